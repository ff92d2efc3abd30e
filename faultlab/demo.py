"""``faultlab demo``: the whole loop on one machine, on real parts.

1. A testbed of ``n_nodes`` network-namespace nodes on a faultlab bridge (as root), or
   plain local processes (without root, said plainly).
2. A real synchronous data-parallel job (``faultlab.benchmarks.ddp``, gloo), one rank
   per node, with per-rank per-step telemetry and a host sampler.
3. Two faults at separate times: ``nic-slow`` on one node's link (both directions,
   verified by measured TCP throughput) and ``cpu-contention`` on one rank (verified
   by the cgroup's throttling counters). Without root: ``process-pause`` on one rank.
4. A run directory (steps, host, injections as Parquet; meta.json; events.jsonl),
   labeled by the labeler, and the peer-median baseline detector scored against the
   labels beside a random and a constant detector.
5. Everything torn down, also on error or Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from faultlab.errors import FaultlabError
from faultlab.rundir import RunDir


class _Stop(BaseException):
    pass


def _raise_stop(signum, frame):
    raise _Stop()


def _wait_first_steps(rd: RunDir, ranks, timeout_s: float) -> float:
    """Wait until every rank has logged a step; returns the earliest step start (unix s)."""
    deadline = time.time() + timeout_s
    files = [rd.telemetry_dir() / f"steps-rank{r.rank}.jsonl" for r in ranks]
    while time.time() < deadline:
        if all(f.exists() and f.stat().st_size > 0 for f in files):
            firsts = []
            for f in files:
                with open(f) as fh:
                    firsts.append(json.loads(fh.readline())["t_start"])
            return min(firsts)  # the first training step: the demo's time origin
        for r in ranks:
            if r.popen.poll() is not None:
                from faultlab.benchmarks.launch import log_tail

                raise FaultlabError(f"rank {r.rank} exited with {r.popen.returncode} before training: {log_tail(r.log_path, 5)}", field="workload")
        time.sleep(0.2)
    raise FaultlabError(f"ranks did not start training within {timeout_s:g}s", field="workload", fix="see the rank logs in the run directory")


def run_demo(out_dir: Path | None = None, n_nodes: int = 4, duration_s: float = 60.0, console: Console | None = None) -> int:
    """Run the demo; returns the process exit code (0 when every stage worked).

    ``duration_s`` is the training time in seconds (the faults are placed at fixed
    fractions of it). Raises FaultlabError for a failed stage (after teardown).
    """
    from faultlab import injectors
    from faultlab.benchmarks.launch import free_port, launch_ranks, stop_ranks, wait_ranks
    from faultlab.hostsampler import HostSampler
    from faultlab.nodes import LocalNode

    con = console or Console()
    if n_nodes < 2:
        raise FaultlabError(f"{n_nodes} node(s)", field="--nodes", fix="give at least 2: a straggler needs peers")
    if duration_s < 30:
        raise FaultlabError(f"{duration_s:g}s is too short for two faults and their baselines", field="--duration", fix="give at least 30s")
    root = os.geteuid() == 0
    t_wall = time.time()
    run_id = time.strftime("demo-%Y%m%d-%H%M%S")
    out_dir = Path(out_dir or Path("faultlab-runs") / run_id)
    plan = _schedule(n_nodes, duration_s, root)
    rd = RunDir.create(out_dir, run_id=run_id, scenario={"name": "demo", "nodes": n_nodes, "duration_s": duration_s, "faults": plan, "backend": "netns" if root else "local"}, seed=0)
    rd.event("run-start", backend="netns" if root else "local")
    if not root:
        con.print("[yellow]not root:[/] ranks run as plain local processes; nic-slow and cpu-contention need root (tc, cgroups), so this demo injects only process-pause (SIGSTOP/SIGCONT) on one rank.")

    testbed = None
    ranks = []
    sampler = None
    active: list = []
    injections: list[dict] = []
    old = {s: signal.signal(s, _raise_stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        if root:
            from faultlab.testbed import NetnsTestbed

            testbed = NetnsTestbed(n_nodes).up()
            nodes = testbed.nodes
            master_addr, master_port = nodes[0].address, 29500
            rd.event("testbed-up", bridge=testbed.bridge, subnet=str(testbed.subnet), nodes=[n.describe() for n in nodes])
            con.print(f"testbed: {n_nodes} netns nodes on bridge {testbed.bridge} ({testbed.subnet})")
        else:
            nodes = [LocalNode(name=f"n{i}", address="127.0.0.1") for i in range(n_nodes)]
            master_addr, master_port = "127.0.0.1", free_port()
        ranks = launch_ranks(
            [(n, i) for i, n in enumerate(nodes)], telemetry_dir=rd.telemetry_dir(), run_id=run_id,
            master_addr=master_addr, master_port=master_port, duration_s=duration_s, log_dir=rd.path / "logs",
            extra_args=["--hidden", "512", "--batch", "512", "--threads", "1"],
        )
        rd.event("ranks-started", pids={r.rank: r.pid for r in ranks})
        sampler = HostSampler({r.node.name: [r.pid] for r in ranks}, interval_s=1.0, run_id=run_id).start()
        t0 = _wait_first_steps(rd, ranks, timeout_s=120)
        con.print(f"training: {n_nodes} ranks (gloo), {duration_s:g}s; times below count from the first training step")
        for f in plan:
            while time.time() < t0 + f["at_s"]:
                time.sleep(0.1)
                _check_ranks(ranks)
            inj = _build(f, nodes, ranks, testbed)
            a = injectors.apply(inj, f["duration_s"], grace_s=15.0)
            active.append(a)
            rd.event("inject", fault_id=a.fault_id, type=inj.type, node=inj.node.name, target=a.plan.target, params=inj.params, verify=a.evidence.get("verify"))
            con.print(f"  +{a.start_ts - t0:5.1f}s inject {inj.type} on {inj.node.name} ({a.plan.target}) verified={a.evidence['verify'].get('ok')} {_verify_text(a.evidence['verify'])}")
            while time.time() < a.start_ts + f["duration_s"]:
                time.sleep(0.1)
                _check_ranks(ranks)
            status = a.revert()
            active.remove(a)
            injections.append(a.injection_row(run_id))
            rd.event("revert", fault_id=a.fault_id, status=status)
            con.print(f"  +{a.end_ts - t0:5.1f}s revert {a.fault_id}: {status}")
        wait_ranks(ranks, timeout_s=duration_s + 120)
        rd.event("ranks-done")
    except (_Stop, KeyboardInterrupt):
        rd.event("interrupted")
        con.print("[red]interrupted[/]: tearing down")
        return 130
    finally:
        for a in active:
            a.revert()
            injections.append(a.injection_row(run_id))
            rd.event("revert", fault_id=a.fault_id, status=a.status)
        if ranks:
            stop_ranks(ranks)
        host = sampler.stop() if sampler else None
        if testbed is not None:
            errs = testbed.down()
            rd.event("testbed-down", errors=errs)
        for s, h in old.items():
            signal.signal(s, h)
        # Whatever happened, keep what was recorded readable.
        steps = rd.read_raw_steps()
        rd.write_table("steps", steps)
        if host is not None:
            rd.write_table("host", host)
        rd.write_table("injections", pd.DataFrame(injections) if injections else _empty("injections"))

    return _analyse(rd, con, t_wall)


def _empty(name):
    from faultlab import schema

    return schema.empty(name)


def _schedule(n_nodes: int, duration_s: float, root: bool) -> list[dict]:
    """The demo's two faults, at separate times: fractions of the training time."""
    d = duration_s
    if root:
        return [
            {"type": "nic-slow", "node": n_nodes - 2, "rate": "50mbit", "at_s": round(0.2 * d, 1), "duration_s": round(0.22 * d, 1)},
            {"type": "cpu-contention", "rank": 1, "cpu_fraction": 0.25, "at_s": round(0.58 * d, 1), "duration_s": round(0.22 * d, 1)},
        ]
    return [{"type": "process-pause", "rank": 1, "pause": "150ms", "period": "300ms", "at_s": round(0.4 * d, 1), "duration_s": round(0.25 * d, 1)}]


def _build(f: dict, nodes, ranks, testbed):
    from faultlab.injectors import CpuContention, NicSlow, ProcessPause
    from faultlab.nodes import LocalNode
    from faultlab.units import parse_duration, parse_rate

    if f["type"] == "nic-slow":
        node = nodes[f["node"]]
        return NicSlow(node, parse_rate(f["rate"]), probe_peer=LocalNode("host"), probe_peer_addr=testbed.bridge_address)
    r = ranks[f["rank"]]
    if f["type"] == "cpu-contention":
        return CpuContention(r.node, [r.pid], f["cpu_fraction"], label=f"rank:{r.rank}")
    return ProcessPause(r.node, r.pid, parse_duration(f["pause"]), parse_duration(f["period"]), f["duration_s"], label=f"rank:{r.rank}")


def _check_ranks(ranks) -> None:
    for r in ranks:
        if r.popen.poll() not in (None, 0):
            from faultlab.benchmarks.launch import log_tail

            raise FaultlabError(f"rank {r.rank} died with {r.popen.returncode}: {log_tail(r.log_path, 5)}", field="workload")


def _verify_text(v: dict) -> str:
    if "ingress_measured_bit_per_s" in v:
        return f"(measured {v['ingress_measured_bit_per_s'] / 1e6:.1f} in / {v['egress_measured_bit_per_s'] / 1e6:.1f} out Mbit/s under a {v['cap_bit_per_s'] / 1e6:.0f} Mbit/s cap)"
    if "cpu_stat" in v:
        return f"(cgroup throttled {v['cpu_stat'].get('nr_throttled', 0)} of {v['cpu_stat'].get('nr_periods', 0)} periods)"
    return ""


def _analyse(rd: RunDir, con: Console, t_wall: float) -> int:
    from faultlab.detectors import load_detector
    from faultlab.labeler import label_run
    from faultlab.scoring import score_table

    steps = rd.read_table("steps")
    host = rd.read_table("host")
    inj = rd.read_table("injections")
    if steps.empty:
        raise FaultlabError("no step telemetry was recorded", field="workload", fix=f"see the rank logs in {rd.path / 'logs'}")
    labels = label_run(rd.path)
    rows = score_table(steps, host, labels, ["peer-median"]).to_dict("records")
    (rd.path / "metrics.json").write_text(json.dumps(_nan_to_none(rows), indent=2, default=_num))
    det = load_detector("peer-median")
    alarms = det.detect(steps, host)
    rd.write_table("alarms", alarms)
    rd.finish(wall_s=time.time() - t_wall)
    rd.event("run-complete")

    ranks = steps["rank"].nunique()
    con.print(f"\n[bold]run[/] {rd.path}  ({ranks} ranks, {steps['step'].nunique()} steps, median step {steps['step_s'].median() * 1e3:.1f} ms)")
    t = Table(title="faults injected (injections.parquet)")
    for c in ("fault", "type", "node", "target", "start", "end", "verified", "status"):
        t.add_column(c)
    t0 = steps["t_start"].min()
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
    t = Table(title="detector scores vs labels (metrics.json)")
    for c in ("detector", "precision", "recall", "F1", "MCC", "event P", "event R", "Acc@1"):
        t.add_column(c)
    for r in rows:
        t.add_row(r["detector"], *(_fmt(r.get(k)) for k in ("precision", "recall", "f1", "mcc", "event_precision", "event_recall", "acc_at_1")))
    con.print(t)
    comps = sorted(set(steps["rank"].map(lambda r: f"rank:{r}")) | {"job"})
    con.print(f"scored over {len(comps)} components ({', '.join(comps)}); random and constant detectors show what chance and always-alarm get.")
    con.print(f"files in {rd.path}: steps, host, injections, labels, alarms (.parquet); whatif.json, metrics.json, meta.json, scenario.yaml, events.jsonl, telemetry/, logs/   ({time.time() - t_wall:.0f}s)")
    return 0


def _nan_to_none(o):
    if isinstance(o, dict):
        return {k: _nan_to_none(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_nan_to_none(v) for v in o]
    if isinstance(o, float) and o != o:
        return None
    return o


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
