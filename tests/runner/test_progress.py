"""Progress and the run's identity, on a real short `faultlab run --json` (local
ranks, a process-pause fault): JSON alone on stdout, plain one-line events on stderr, one run id
for the default folder and meta.json, one time origin for printed and stored times,
and the report path printed at the end."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pandas as pd
from rich.console import Console

from faultlab.progress import Progress
from tests.helpers import FL

SCENARIO = """\
name: prog
seed: 0
testbed: {backend: local, nodes: 2}
workload: {kind: ddp, duration: 12s, hidden: 128, batch: 64}
faults:
  - type: process-pause
    rank: 1
    at: 3s
    duration: 4s
    params: {pause: 100ms, period: 300ms}
"""


def test_run_prints_phases_heartbeat_report_and_keeps_one_run_id_and_time_origin(tmp_path):
    (tmp_path / "s.yaml").write_text(SCENARIO)
    cp = subprocess.run([*FL, "run", "s.yaml", "--json"], cwd=tmp_path,
                        capture_output=True, text=True, timeout=240)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    summary = json.loads(cp.stdout)  # with --json stdout holds only the summary; progress went to stderr
    assert summary["code"] == 0 and summary["injected"] == 1
    lines = cp.stderr.splitlines()
    for phase in ("starting ranks", "training", "finishing"):
        assert any(l.startswith(phase + ":") for l in lines), (phase, cp.stdout)
        assert any(re.fullmatch(rf"{phase} done \(\d+\.\ds\)", l) for l in lines), (phase, cp.stdout)
    # a heartbeat names the step and the faults in force; no live-redraw escapes in a pipe
    assert any(re.match(r"  training \+\d+\.\ds: step \d+, faults in force: ", l) for l in lines), cp.stderr
    assert "\x1b[" not in cp.stderr
    runs = list((tmp_path / "faultlab-runs").iterdir())
    assert len(runs) == 1
    run = runs[0]
    meta = json.loads((run / "meta.json").read_text())
    assert meta["run_id"] == run.name, "one run id: the folder is named by it"
    assert set(pd.read_parquet(run / "steps.parquet")["run_id"]) == {run.name}
    assert (tmp_path / summary["report"]).resolve() == (run / "report.html").resolve() and f"report: {summary['report']}" in cp.stderr
    # the printed inject time counts from the same origin (meta t0) as the stored one
    inj = pd.read_parquet(run / "injections.parquet").iloc[0]
    m = re.search(r"\+\s*(\d+\.\d)s inject process-pause", cp.stderr)
    assert m and abs(float(m.group(1)) - (inj.start_ts - meta["t0"])) <= 0.051, (m and m.group(0), inj.start_ts - meta["t0"])


def test_progress_plain_form_lines(capsys):
    con = Console(file=sys.stdout, force_terminal=False)
    with Progress(con, prefix="[run 1/2]", live=False) as p:
        p.phase("training", "12s")
        p.tick(1.5, 9, total_s=12, faults=["nic-slow@n2"])
        p.tick(1.6, 10, total_s=12, faults=["nic-slow@n2"])  # within HEARTBEAT_S: not printed
        p.done()
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[run 1/2] training: 12s ..."
    assert out[1] == "[run 1/2]   training +1.5s: step 10, faults in force: nic-slow@n2"
    assert re.fullmatch(r"\[run 1/2\] training done \(\d+\.\ds\)", out[2]) and len(out) == 3


def test_progress_is_plain_in_ci_and_with_json(monkeypatch):
    con = Console(force_terminal=True)
    monkeypatch.setenv("CI", "true")
    assert Progress(con).live is False
    monkeypatch.delenv("CI")
    assert Progress(con, as_json=True).live is False and Progress(con, as_json=True).console.stderr
