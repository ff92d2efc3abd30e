"""A run as a Chrome trace (Trace Event Format JSON), the format ui.perfetto.dev and
chrome://tracing load.

Format: "Trace Event Format" (Google, the JSON that Chrome's tracing and Perfetto's
JSON importer read): a top-level object ``{"traceEvents": [...], "displayTimeUnit":
"ms", "otherData": {...}}``; every event has ``ph`` (phase), ``ts`` (microseconds),
``pid`` and ``tid``. We write only complete slices (``ph: "X"`` with ``dur`` in
microseconds), counters (``"C"``), instants (``"i"``) and metadata (``"M"``: process
and thread names and sort order). The ``perfetto`` PyPI package is not used: it
downloads a trace-processor binary at run time.

Layout:

- one process per node (``pid`` 1..N, named ``node NAME``), holding one thread
  (track) per rank (``tid`` = rank + 1, named ``rank R``) with a ``step N`` slice per
  step (cut at the rank's next step start, should clock jitter make them overlap)
  and, nested inside it, a ``compute`` slice then a ``comm`` slice (clipped to the
  step: children never reach past their parent);
- the node's faults on a ``faults`` track of that node's process (``tid`` 10000 +
  lane); the node's host metrics as counter tracks (``cpu_util_pct``, NIC rates in
  Mbit/s, ``tcp_rtt_ms`` per peer, ...);
- labels on their own process ``labels`` (``pid`` 0) with a track per component
  (``job``, ``rank:R``); overlapping intervals on one track are put on further lanes
  so slices only ever nest, never cross.

Time origin: ``ts`` counts from the run's first training step
(:meth:`faultlab.rundir.RunDir.time_origin`, ``otherData.time_origin_unix_s``), the
instant the HTML report, the demo's and the runner's printed "+12.3s" times count
from, so a fault at +12.1 s in the report starts at 12.1 s in Perfetto. Perfetto
refuses negative timestamps, so what happened before that instant (the run's set-up:
host samples, a fault already in force) is clipped to it: a slice that began earlier
starts at 0 (its ``args.start_s`` keeps the true, negative, start), earlier counter
samples are left out. The run's start (meta.json ``started_ts``) is shown on the
instant ``first training step`` at ``ts`` 0 (its name says how many seconds earlier
the run started; ``args.run_start_s``) and in ``otherData.run_start_unix_s``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from faultlab import safefs
from faultlab.report.data import RunData, load_run
from faultlab.schema import json_safe

LABELS_PID = 0
FAULT_TID = 10000


def _us(seconds: float) -> int:
    """Whole microseconds: integer arithmetic keeps children exactly inside parents."""
    return int(round(seconds * 1e6))


def _meta(pid: int, tid: int | None, what: str, name: str, sort: int | None = None) -> list[dict]:
    ev = [{"ph": "M", "pid": pid, "tid": tid if tid is not None else 0, "ts": 0, "name": what, "args": {"name": name}}]
    if sort is not None:
        kind = "process_sort_index" if what == "process_name" else "thread_sort_index"
        ev.append({"ph": "M", "pid": pid, "tid": tid if tid is not None else 0, "ts": 0, "name": kind, "args": {"sort_index": sort}})
    return ev


def lanes(intervals: list[tuple[float, float]]) -> list[int]:
    """Greedy lane assignment: the lane of each ``(start, end)`` interval such that
    intervals on one lane never overlap. Returns one lane index per interval."""
    ends: list[float] = []
    out = [0] * len(intervals)
    for i in sorted(range(len(intervals)), key=lambda k: intervals[k]):
        s, e = intervals[i]
        for j, last in enumerate(ends):
            if last <= s:
                ends[j], out[i] = e, j
                break
        else:
            ends.append(e)
            out[i] = len(ends) - 1
    return out


def _clip(origin: float, a: float, b: float) -> tuple[int, int] | None:
    """``(ts, dur)`` in whole microseconds of the interval ``a..b`` (unix s) counted
    from ``origin`` and clipped to start no earlier; None when it ends before it."""
    if b < origin:
        return None
    ts = _us(max(a, origin) - origin)
    return ts, max(0, _us(b - origin) - ts)


def trace_events(run: RunData) -> dict:
    """The Chrome trace of ``run`` as a dict (see the module docstring)."""
    origin = run.t0
    started = run.meta.get("started_ts")
    started = float(started) if isinstance(started, (int, float)) else None
    ev: list[dict] = []
    nodes = run.nodes
    pid_of = {n: i + 1 for i, n in enumerate(nodes)}
    for n, pid in pid_of.items():
        ev += _meta(pid, None, "process_name", f"node {n}", sort=pid)
    ev += _meta(LABELS_PID, None, "process_name", "labels", sort=len(nodes) + 1)
    name = "first training step (time origin)"
    args = {"unix_s": origin}
    if started is not None:
        name += f"; run started {origin - started:.1f} s earlier"
        args.update(run_start_unix_s=started, run_start_s=started - origin)
    ev.append({"ph": "i", "s": "g", "pid": LABELS_PID, "tid": 0, "ts": 0, "name": name, "args": args})
    ev += _step_slices(run, pid_of, origin)
    ev += _fault_slices(run, pid_of, origin)
    ev += _label_slices(run, origin)
    ev += _counters(run, pid_of, origin)
    return {
        "traceEvents": ev,
        "displayTimeUnit": "ms",
        "otherData": {"run_id": run.run_id, "time_origin_unix_s": origin, "time_origin": "first training step",
                      "run_start_unix_s": started, "format": "faultlab perfetto export 2"},
    }


def _step_slices(run: RunData, pid_of: dict, origin: float) -> list[dict]:
    ev = []
    for rank, g in run.steps.groupby("rank", sort=True):
        rank = int(rank)
        node = str(g["node"].iloc[0])
        pid, tid = pid_of[node], rank + 1
        ev += _meta(pid, tid, "thread_name", f"rank {rank}", sort=rank)
        t = g["t_start"].to_numpy(dtype=float) - origin
        cols = {c: g[c].to_numpy(dtype=float) for c in ("compute_s", "comm_s", "step_s")}
        n = len(t)
        for i, step in enumerate(g["step"].to_numpy()):
            start = _us(t[i])
            end = start + _us(max(cols["step_s"][i], 0.0))
            if i + 1 < n:  # clock jitter: a step never reaches into the rank's next one
                end = max(start, min(end, _us(t[i + 1])))
            ts = max(start, 0)  # a rank's first step may start just before rank 0's: clipped
            if end <= ts:
                continue
            ev.append({"ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": end - ts, "name": f"step {int(step)}", "cat": "step"})
            c0 = start
            for part, col in (("compute", "compute_s"), ("comm", "comm_s")):
                d = cols[col][i]
                if not (d > 0):
                    continue
                c1 = min(c0 + _us(d), end)  # clipped to the step
                if c1 > max(c0, ts):
                    ev.append({"ph": "X", "pid": pid, "tid": tid, "ts": max(c0, ts), "dur": c1 - max(c0, ts), "name": part, "cat": part})
                c0 = c1
    return ev


def _fault_slices(run: RunData, pid_of: dict, origin: float) -> list[dict]:
    ev = []
    inj = run.injections
    for node, g in inj.groupby("node", sort=True):
        pid = pid_of.get(str(node))
        if pid is None:
            pid_of[str(node)] = pid = max(pid_of.values(), default=0) + 1
            ev += _meta(pid, None, "process_name", f"node {node}", sort=pid)
        rows = list(g.itertuples())
        iv = [(r.start_ts, r.end_ts if pd.notna(r.end_ts) else r.start_ts) for r in rows]
        for r, (a, b), lane in zip(rows, iv, lanes(iv)):
            span = _clip(origin, a, b)
            if span is None:
                continue
            if lane == 0 or FAULT_TID + lane not in {e["tid"] for e in ev if e["ph"] == "M"}:
                ev += _meta(pid, FAULT_TID + lane, "thread_name", "faults" if lane == 0 else f"faults ({lane + 1})", sort=FAULT_TID + lane)
            ev.append({"ph": "X", "pid": pid, "tid": FAULT_TID + lane, "ts": span[0], "dur": span[1],
                       "name": f"{r.fault_type} ({r.target})", "cat": "fault",
                       "args": json_safe({"fault_id": r.fault_id, "params": r.params, "verified": bool(r.verified), "status": r.status,
                                          "start_s": a - origin, "end_s": b - origin})})
    return ev


def _label_slices(run: RunData, origin: float) -> list[dict]:
    ev = []
    comps = ["job"] + [f"rank:{r}" for r in run.ranks]
    comps += sorted(set(run.labels["component"].astype(str)) - set(comps))
    tid = 1
    for ci, comp in enumerate(comps):
        g = run.labels[run.labels["component"] == comp]
        rows = list(g.itertuples())
        iv = [(r.start_ts, r.end_ts) for r in rows]
        ls = lanes(iv)
        for lane in range(max(ls, default=0) + 1):
            ev += _meta(LABELS_PID, tid + lane, "thread_name", comp if lane == 0 else f"{comp} ({lane + 1})", sort=tid + lane)
        for r, (a, b), lane in zip(rows, iv, ls):
            span = _clip(origin, a, b)
            if span is None:
                continue
            ev.append({"ph": "X", "pid": LABELS_PID, "tid": tid + lane, "ts": span[0], "dur": span[1],
                       "name": f"{r.slowdown:.2f}x {r.source}", "cat": "label",
                       "args": json_safe({"component": comp, "slowdown": float(r.slowdown), "views": r.views, "source": r.source,
                                          "cause": r.cause, "fault_id": r.fault_id if isinstance(r.fault_id, str) else None})})
        tid += max(ls, default=0) + 1
    return ev


def _counters(run: RunData, pid_of: dict, origin: float) -> list[dict]:
    ev = []
    h = run.host
    if h.empty:
        return ev
    h = h[h["value"].notna()]
    for (node, metric), g in h.groupby(["node", "metric"], sort=True):
        pid = pid_of.get(str(node))
        if pid is None:
            continue
        base, _, qual = str(metric).partition(":")
        scale, name = 1.0, base
        if base.endswith("_bytes_per_s"):
            scale, name = 8 / 1e6, base.replace("_bytes_per_s", "_mbit_per_s")
        key = qual or "value"
        for ts, v in zip(g["ts"].to_numpy(dtype=float), g["value"].to_numpy(dtype=float)):
            if math.isfinite(v) and ts >= origin:  # before the time origin: left out (no negative ts)
                ev.append({"ph": "C", "pid": pid, "tid": 0, "ts": _us(ts - origin), "name": name, "args": {key: v * scale}})
    return ev


def export_trace(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the Chrome trace JSON of the run at ``run_dir`` to ``out`` (default
    ``RUN_DIR/trace.json``). Returns the path written.

    Raises BadInput (faultlab.report.data.load_run) for a folder that is no run
    directory; OSError when ``out`` cannot be written, UntrustedPath when a folder on
    its path is a symlink (written with ``safefs.write_file_nofollow``: no link
    followed)."""
    run = load_run(run_dir)
    target = Path(out) if out is not None else Path(run_dir) / "trace.json"
    safefs.write_file_nofollow(target, json.dumps(trace_events(run), separators=(",", ":"), allow_nan=False).encode(), 0o644)
    return target
