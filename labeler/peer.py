"""Peer view: each rank against its peer group at the same step.

Part of the two-view labeler (SlowSight's *peer* view: a component against the
components that do the same work at the same moment). A peer group is the set of
ranks that should be equally fast (a DP group, one pipeline stage).

In synchronous training every rank's ``step_s`` is the same, since all wait for the
slowest at the collective, so the peer view does **not** use ``step_s``. It uses
``compute_s``: the straggler computes longest (and waits least in ``comm_s``).

For rank ``r`` in group ``g`` at step ``t``::

    peer_median[t, r] = median(compute_s[t, g])          (seconds)
    ratio[t, r]       = compute_s[t, r] / peer_median[t, r]

A cell is flagged when ``ratio > threshold`` **and** ``ratio - 1 > mad_k * sigma_g``,
where ``sigma_g = 1.4826 * MAD`` of all ratios of the group over the run (a noise
floor: a noisy group needs a larger excess), and the group has at least
``peer_min_ranks`` ranks with data at that step.

Limitation (by design of a peer view): when most of a group is slowed the median is
slowed too and nothing is flagged; the temporal view covers that case.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from faultlab.labeler.temporal import MAD_TO_SIGMA, StepGrid, nanmedian


@dataclass
class PeerView:
    """Result of :func:`peer_view` (shapes ``(S, R)``: S steps, R ranks).

    ``median`` peer-group median compute_s (s); ``ratio`` compute_s / median;
    ``flag`` bool; ``sigma`` ``(R,)`` the robust noise of the ratio in the rank's group.
    """

    median: np.ndarray
    ratio: np.ndarray
    flag: np.ndarray
    sigma: np.ndarray


def peer_view(grid: StepGrid, config=None) -> PeerView:
    """Peer view of one run: compute_s of each rank / median compute_s of its peer group.

    Args:
        grid: the run as a :class:`faultlab.labeler.temporal.StepGrid`.
        config: a :class:`faultlab.labeler.LabelerConfig` (defaults when None); uses
            ``peer_threshold``, ``mad_k``, ``peer_min_ranks``.

    Returns:
        a :class:`PeerView`. Vectorized with numpy; deterministic.
    """
    if config is None:
        from faultlab.labeler import LabelerConfig

        config = LabelerConfig()
    med = grid.group_median()
    count = grid.group_count()
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = grid.compute / med
    ratio = np.where(np.isfinite(ratio), ratio, np.nan)
    sigma = np.zeros(grid.R)
    for g in sorted(set(grid.groups.tolist())):
        cols = np.flatnonzero(grid.groups == g)
        vals = ratio[:, cols].ravel()
        vals = vals[~np.isnan(vals)]
        if vals.size:
            c = np.median(vals)
            sigma[cols] = MAD_TO_SIGMA * np.median(np.abs(vals - c))
    with np.errstate(invalid="ignore"):
        flag = (ratio > config.peer_threshold) & ((ratio - 1.0) > config.mad_k * sigma[None, :])
    flag &= count >= config.peer_min_ranks
    flag &= ~np.isnan(ratio)
    return PeerView(median=med, ratio=ratio, flag=flag, sigma=sigma)


__all__ = ["PeerView", "peer_view", "nanmedian"]
