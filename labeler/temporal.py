"""Temporal view: each series against its own recent history.

Part of the two-view labeler (the SlowSight idea of a *temporal* view, a component
against its own past, and a *peer* view, a component against its peers at the same
moment). This module also holds :class:`StepGrid`, the dense step x rank layout of the
``steps`` table that every view of the labeler works on.

Series judged here:

- the job's step time: per step, the median ``step_s`` across ranks (seconds);
- each rank's *local time* (seconds): ``compute_s`` plus ``dataloader_s`` where the
  steps table has it (the step's wait on the rank's own data loader, e.g. the
  disk-backed one of benchmarks/diskdata.py; faultlab.schema keeps it out of
  ``compute_s``). A rank waiting on its own disk arrives late at the collective just
  as a rank computing slowly does: both are its own time, not the collective's.

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

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from faultlab.errors import BadInput

STEP_COLUMNS = ("run_id", "rank", "node", "peer_group", "step", "t_start", "compute_s", "comm_s", "step_s")
#: optional ``steps`` columns the labeler reads when present: ``dataloader_s`` (s) is
#: part of the rank's local time (see :meth:`StepGrid.from_steps`)
OPTIONAL_STEP_COLUMNS = ("dataloader_s",)

#: scale factor from MAD to the standard deviation of a normal distribution
MAD_TO_SIGMA = 1.4826


def nanmedian(a: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Median along ``axis`` ignoring NaN, vectorized (one sort, no Python loop).

    ``a`` may be float32 or float64 (other dtypes are converted to float64); it is
    sorted in its own dtype, along a contiguous copy of ``axis``. The median of an
    even count is ``0.5 * (lo + hi)`` of the two middle values, computed in float64.

    Returns ``(median, count)``: the float64 median (NaN where a slice has no finite
    value) and the int64 number of non-NaN values per slice, both with ``axis``
    removed.
    """
    a = np.asarray(a)
    if a.dtype != np.float32 and a.dtype != np.float64:
        a = a.astype(np.float64)
    s = np.array(np.moveaxis(a, axis, -1), order="C")  # own copy, sorted axis contiguous
    L = s.shape[-1]
    if L == 0:
        return np.full(s.shape[:-1], np.nan), np.zeros(s.shape[:-1], dtype=np.int64)
    s.sort(axis=-1)  # NaN sorts last
    if not np.isnan(s[..., -1]).any():  # no NaN at all: fixed middle positions
        n = np.full(s.shape[:-1], L, dtype=np.int64)
        return 0.5 * (s[..., (L - 1) // 2].astype(np.float64) + s[..., L // 2]), n
    n = L - np.count_nonzero(np.isnan(s), axis=-1).astype(np.int64)
    lo = np.clip((n - 1) // 2, 0, None)
    hi = np.clip(n // 2, 0, None)
    lo_v = np.take_along_axis(s, lo[..., None], axis=-1)[..., 0].astype(np.float64)
    hi_v = np.take_along_axis(s, hi[..., None], axis=-1)[..., 0]
    med = np.where(n > 0, 0.5 * (lo_v + hi_v), np.nan)
    return med, n


def loo_median(x: np.ndarray) -> np.ndarray:
    """Leave-one-out median of each row's members: ``out[i, j]`` = the median of row
    ``i`` of ``x`` without ``x[i, j]`` (NaN ignored), i.e. each member's peers without
    itself. A member that is NaN gets the median of the others (all of the row); a
    member with no other value in its row gets NaN (no peer left: the caller falls
    back to its own history).

    Why: with two ranks in a peer group the median is their mean, and a 2x straggler
    reads ``2 / 1.5 = 1.33x``; against the other rank alone it reads 2x.

    Method: one sort per row (NaN last); with ``k`` other values the median of the
    rest uses sorted positions ``lo = (k-1)//2`` and ``hi = k//2`` of the rest, which
    are ``s[lo]``/``s[hi]`` when the member sorts above them and ``s[lo+1]``/``s[hi+1]``
    when below; ties give the same multiset whichever copy is removed.

    Args:
        x: ``(S, n)`` float32 or float64 (other dtypes are converted to float64).

    Returns:
        ``(S, n)`` in the dtype of ``x`` (float64 for other dtypes).
    """
    x = np.asarray(x)
    if x.dtype != np.float32 and x.dtype != np.float64:
        x = x.astype(np.float64)
    S, L = x.shape
    if L == 0:
        return x.copy()
    s = np.sort(x, axis=1)  # NaN last
    nan_x = np.isnan(x)
    any_nan = bool(nan_x.any())
    if not any_nan:  # every row full: fixed positions (a slice, no gather)
        k = np.full(S, L - 1)
        lo, hi = max((L - 2) // 2, 0), (L - 1) // 2
        s_lo, s_hi = s[:, lo : lo + 1], s[:, hi : hi + 1]
        s_lo1, s_hi1 = s[:, min(lo + 1, L - 1) : min(lo + 1, L - 1) + 1], s[:, min(hi + 1, L - 1) : min(hi + 1, L - 1) + 1]
    else:
        k = L - np.count_nonzero(nan_x, axis=1) - 1  # (S,) others, for a member that has a value
        lo_i = np.clip((k - 1) // 2, 0, L - 1)[:, None]
        hi_i = np.clip(k // 2, 0, L - 1)[:, None]

        def at(i):
            return np.take_along_axis(s, np.minimum(i, L - 1), axis=1)

        s_lo, s_hi, s_lo1, s_hi1 = at(lo_i), at(hi_i), at(lo_i + 1), at(hi_i + 1)
    half = x.dtype.type(0.5)
    with np.errstate(invalid="ignore"):
        out = np.where(x > s_hi, half * (s_lo + s_hi),
                       np.where(x <= s_lo, half * (s_lo1 + s_hi1), half * (s_lo + s_hi1)))
    if any_nan:  # a member without a value: the plain median of the row
        med, _ = nanmedian(x, axis=1)
        out = np.where(nan_x, med.astype(x.dtype)[:, None], out)
    if L < 2 or any_nan:
        out[(k < 1)[:, None] & ~nan_x] = np.nan  # no peer left
    return out.astype(x.dtype, copy=False)


def check_steps(steps: pd.DataFrame) -> None:
    """Raise BadInput naming the missing columns of a ``steps`` frame.

    Only the columns are checked here; their values are checked per run by
    :meth:`StepGrid.from_steps`.
    """
    missing = [c for c in STEP_COLUMNS if c not in steps.columns]
    if missing:
        raise BadInput(
            f"missing column(s) {', '.join(missing)}",
            field="steps",
            fix="give a frame with the faultlab.schema.STEPS columns",
        )


def check_step_values(steps: pd.DataFrame) -> None:
    """Raise BadInput naming the column of a ``steps`` frame that the labeler would
    refuse (a missing column, a null, fractional or non-numeric ``rank``/``step``, a
    non-numeric, negative or infinite duration, ``t_start`` not increasing with
    ``step``): the checks of :meth:`StepGrid.from_steps`, for readers (scoring, the
    report) that must refuse what ``faultlab label`` refuses rather than fail later
    with a traceback, and the checks of :func:`check_recorded_steps` but the one of an
    empty frame, which passes (a run with no steps yet)."""
    if len(steps):
        check_recorded_steps(steps)
        StepGrid.from_steps(steps)


def check_recorded_steps(steps: pd.DataFrame, name: str = "steps") -> None:
    """BadInput for a run's recorded steps that no run writes: no rows at all, a
    negative ``rank``, or a ``(rank, step)`` recorded twice (the grid would keep one of
    them in silence); ``name`` (the file) is named in the message. Other bad values
    are named by :meth:`StepGrid.from_steps`."""
    if not len(steps):
        raise BadInput(f"{name} holds no step", field="steps",
                       fix="a run directory whose ranks recorded steps; remove an emptied steps.parquet to rebuild it from telemetry/")
    if "rank" not in steps.columns or "step" not in steps.columns:
        return  # the grid names the missing column
    rank = pd.to_numeric(steps["rank"], errors="coerce")
    neg = int((rank < 0).sum())
    if neg:
        raise BadInput(f"{neg} row(s) of {name} have a negative rank, e.g. {int(rank[rank < 0].iloc[0])}", field="rank",
                       fix="ranks are numbered from 0")
    step = pd.to_numeric(steps["step"], errors="coerce")
    runs = steps["run_id"].nunique(dropna=False) if "run_id" in steps.columns else 1
    if rank.isna().any() or step.isna().any() or runs > 1:
        return  # the grid names a null or text rank/step; runs of a frame are checked one by one there
    r, st = rank.to_numpy(np.int64), step.to_numpy(np.int64)
    key = st * (int(r.max()) + 1) + r
    if key.size < 2 or bool((key[1:] > key[:-1]).all()):  # the usual layout: step-major, no repeat possible
        return
    u, first = np.unique(key, return_index=True)
    if u.size < key.size:
        seen = np.zeros(key.size, dtype=bool)
        seen[first] = True
        i = int(np.flatnonzero(~seen)[0])
        raise BadInput(f"{key.size - u.size} row(s) of {name} repeat a (rank, step) already recorded, e.g. rank "
                       f"{int(r[i])} step {int(st[i])}", field="step", fix="each rank records each step once")


def _codes(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(unique, codes)`` of a 1-D integer array: the sorted distinct values (int64)
    and each element's index into them (int32 when it fits), like
    ``np.unique(v, return_inverse=True)``. A dense lookup table (O(n)) when the values
    span a range no larger than ~2x the array, else a sort."""
    v = np.asarray(v)
    if v.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
    if v.dtype.kind not in "iu":
        v = v.astype(np.int64)
    lo, hi = int(v.min()), int(v.max())
    span = hi - lo + 1
    if span <= 2 * v.size + 4096:
        off = np.subtract(v, lo, dtype=np.int64) if v.dtype.itemsize > 4 or v.dtype.kind == "u" else v - np.int32(lo)
        present = np.zeros(span, dtype=bool)
        present[off] = True
        uniq = np.flatnonzero(present).astype(np.int64) + lo
        ct = np.int32 if uniq.size < 2**31 else np.int64
        lut = np.cumsum(present, dtype=ct) - ct(1)
        return uniq, lut[off]
    uniq, inv = np.unique(v.astype(np.int64, copy=False), return_inverse=True)
    return uniq, inv.reshape(-1)


def _step_major(step_vals: np.ndarray, rank_vals: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(steps, ranks)`` (int64, ascending) when the rows are the complete grid in
    step-major order (every rank once per step, ranks ascending, steps ascending),
    else None. A few vectorized passes, no sort."""
    n = step_vals.shape[0]
    if n == 0 or step_vals.dtype.kind not in "iu" or rank_vals.dtype.kind not in "iu":
        return None
    ch = step_vals != step_vals[0]
    R = int(np.argmax(ch)) if ch.any() else n
    del ch
    if n % R:
        return None
    S = n // R
    V = step_vals.reshape(S, R)
    K = rank_vals.reshape(S, R)
    r0, s0 = K[0], V[:, 0]
    if not (np.all(r0[1:] > r0[:-1]) and np.all(s0[1:] > s0[:-1])):
        return None
    if not (bool((V == s0[:, None]).all()) and bool((K == r0[None, :]).all())):
        return None
    return s0.astype(np.int64), r0.astype(np.int64)


#: what a seconds column of ``steps`` must hold (the fix of its BadInput)
_SECONDS_FIX = "durations in seconds: finite and >= 0, NaN (null) where missing"
_INT_FIX = {
    "rank": "rank must be an integer on every row (the rank number, e.g. 0, 1, 2)",
    "step": "step must be an integer on every row (the training step number)",
}


def _not_numeric(s: pd.Series):
    """The first value of ``s`` that is set but is no number (for an error message)."""
    num = pd.to_numeric(s, errors="coerce")
    bad = np.flatnonzero(num.isna().to_numpy() & s.notna().to_numpy())
    return s.iloc[int(bad[0])] if bad.size else None


def _int_column(steps: pd.DataFrame, col: str) -> np.ndarray:
    """Column ``col`` (``rank`` or ``step``) as an integer array: as stored when its
    dtype is integer, else converted to int64 (floats must be integral).

    Raises BadInput naming ``col`` for a non-numeric, null, non-finite or fractional
    value."""
    s = steps[col]
    vals = s.to_numpy()
    if vals.dtype.kind in "iu":
        return vals
    fix = _INT_FIX.get(col)
    try:
        f = s.to_numpy(dtype=np.float64, na_value=np.nan)
    except (ValueError, TypeError):
        raise BadInput(f"not a number: {_not_numeric(s)!r}", field=col, fix=fix) from None
    nan = np.isnan(f)
    if nan.any():
        raise BadInput(f"{int(nan.sum())} of {f.size} rows are null", field=col, fix=fix)
    del nan
    bad = np.flatnonzero(~(np.abs(f) < 2.0**63) | (f != np.floor(f)))
    if bad.size:
        raise BadInput(f"{bad.size} value(s) are not whole numbers, e.g. {float(f[bad[0]])!r}", field=col, fix=fix)
    return f.astype(np.int64)


def _column(steps: pd.DataFrame, col: str, dtype) -> np.ndarray:
    """A column of ``steps`` as a numpy array of ``dtype`` that the caller owns.

    Raises BadInput naming ``col`` for a value that is not a number. NaN (null) is
    kept: a missing value."""
    s = steps[col]
    try:
        with np.errstate(over="ignore"):  # a value beyond float32 becomes inf: _check_seconds names it
            if isinstance(s.dtype, np.dtype) and s.dtype.kind in "iuf":
                vals = s.to_numpy(dtype=dtype)
            else:  # nullable, object, string or categorical: nulls become NaN
                vals = s.to_numpy(dtype=dtype, na_value=np.nan)
    except (ValueError, TypeError):
        fix = "unix seconds (a number)" if col == "t_start" else _SECONDS_FIX
        raise BadInput(f"not a number: {_not_numeric(s)!r}", field=col, fix=fix) from None
    if not vals.flags.owndata or not vals.flags.writeable:
        vals = vals.copy()
    return vals


def _check_seconds(vals: np.ndarray, steps: pd.DataFrame, col: str) -> None:
    """BadInput naming ``col`` when a duration is negative or infinite (NaN is missing,
    allowed). Two reductions, no temporaries, unless a value is bad."""
    if not vals.size:
        return
    lo, hi = np.fmin.reduce(vals), np.fmax.reduce(vals)
    if np.isnan(lo) or (lo >= 0 and hi < np.inf):
        return
    bad = np.flatnonzero((vals < 0) | np.isinf(vals))
    # the value as given (a huge float64 is inf only once made float32)
    given = steps[col].iloc[int(bad[0])]
    given = given.item() if isinstance(given, np.generic) else given
    raise BadInput(f"{bad.size} value(s) negative, infinite or over 3.4e38 s, e.g. {given!r}", field=col,
                   fix=_SECONDS_FIX)


#: a start time past this many seconds (the year 5138) is not unix seconds
MAX_UNIX_S = 1e11
#: (largest value, unit, divisor) for a start time recorded in a finer unit
_FINER = ((1e14, "milliseconds", "1e3"), (1e17, "microseconds", "1e6"), (float("inf"), "nanoseconds", "1e9"))


def _check_t_start_unit(hi: float) -> None:
    """BadInput naming ``t_start`` when its latest value ``hi`` cannot be unix seconds
    (past :data:`MAX_UNIX_S`), with the unit it most likely is: every step would read
    1000x apart, and the labels would be wrong without a word."""
    if hi <= MAX_UNIX_S:
        return
    unit, div = next((u, d) for top, u, d in _FINER if hi <= top)
    raise BadInput(f"values up to {hi:.4g} are not unix seconds (they look like {unit})", field="t_start",
                   fix=f"divide t_start by {div}")


def _check_t_start(t: np.ndarray, steps_u: np.ndarray, ranks: np.ndarray) -> None:
    """BadInput naming ``t_start`` when the ``(S, R)`` grid has no finite start time, an
    infinite one, or one that is earlier than the rank's start of an earlier step.
    Blocks of rows, bounded temporaries."""
    fix = "unix seconds of the step's start, increasing with step for each rank"
    if not t.size:
        return
    lo, hi = np.fmin.reduce(t, axis=None), np.fmax.reduce(t, axis=None)
    if np.isnan(hi):
        raise BadInput("no value: every start time is missing", field="t_start", fix=fix)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise BadInput("not finite (inf)", field="t_start", fix=fix)
    _check_t_start_unit(hi)
    gaps = bool(np.isnan(np.add.reduce(t, axis=None)))  # a missing start anywhere (NaN propagates)
    last = np.full(t.shape[1], -np.inf)
    blk = 1024
    for i in range(0, t.shape[0], blk):
        b = t[i : i + blk]
        if gaps:
            run = np.fmax.accumulate(b, axis=0)  # latest start so far, NaN skipped
            np.fmax(run, last[None, :], out=run)
        else:  # no gaps: the previous row is the latest start so far
            run = b
        prev = np.empty_like(b)
        prev[0] = last
        prev[1:] = run[:-1]
        back = b < prev  # NaN compares False
        if back.any():
            r, j = np.argwhere(back)[0]
            raise BadInput(
                f"must increase with step for each rank: rank {int(ranks[j])} starts step {int(steps_u[i + r])} "
                f"at {float(b[r, j])!r}, before an earlier step of it ({float(prev[r, j])!r})",
                field="t_start", fix=fix)
        last = run[-1]


@dataclass
class StepGrid:
    """The ``steps`` table of one run as dense ``(S, R)`` arrays (S steps x R ranks).

    Missing (rank, step) cells are NaN. Row ``i`` is the i-th distinct step number in
    ascending order (``steps[i]``, int64); column ``j`` is rank ``ranks[j]`` (int64,
    ascending).

    Attributes (units): ``t_start`` unix s (float64: a unix time needs its 52 bits);
    ``compute`` the rank's *local time* (``compute_s`` + ``dataloader_s``, the part of
    the step spent on the rank itself before the collective), ``comm``, ``step_s``
    seconds (float32 when built by
    :meth:`from_steps`: 7 significant digits, ~2 ns at 30 ms, ~4 us at 60 s; any
    float array when given directly); ``job_step`` (S,) the median ``step_s`` across
    ranks, seconds, float64; ``t0`` (S,) the earliest ``t_start`` of the step, unix s;
    ``t1`` (S,) the latest ``t_start + step_s`` of the step, unix s;
    ``clock_offsets`` (R,) seconds subtracted from a rank's ``t_start`` when its clock
    is skewed (see :meth:`_align_clocks`; zeros otherwise).
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
    clock_offsets: np.ndarray = field(init=False, repr=False)  # (R,) s removed from t_start (skew)
    #: (S, R) the ``dataloader_s`` part of ``compute`` (s; NaN where not measured), or
    #: None when the steps table has no such column
    dataloader: np.ndarray | None = field(default=None, repr=False)
    _group_median: np.ndarray | None = field(init=False, default=None, repr=False)
    _group_stats: tuple | None = field(init=False, default=None, repr=False)
    _peer_median: np.ndarray | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self.job_step, _ = nanmedian(self.step_s, axis=1) if self.S else (np.zeros(0), None)
        self.clock_offsets = np.zeros(self.R)
        if self.S and self.R > 1:
            self._align_clocks()
        if self.S and self.R:
            # fmin/fmax ignore NaN (a row of NaN gives NaN, without a warning)
            self.t0 = np.fmin.reduce(self.t_start, axis=1).astype(np.float64, copy=False)
            t1 = np.empty(self.S)
            for i in range(0, self.S, 4096):  # bounded temporaries
                t1[i : i + 4096] = np.fmax.reduce(self.t_start[i : i + 4096] + self.step_s[i : i + 4096], axis=1)
            self.t1 = t1
        else:
            self.t0 = np.zeros(0)
            self.t1 = np.zeros(0)

    def _align_clocks(self) -> None:
        """Remove clock skew between ranks' ``t_start`` (unsynchronized hosts).

        In synchronous training a rank can start a step later than its peers by less
        than one step time (they wait for it in the collective, so the step time
        includes the wait). A rank whose median offset from the per-step median
        ``t_start`` exceeds the median job step time is therefore on a skewed clock:
        that offset (seconds, ``clock_offsets`` ``(R,)``) is subtracted from its
        ``t_start``. Offsets within one step time are left alone: they are real
        (a rank persistently late with its post-step work). Estimated on at most 2,000
        evenly spaced steps."""
        step_med, n = nanmedian(np.asarray(self.job_step, dtype=np.float64), axis=0)
        if not n or not np.isfinite(step_med) or step_med <= 0:
            return
        rows = np.unique(np.linspace(0, self.S - 1, min(self.S, 2000)).astype(np.int64))
        sub = np.asarray(self.t_start[rows], dtype=np.float64)
        mid, _ = nanmedian(sub, axis=1)
        with np.errstate(invalid="ignore"):
            off, cnt = nanmedian(sub - mid[:, None], axis=0)
        skewed = (cnt > 0) & np.isfinite(off) & (np.abs(off) > float(step_med))
        if not skewed.any():
            return
        self.clock_offsets = np.where(skewed, off, 0.0)
        self.t_start = np.asarray(self.t_start, dtype=np.float64) - self.clock_offsets[None, :]

    @property
    def S(self) -> int:
        return int(self.steps.shape[0])

    @property
    def R(self) -> int:
        return int(self.ranks.shape[0])

    @classmethod
    def from_steps(cls, steps: pd.DataFrame) -> "StepGrid":
        """Build the grid from a ``steps`` frame of ONE run (faultlab.schema.STEPS).

        Duplicate (rank, step) rows: the last one wins. O(rows), no sort: when the
        frame is already the complete grid in step-major order (every rank once per
        step, ranks and steps ascending: the usual layout) the columns are reshaped;
        otherwise step and rank codes come from a lookup table and the values are
        scattered into the grid. String columns may be ``str``/object or categorical.
        ``rank`` and ``step`` may be of any integer dtype, or float / nullable with
        whole numbers only. NaN (null) in ``t_start``, ``compute_s``, ``comm_s`` or
        ``step_s`` is a missing value.

        Local time: when the frame has ``dataloader_s`` (optional in
        faultlab.schema.STEPS: the step's wait for its batch, not in ``compute_s``),
        ``compute`` is ``compute_s + dataloader_s`` (a NaN ``dataloader_s`` counts 0:
        not measured at that step), and ``dataloader`` keeps that part. A rank
        stalled on its own (slow) disk is then a straggler in the temporal and peer
        views, where ``compute_s`` alone would even fall (its peers wait in the
        collective, it does not).

        Raises:
            BadInput naming the column: a missing column (field ``steps``); ``rank`` or
            ``step`` not a number, null or fractional; ``t_start``, ``compute_s``,
            ``comm_s`` or ``step_s`` not a number; a negative or infinite
            ``compute_s``, ``comm_s``, ``step_s`` or ``dataloader_s``; ``t_start`` with no value at all,
            an infinite one, or one that does not increase with ``step`` for a rank.
        """
        check_steps(steps)
        run_ids = [r for r in pd.unique(steps["run_id"]) if not pd.isna(r)]
        run_id = str(run_ids[0]) if run_ids else ""
        step_vals, rank_vals = _int_column(steps, "step"), _int_column(steps, "rank")
        n = len(steps)
        hit = _step_major(step_vals, rank_vals)
        ordered = hit is not None
        if ordered:
            u_steps, u_ranks = hit
            S, R = len(u_steps), len(u_ranks)
            cell = ri = None
        else:
            u_steps, si = _codes(step_vals)
            u_ranks, ri = _codes(rank_vals)
            S, R = len(u_steps), len(u_ranks)
            cell = si.astype(np.int64) * R + ri
            del si
        del step_vals, rank_vals

        def dense(col: str, dtype) -> np.ndarray:
            vals = _column(steps, col, dtype)
            if col != "t_start":
                _check_seconds(vals, steps, col)
            if ordered:
                return vals.reshape(S, R)
            out = np.full(S * R, np.nan, dtype=dtype)
            out[cell] = vals
            return out.reshape(S, R)

        # first occurrence of each rank gives its node and peer group (row j when ordered)
        if ordered:
            first = np.arange(R, dtype=np.int64)
        else:
            first = np.full(R, -1, dtype=np.int64)
            order = np.arange(n - 1, -1, -1, dtype=np.int64)
            first[ri[order]] = order  # the last write, the smallest row index, wins
            del order
        del ri
        nodes = [str(x) for x in steps["node"].iloc[first].tolist()] if R else []
        groups = [str(x) for x in steps["peer_group"].iloc[first].tolist()] if R else []
        t_start = dense("t_start", np.float64)
        _check_t_start(t_start, u_steps, u_ranks)
        compute = dense("compute_s", np.float32)
        loader = dense("dataloader_s", np.float32) if "dataloader_s" in steps.columns else None
        if loader is not None and np.isfinite(loader).any():
            compute += np.where(np.isnan(loader), np.float32(0), loader)  # NaN compute stays NaN
        else:
            loader = None
        return cls(
            run_id=run_id,
            steps=u_steps,
            ranks=u_ranks,
            nodes=np.asarray(nodes, dtype=object),
            groups=np.asarray(groups, dtype=object),
            t_start=t_start,
            compute=compute,
            comm=dense("comm_s", np.float32),
            step_s=dense("step_s", np.float32),
            dataloader=loader,
        )

    def peer_groups(self) -> tuple[list[str], np.ndarray, list]:
        """``(names, gidx, cols)``: the sorted peer group names, ``(R,)`` the index of
        each rank's group in ``names``, and per group its rank columns (a slice when
        contiguous, else an index array)."""
        names = sorted(set(self.groups.tolist()))
        gidx = np.zeros(self.R, dtype=np.intp)
        cols = []
        for k, g in enumerate(names):
            c = np.flatnonzero(self.groups == g)
            gidx[c] = k
            cols.append(slice(int(c[0]), int(c[-1]) + 1) if c[-1] - c[0] + 1 == c.size else c)
        return names, gidx, cols

    def group_stats(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(median, count, gidx)``: ``(S, G)`` per step and peer group (groups in
        sorted name order) the median ``compute_s`` (s, in the dtype of ``compute``)
        and the number of ranks with data; ``(R,)`` each rank's group index. Cached."""
        if self._group_stats is None:
            names, gidx, cols = self.peer_groups()
            med = np.full((self.S, len(names)), np.nan, dtype=self.compute.dtype)
            cnt = np.zeros((self.S, len(names)), dtype=np.int64)
            for k, c in enumerate(cols):
                m, n = nanmedian(self.compute[:, c], axis=1)
                med[:, k] = m
                cnt[:, k] = n
            self._group_stats = (med, cnt, gidx)
        return self._group_stats

    def group_median(self) -> np.ndarray:
        """``(S, R)``: per step, the median ``compute_s`` of the rank's peer group (s,
        in the dtype of ``compute``).

        NaN ranks (no record at that step) are left out of the median. Cached.
        """
        if self._group_median is None:
            med, _, gidx = self.group_stats()
            self._group_median = np.broadcast_to(med, (self.S, self.R)) if med.shape[1] == 1 else med[:, gidx]
        return self._group_median

    def peer_median(self) -> np.ndarray:
        """``(S, R)``: per step, the median ``compute_s`` of the rank's peers *without
        the rank itself* (:func:`loo_median`; s, in the dtype of ``compute``). NaN
        where the rank has no peer with data at that step. Computed in blocks of
        4,096 steps (bounded temporaries). Cached."""
        if self._peer_median is None:
            _, _, cols = self.peer_groups()
            out = np.full((self.S, self.R), np.nan, dtype=self.compute.dtype)
            for c in cols:
                for i in range(0, self.S, 4096):
                    out[i : i + 4096, c] = loo_median(self.compute[i : i + 4096, c])
            self._peer_median = out
        return self._peer_median

    def group_count(self) -> np.ndarray:
        """``(S, R)``: per step, the number of ranks of the rank's peer group with data."""
        _, cnt, gidx = self.group_stats()
        return cnt[:, gidx]

    def component(self, j: int) -> str:
        """Component name of rank column ``j``: ``"rank:N"``."""
        return f"rank:{int(self.ranks[j])}"

    def steps_between(self, t_lo: float, t_hi: float) -> np.ndarray:
        """Row indices of the steps whose ``[t0, t1]`` overlaps ``[t_lo, t_hi]`` (unix s)."""
        if not self.S:
            return np.zeros(0, dtype=np.int64)
        hi = np.inf if not np.isfinite(t_hi) else t_hi
        return np.flatnonzero((self.t0 <= hi) & (self.t1 >= t_lo))


def _window_stats(win: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | int]:
    """Median, MAD (both in the dtype of ``win``) and non-NaN count of each row of
    ``win`` ``(C, w)``, ignoring NaN; a row without values gives NaN. The median of an
    even count is the mean of the two middle values (computed in float64); the MAD is
    taken about the median as stored. The count is an int when no row holds a NaN."""
    dt = win.dtype
    w = win.shape[1]
    srt = np.sort(win, axis=1)  # NaN last
    lo, hi = (w - 1) // 2, w // 2
    med = (0.5 * (srt[:, lo].astype(np.float64) + srt[:, hi])).astype(dt)
    dev = np.abs(win - med[:, None])
    dev.sort(axis=1)
    mad = (0.5 * (dev[:, lo].astype(np.float64) + dev[:, hi])).astype(dt)
    rows = np.flatnonzero(np.isnan(srt[:, -1]))
    if rows.size == 0:
        return med, mad, w
    # rows holding a NaN (no record, or a flagged step left out): redo with their count
    srt = srt[rows]
    n_r = w - np.count_nonzero(np.isnan(srt), axis=1)
    lo_r = np.clip((n_r - 1) // 2, 0, None)[:, None]
    hi_r = np.clip(n_r // 2, 0, None)[:, None]

    def mid(a):
        return 0.5 * (np.take_along_axis(a, lo_r, axis=1)[:, 0].astype(np.float64) + np.take_along_axis(a, hi_r, axis=1)[:, 0])

    med_r = mid(srt).astype(dt)
    med_r[n_r == 0] = np.nan
    dev = np.abs(win[rows] - med_r[:, None])
    dev.sort(axis=1)
    mad_r = mid(dev).astype(dt)
    mad_r[n_r == 0] = np.nan
    med[rows] = med_r
    mad[rows] = mad_r
    n = np.full(win.shape[0], w, dtype=np.int64)
    n[rows] = n_r
    return med, mad, n


def _trailing_baseline_t(
    Xt: np.ndarray, *, window: int, min_valid: int, threshold: float, mad_k: float, block: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`trailing_baseline` on the transposed layout: ``Xt`` ``(C, S)`` (a series
    per row, time along the contiguous axis), float32 or float64. Returns ``(C, S)``
    baseline, sigma (dtype of ``Xt``) and flags (bool).

    The feedback (flagged steps leave the baseline) makes block ``k`` depend on the
    flags of the blocks before it, so blocks run in order, each vectorized over all C
    series: per block, one sort of the ``(C, window)`` trailing window for the median
    and one for the MAD (a few hundred KB, in cache).
    """
    C, S = Xt.shape
    dt = Xt.dtype
    nb = -(-S // block)
    bb = np.full((nb, C), np.nan, dtype=dt)
    ss = np.full((nb, C), np.nan, dtype=dt)
    flags = np.zeros((C, S), dtype=bool)
    if S == 0 or C == 0:
        return np.full((C, S), np.nan, dtype=dt), np.full((C, S), np.nan, dtype=dt), flags
    feed = Xt.copy()  # the values allowed to feed the baseline (flagged ones -> NaN)
    # warm-up baseline: median of the first `window` rows
    cur_b, cur_s, _ = _window_stats(Xt[:, :window])
    cur_s = (cur_s * MAD_TO_SIGMA).astype(dt)
    thr_b = cur_b * dt.type(threshold)
    floor = dt.type(mad_k) * np.nan_to_num(cur_s)
    for k in range(nb):
        s0 = k * block
        if s0 >= min_valid:
            med, mad, n = _window_stats(feed[:, max(0, s0 - window) : s0])
            mad = (mad * MAD_TO_SIGMA).astype(dt)
            if isinstance(n, int):
                if n >= min_valid:
                    cur_b, cur_s = med, mad
            else:
                ok = n >= min_valid
                cur_b = np.where(ok, med, cur_b)
                cur_s = np.where(ok, mad, cur_s)
            thr_b = cur_b * dt.type(threshold)
            floor = dt.type(mad_k) * np.nan_to_num(cur_s)
        blk = Xt[:, s0 : s0 + block]
        # a NaN value or baseline compares False: never flagged
        f = (blk > thr_b[:, None]) & ((blk - cur_b[:, None]) > floor[:, None])
        bb[k] = cur_b
        ss[k] = cur_s
        if f.any():
            flags[:, s0 : s0 + block] = f
            feed[:, s0 : s0 + block][f] = np.nan
    del feed
    base = np.repeat(bb.T, block, axis=1)[:, :S]
    sig = np.repeat(ss.T, block, axis=1)[:, :S]
    return base, sig, flags


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
        X: ``(S, C)`` float array, rows in time order; NaN = no value. float32 is
            computed in float32, anything else in float64.
        window: number of preceding rows the baseline is the median of (steps).
        min_valid: fewest unflagged values in the window to refresh the baseline;
            with fewer the previous baseline is kept (also the warm-up length).
        threshold: ratio ``value / baseline`` above which a row may be flagged.
        mad_k: the value must also exceed the baseline by ``mad_k * 1.4826 * MAD``.
        block: the baseline is refreshed every ``block`` rows (1 = every row).

    Returns:
        ``(baseline, sigma, flags)``: baseline and robust sigma ``(S, C)`` in the
        unit (and float dtype) of ``X``, and the boolean ``(S, C)`` flags (possibly
        transposed views of ``(C, S)`` arrays). Deterministic.

    Raises:
        BadInput when a parameter is out of range.
    """
    if window < 1 or min_valid < 1 or block < 1:
        raise BadInput("window, min_valid and block must be >= 1", field="temporal")
    X = np.asarray(X)
    dt = np.float32 if X.dtype == np.float32 else np.float64
    Xt = np.ascontiguousarray(X.T, dtype=dt)
    base, sig, flags = _trailing_baseline_t(Xt, window=window, min_valid=min_valid, threshold=threshold,
                                            mad_k=mad_k, block=block)
    return base.T, sig.T, flags.T


@dataclass
class TemporalView:
    """Result of :func:`temporal_view` for one run (shapes: S steps, R ranks).

    ``job_*`` are ``(S,)`` for the job step time (seconds, median ``step_s`` across
    ranks); ``rank_*`` are ``(S, R)`` for each rank's ``compute_s`` (seconds).
    ``*_base`` baseline (s), ``*_sigma`` robust noise (s), ``*_ratio`` value/baseline,
    ``*_flag`` bool. Floats are in the dtype of the grid's ``compute`` (float32 from
    :meth:`StepGrid.from_steps`); the ``(S, R)`` arrays are transposed views of
    ``(R + 1, S)`` arrays (a rank's series is contiguous).
    """

    job_base: np.ndarray
    job_sigma: np.ndarray
    job_ratio: np.ndarray
    job_flag: np.ndarray
    rank_base: np.ndarray
    rank_sigma: np.ndarray
    rank_ratio: np.ndarray
    rank_flag: np.ndarray


def _cap_job_baseline(x: np.ndarray, base: np.ndarray, sig: np.ndarray, flag: np.ndarray, config) -> None:
    """A job slowed from its first step has a slowed trailing baseline, and a temporal
    view alone never sees it (SlowSight's caveat; for a single rank the peer view
    covers it, for the whole job nothing would). Where the job's trailing baseline is
    itself above ``temporal_threshold`` x the run's typical step time (the median over
    the run), the typical step time is the baseline instead and those steps are judged
    against it (same threshold and noise floor). In place on ``base`` and ``flag``."""
    typical, n = nanmedian(np.asarray(x, dtype=np.float64), axis=0)
    if not n or not np.isfinite(typical) or typical <= 0:
        return
    with np.errstate(invalid="ignore"):
        high = base > config.temporal_threshold * typical
    if not high.any():
        return
    t = base.dtype.type(typical)
    base[high] = t
    with np.errstate(invalid="ignore"):
        flag[high] = (x[high] / t > config.temporal_threshold) & ((x[high] - t) > config.mad_k * np.nan_to_num(sig[high]))


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
    if config.temporal_window_steps < 1 or config.temporal_min_valid_steps < 1 or config.temporal_block_steps < 1:
        raise BadInput("window, min_valid and block must be >= 1", field="temporal")
    dt = np.float32 if grid.compute.dtype == np.float32 else np.float64
    # series per row: row 0 the job step time, row 1 + j rank j's compute_s
    Xt = np.empty((grid.R + 1, grid.S), dtype=dt)
    if grid.S:
        Xt[0] = grid.job_step
        Xt[1:] = grid.compute.T
    base, sig, flags = _trailing_baseline_t(
        Xt,
        window=config.temporal_window_steps,
        min_valid=config.temporal_min_valid_steps,
        threshold=config.temporal_threshold,
        mad_k=config.mad_k,
        block=config.temporal_block_steps,
    )
    if grid.S:
        _cap_job_baseline(Xt[0], base[0], sig[0], flags[0], config)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.divide(Xt, base, out=Xt)  # Xt is not needed any more
    return TemporalView(
        job_base=base[0],
        job_sigma=sig[0],
        job_ratio=ratio[0],
        job_flag=flags[0],
        rank_base=base[1:].T,
        rank_sigma=sig[1:].T,
        rank_ratio=ratio[1:].T,
        rank_flag=flags[1:].T,
    )
