"""The main job end to end: `faultlab demo` on a real netns testbed."""

from __future__ import annotations

import json
import re
import subprocess

import pandas as pd
import pytest

from tests.helpers import FL, needs_root, residue






def both_faults_labeled(inj: pd.DataFrame, labels: pd.DataFrame):
    """Check a demo run's two faults (injections and labels frames, the run dir's
    Parquet): a nic-slow and a cpu-contention, both verified and reverted; the nic-slow
    found as a job label (source injected, its fault_id, slowdown > 1.3), the
    cpu-contention as straggler labels of its target rank (all injected, its fault_id).
    Returns ``(nic, cpu, straggler)``: the two injection rows and the straggler labels."""
    assert sorted(inj.fault_type) == ["cpu-contention", "nic-slow"]
    assert (inj.status == "reverted").all() and inj.verified.all()
    nic, cpu = (inj[inj.fault_type == t].iloc[0] for t in ("nic-slow", "cpu-contention"))

    def overlaps(l, i):
        return l.start_ts < i.end_ts and l.end_ts > i.start_ts

    job = [l for l in labels.itertuples() if l.component == "job" and overlaps(l, nic)]
    assert job and job[0].source == "injected" and job[0].fault_id == nic.fault_id and job[0].slowdown > 1.3
    straggler = [l for l in labels.itertuples() if l.component == cpu.target and overlaps(l, cpu)]
    assert straggler and all(l.source == "injected" and l.fault_id == cpu.fault_id for l in straggler)
    return nic, cpu, straggler


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The demo, run once for this module: (run dir, completed process, residue before)."""
    before = residue()
    out = tmp_path_factory.mktemp("demo") / "run"
    cp = subprocess.run([*FL, "demo", "--out", str(out), "--duration", "40s"],
                        capture_output=True, text=True, timeout=300)
    return out, cp, before


@needs_root
def test_demo_end_to_end_labels_both_faults_and_leaves_nothing(demo_run):
    out, cp, before = demo_run
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    assert residue() == before, "the demo tore everything down"

    meta = json.loads((out / "meta.json").read_text())
    assert meta["complete"] is True
    inj = pd.read_parquet(out / "injections.parquet")
    labels = pd.read_parquet(out / "labels.parquet")
    nic, cpu, straggler = both_faults_labeled(inj, labels)
    assert (inj.end_ts > inj.start_ts).all()
    ev = json.loads(nic.evidence)["verify"]
    assert ev["ingress_measured_bit_per_s"] <= 50e6 * 1.15 and ev["egress_measured_bit_per_s"] <= 50e6 * 1.15
    assert json.loads(cpu.evidence)["at_revert"]["cpu_stat"]["nr_throttled"] > 0
    assert max(l.slowdown for l in straggler) > 1.3
    others = labels[labels.fault_id.isna()]
    assert set(others.source) <= {"observed"} and (others.slowdown > 0).all()

    steps = pd.read_parquet(out / "steps.parquet")
    assert steps["rank"].nunique() == 4 and (steps.groupby("rank").size().nunique() == 1)
    host = pd.read_parquet(out / "host.parquet")
    assert {"cpu_util_pct", "net_rx_bytes_per_s", "net_tx_bytes_per_s"} <= set(host.metric)
    metrics = json.loads((out / "metrics.json").read_text())  # faultlab.scoring.runmetrics' document
    assert metrics["format"] == "faultlab-run-metrics/1" and metrics["window_s"] == 10.0 and metrics["n_runs"] == 1
    rows = metrics["rows"]
    assert [m["detector"] for m in rows][:1] == ["peer-median"] and {"random", "constant"} <= {m["detector"] for m in rows}


@needs_root
def test_demo_report_opens_in_headless_chromium_without_errors_or_network(demo_run, tmp_path):
    """The demo ends by writing report.html and printing its path; Chromium loads it
    with no console error and no request beyond the file and its data: images; every
    plot shows pixels (not blank)."""
    from tests.browser_check import check_report

    out, cp, _ = demo_run
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    report = out / "report.html"
    assert f"report: {report}" in cp.stdout
    # never silent for long: a line per phase (a pipe gets plain lines) and training heartbeats
    lines = cp.stdout.splitlines()
    for phase in ("bringing up the testbed", "starting ranks", "training", "finishing", "labeling", "scoring", "writing the report"):
        assert any(line.startswith(phase + ":") for line in lines), phase
    assert sum(line.startswith("  training +") for line in lines) >= 3  # 40 s at one heartbeat per 10 s
    res = check_report(report, tmp_path / "demo-report.png")
    assert {"plot-timeline", "plot-whatif", "plot-host", "plot-scores"} <= {i["id"] for i in res["images"]}


@needs_root
def test_demo_report_and_trace_show_the_first_fault_at_the_same_time(demo_run, tmp_path):
    """One time origin, the first training step: the demo's first fault starts at the
    same second (to 0.1 s) in the HTML report and in the Perfetto trace, and both
    show when the run started, before it."""
    from tests.report.timeorigin import first_fault_in_report_and_trace

    out, cp, _ = demo_run
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    got = first_fault_in_report_and_trace(out, tmp_path)
    assert abs(got["trace_s"] - got["report_s"]) <= 0.1, got
    assert got["trace_origin_ts"] == 0 and got["trace_run_start_s"] < 0, got
    assert got["report_run_start"] and re.search(r"\(-\d+\.\ds\)", got["report_run_start"]), got
