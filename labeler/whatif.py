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
from faultlab.labeler.temporal import StepGrid, check_steps


def simulate(grid: StepGrid) -> tuple[np.ndarray, np.ndarray]:
    """Per-step what-if times of one run.

    Returns:
        ``(simulated, simulated_per_rank)``: ``(S,)`` the job step time with every
        straggler made ideal, and ``(S, R)`` with only rank column ``j`` made ideal;
        seconds; NaN where the step has no job step time or no compute data.
    """
    S, R = grid.S, grid.R
    if S == 0 or R == 0:
        return np.zeros(0), np.zeros((S, R))
    comp = grid.compute
    gmed = grid.group_median()
    with np.errstate(invalid="ignore"):
        filled = np.where(np.isnan(comp), -np.inf, comp)
        top = np.max(filled, axis=1)  # (S,)
        arg = np.argmax(filled, axis=1)
        second = np.partition(filled, R - 2, axis=1)[:, R - 2] if R >= 2 else np.full(S, -np.inf)
        ideal = np.max(np.where(np.isnan(gmed), -np.inf, gmed), axis=1)
    top = np.where(np.isfinite(top), top, np.nan)
    ideal = np.where(np.isfinite(ideal), ideal, np.nan)
    step = grid.job_step
    sim = np.maximum(step - (top - ideal), ideal)
    # only rank j ideal: the max of the others, or j's group median
    is_top = np.arange(R)[None, :] == arg[:, None]
    others_max = np.where(is_top, second[:, None], top[:, None])
    new_top = np.where(np.isnan(comp), top[:, None], np.fmax(others_max, gmed))
    sim_w = np.maximum(step[:, None] - (top[:, None] - new_top), ideal[:, None])
    return sim, sim_w


def whatif_grid(grid: StepGrid) -> dict:
    """:func:`whatif` on a prepared :class:`StepGrid` (same return value)."""
    sim, sim_w = simulate(grid)
    step = grid.job_step if grid.S else np.zeros(0)
    ok = ~np.isnan(step) & ~np.isnan(sim) if grid.S else np.zeros(0, dtype=bool)
    actual = float(np.sum(step[ok]))
    simulated = float(np.sum(sim[ok]))
    S = actual / simulated if simulated > 0 else float("nan")
    per_rank = {}
    for j in range(grid.R):
        sw = float(np.sum(sim_w[ok, j]))
        per_rank[grid.component(j)] = actual / sw if sw > 0 else float("nan")
    return {
        "method": "osdi25-whatif-dp",
        "run_id": grid.run_id,
        "slowdown": S,
        "per_rank": per_rank,
        "actual_s": actual,
        "simulated_s": simulated,
        "n_steps": int(np.sum(ok)),
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
