"""``faultlab demo``: the whole loop on one machine, on real parts.

1. A testbed of ``n_nodes`` network-namespace nodes on a faultlab bridge (as root), or
   plain local processes (without root, said plainly).
2. A real synchronous data-parallel job (``faultlab.benchmarks.ddp``, gloo), one rank
   per node, with per-rank per-step telemetry and a host sampler, run by
   ``faultlab.runner`` from the embedded scenario ``demo_scenario``.
3. Two faults at separate times: ``nic-slow`` on one node's link (both directions,
   verified by measured TCP throughput) and ``cpu-contention`` on one rank (verified
   by the cgroup's throttling counters). Without root: ``process-pause`` on one rank.
4. A run directory (steps, host, injections as Parquet; meta.json; events.jsonl),
   labeled by the labeler, and the baseline detectors scored against the labels
   beside a random and a constant detector, in the same honest table as docs/evaluation.md's
   (faultlab.scoring.table; one run, so no CI over runs, and the table says so).
5. Everything torn down, also on error or Ctrl-C.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from faultlab.errors import BadInput, FaultlabError
from faultlab.labeler import label_run
from faultlab.progress import Progress
from faultlab.report import write_report
from faultlab.rundir import RunDir, new_run_id
from faultlab.runner import run
from faultlab.schema import json_safe
from faultlab.scenario import Scenario
from faultlab.scoring import load_detector, runmetrics, table
from faultlab.scoring.api import score_many
from faultlab.rundata import RunData as Run


def demo_scenario(n_nodes: int, duration_s: float, root: bool, backend: str = "netns") -> Scenario:
    """The embedded default: two faults at separate times, at fixed fractions of the
    training time (as root: nic-slow on a node, then cpu-contention on rank 1;
    without root: process-pause on rank 1)."""
    d = duration_s
    if root:
        faults = [
            {"type": "nic-slow", "node": f"n{n_nodes - 2}", "at": f"{0.2 * d:.1f}s", "duration": f"{0.22 * d:.1f}s", "params": {"rate": "50mbit"}},
            {"type": "cpu-contention", "rank": 1, "at": f"{0.58 * d:.1f}s", "duration": f"{0.22 * d:.1f}s", "params": {"cpu_fraction": 0.25}},
        ]
    else:
        faults = [{"type": "process-pause", "rank": 1, "at": f"{0.4 * d:.1f}s", "duration": f"{0.25 * d:.1f}s", "params": {"pause": "150ms", "period": "300ms"}}]
    return Scenario.model_validate({
        "name": "demo", "seed": 0,
        "testbed": {"backend": backend if root else "local", "nodes": n_nodes},
        "workload": {"kind": "ddp", "duration": f"{d:g}s", "hidden": 512, "batch": 512},
        "faults": faults,
    })


def run_demo(out_dir: Path | None = None, n_nodes: int = 4, duration_s: float = 60.0, console: Console | None = None, backend: str = "netns",
             result: Console | None = None) -> dict:
    """Run the demo; returns ``{code, run_dir, report}``: the process exit code (0 when
    every stage worked), the run directory and its report.html (None when the run
    failed before it).

    ``duration_s`` is the training time in seconds (the faults are placed at fixed
    fractions of it). ``result``: where the closing line (the run's report) is
    printed, ``console`` when None (``--quiet`` silences ``console`` only). Raises FaultlabError for a failed stage (after teardown).
    """
    con = console or Console(highlight=False)
    if n_nodes < 2:
        raise BadInput(f"{n_nodes} node(s)", field="--nodes", fix="give at least 2: a straggler needs peers")
    if duration_s < 30:
        raise BadInput(f"{duration_s:g}s is too short for two faults and their baselines", field="--duration", fix="give at least 30s")
    root = os.geteuid() == 0
    t_wall = time.time()
    run_id = new_run_id("demo")  # one id: the default folder's name and meta.json's run_id
    out_dir = Path(out_dir or Path("faultlab-runs") / run_id)
    sc = demo_scenario(n_nodes, duration_s, root, backend)
    kinds = {"netns": "network-namespace nodes on a faultlab bridge", "docker": "docker containers on an internal network (faults from the docker host)",
             "ssh": "containers reached over SSH with pinned host keys (faults and leases on the nodes)"}
    if root:
        con.print(f"testbed: {n_nodes} {kinds.get(backend, backend)}; {n_nodes} ranks (gloo) train for {duration_s:g}s; times count from the first training step")
    else:
        con.print("[yellow]not root:[/] ranks run as plain local processes; nic-slow and cpu-contention need root (tc, cgroups), so this demo injects only process-pause (SIGSTOP/SIGCONT) on one rank.")
    with Progress(con) as prog:
        res = run(sc, out_dir, console=con, progress=prog, run_id=run_id)
        if res.code:
            return {"code": res.code, "run_dir": str(out_dir), "report": None}
        if res.failed_faults:
            raise FaultlabError("; ".join(res.failed_faults), field="faults")
        return {"code": 0, "run_dir": str(out_dir), "report": str(_analyse(res.rundir, con, t_wall, prog, result or con))}


def _analyse(rd: RunDir, con: Console, t_wall: float, prog: Progress, result: Console) -> Path:
    """Label, score and report the demo's run ``rd``; the tables on ``con``, the
    closing line on ``result``. Returns the report's path."""
    steps = rd.read_table("steps")
    host = rd.read_table("host")
    inj = rd.read_table("injections")
    if steps.empty:
        raise FaultlabError("no step telemetry was recorded", field="workload", fix=f"see the rank logs in {rd.path / 'logs'}")
    prog.phase("labeling", "temporal view + peer view, reconciled with the injections; what-if slowdown")
    labels = label_run(rd.path)
    prog.phase("scoring", "peer-median, temporal-z and arrival-late against the labels, beside a random and a constant detector (offline and in replay)")
    summary, rows = _score(rd, steps, host, labels, inj)
    doc = runmetrics.document(rd.run_id, rows, window_s=WINDOW_S, params={d: p for d, p in SPECS if p})
    (rd.path / "metrics.json").write_text(json.dumps(json_safe(doc), indent=2, default=_num))
    det = load_detector("peer-median")
    alarms = det.detect(steps, host)
    rd.write_table("alarms", alarms)
    rd.finish(wall_s=time.time() - t_wall)
    rd.event("run-complete")
    prog.phase("writing the report", "report.html")
    report = write_report(rd.path)
    prog.done()

    ranks = steps["rank"].nunique()
    con.print(f"\n[bold]run[/] {rd.path}  ({ranks} ranks, {steps['step'].nunique()} steps, median step {steps['step_s'].median() * 1e3:.1f} ms)")
    t = Table(title="faults injected (injections.parquet)")
    for c in ("fault", "type", "node", "target", "start", "end", "verified", "status"):
        t.add_column(c)
    t0 = rd.time_origin(steps)  # the origin the runner's event lines used
    for r in inj.itertuples():
        t.add_row(r.fault_id, r.fault_type, r.node, r.target, f"+{r.start_ts - t0:.1f}s", f"+{r.end_ts - t0:.1f}s", str(r.verified), r.status)
    con.print(t)
    t = Table(title="labels (labels.parquet): where and when the job was really slowed")
    for c in ("component", "start", "end", "slowdown", "job step slowdown", "views", "source", "cause", "fault"):
        t.add_column(c)
    for r in labels.itertuples():
        jsl = json.loads(r.evidence or "{}").get("job_slowdown")
        t.add_row(r.component, f"+{r.start_ts - t0:.1f}s", f"+{r.end_ts - t0:.1f}s", f"{r.slowdown:.2f}x", f"{jsl:.2f}x" if isinstance(jsl, (int, float)) else "-",
                  r.views, r.source, r.cause, str(r.fault_id or "-"))
    con.print(t)
    con.print("slowdown: the component's time (compute for a rank, step time for the job) over its baseline; job step slowdown: what the whole job felt meanwhile.")
    whatif = rd.path / "whatif.json"
    if whatif.exists():
        w = json.loads(whatif.read_text())
        if "slowdown" in w:
            con.print(f"what-if slowdown S = {w['slowdown']:.3f}: actual job time / simulated time with every rank computing at its peers' median (stragglers removed; a job-wide slowdown such as a slow link is not a straggler and stays in both)")
    con.print(summary)
    comps = sorted(set(steps["rank"].map(lambda r: f"rank:{r}")) | {"job"})
    span = float((steps["t_start"] + steps["step_s"]).max() - steps["t_start"].min())
    con.print(f"window = one component ({', '.join(comps)}) x 10 s cell: {len(comps)} x {int(-(-span // 10))} cells; MCC near 0 is chance "
              "(random) or no information (constant alarms every cell); event P/R count each alarm and label once, no point-adjust.")
    con.print(f"files in {rd.path}: steps, host, injections, labels, alarms (.parquet); whatif.json, metrics.json, meta.json, scenario.yaml, events.jsonl, telemetry/, logs/")
    result.print(f"report: {report}   (open it in a browser; {time.time() - t_wall:.0f}s in all)", markup=False)
    return report


DETECTORS = ("peer-median", "temporal-z", "arrival-late", "random", "constant")
#: (detector, parameters) as scored: random as its chance level (a mean of 20 draws), not one draw
SPECS = tuple((d, {"draws": 20} if d == "random" else None) for d in DETECTORS)
#: the window-level cell width (seconds) the demo scores with
WINDOW_S = 10.0


def _score(rd: RunDir, steps, host, labels, inj):
    """The honest score table of this run (faultlab.scoring.table, as in docs/evaluation.md) and
    the metrics.json rows (every metric offline, latency from the replay; no CI: one
    run has none over runs)."""
    run = Run(str(rd.run_id), steps, host, labels, inj, rd.meta)
    off = score_many(list(SPECS), [run], by=None, n_boot=0, window_s=WINDOW_S)
    rep = score_many(list(SPECS), [run], mode="replay", by=None, n_boot=0, window_s=WINDOW_S)
    rows = []
    for o, r in zip(off, rep):
        row = {"detector": o.detector, **{k: v["value"] for k, v in o.metrics.items()}}
        row.update({k: r.metrics[k]["value"] for k in ("latency_median_s", "latency_p95_s")})
        rows.append(row)
    t = table.rich_table(table.rows(list(DETECTORS), off, rep), "detector scores vs labels (metrics.json; the table of docs/evaluation.md, on one run)")
    return t, rows


def _fmt(v) -> str:
    if v is None:
        return "-"
    try:
        return "nan" if v != v else f"{float(v):.2f}"
    except (TypeError, ValueError):
        return str(v)


def _num(o):
    try:
        return float(o)
    except (TypeError, ValueError):
        return str(o)
