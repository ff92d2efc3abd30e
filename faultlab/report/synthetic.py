"""A synthetic run directory of a chosen size, for measuring the report and the
Perfetto export (``perf/report_render.py``) and for their fast tests.

It is NOT telemetry of a real run: step times are drawn (seeded) around 26 ms with a
job-wide slowdown while a ``nic-slow`` row is in force and one rank's compute doubled
while a ``cpu-contention`` row is; host metrics follow suit once a second. Labels and
the what-if slowdown come from the real labeler (``faultlab.labeler.label_run``);
alarms and ``metrics.json`` are drawn, in their real formats. The demo's report test
and the browser test use a real run.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from faultlab.labeler import label_run
from faultlab.rundir import RunDir
from faultlab.scoring import runmetrics


def make_run(path: str | Path, ranks: int = 4, duration_s: float = 300.0, seed: int = 0, label: bool = True) -> Path:
    """Write a synthetic run directory at ``path`` (new or empty): ``ranks`` ranks on
    nodes n0..n{ranks-1}, ``duration_s`` seconds of ~26 ms steps. Returns the path."""
    rng = np.random.default_rng(seed)
    t0 = 1_800_000_000.0
    rd = RunDir.create(path, run_id=Path(path).name, scenario={"name": "synthetic", "note": "faultlab.report.synthetic"}, seed=seed)
    nic = (0.2 * duration_s, 0.42 * duration_s)  # job-wide: every rank waits
    cpu = (0.58 * duration_s, 0.8 * duration_s)  # rank 1 computes slower
    rows, t, step = [], t0, 0
    while t < t0 + duration_s:
        rel = t - t0
        comp = rng.normal(0.012, 0.0015, ranks).clip(0.004)
        if cpu[0] <= rel < cpu[1]:
            comp[1 % ranks] *= 2.2
        comm_base = 0.25 if nic[0] <= rel < nic[1] else 0.013
        step_s = comp.max() + comm_base + abs(rng.normal(0, 0.001))
        for r in range(ranks):
            rows.append((r, f"n{r}", "dp", step, t + rng.normal(0, 2e-4), comp[r], step_s - comp[r] - 1e-4, step_s))
        t += step_s
        step += 1
    steps = pd.DataFrame(rows, columns=["rank", "node", "peer_group", "step", "t_start", "compute_s", "comm_s", "step_s"])
    steps["run_id"] = rd.run_id
    rd.write_table("steps", steps)
    rd.write_table("host", _host(rng, rd.run_id, ranks, t0, duration_s, nic, cpu))
    inj = pd.DataFrame([
        _fault(rd.run_id, "nic-slow", "nic-000001", f"n{min(2, ranks - 1)}", "fleth0", t0 + nic[0], t0 + nic[1], {"rate_bit_per_s": 5e7}),
        _fault(rd.run_id, "cpu-contention", "cpu-000002", f"n{1 % ranks}", f"rank:{1 % ranks}", t0 + cpu[0], t0 + cpu[1], {"cpu_fraction": 0.25}),
    ])
    rd.write_table("injections", inj)
    rd.update_meta(t0=t0, started_ts=t0 - 6.0)  # as a real run: set-up before the first step
    if label:

        label_run(rd.path)
    rd.write_table("alarms", pd.DataFrame({
        "component": [f"rank:{1 % ranks}"] * 20 + ["job"] * 5,
        "start_ts": np.r_[np.linspace(t0 + cpu[0], t0 + cpu[1], 20), np.linspace(t0 + nic[0], t0 + nic[1], 5)],
        "end_ts": np.r_[np.linspace(t0 + cpu[0], t0 + cpu[1], 20) + 1.0, np.linspace(t0 + nic[0], t0 + nic[1], 5) + 2.0],
        "score": rng.uniform(0.5, 1.0, 25),
    }))
    metrics = [{"detector": d, "precision": p, "recall": r, "f1": 2 * p * r / (p + r), "mcc": m, "event_precision": p, "event_recall": r,
                "window_precision": p * 0.8, "window_recall": r * 0.9, "window_f1": 2 * p * r * 0.72 / (p * 0.8 + r * 0.9), "window_mcc": m * 0.6,
                "window_f1_point_adjusted": min(1.0, (p + r) / 1.6), "acc_at_1": a}
               for d, p, r, m, a in (("peer-median", 0.9, 0.6, 0.55, 0.5), ("random", 0.4, 0.5, -0.05, 0.2), ("constant", 0.3, 1.0, 0.0, 0.2))]
    doc = runmetrics.document(rd.run_id, metrics, window_s=10.0, params={"random": {"draws": 20}})
    (rd.path / "metrics.json").write_text(json.dumps(doc, indent=1))
    rd.finish()
    return rd.path


def _fault(run_id, typ, fid, node, target, a, b, params) -> dict:
    return {"run_id": run_id, "fault_id": fid, "fault_type": typ, "node": node, "target": target, "start_ts": a, "end_ts": b,
            "params": json.dumps(params), "severity": 1.0, "status": "reverted", "verified": True, "evidence": "{}"}


def _host(rng, run_id, ranks, t0, duration_s, nic, cpu) -> pd.DataFrame:
    rows = []
    for s in range(int(duration_s) + 1):
        ts = t0 + s
        slow_net = nic[0] <= s < nic[1]
        for r in range(ranks):
            node = f"n{r}"
            busy = 2.2 if (cpu[0] <= s < cpu[1] and r == 1 % ranks) else 1.0
            rows += [(node, ts, "cpu_util_pct", min(100.0, rng.normal(70 * busy, 5))),
                     (node, ts, "proc_cpu_util_pct", rng.normal(25, 3)),
                     (node, ts, "net_rx_bytes_per_s", rng.normal(5e6 if slow_net else 5e7, 2e6)),
                     (node, ts, "net_tx_bytes_per_s", rng.normal(5e6 if slow_net else 5e7, 2e6))]
            for p in range(ranks):
                if p != r:
                    capped = slow_net and (p == min(2, ranks - 1) or r == min(2, ranks - 1))
                    rows += [(node, ts, f"tcp_rtt_ms:n{p}", abs(rng.normal(25 if capped else 0.3, 0.1))),
                             (node, ts, f"tcp_retrans_per_s:n{p}", 0.0)]
    h = pd.DataFrame(rows, columns=["node", "ts", "metric", "value"])
    h["run_id"] = run_id
    return h
