"""A synthetic run of any size, written block by block in bounded memory
(``faultlab synth``): the labeler's scale tests and perf/labeler_scale.py label it.

The job: ``ranks`` synchronous data-parallel ranks in 8 peer groups (pipeline stages
of slightly unequal cost, 2% apart; one group under 8 ranks), 8 ranks a node; per
step each rank computes ~30 ms x its group's scale x a per-device spread (0.5%) with
3% noise, rare single-step spikes (a GC pause, 1 in 20,000 cells, 2-4x: never a
label); the all-reduce takes ~10 ms; ``step_s`` = the slowest compute + all-reduce,
``comm_s`` = ``step_s`` - own compute, ``t_start`` the step's start plus up to 0.5 ms
of jitter per rank.

Planted faults (:func:`planted`, at fractions of the run so every size has them),
one of each kind the labeler labels:

- three stragglers (rank labels): compute x2.0 (``cpu-contention``), x1.6
  (``gpu-clock-cap``), x3.0 (``process-pause``, short), the first across a block
  boundary when the run has several blocks;
- a job-wide slowdown (``job`` label, ``nic-slow``): +30 ms on every all-reduce;
- an intermittent straggler (rank label by the stall vote, ``process-pause``): one
  rank stopped 0.25 s every 5th step over 121 steps, every 3rd stop in its compute
  (it arrives late), the others inside the all-reduce (every rank waits alike).

Rows are generated one block of steps at a time (:class:`faultlab.steptable.BlockWriter`;
a random stream per block, seeded by ``(seed, block)``), the run's clock carried from
block to block: memory is one block's, whatever the run's length.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from faultlab import schema, steptable
from faultlab.errors import BadInput
from faultlab.rundir import RunDir
from faultlab.synthlimits import MAX_RANKS, MAX_SEED, MIN_RANKS, MIN_STEPS

T0 = 1_700_000_000.0

COMPUTE_S = 0.03
ALLREDUCE_S = 0.01
#: ranks per node
RANKS_PER_NODE = 8


def planted(R: int, S: int, block_steps: int) -> list[dict]:
    """The planted faults of a run of ``R`` ranks x ``S`` steps: ``fault_id``,
    ``fault_type``, ``rank`` (None: job-wide), steps ``[a, b)``, and ``factor`` (compute
    x), ``extra_s`` (all-reduce + s) or ``stall_s``/``every`` (a stall of that many s
    every that many steps)."""

    def at(frac: float) -> int:
        return int(S * frac)

    a = at(0.15)
    if S > block_steps:  # across the block boundary nearest 15%
        k = max(1, int(round(a / block_steps)))
        a = max(0, min(S - 1, k * block_steps) - max(1, at(0.015)))
    return [
        {"fault_id": "f-straggle-a", "fault_type": "cpu-contention", "rank": 17 % R, "factor": 2.0,
         "a": a, "b": min(S, a + max(2, at(0.03)))},
        {"fault_id": "f-straggle-b", "fault_type": "gpu-clock-cap", "rank": (R // 2 + 11) % R, "factor": 1.6,
         "a": at(0.40), "b": at(0.45)},
        {"fault_id": "f-straggle-c", "fault_type": "process-pause", "rank": (R - 24) % R, "factor": 3.0,
         "a": at(0.60), "b": at(0.61)},
        {"fault_id": "f-nic", "fault_type": "nic-slow", "rank": None, "extra_s": 0.03, "a": at(0.75), "b": at(0.80)},
        {"fault_id": "f-intermittent", "fault_type": "process-pause", "rank": (R // 3 + 5) % R, "stall_s": 0.25,
         "every": 5, "in_compute_every": 3, "a": at(0.90), "b": min(S, at(0.90) + 121)},
    ]


def _block(rng: np.random.Generator, s0: int, s1: int, R: int, scale: np.ndarray, faults: list[dict],
           t_next: float) -> tuple[dict, float, np.ndarray, np.ndarray]:
    """The columns of steps ``s0..s1-1`` (step-major), the start of step ``s1`` (unix
    s), and the block's step start times and step times ``(s1 - s0,)`` s."""
    n = s1 - s0
    c = COMPUTE_S * scale[None, :] * (1.0 + 0.03 * rng.standard_normal((n, R)))
    n_spk = rng.binomial(n * R, 1 / 20_000)
    si, ri = rng.integers(0, n, n_spk), rng.integers(0, R, n_spk)
    c[si, ri] *= rng.uniform(2.0, 4.0, n_spk)
    core = ALLREDUCE_S * (1.0 + 0.03 * rng.standard_normal(n))
    steps = np.arange(s0, s1)
    for f in faults:
        lo, hi = max(f["a"], s0), min(f["b"], s1)
        if lo >= hi:
            continue
        if f["rank"] is None:
            core[lo - s0 : hi - s0] += f["extra_s"]
        elif "every" in f:  # a stall every `every` steps: in the rank's compute, or in the all-reduce
            hit = steps[lo - s0 : hi - s0]
            hit = hit[(hit - f["a"]) % f["every"] == 0]
            own = ((hit - f["a"]) // f["every"]) % f["in_compute_every"] == 0
            c[hit[own] - s0, f["rank"]] += f["stall_s"]
            core[hit[~own] - s0] += f["stall_s"]
        else:
            c[lo - s0 : hi - s0, f["rank"]] *= f["factor"]
    step = c.max(axis=1) + core
    t = t_next + np.concatenate([[0.0], np.cumsum(step)[:-1]])
    t_end = float(t[-1] + step[-1]) if n else t_next
    jitter = rng.uniform(0.0, 5e-4, (n, R))
    cols = {
        "rank": np.tile(np.arange(R, dtype=np.int32), n),
        "step": np.repeat(steps.astype(np.int64), R),
        "t_start": (t[:, None] + jitter).ravel(),
        "compute_s": c.ravel(),
        "comm_s": (step[:, None] - c).ravel(),
        "step_s": np.repeat(step, R),
    }
    return cols, t_end, t, step


def write_run(path: str | Path, ranks: int, steps: int, *, seed: int = 0, run_id: str | None = None,
              block_rows: int = steptable.BLOCK_ROWS, drop: tuple[int, int] | None = None) -> dict:
    """Write a synthetic run directory at ``path`` (see the module docstring):
    ``steps/`` partitioned by step blocks of about ``block_rows`` rank-steps (one
    ``steps.parquet`` when the run fits one block), ``injections.parquet`` (the planted
    faults, start/end on the run's clock) and ``meta.json``.

    Args:
        ranks, steps: the run's size (R ranks x S steps).
        seed: the random streams (one per block).
        run_id: the run's id (``synthetic-RxS`` when None).
        block_rows: rank-steps a block holds, about.
        drop: ``(rank, block)``: leave that rank's rows of that block out (a block with
            no steps of one rank).

    Returns:
        ``{"run_id", "rows", "blocks", "block_steps", "faults", "seconds"}``.

    Raises:
        BadInput for fewer than 1 rank or 1 step, more than ``MAX_RANKS`` ranks or a
        seed outside 0..``MAX_SEED`` (:mod:`faultlab.synthlimits`).
    """
    R, S = int(ranks), int(steps)
    if R < MIN_RANKS or S < MIN_STEPS:
        raise BadInput(f"a run needs >= {MIN_RANKS} rank and >= {MIN_STEPS} step, got {R} x {S}", field="--ranks/--steps")
    if R > MAX_RANKS:  # each rank's node and group names are made at once, before any block
        raise BadInput(f"{R} ranks is more than a synthetic run holds", field="--ranks", fix=f"give at most {MAX_RANKS} ranks")
    if not 0 <= int(seed) <= MAX_SEED:
        raise BadInput(f"seed {seed} is not a seed numpy takes", field="--seed", fix=f"give a whole number in 0..{MAX_SEED}")
    t_wall = time.perf_counter()
    run_id = run_id or f"synthetic-{R}x{S}"
    B = steptable.block_steps(R, block_rows)
    faults = planted(R, S, B)
    rng0 = np.random.default_rng([seed, 1 << 30])
    n_groups = 8 if R >= 8 else 1
    group = (np.arange(R) * n_groups) // R
    scale = (1.0 + 0.02 * np.arange(n_groups))[group] * (1.0 + 0.005 * rng0.standard_normal(R))
    node = pa.array([f"node{k:04d}" for k in np.arange(R) // RANKS_PER_NODE])
    peer = pa.array([f"stage{k}" for k in group])
    rd = RunDir.create(path, run_id=run_id, scenario={"name": "synthetic", "ranks": R, "steps": S, "seed": seed}, seed=seed)
    t_next, bounds = T0, {}
    n_blocks = -(-S // B)
    with steptable.BlockWriter(rd.path, block_steps=B) as w:
        for k in range(n_blocks):
            s0, s1 = k * B, min(S, (k + 1) * B)
            cols, t_end, t, step = _block(np.random.default_rng([seed, k]), s0, s1, R, scale, faults, t_next)
            for f in faults:  # the fault's clock: its first step's start, its last step's end
                if s0 <= f["a"] < s1:
                    bounds.setdefault(f["fault_id"], {})["start_ts"] = float(t[f["a"] - s0])
                if s0 <= f["b"] - 1 < s1:
                    bounds.setdefault(f["fault_id"], {})["end_ts"] = float(t[f["b"] - 1 - s0] + step[f["b"] - 1 - s0])
            t_next = t_end
            w.write(_table(cols, run_id, node, peer, R, s1 - s0, None if drop is None or drop[1] != k else drop[0]))
            del cols
    if n_blocks == 1:  # one file: the layout of a run that fits a block
        t = steptable.read_table(rd.path / steptable.STEPS_DIR)
        steptable.write_steps(rd.path, t, partition_rows=len(t) + 1)
    rd.write_table("injections", _injections(run_id, faults, bounds))
    rd.finish()
    return {"run_id": run_id, "rows": R * S, "blocks": n_blocks, "block_steps": B, "faults": faults,
            "seconds": time.perf_counter() - t_wall}


def _table(cols: dict, run_id: str, node: pa.Array, peer: pa.Array, R: int, n: int, drop_rank: int | None) -> pa.Table:
    """One block as a STEPS table (dictionary-coded strings cast to text; the optional
    columns null); without rank ``drop_rank``'s rows when given."""
    idx = pa.array(np.tile(np.arange(R, dtype=np.int32), n))
    data = {
        "run_id": pa.DictionaryArray.from_arrays(pa.array(np.zeros(R * n, dtype=np.int32)), pa.array([run_id])).cast(pa.string()),
        "node": pa.DictionaryArray.from_arrays(idx, node).cast(pa.string()),
        "peer_group": pa.DictionaryArray.from_arrays(idx, peer).cast(pa.string()),
        **{k: pa.array(v) for k, v in cols.items()},
    }
    t = pa.table({f.name: data.get(f.name, pa.nulls(R * n, f.type)) for f in schema.STEPS}, schema=schema.STEPS)
    if drop_rank is not None:
        t = t.filter(pa.array(cols["rank"] != drop_rank))
    return t


def _injections(run_id: str, faults: list[dict], bounds: dict) -> pd.DataFrame:
    """The ``injections`` rows of the planted faults (node and target of each)."""
    rows = []
    for f in faults:
        b = bounds.get(f["fault_id"], {})
        r = f["rank"]
        rows.append({"run_id": run_id, "fault_id": f["fault_id"], "fault_type": f["fault_type"],
                     "node": "node0000" if r is None else f"node{r // RANKS_PER_NODE:04d}",
                     "target": "eth0" if r is None else f"rank:{r}", "start_ts": b.get("start_ts", np.nan),
                     "end_ts": b.get("end_ts", np.nan), "params": "{}", "severity": float(f.get("factor", 1.0)),
                     "status": "reverted", "verified": True, "evidence": "{}"})
    return pd.DataFrame(rows)


__all__ = ["planted", "write_run"]
