"""What-if slowdown: how much faster would the job have been without its stragglers?

Method: the what-if analysis of "Understanding Stragglers in Large Model Training
Using What-if Analysis" (OSDI'25), in its data-parallel form. In a synchronous
data-parallel step every rank waits for the slowest compute, so the straggler's excess
over an ideal (the peer median) is time the whole job lost. Per step ``t``::

    excess[t]    = max_r compute_s[t, r] - ideal[t]
    simulated[t] = max(step[t] - excess[t], ideal[t])          (seconds)

where ``step[t]`` is the job step time (median ``step_s`` across ranks) and
``ideal[t]`` the median ``compute_s`` of the peer group (with several peer groups,
e.g. pipeline stages, the largest group median: the slowest *ideal* stage; with one
group this is exactly the median). Then::

    S   = sum_t step[t] / sum_t simulated[t]             (ratio, >= 1)
    S_w = sum_t step[t] / sum_t simulated_w[t]

where ``simulated_w`` makes only rank ``w`` ideal (its compute_s replaced by its
group median): ``excess_w[t] = max_r compute_s[t, r] - max(max_{r != w}
compute_s[t, r], median_g(w)[t])``. ``S_w`` attributes the slowdown to rank ``w``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from faultlab.errors import BadInput
from faultlab.labeler.grid import StepGrid
from faultlab.steps import check_steps


def simulate_job(grid: StepGrid, top: np.ndarray | None = None) -> np.ndarray:
    """``(S,)`` float64: the job step time with every straggler made ideal (seconds;
    NaN where the step has no job step time or no compute data). The first output of
    :func:`simulate`, without its ``(S, R)`` per-rank part. ``top`` ``(S,)``: each
    step's largest compute (:func:`step_top`) when already known."""
    S, R = grid.S, grid.R
    if S == 0 or R == 0:
        return np.zeros(0)
    top = step_top(grid.compute) if top is None else top
    gmed, _, _ = grid.group_stats()
    ideal = np.fmax.reduce(gmed, axis=1).astype(np.float64)  # the slowest ideal group
    return np.maximum(grid.job_step - (top - ideal), ideal)


def step_top(compute: np.ndarray) -> np.ndarray:
    """``(S,)`` float64: each step's largest compute over the ranks of ``compute``
    ``(S, R)`` (NaN only when no rank has data)."""
    return np.fmax.reduce(compute, axis=1).astype(np.float64)


def _largest(comp: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(arg, top, second)`` of ``comp`` ``(S, R)`` (s): per step the rank column with
    the largest compute, that compute and the largest of the others (equal to it on a
    tie), float64; NaN counts as ``-inf`` (``top`` is ``-inf`` for a step without data,
    ``second`` ``-inf`` with one rank)."""
    S, R = comp.shape
    rows = np.arange(S)
    filled = np.where(np.isnan(comp), comp.dtype.type(-np.inf), comp)
    arg = np.argmax(filled, axis=1)
    top = filled[rows, arg].astype(np.float64)
    if R < 2:
        return arg, top, np.full(S, -np.inf)
    filled[rows, arg] = -np.inf
    return arg, top, np.max(filled, axis=1).astype(np.float64)


def simulate(grid: StepGrid) -> tuple[np.ndarray, np.ndarray]:
    """Per-step what-if times of one run.

    Returns:
        ``(simulated, simulated_per_rank)``: ``(S,)`` the job step time with every
        straggler made ideal, and ``(S, R)`` with only rank column ``j`` made ideal;
        seconds, float64; NaN where the step has no job step time or no compute data.
    """
    S, R = grid.S, grid.R
    if S == 0 or R == 0:
        return np.zeros(0), np.zeros((S, R))
    comp = grid.compute
    gmed_g, _, gidx = grid.group_stats()
    rows = np.arange(S)
    arg, top, second = _largest(comp)
    ideal = np.fmax.reduce(gmed_g, axis=1).astype(np.float64)
    top = np.where(np.isfinite(top), top, np.nan)
    step = grid.job_step
    sim = np.maximum(step - (top - ideal), ideal)
    # only rank j ideal: the max of the others, or j's group median
    others_max = np.repeat(top[:, None], R, axis=1)
    others_max[rows, arg] = second
    gmed = gmed_g[:, 0][:, None] if gmed_g.shape[1] == 1 else gmed_g[:, gidx]
    new_top = np.fmax(others_max, gmed, out=others_max)
    miss = np.isnan(comp)
    if miss.any():
        new_top[miss] = np.broadcast_to(top[:, None], (S, R))[miss]
    # sim_w = max(step - (top - new_top), ideal), in place
    sim_w = np.subtract(new_top, top[:, None], out=new_top)
    sim_w += step[:, None]
    np.maximum(sim_w, ideal[:, None], out=sim_w)
    return sim, sim_w


def whatif_sums(grid) -> tuple[float, float, int, np.ndarray]:
    """:func:`simulate`'s times summed over the steps that have both a job step time
    and a simulated one: ``(actual s, simulated s, steps counted, (R,) simulated s with
    only rank j made ideal)``, without :func:`simulate`'s ``(S, R)`` array.

    Why it needs no ``(S, R)`` array: making a rank ideal changes a step only where
    that rank has the step's largest compute (its group median never exceeds the
    largest compute); every other rank's column holds the step's time with the
    largest compute kept, ``max(step, ideal)``. So each rank's sum is the sum of that
    time over the steps, with its own steps' times in place of it where it is the
    largest. The sums may differ from :func:`simulate`'s column sums in their last
    bits (float64 summation order). ``grid``: anything with ``S``, ``R``,
    ``compute`` ``(S, R)``, ``job_step`` ``(S,)`` and ``group_stats()``."""
    S, R = grid.S, grid.R
    if S == 0 or R == 0:
        return 0.0, 0.0, 0, np.zeros(R)
    comp = np.asarray(grid.compute)
    gmed_g, _, gidx = grid.group_stats()
    rows = np.arange(S)
    arg, top, second = _largest(comp)
    ideal = np.fmax.reduce(gmed_g, axis=1).astype(np.float64)
    top = np.where(np.isfinite(top), top, np.nan)
    step = np.asarray(grid.job_step)
    sim = np.maximum(step - (top - ideal), ideal)
    ok = ~np.isnan(step) & ~np.isnan(sim)
    kept = np.maximum((top - top) + step, ideal)  # a rank that is not the largest made ideal: nothing changes
    g_arg = gmed_g[:, 0] if gmed_g.shape[1] == 1 else gmed_g[rows, gidx[arg]]
    new_top = np.where(np.isnan(comp[rows, arg]), top, np.fmax(second, g_arg))
    own = np.maximum((new_top - top) + step, ideal)  # the largest made ideal: the next largest, or its group median
    a, k, o = arg[ok], kept[ok], own[ok]
    total = float(np.sum(k))
    per_rank = total - np.bincount(a, weights=k, minlength=R) + np.bincount(a, weights=o, minlength=R)
    return float(np.sum(step[ok])), float(np.sum(sim[ok])), int(ok.sum()), per_rank


class GridRows:
    """Rows of a :class:`StepGrid`, as :func:`whatif_sums` reads a grid (``S``, ``R``,
    ``compute``, ``job_step``, ``group_stats()``): ``compute`` ``(rows, R)``,
    ``job_step`` ``(rows,)`` and the rows' group stats ``(median (rows, G), count
    (rows, G), gidx (R,))``."""

    def __init__(self, compute: np.ndarray, job_step: np.ndarray, stats: tuple):
        self.compute = np.asarray(compute)
        self.S, self.R = self.compute.shape
        self.job_step = np.asarray(job_step)
        self._stats = stats

    def group_stats(self) -> tuple:
        return self._stats


#: cells (rows x ranks) of compute one step of :func:`ranks_cost` reads at once
COST_CHUNK_CELLS = 1 << 22


def ranks_cost(grid, cols, i0: int, i1: int) -> float:
    """What the rank columns ``cols`` together cost the job over grid rows ``i0..i1``:
    the job's time / its time with those ranks made ideal (each one's compute replaced
    by its group median; per step ``simulated = max(step - (top - new_top), ideal)``,
    ``new_top`` the largest compute left, as in the module docstring). For one rank it
    is ``S_w`` over those rows; for ranks slowed together (two faults at once, a
    node's ranks) it is what they cost as a set, where each alone would read ~1 (the
    others still hold the step). A ratio >= 1; NaN when no row has a job step time.
    Read in chunks of :data:`COST_CHUNK_CELLS` cells, so a long interval of a wide run
    (out of core) costs bounded memory. ``grid``: anything with ``R``, ``compute``,
    ``job_step`` and ``group_stats()``."""
    med, _, gidx = grid.group_stats()
    cols = np.unique(np.asarray(cols, dtype=np.intp))
    rest = np.ones(int(grid.R), dtype=bool)
    rest[cols] = False
    step_rows = max(1, COST_CHUNK_CELLS // max(int(grid.R), 1))
    actual = simulated = 0.0
    for a in range(i0, i1 + 1, step_rows):
        b = min(a + step_rows, i1 + 1)
        comp = np.asarray(grid.compute[a:b], dtype=np.float64)
        filled = np.where(np.isnan(comp), -np.inf, comp)
        top = np.max(filled, axis=1)
        left = np.max(filled[:, rest], axis=1) if rest.any() else np.full(b - a, -np.inf)
        gm = np.asarray(med[a:b], dtype=np.float64)
        made = np.max(np.where(np.isnan(comp[:, cols]), -np.inf, gm[:, gidx[cols]]), axis=1)  # the set's ideal, where it ran
        new_top = np.minimum(np.maximum(left, made), top)
        ideal = np.fmax.reduce(gm, axis=1)
        step = np.asarray(grid.job_step[a:b], dtype=np.float64)
        sim = np.maximum(step - (top - new_top), ideal)
        ok = np.isfinite(step) & np.isfinite(sim)
        actual += float(np.sum(step[ok]))
        simulated += float(np.sum(sim[ok]))
    return actual / simulated if simulated > 0 else float("nan")


def whatif_grid(grid: StepGrid) -> dict:
    """:func:`whatif` on a prepared :class:`StepGrid` (same return value)."""
    actual, simulated, n_ok, sums = whatif_sums(grid)
    S = actual / simulated if simulated > 0 else float("nan")
    per_rank = {}
    for j in range(grid.R):
        sw = float(sums[j])
        per_rank[grid.component(j)] = actual / sw if sw > 0 else float("nan")
    return {
        "method": "osdi25-whatif-dp",
        "run_id": grid.run_id,
        "slowdown": S,
        "per_rank": per_rank,
        "actual_s": actual,
        "simulated_s": simulated,
        "n_steps": n_ok,
    }


def whatif(steps: pd.DataFrame) -> dict:
    """What-if slowdown of one run (OSDI'25 "Understanding Stragglers in Large Model
    Training Using What-if Analysis", data-parallel form; see the module docstring).

    Args:
        steps: the ``steps`` table of ONE run (faultlab.schema.STEPS columns).

    Returns:
        ``{"slowdown": S, "per_rank": {"rank:N": S_w, ...}, "actual_s": float,
        "simulated_s": float, "n_steps": int, "method": str, "run_id": str}``.
        Ratios are ``actual / simulated`` (1.0 = no straggler cost); times in seconds.
        ``slowdown`` is NaN for an empty table.

    Raises:
        BadInput when a column is missing or the table holds more than one run_id.
    """
    check_steps(steps)
    if steps["run_id"].nunique(dropna=True) > 1:
        raise BadInput("steps hold more than one run_id", field="steps", fix="call whatif once per run")
    return whatif_grid(StepGrid.from_steps(steps))
