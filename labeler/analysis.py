"""The analysis of one run: its grid, the temporal and peer views, the what-if step
times and the job-wide flags (:func:`analyze` -> :class:`Analysis`), which fusion,
intermittent episodes, the host peer view and reconciliation read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from faultlab.labeler.config import LabelerConfig
from faultlab.labeler.grid import StepGrid
from faultlab.labeler.labelrows import jsonable
from faultlab.labeler.peergroups import PeerGroups, assign_groups
from faultlab.labeler.stats import MAD_TO_SIGMA, mean, median, median_ratio, time_ratio
from faultlab.labeler.views.peer import PeerView, peer_view, sustained, window_steps
from faultlab.labeler.views.temporal import TemporalView, temporal_view
from faultlab.labeler.whatif import simulate_job


@dataclass
class Analysis:
    """Everything the views computed for one run: the grid, both views and the what-if
    step times (``sim`` ``(S,)`` seconds, stragglers removed)."""

    grid: StepGrid
    temporal: TemporalView
    peer: PeerView
    sim: np.ndarray
    job_wide_flag: np.ndarray  # (S,) job step up even with stragglers removed
    config: object
    #: the run's expected job step over its baseline, mean over the unflagged steps
    #: (:func:`expected_over_median`)
    job_expected: float = 1.0
    #: the peer groups the views used (:func:`faultlab.labeler.peergroups.assign_groups`)
    groups: PeerGroups | None = None
    #: the what-if figures (:func:`faultlab.labeler.whatif.whatif_grid`'s dict) where the
    #: views computed them on the way (out of core: in the peer pass), else None
    whatif: dict | None = None

    def job_slowdown(self, i0: int, i1: int, skip: np.ndarray | None = None) -> float:
        """Job time over rows ``i0..i1`` / the time its baseline steps would have taken
        (a time ratio: an intermittent stall counts in full, where a median would hide
        it), the baseline being the trailing median scaled to the expected step
        (``job_expected``). ``skip`` ``(S,)`` bool leaves those rows out (steps whose
        time another label explains); NaN when no row is left."""
        x = self.grid.job_step[i0 : i1 + 1]
        base = self.temporal.job_base[i0 : i1 + 1] * self.job_expected
        if skip is not None:
            keep = ~np.asarray(skip[i0 : i1 + 1], dtype=bool)
            x, base = x[keep], base[keep]
        return time_ratio(x, base)

    def measure(self, component: str, rows: np.ndarray) -> dict:
        """The measured slowdown of ``component`` over grid rows ``rows`` (for an
        injection that got no label): rank -> median compute_s / its temporal baseline;
        job or node -> job slowdown. Returns ``{"ratio": float, "n_steps": int, ...}``;
        ratio 1.0 when there is no data."""
        rows = np.asarray(rows, dtype=np.int64)
        out: dict = {"n_steps": int(rows.size)}
        if rows.size == 0:
            out["ratio"] = 1.0
            return out
        j = self.rank_col(component)
        if j is not None:
            vals, base = self.grid.compute[rows, j], self.temporal.rank_base[rows, j]
            out["peer_ratio"] = jsonable(median(self.peer.ratio[rows, j]))
            out["n_flagged"] = int((self.peer.flag[rows, j] | self.temporal.rank_flag[rows, j]).sum())
        else:
            vals, base = self.grid.job_step[rows], self.temporal.job_base[rows]
            out["n_flagged"] = int(self.temporal.job_flag[rows].sum())
        r = median_ratio(vals, base)
        # the mean shows an intermittent fault (few very slow steps) that a median hides
        with np.errstate(invalid="ignore", divide="ignore"):
            out["mean_ratio"] = jsonable(mean(vals / base))
        out["job_slowdown"] = jsonable(median_ratio(self.grid.job_step[rows], self.temporal.job_base[rows]))
        out["ratio"] = r if np.isfinite(r) else 1.0
        return out

    def rank_col(self, component: str) -> int | None:
        """Column of ``"rank:N"`` in the grid, or None."""
        if not component.startswith("rank:"):
            return None
        try:
            rank = int(component.split(":", 1)[1])
        except ValueError:
            return None
        hit = np.flatnonzero(self.grid.ranks == rank)
        return int(hit[0]) if hit.size else None


def analyze(grid: StepGrid, config=None, *, peer_groups: dict | None = None) -> Analysis:
    """Run the temporal view, the peer view and the what-if simulation on one run,
    after setting the grid's peer groups (in place, :meth:`StepGrid.regroup`): a
    ``peer_groups`` mapping (component or rank number -> group), the declared ones
    when more than one, else discovered (:func:`faultlab.labeler.peergroups.assign_groups`).

    Raises:
        BadInput (field ``--peer-groups``) for a mapping that names no rank."""
    if config is None:
        config = LabelerConfig()
    pg = assign_groups(grid.compute, [grid.component(j) for j in range(grid.R)], grid.groups, config,
                       mapping=peer_groups, part=grid.dataloader)
    if pg.source in ("discovered", "mapping"):
        grid.regroup(pg.groups)
    tv = temporal_view(grid, config)
    grid.floor_small_groups(tv.rank_base)  # a small group's peer at no less than its usual level
    pv = peer_view(grid, config)
    sim = simulate_job(grid)
    # no compute_s at a step (not recorded): nothing to remove, the step time stands
    sim = np.where(np.isfinite(sim), sim, np.asarray(grid.job_step, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        jw = (
            tv.job_flag
            & (sim > tv.job_base * config.temporal_threshold)
            & ((sim - tv.job_base) > config.mad_k * np.nan_to_num(tv.job_sigma))
        )
    jw |= _sustained_job(grid, tv, sim, config)
    return Analysis(grid=grid, temporal=tv, peer=pv, sim=sim, job_wide_flag=jw, config=config,
                    job_expected=expected_over_median(grid.job_step, tv.job_base, tv.job_flag), groups=pg)


def expected_over_median(x: np.ndarray, base: np.ndarray, flag: np.ndarray) -> float:
    """The expected step over its trailing-median baseline: the mean of ``x / base``
    over the unflagged steps (``x``, ``base`` ``(S,)`` s; ``flag`` ``(S,)`` bool), at
    least 1 (1.0 with no such step).

    Step times skew right, so their mean, the time a step is expected to take, lies
    above their median (1.01-1.09, median 1.03, over the 46 runs of the 801-806 sweeps
    and the fault-free campaign): a slowdown as a time ratio against the median alone
    reads that much high, and a fault that slowed the job 1.15x could read 1.2x, the
    floor. Flagged steps are left out, so the correction is never more than the
    unflagged steps show."""
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.asarray(x, dtype=np.float64) / np.asarray(base, dtype=np.float64)
    ok = np.isfinite(r) & ~np.asarray(flag, dtype=bool)
    return max(1.0, float(r[ok].mean())) if ok.any() else 1.0


def _sustained_job(grid: StepGrid, tv: TemporalView, sim: np.ndarray, config) -> np.ndarray:
    """``(S,)`` bool: the job's straggler-free step time (the what-if ``sim``, s) is
    *sustainedly* above its trailing baseline: the peer view's sustained rule
    (:func:`faultlab.labeler.views.peer.sustained`) on ``sim / job_base`` over its median
    over the run when that is under 1 (the what-if takes every step's slowest rank's
    extra compute out, so on a noisy host it sits below the job's baseline at every
    step, not only in a fault), over a centered
    window of ``min_duration_s`` of steps (k), at ``max(min_slowdown, 1 + mad_k x
    sigma)`` with sigma the robust spread of that ratio's centered k-step rolling
    median over the run (not sigma / sqrt(k): step noise on a loaded host is not
    independent): 1.4826 x the median distance below the median of the values below
    it (the lower half only: the slowed stretches this rule is for lie above the
    median, and a run with several faults would widen a two-sided MAD). The level
    is the labeler's floor, not the per-step bar ``temporal_threshold``: a median
    over a second of steps is not one noisy step. A slow link that slows a third of
    the steps by 2x and the rest by 1.2x flags only some steps one by one (the
    unflagged ones feed the baseline); over a second of steps it is plain."""
    if grid.S == 0:
        return np.zeros(0, dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.asarray(sim, dtype=np.float64) / np.asarray(tv.job_base, dtype=np.float64)
    # against its own typical level: the what-if takes every step's slowest rank's
    # extra compute out, so on a noisy host it sits below the job's baseline at
    # every step (0.85-0.95 on 4 ranks sharing 2 cores), not only in a fault
    typical = median(r[np.isfinite(r)]) if np.isfinite(r).any() else 1.0
    if 0 < typical < 1:
        r = r / typical
    k = window_steps(grid, config)
    # the spread of the window median itself over the run: host load wanders, so
    # steps are not independent and sigma / sqrt(k) would understate it
    rm = pd.Series(np.where(np.isfinite(r), r, np.nan)).rolling(k, center=True, min_periods=(k + 1) // 2).median().to_numpy()
    fin = rm[np.isfinite(rm)]
    if fin.size == 0:
        return np.zeros(grid.S, dtype=bool)
    mid = median(fin)
    # the spread from the lower half only: slowed stretches (the faults this rule is
    # for) lie above the median and would widen a two-sided MAD
    sigma = MAD_TO_SIGMA * median(mid - fin[fin <= mid])
    level = max(float(config.min_slowdown), 1.0 + float(config.mad_k) * sigma)
    return sustained(r[:, None], k, np.asarray([level]))[:, 0]
