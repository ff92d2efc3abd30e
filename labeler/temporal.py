"""Temporal view: each series against its own recent history.

Part of the two-view labeler (the SlowSight idea of a *temporal* view, a component
against its own past, and a *peer* view, a component against its peers at the same
moment). This module also holds :class:`StepGrid`, the dense step x rank layout of the
``steps`` table that every view of the labeler works on.

Series judged here:

- the job's step time: per step, the median ``step_s`` across ranks (seconds);
- each rank's ``compute_s`` (seconds).

Baseline: a robust *trailing* baseline, the median of the preceding ``window`` steps,
in which steps already flagged are left out (so a long fault does not become the new
normal), refreshed every ``block`` steps. When fewer than ``min_valid`` unflagged
values are in the window (deep inside a long fault) the last baseline is kept. The
first ``min_valid`` steps, which have no history, use a warm-up baseline: the median of
the first ``window`` steps. Noise floor: ``sigma = 1.4826 * MAD`` of the same window.

A step is flagged when ``value / baseline > threshold`` **and**
``value - baseline > mad_k * sigma`` (jitter must not fire).

Limitation (by design of a temporal view): a fault present from the first step is part
of the baseline and is not flagged; the peer view covers that case.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from faultlab.errors import BadInput

STEP_COLUMNS = ("run_id", "rank", "node", "peer_group", "step", "t_start", "compute_s", "comm_s", "step_s")

#: scale factor from MAD to the standard deviation of a normal distribution
MAD_TO_SIGMA = 1.4826


def nanmedian(a: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Median along ``axis`` ignoring NaN, vectorized (one sort, no Python loop).

    Returns ``(median, count)``: the median (NaN where a slice has no finite value)
    and the number of non-NaN values per slice, both with ``axis`` removed.
    """
    a = np.asarray(a, dtype=np.float64)
    s = np.sort(a, axis=axis)  # NaN sorts last
    n = np.sum(~np.isnan(s), axis=axis)
    lo = np.clip((n - 1) // 2, 0, None)
    hi = np.clip(n // 2, 0, None)
    if s.shape[axis] == 0:
        return np.full(n.shape, np.nan), n
    lo_v = np.take_along_axis(s, np.expand_dims(lo, axis), axis=axis).squeeze(axis)
    hi_v = np.take_along_axis(s, np.expand_dims(hi, axis), axis=axis).squeeze(axis)
    med = 0.5 * (lo_v + hi_v)
    med = np.where(n > 0, med, np.nan)
    return med, n


def check_steps(steps: pd.DataFrame) -> None:
    """Raise BadInput naming the first missing column of a ``steps`` frame."""
    missing = [c for c in STEP_COLUMNS if c not in steps.columns]
    if missing:
        raise BadInput(
            f"missing column(s) {', '.join(missing)}",
            field="steps",
            fix="give a frame with the faultlab.schema.STEPS columns",
        )


@dataclass
class StepGrid:
    """The ``steps`` table of one run as dense ``(S, R)`` arrays (S steps x R ranks).

    Missing (rank, step) cells are NaN. Row ``i`` is the i-th distinct step number in
    ascending order (``steps[i]``); column ``j`` is rank ``ranks[j]`` (ascending).

    Attributes (units): ``t_start`` unix s; ``compute``, ``comm``, ``step_s`` seconds;
    ``job_step`` (S,) the median ``step_s`` across ranks, seconds; ``t0`` (S,) the
    earliest ``t_start`` of the step, unix s; ``t1`` (S,) the latest
    ``t_start + step_s`` of the step, unix s.
    """

    run_id: str
    steps: np.ndarray
    ranks: np.ndarray
    nodes: np.ndarray  # (R,) node name per rank (first seen)
    groups: np.ndarray  # (R,) peer group per rank (first seen)
    t_start: np.ndarray
    compute: np.ndarray
    comm: np.ndarray
    step_s: np.ndarray
    job_step: np.ndarray = field(init=False)
    t0: np.ndarray = field(init=False)
    t1: np.ndarray = field(init=False)
    _group_median: np.ndarray | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self.job_step, _ = nanmedian(self.step_s, axis=1) if self.S else (np.zeros(0), None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if self.S and self.R:
                self.t0 = np.nanmin(self.t_start, axis=1)
                self.t1 = np.nanmax(self.t_start + self.step_s, axis=1)
            else:
                self.t0 = np.zeros(0)
                self.t1 = np.zeros(0)

    @property
    def S(self) -> int:
        return int(self.steps.shape[0])

    @property
    def R(self) -> int:
        return int(self.ranks.shape[0])

    @classmethod
    def from_steps(cls, steps: pd.DataFrame) -> "StepGrid":
        """Build the grid from a ``steps`` frame of ONE run (faultlab.schema.STEPS).

        Duplicate (rank, step) rows: the last one wins. Raises BadInput when a column
        is missing.
        """
        check_steps(steps)
        run_ids = [r for r in pd.unique(steps["run_id"]) if not pd.isna(r)]
        run_id = str(run_ids[0]) if run_ids else ""
        step_vals = steps["step"].to_numpy(dtype=np.int64)
        rank_vals = steps["rank"].to_numpy(dtype=np.int64)
        u_steps, si = np.unique(step_vals, return_inverse=True)
        u_ranks, ri = np.unique(rank_vals, return_inverse=True)
        S, R = len(u_steps), len(u_ranks)

        def dense(col: str) -> np.ndarray:
            out = np.full((S, R), np.nan)
            out[si, ri] = steps[col].to_numpy(dtype=np.float64)
            return out

        # first occurrence of each rank gives its node and peer group
        first = np.full(R, -1, dtype=np.int64)
        order = np.arange(len(ri))[::-1]
        first[ri[order]] = order
        nodes = [str(x) for x in steps["node"].iloc[first].tolist()] if R else []
        groups = [str(x) for x in steps["peer_group"].iloc[first].tolist()] if R else []
        return cls(
            run_id=run_id,
            steps=u_steps,
            ranks=u_ranks,
            nodes=np.asarray(nodes, dtype=object),
            groups=np.asarray(groups, dtype=object),
            t_start=dense("t_start"),
            compute=dense("compute_s"),
            comm=dense("comm_s"),
            step_s=dense("step_s"),
        )

    def group_median(self) -> np.ndarray:
        """``(S, R)``: per step, the median ``compute_s`` of the rank's peer group (s).

        NaN ranks (no record at that step) are left out of the median. Cached.
        """
        if self._group_median is None:
            out = np.full((self.S, self.R), np.nan)
            for g in sorted(set(self.groups.tolist())):
                cols = np.flatnonzero(self.groups == g)
                med, _ = nanmedian(self.compute[:, cols], axis=1)
                out[:, cols] = med[:, None]
            self._group_median = out
        return self._group_median

    def group_count(self) -> np.ndarray:
        """``(S, R)``: per step, the number of ranks of the rank's peer group with data."""
        out = np.zeros((self.S, self.R), dtype=np.int64)
        for g in sorted(set(self.groups.tolist())):
            cols = np.flatnonzero(self.groups == g)
            out[:, cols] = np.sum(~np.isnan(self.compute[:, cols]), axis=1)[:, None]
        return out

    def component(self, j: int) -> str:
        """Component name of rank column ``j``: ``"rank:N"``."""
        return f"rank:{int(self.ranks[j])}"

    def steps_between(self, t_lo: float, t_hi: float) -> np.ndarray:
        """Row indices of the steps whose ``[t0, t1]`` overlaps ``[t_lo, t_hi]`` (unix s)."""
        if not self.S:
            return np.zeros(0, dtype=np.int64)
        hi = np.inf if not np.isfinite(t_hi) else t_hi
        return np.flatnonzero((self.t0 <= hi) & (self.t1 >= t_lo))


def trailing_baseline(
    X: np.ndarray,
    *,
    window: int,
    min_valid: int,
    threshold: float,
    mad_k: float,
    block: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flag values above a robust trailing baseline, column by column (vectorized over columns).

    Args:
        X: ``(S, C)`` float array, rows in time order; NaN = no value.
        window: number of preceding rows the baseline is the median of (steps).
        min_valid: fewest unflagged values in the window to refresh the baseline;
            with fewer the previous baseline is kept (also the warm-up length).
        threshold: ratio ``value / baseline`` above which a row may be flagged.
        mad_k: the value must also exceed the baseline by ``mad_k * 1.4826 * MAD``.
        block: the baseline is refreshed every ``block`` rows (1 = every row).

    Returns:
        ``(baseline, sigma, flags)``: baseline and robust sigma ``(S, C)`` in the
        unit of ``X``, and the boolean ``(S, C)`` flags. Deterministic.

    Raises:
        BadInput when a parameter is out of range.
    """
    if window < 1 or min_valid < 1 or block < 1:
        raise BadInput("window, min_valid and block must be >= 1", field="temporal")
    X = np.asarray(X, dtype=np.float64)
    S, C = X.shape
    base = np.full((S, C), np.nan)
    sig = np.full((S, C), np.nan)
    flags = np.zeros((S, C), dtype=bool)
    if S == 0 or C == 0:
        return base, sig, flags
    feed = X.copy()  # the values allowed to feed the baseline (flagged ones -> NaN)
    # warm-up baseline: median of the first `window` rows
    head = X[:window]
    cur_b, _ = nanmedian(head, axis=0)
    cur_s, _ = nanmedian(np.abs(head - cur_b), axis=0)
    cur_s = cur_s * MAD_TO_SIGMA
    for s0 in range(0, S, block):
        if s0 >= min_valid:
            win = feed[max(0, s0 - window) : s0]
            med, n = nanmedian(win, axis=0)
            mad, _ = nanmedian(np.abs(win - med), axis=0)
            ok = n >= min_valid
            cur_b = np.where(ok, med, cur_b)
            cur_s = np.where(ok, mad * MAD_TO_SIGMA, cur_s)
        blk = X[s0 : s0 + block]
        with np.errstate(invalid="ignore"):
            f = (blk > cur_b * threshold) & ((blk - cur_b) > mad_k * np.nan_to_num(cur_s))
        f &= ~np.isnan(blk)
        flags[s0 : s0 + block] = f
        base[s0 : s0 + block] = cur_b
        sig[s0 : s0 + block] = cur_s
        fb = feed[s0 : s0 + block]
        fb[f] = np.nan
    return base, sig, flags


@dataclass
class TemporalView:
    """Result of :func:`temporal_view` for one run (shapes: S steps, R ranks).

    ``job_*`` are ``(S,)`` for the job step time (seconds, median ``step_s`` across
    ranks); ``rank_*`` are ``(S, R)`` for each rank's ``compute_s`` (seconds).
    ``*_base`` baseline (s), ``*_sigma`` robust noise (s), ``*_ratio`` value/baseline,
    ``*_flag`` bool.
    """

    job_base: np.ndarray
    job_sigma: np.ndarray
    job_ratio: np.ndarray
    job_flag: np.ndarray
    rank_base: np.ndarray
    rank_sigma: np.ndarray
    rank_ratio: np.ndarray
    rank_flag: np.ndarray


def temporal_view(grid: StepGrid, config=None) -> TemporalView:
    """Temporal view (SlowSight-style): the job's step time and each rank's compute time
    against their own trailing robust baseline (see module docstring).

    Args:
        grid: the run as a :class:`StepGrid`.
        config: a :class:`faultlab.labeler.LabelerConfig` (defaults when None); uses
            ``temporal_window_steps``, ``temporal_min_valid_steps``,
            ``temporal_threshold``, ``mad_k``, ``temporal_block_steps``.

    Returns:
        a :class:`TemporalView`.
    """
    if config is None:
        from faultlab.labeler import LabelerConfig

        config = LabelerConfig()
    X = np.column_stack([grid.job_step.reshape(-1, 1), grid.compute]) if grid.S else np.zeros((0, grid.R + 1))
    base, sig, flags = trailing_baseline(
        X,
        window=config.temporal_window_steps,
        min_valid=config.temporal_min_valid_steps,
        threshold=config.temporal_threshold,
        mad_k=config.mad_k,
        block=config.temporal_block_steps,
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = X / base
    return TemporalView(
        job_base=base[:, 0],
        job_sigma=sig[:, 0],
        job_ratio=ratio[:, 0],
        job_flag=flags[:, 0],
        rank_base=base[:, 1:],
        rank_sigma=sig[:, 1:],
        rank_ratio=ratio[:, 1:],
        rank_flag=flags[:, 1:],
    )
