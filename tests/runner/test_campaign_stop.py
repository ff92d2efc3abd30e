"""A campaign stops when told to: SIGINT (Ctrl-C) or SIGTERM to the ``faultlab
campaign`` process, sent by its PID while the first run has a fault in force, stops
that run (its fault reverted, its ranks gone), runs no further run, and exits 130 or
143 with ``campaign.json`` naming the run stopped (its code, the signal) and the runs
not run. A real campaign of three short runs on the ``local`` backend (one rank per
node as a local process, a process-pause fault)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import FL, residue

CAMPAIGN = """\
name: stopme
seed: 3
runs: 3
base:
  testbed: {backend: local, nodes: 2}
  workload: {kind: ddp, duration: 40s, hidden: 64, batch: 32}
faults_per_run: [1, 1]
start: [2s, 2s]
duration: [30s, 30s]
types:
  process-pause: {params: {pause: [100ms], period: [400ms]}}
"""


def _events(run: Path) -> list[str]:
    try:
        return [json.loads(line).get("event") for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_campaign_after_cleaning_up_its_run(sig, tmp_path):
    before = residue()
    (tmp_path / "c.yaml").write_text(CAMPAIGN)
    out = tmp_path / "runs"
    with open(tmp_path / "stdout", "w") as so, open(tmp_path / "stderr", "w") as se:
        p = subprocess.Popen([*FL, "campaign", "c.yaml", "--out", str(out), "--no-label"], cwd=tmp_path, stdout=so, stderr=se)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and p.poll() is None:
            runs = sorted(out.glob("*/events.jsonl"))
            if runs and "inject" in _events(runs[0].parent):
                break
            time.sleep(0.2)
        assert p.poll() is None, (tmp_path / "stderr").read_text()[-3000:]
        assert runs and "inject" in _events(runs[0].parent), "the first run's fault was never injected"
        p.send_signal(sig)
        code = p.wait(timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = (tmp_path / "stderr").read_text() + (tmp_path / "stdout").read_text()
    assert code == 128 + sig, (code, err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    manifest = json.loads((out / "campaign.json").read_text())
    assert len(manifest["runs"]) == 1, manifest
    first = manifest["runs"][0]
    assert first["code"] == 128 + sig and first["signal"] == sig.name, first
    assert manifest["stopped"]["signal"] == sig.name and len(manifest["stopped"]["not_run"]) == 2, manifest
    assert [d.name for d in out.iterdir() if d.is_dir()] == [Path(first["run_dir"]).name], "no further run was started"
    events = _events(Path(first["run_dir"]))
    assert "interrupted" in events and "revert" in events and events.index("revert") > events.index("interrupted"), events
    assert f"stopped by {sig.name}" in err and "--runs 1:3" in err, err[-2000:]
    # this session's objects only (other sessions' testbeds come and go beside it)
    mine = ("processes", "leases", "workers", "testbed_state")
    assert {k: residue()[k] for k in mine} == {k: before[k] for k in mine}, "the stopped run left ranks, pause loops or leases behind"
