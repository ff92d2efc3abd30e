"""Simulated run directories, for tests and benchmarks of scoring (never published as
data: the published datasets are measured on real ranks).

A run is ``n_ranks`` data-parallel ranks of ``n_steps`` steps: compute ~ ``step_s``
with Gaussian noise, a straggler rank slowed by ``factor`` over a step range, step time
= the slowest rank's compute plus an all-reduce; labeled by faultlab's labeler, the
slowdown recorded as an injection (``fault_type`` given).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from faultlab import schema
from faultlab.labeler import label
from faultlab.rundir import RunDir

T0 = 1_700_000_000.0


def simulate_steps(run_id: str, n_ranks: int = 4, n_steps: int = 300, straggler=(1, 100, 150, 3.0), seed: int = 0,
                   noise: float = 0.03, compute_s: float = 0.03, t0: float = T0) -> pd.DataFrame:
    """STEPS rows of one simulated run; ``straggler = (rank, first step, end step,
    factor)`` or None."""
    rng = np.random.default_rng(seed)
    c = compute_s * (1 + noise * rng.standard_normal((n_steps, n_ranks)))
    core = compute_s / 3 * (1 + noise * rng.standard_normal(n_steps))
    if straggler:
        r, a, b, f = straggler
        c[a:b, r] *= f
    step = c.max(axis=1) + core
    t = t0 + np.concatenate([[0.0], np.cumsum(step)[:-1]])
    S, R = np.meshgrid(np.arange(n_steps), np.arange(n_ranks), indexing="ij")
    s, r = S.ravel(), R.ravel()
    return pd.DataFrame({"run_id": run_id, "rank": r.astype(np.int32), "node": [f"n{x}" for x in r], "peer_group": "dp0",
                         "step": s, "t_start": t[s], "compute_s": c.ravel(), "comm_s": (step[:, None] - c).ravel(),
                         "step_s": step[s], "gc_s": np.nan, "tokens": np.nan, "dataloader_s": np.nan})


def make_run(path: str | Path, run_id: str, *, seed: int = 0, fault_type: str = "cpu-contention", n_ranks: int = 4,
             n_steps: int = 300, factor: float = 3.0, slow: bool = True) -> Path:
    """Write a labeled run directory at ``path`` (labels from faultlab's labeler);
    the straggler's rank, onset and length are drawn from ``seed``."""

    rng = np.random.default_rng(seed + 1000)
    r = int(rng.integers(0, n_ranks))
    a = int(rng.integers(n_steps // 5, n_steps // 2))
    b = a + int(rng.integers(n_steps // 10, n_steps // 4))
    steps = simulate_steps(run_id, n_ranks, n_steps, (r, a, b, factor) if slow else None, seed=seed)
    rd = RunDir.create(path, run_id=run_id, scenario={"name": "synthetic", "seed": seed}, seed=seed)
    rd.write_table("steps", steps)
    t_a = float(steps.loc[steps.step == a, "t_start"].min())
    t_b = float(steps.loc[steps.step == b - 1, "t_start"].max() + steps.loc[steps.step == b - 1, "step_s"].max())
    inj = pd.DataFrame([{"run_id": run_id, "fault_id": f"f-{run_id}", "fault_type": fault_type, "node": f"n{r}", "target": f"rank:{r}",
                         "start_ts": t_a, "end_ts": t_b, "params": "{}", "severity": factor, "status": "reverted",
                         "verified": True, "evidence": "{}"}]) if slow else schema.empty("injections")
    rd.write_table("injections", inj)
    rd.write_table("host", schema.empty("host"))
    labels = label(steps, injections=inj) if slow else label(steps)
    rd.write_table("labels", labels)
    rd.finish()
    return rd.path
