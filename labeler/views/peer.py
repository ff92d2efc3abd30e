"""Peer view: each rank against its peer group at the same step.

Part of the two-view labeler (SlowSight's *peer* view: a component against the
components that do the same work at the same moment). A peer group is the set of
ranks that should be equally fast (a DP group, one pipeline stage).

In synchronous training every rank's ``step_s`` is the same, since all wait for the
slowest at the collective, so the peer view does **not** use ``step_s``. It uses
``compute_s``: the straggler computes longest (and waits least in ``comm_s``).

For rank ``r`` in group ``g`` at step ``t``::

    peer_median[t, r] = median(compute_s[t, g \\ {r}])     (seconds; leave-one-out)
    ratio[t, r]       = compute_s[t, r] / peer_median[t, r]

The reference leaves the rank itself out (:func:`faultlab.labeler.stats.loo_median`):
with two ranks in a group a median that includes the straggler is the pair's mean, and
a 2x straggler would read 1.33x. A rank with no peer left at a step (its group's
other ranks have no record there, or it is alone in its group) has no peer ratio
there; the temporal view (its own history) speaks for it. In a group of two or three
ranks each peer counts at no less than its own trailing baseline
(:meth:`faultlab.labeler.grid.StepGrid.floor_small_groups`, set by
:func:`faultlab.labeler.analysis.analyze`): a median of one or two values moves with a
peer's fast spell, which would read as this rank's slowdown.

A cell is flagged when ``ratio > threshold`` **and** ``ratio - 1 > mad_k * sigma_g``,
where ``sigma_g`` is the median over the group's ranks of ``1.4826 * MAD`` of each
rank's ratio over the run about its own median (a noise floor: a noisy group needs a
larger excess; a rank offset for the whole run does not raise it), and the group has at least
``peer_min_ranks`` ranks with data at that step.

A cell is also flagged when the rank is *sustainedly* slow: over a centered window of
``k`` steps (the steps of ``min_duration_s``, the shortest label, at least
``min_steps``), more than half of its ratios exceed ``max(peer_threshold, 1 + mad_k *
sigma_g * 1.2533 / sqrt(k))``, i.e. the window's median ratio is above that level.
The per-step rule's noise floor is that of one step; a label's slowdown is judged over
its interval, whose median has the noise ``1.2533 sigma_g / sqrt(k)`` (the standard
error of a median). On a busy host the per-step noise of the ratio can be 0.3, so a
CPU-throttled rank at 1.5x for seconds never crosses ``1 + 4 x 0.3`` at one step, yet
over a second of steps it is unmistakable. The window is counted with cumulative sums
(O(steps x ranks)), not sorted.

Limitation (by design of a peer view): when most of a group is slowed the median is
slowed too and nothing is flagged; the temporal view covers that case.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from faultlab.labeler.config import LabelerConfig
from faultlab.labeler.grid import StepGrid
from faultlab.labeler.stats import MAD_TO_SIGMA, median, nanmedian


@dataclass
class PeerView:
    """Result of :func:`peer_view` (shapes ``(S, R)``: S steps, R ranks).

    ``median`` the median compute_s of the rank's peers, itself left out (s);
    ``ratio`` compute_s / median;
    ``flag`` bool; ``sigma`` ``(R,)`` float64, the robust noise of the ratio in the
    rank's group (the group's median of each rank's MAD over time, x 1.4826). ``median`` and ``ratio`` are in the dtype of the grid's ``compute``
    (float32 from :meth:`StepGrid.from_steps`).
    """

    median: np.ndarray
    ratio: np.ndarray
    flag: np.ndarray
    sigma: np.ndarray


def peer_view(grid: StepGrid, config=None) -> PeerView:
    """Peer view of one run: compute_s of each rank / median compute_s of its peers
    (leave-one-out: the rank itself excluded).

    Args:
        grid: the run as a :class:`faultlab.labeler.grid.StepGrid`.
        config: a :class:`faultlab.labeler.LabelerConfig` (defaults when None); uses
            ``peer_threshold``, ``mad_k``, ``peer_min_ranks``.

    Returns:
        a :class:`PeerView`. Vectorized with numpy (a loop over peer groups only);
        deterministic.
    """
    if config is None:
        config = LabelerConfig()
    med = grid.peer_median()
    _, count, gidx = grid.group_stats()  # (S, G) ranks with data per group
    _, _, cols = grid.peer_groups()
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = grid.compute / med
    ratio[~np.isfinite(ratio)] = np.nan
    sigma = np.zeros(grid.R)
    for c in cols:
        vals = ratio[:, c]
        if vals.size:
            # each rank's ratio about its own median over the run (its noise over
            # time), then the group's typical one: a rank slow for the whole run (a
            # steady 2x in a group of two) shifts its ratio, not the noise floor
            # (every k-th step, at most ~4,096 of them: a noise estimate, not a label)
            vals = vals[:: max(1, vals.shape[0] // 4096)]
            m, n = nanmedian(vals, axis=0)
            mad, _ = nanmedian(np.abs(vals - m.astype(vals.dtype)[None, :]), axis=0)
            ok = n > 0
            if ok.any():
                sigma[c] = MAD_TO_SIGMA * median(mad[ok])
    dt = ratio.dtype.type
    with np.errstate(invalid="ignore"):
        # NaN ratios compare False: never flagged
        flag = ratio > dt(config.peer_threshold)
        flag &= (ratio - dt(1.0)) > (dt(config.mad_k) * sigma.astype(ratio.dtype))[None, :]
    k = window_steps(grid, config)
    if k > 1:
        flag |= sustained(ratio, k, np.maximum(config.peer_threshold, 1.0 + config.mad_k * sigma * MEDIAN_SE / np.sqrt(k)))
    few = count < config.peer_min_ranks
    if few.any():
        flag &= ~few[:, gidx]
    return PeerView(median=med, ratio=ratio, flag=flag, sigma=sigma)


#: standard error of a median of n normal values, in sigmas x sqrt(n): sqrt(pi / 2)
MEDIAN_SE = 1.2533


def window_steps(grid: StepGrid, config) -> int:
    """Steps in the window of the sustained rule: those of ``min_duration_s`` at the
    run's median job step time (s), at least ``min_steps``, at most
    ``temporal_window_steps``; ``min_steps`` when the step time is unknown."""
    step, n = nanmedian(np.asarray(grid.job_step, dtype=np.float64), axis=0) if grid.S else (np.nan, 0)
    k = int(config.min_steps)
    if n and np.isfinite(step) and step > 0:
        k = max(k, int(round(float(config.min_duration_s) / float(step))))
    return int(min(k, max(int(config.temporal_window_steps), int(config.min_steps))))


def sustained(ratio: np.ndarray, k: int, level: np.ndarray) -> np.ndarray:
    """``(S, R)`` bool: the centered window of ``k`` steps around each step has more
    than half of its known ratios above ``level`` (a window cut short by the run's
    ends counts its missing steps as not above) (``(R,)``, per rank) and at least
    ``(k + 1) // 2`` known ratios: the window's median is above the level.

    NaN ratios are unknown. O(S x R) with cumulative sums, 256 ranks at a time (bounded
    temporaries)."""
    S, R = ratio.shape
    out = np.zeros((S, R), dtype=bool)
    if S == 0:
        return out
    level = np.broadcast_to(np.asarray(level, dtype=ratio.dtype), (R,))
    # a window holds at least (k + 1) // 2 known ratios, more than half of them above:
    # a rank with fewer steps above its level in the whole run is never flagged (one
    # pass over the array; the window counts below run only for the other ranks)
    with np.errstate(invalid="ignore"):
        n_up = np.count_nonzero(ratio > level[None, :], axis=0)
    cand = np.flatnonzero(n_up >= (k + 1) // 2 // 2 + 1)
    if cand.size == 0:
        return out
    if cand.size < R:
        out[:, cand] = sustained(ratio[:, cand], k, level[cand])
        return out
    h = k // 2
    lo = np.clip(np.arange(S) - h, 0, S)
    hi = np.clip(np.arange(S) - h + k, 0, S)

    cut = (k - (hi - lo))[:, None]  # steps of each window beyond the run

    def count(b: np.ndarray) -> np.ndarray:
        c = np.zeros((S + 1, b.shape[1]), dtype=np.int32)
        np.cumsum(b, axis=0, dtype=np.int32, out=c[1:])
        return c[hi] - c[lo]

    for a in range(0, R, 256):
        x = ratio[:, a : a + 256]
        with np.errstate(invalid="ignore"):
            n_above = count(x > level[None, a : a + 256])
        nan = np.isnan(x)
        n_known = count(~nan) if nan.any() else (hi - lo)[:, None]  # no NaN: the window's length
        # a window cut short by the run's first or last step: its missing steps count
        # as not above (a fault ending with the run is not extended past its end)
        out[:, a : a + 256] = (n_above * 2 > n_known + cut) & (n_known >= (k + 1) // 2)
    return out


__all__ = ["PeerView", "peer_view", "nanmedian", "sustained", "window_steps"]
