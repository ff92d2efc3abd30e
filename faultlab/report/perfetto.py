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

``ts`` counts from ``otherData.trace_origin_unix_s`` (the earliest time in the run,
so no event has a negative ``ts``); the run's time origin (its first training step,
what the report and the printed "+12.3s" times count from) is the instant ``first
training step`` and ``otherData.time_origin_unix_s``.
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


def trace_events(run: RunData) -> dict:
    """The Chrome trace of ``run`` as a dict (see the module docstring)."""
    s = run.steps
    starts = [float(s["t_start"].min()), run.t0]
    if len(run.host):
        starts.append(float(run.host["ts"].min()))
    if len(run.injections):
        starts.append(float(run.injections["start_ts"].min()))
    if len(run.labels):
        starts.append(float(run.labels["start_ts"].min()))
    origin = math.floor(min(starts))
    ev: list[dict] = []
    nodes = run.nodes
    pid_of = {n: i + 1 for i, n in enumerate(nodes)}
    for n, pid in pid_of.items():
        ev += _meta(pid, None, "process_name", f"node {n}", sort=pid)
    ev += _meta(LABELS_PID, None, "process_name", "labels", sort=len(nodes) + 1)
    ev.append({"ph": "i", "s": "g", "pid": LABELS_PID, "tid": 0, "ts": _us(run.t0 - origin), "name": "first training step",
               "args": {"unix_s": run.t0}})
    ev += _step_slices(run, pid_of, origin)
    ev += _fault_slices(run, pid_of, origin)
    ev += _label_slices(run, origin)
    ev += _counters(run, pid_of, origin)
    return {
        "traceEvents": ev,
        "displayTimeUnit": "ms",
        "otherData": {"run_id": run.run_id, "trace_origin_unix_s": origin, "time_origin_unix_s": run.t0, "format": "faultlab perfetto export 1"},
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
            ts = _us(t[i])
            dur = _us(max(cols["step_s"][i], 0.0))
            if i + 1 < n:  # clock jitter: a step never reaches into the rank's next one
                dur = max(0, min(dur, _us(t[i + 1]) - ts))
            end = ts + dur
            ev.append({"ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur, "name": f"step {int(step)}", "cat": "step"})
            c0 = ts
            for part, col in (("compute", "compute_s"), ("comm", "comm_s")):
                d = cols[col][i]
                if not (d > 0):
                    continue
                d_us = min(_us(d), end - c0)  # clipped to the step
                if d_us > 0:
                    ev.append({"ph": "X", "pid": pid, "tid": tid, "ts": c0, "dur": d_us, "name": part, "cat": part})
                    c0 += d_us
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
            if lane == 0 or FAULT_TID + lane not in {e["tid"] for e in ev if e["ph"] == "M"}:
                ev += _meta(pid, FAULT_TID + lane, "thread_name", "faults" if lane == 0 else f"faults ({lane + 1})", sort=FAULT_TID + lane)
            ev.append({"ph": "X", "pid": pid, "tid": FAULT_TID + lane, "ts": _us(a - origin), "dur": max(0, _us(b - origin) - _us(a - origin)),
                       "name": f"{r.fault_type} ({r.target})", "cat": "fault",
                       "args": json_safe({"fault_id": r.fault_id, "params": r.params, "verified": bool(r.verified), "status": r.status})})
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
            ev.append({"ph": "X", "pid": LABELS_PID, "tid": tid + lane, "ts": _us(a - origin), "dur": max(0, _us(b - origin) - _us(a - origin)),
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
            if math.isfinite(v):
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
