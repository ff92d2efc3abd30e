"""faultlab export --format perfetto: Chrome trace JSON (Trace Event Format) that
Perfetto UI loads, checked against a JSON Schema written here, for nesting, and for a
json round-trip."""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict

import jsonschema
import pytest

from faultlab.report.synthetic import make_run
from tests.helpers import FL

# The subset of the Trace Event Format faultlab writes (ph X, C, i, M): every event has
# ph, ts (whole microseconds, >= 0), pid and tid; a slice has a duration; metadata names a
# process or thread.
TRACE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
        "traceEvents": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["ph", "ts", "pid", "tid", "name"],
                "properties": {
                    "ph": {"enum": ["X", "C", "i", "M"]},
                    "ts": {"type": "integer", "minimum": 0},
                    "pid": {"type": "integer", "minimum": 0},
                    "tid": {"type": "integer", "minimum": 0},
                    "name": {"type": "string", "minLength": 1},
                    "dur": {"type": "integer", "minimum": 0},
                    "cat": {"type": "string"},
                    "args": {"type": "object"},
                },
                "allOf": [
                    {"if": {"properties": {"ph": {"const": "X"}}}, "then": {"required": ["dur"]}},
                    {"if": {"properties": {"ph": {"const": "C"}}},
                     "then": {"required": ["args"], "properties": {"args": {"minProperties": 1, "additionalProperties": {"type": "number"}}}}},
                    {"if": {"properties": {"ph": {"const": "M"}}},
                     "then": {"properties": {"name": {"enum": ["process_name", "thread_name", "process_sort_index", "thread_sort_index"]}},
                              "required": ["args"]}},
                ],
            },
        },
    },
}


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    run = make_run(tmp_path_factory.mktemp("exp") / "run", ranks=4, duration_s=40)
    out = run / "trace.json"
    cp = subprocess.run([*FL, "export", str(run), "--format", "perfetto", "--out", str(out)],
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert f"perfetto trace -> {out}" in cp.stdout
    return out


def check_trace(doc: dict) -> None:
    """Schema, one named track per rank, and slices that nest (never cross) per track."""
    jsonschema.validate(doc, TRACE_SCHEMA)
    ev = doc["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    for e in ev:
        if e["ph"] == "X":
            assert (e["pid"], e["tid"]) in names, f"slice on an unnamed track: {e}"
            assert e["pid"] in procs
    by_track = defaultdict(list)
    for e in ev:
        if e["ph"] == "X":
            by_track[(e["pid"], e["tid"])].append(e)
    for track, slices in by_track.items():
        slices.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[float] = []  # ends of the open slices
        for e in slices:
            while stack and stack[-1] <= e["ts"]:
                stack.pop()
            end = e["ts"] + e["dur"]
            assert not stack or end <= stack[-1], f"slice {e['name']} on {names[track]} crosses its parent"
            stack.append(end)


def test_export_validates_and_round_trips(trace):
    text = trace.read_text()
    doc = json.loads(text)
    check_trace(doc)
    assert json.loads(json.dumps(doc)) == doc
    ev = doc["traceEvents"]
    ranks = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"].startswith("rank ")}
    assert ranks == {"rank 0", "rank 1", "rank 2", "rank 3"}
    procs = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs == {"node n0", "node n1", "node n2", "node n3", "labels"}
    kinds = {e.get("cat") for e in ev if e["ph"] == "X"}
    assert {"step", "compute", "comm", "fault", "label"} <= kinds
    counters = {e["name"] for e in ev if e["ph"] == "C"}
    assert {"cpu_util_pct", "net_rx_mbit_per_s", "tcp_rtt_ms"} <= counters
    # every step of rank 1 is one slice, with compute and comm inside it
    steps_r1 = [e for e in ev if e["ph"] == "X" and e["cat"] == "step" and e["tid"] == 2]
    assert len(steps_r1) == len({e["name"] for e in steps_r1}) > 100


def test_check_trace_catches_crossing_slices():
    doc = {"traceEvents": [
        {"ph": "M", "pid": 1, "tid": 0, "ts": 0, "name": "process_name", "args": {"name": "node n0"}},
        {"ph": "M", "pid": 1, "tid": 1, "ts": 0, "name": "thread_name", "args": {"name": "rank 0"}},
        {"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 10, "name": "step 0"},
        {"ph": "X", "pid": 1, "tid": 1, "ts": 5, "dur": 10, "name": "compute"},
    ]}
    with pytest.raises(AssertionError, match="crosses"):
        check_trace(doc)
    doc["traceEvents"][3]["ts"] = -1
    with pytest.raises(jsonschema.ValidationError):
        check_trace(doc)


def test_export_refuses_a_folder_that_is_no_run(tmp_path):
    cp = subprocess.run([*FL, "export", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2 and "RUN_DIR:" in cp.stderr and cp.stderr.count("\n") == 1
    cp = subprocess.run([*FL, "export", str(tmp_path), "--format", "json"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2 and "--format" in cp.stderr


def test_report_and_trace_share_the_first_training_step_as_origin(tmp_path):
    """A synthetic run: the first fault starts at the same second in the report and in
    the trace, and both show the run start (6 s before the first step)."""
    from tests.report.timeorigin import first_fault_in_report_and_trace

    run = make_run(tmp_path / "run", ranks=3, duration_s=40)
    got = first_fault_in_report_and_trace(run, tmp_path)
    assert abs(got["trace_s"] - got["report_s"]) <= 0.1, got
    assert got["report_s"] > 1.0, "the fault starts well after the first step in this run"
    assert got["trace_origin_ts"] == 0 and abs(got["trace_run_start_s"] + 6.0) < 1e-6, got
    assert got["report_run_start"] and "(-6.0s)" in got["report_run_start"], got
