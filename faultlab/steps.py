"""A run's ``steps`` table, checked and laid out as dense step x rank arrays.

One place for what a ``steps`` frame must hold (its columns, integer ranks and steps,
durations in seconds, ``t_start`` in unix seconds increasing with ``step``), shared by
the labeler (its :class:`~faultlab.labeler.grid.StepGrid` is built on
:func:`dense_steps`), scoring and the report (:func:`check_step_values`: they refuse
what ``faultlab label`` refuses, in the same one-line error, without importing the
labeler). Every error is a :class:`~faultlab.errors.BadInput` naming the column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from faultlab.errors import BadInput

STEP_COLUMNS = ("run_id", "rank", "node", "peer_group", "step", "t_start", "compute_s", "comm_s", "step_s")
#: optional ``steps`` columns the labeler reads when present: ``dataloader_s`` (s) is
#: part of the rank's local time (see :func:`dense_steps`)
OPTIONAL_STEP_COLUMNS = ("dataloader_s",)

#: a run's dense grid (distinct steps x distinct ranks) may hold at most this many
#: times its rows, past :data:`GRID_FREE_CELLS`: a run's ranks record (nearly) every
#: step, while a table whose rows each name a new step and a new rank (a diagonal)
#: sizes a grid of rows squared cells: 60,000 such rows, 1 MB of Parquet, asked for
#: 27 GiB a column
GRID_SLACK = 4
#: cells any grid may hold whatever its rows (a sparse imported trace; 128 MiB a float64 column)
GRID_FREE_CELLS = 1 << 24


def check_steps(steps: pd.DataFrame) -> None:
    """Raise BadInput naming the missing columns of a ``steps`` frame.

    Only the columns are checked here; their values are checked per run by
    :func:`dense_steps`.
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
    refuse.

    Refused: a missing column, a null, fractional or non-numeric ``rank``/``step``, a
    non-numeric, negative or infinite duration, ``t_start`` not increasing with
    ``step``. These are the checks of :func:`dense_steps`, for readers (scoring, the
    report) that must refuse what ``faultlab label`` refuses rather than fail later with
    a traceback, and the checks of :func:`check_recorded_steps` but the one of an empty
    frame, which passes (a run with no steps yet)."""
    if len(steps):
        check_recorded_steps(steps)
        dense_steps(steps)


def grid_too_large(cells: int, rows: int) -> bool:
    """Whether a dense grid of ``cells`` cells laid out from ``rows`` rows (a run's
    steps x ranks, an imported metric's timestamps x components) is sized by the
    product of what the rows name rather than by the rows: more than
    :data:`GRID_SLACK` times the rows and more than :data:`GRID_FREE_CELLS`."""
    return int(cells) > GRID_FREE_CELLS and int(cells) > GRID_SLACK * int(rows)


def check_grid_size(S: int, R: int, rows: int, name: str = "") -> None:
    """BadInput when ``S`` distinct steps x ``R`` distinct ranks, the dense grid of a
    table of ``rows`` rows, is more than :data:`GRID_SLACK` times the rows and more
    than :data:`GRID_FREE_CELLS` cells: the arrays would be sized by the product of
    what the rows name, not by the rows (``name``, the file, is named when given)."""
    cells = int(S) * int(R)
    if grid_too_large(cells, rows):
        raise BadInput(f"{name + ': ' if name else ''}{rows} rows name {S} distinct steps and {R} distinct ranks, a grid of {cells} cells "
                       f"(at most {GRID_SLACK} times the rows, or {GRID_FREE_CELLS}): a run's ranks record the same steps",
                       field="steps", fix="give the steps table as the run recorded it (one row per rank per step)")


def check_recorded_steps(steps: pd.DataFrame, name: str = "steps") -> None:
    """BadInput for a run's recorded steps that no run writes: no rows at all, a
    negative ``rank``, or a ``(rank, step)`` recorded twice (the grid would keep one of
    them in silence); ``name`` (the file) is named in the message. Other bad values
    are named by :func:`dense_steps`."""
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


#: a unix time past this many seconds (the year 5138) is not unix seconds
MAX_UNIX_S = 1e11


def unix_time(v) -> float | None:
    """``v`` as a unix time (s) when it is one: a number (not a bool), finite, from 0 to
    :data:`MAX_UNIX_S`; else None (a time a run's files hold is whoever wrote them's)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= MAX_UNIX_S:
        return float(v)
    return None
#: ``(above this, divisor, unit)`` of a unix time recorded in a finer unit than
#: seconds, finest first (shared with the importers' timestamps)
FINER_UNITS = ((1e17, 1e9, "nanoseconds"), (1e14, 1e6, "microseconds"), (MAX_UNIX_S, 1e3, "milliseconds"))


def finer_unit(x: float) -> tuple[float, str] | None:
    """``(divisor, unit)`` of a unix time ``x`` that is past :data:`MAX_UNIX_S` (the
    finer unit it most likely is in, :data:`FINER_UNITS`); None for seconds or NaN."""
    return next(((div, unit) for lim, div, unit in FINER_UNITS if x > lim), None)


def _check_t_start_unit(hi: float) -> None:
    """BadInput naming ``t_start`` when its latest value ``hi`` cannot be unix seconds
    (past :data:`MAX_UNIX_S`), with the unit it most likely is: every step would read
    1000x apart, and the labels would be wrong without a word."""
    finer = finer_unit(hi)
    if finer is None:
        return
    div, unit = finer
    raise BadInput(f"values up to {hi:.4g} are not unix seconds (they look like {unit})", field="t_start",
                   fix=f"divide t_start by 1e{round(math.log10(div))}")


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
class DenseSteps:
    """One run's ``steps`` as ``(S, R)`` arrays (S distinct steps ascending x R ranks
    ascending; NaN where a (rank, step) is missing), with each rank's node and peer
    group (first seen) and the run id; see :func:`dense_steps` for units and dtypes."""

    run_id: str
    steps: np.ndarray
    ranks: np.ndarray
    nodes: np.ndarray
    groups: np.ndarray
    t_start: np.ndarray
    compute: np.ndarray
    comm: np.ndarray
    step_s: np.ndarray
    dataloader: np.ndarray | None


def local_time(compute_s: np.ndarray, dataloader_s: np.ndarray | None) -> np.ndarray:
    """A rank's local time per step (s): ``compute_s + dataloader_s``, the part of
    the step spent on the rank itself before the collective, what the labeler
    compares across time and peers. A NaN ``dataloader_s`` counts 0 (not measured at
    that step); a NaN ``compute_s`` stays NaN. Arrays of any one shape; ``None``
    for no dataloader column returns ``compute_s``."""
    if dataloader_s is None:
        return compute_s
    return compute_s + np.where(np.isnan(dataloader_s), np.zeros((), dtype=dataloader_s.dtype), dataloader_s)


def dense_steps(steps: pd.DataFrame) -> DenseSteps:
    """The ``steps`` frame of ONE run (faultlab.schema.STEPS) as dense ``(S, R)`` arrays, checked.

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
        check_grid_size(S, R, n)
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
        compute = local_time(compute, loader)
    else:
        loader = None
    return DenseSteps(
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
