"""The residue check (tests/conftest.py) sees every kind of object faultlab makes:
each is made here for real, must show up in ``left_since``, and is removed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import left_since, residue


def test_residue_sees_stress_workers_state_and_agent_files(tmp_path, monkeypatch):
    agent_dir = tmp_path / "agents"
    agent_dir.mkdir(mode=0o700)
    monkeypatch.setenv("FAULTLAB_AGENT_DIR", str(agent_dir))
    before = residue()
    lease_dir = Path(os.environ["FAULTLAB_LEASE_DIR"])
    # a worker as injectors/stress.py starts it: python3 -I -c CODE MARK PIDFILE ...
    w = subprocess.Popen([sys.executable, "-I", "-c", "import time; time.sleep(60)", "faultlab-membw",
                          str(lease_dir / "mem-000000.workers"), "0", "0", "mem", "0"])
    tb = Path(os.environ["FAULTLAB_STATE_DIR"]) / "testbeds"
    tb.mkdir(parents=True, exist_ok=True)
    (tb / "ab12.json").write_text("{}")
    (agent_dir / "1.gc-storm.json").write_text("{}")
    try:
        left = left_since(before, settle_s=0)
        assert {"workers", "testbed_state", "agent_files"} <= set(left), left
    finally:
        w.kill()
        w.wait()
        (tb / "ab12.json").unlink()
        (agent_dir / "1.gc-storm.json").unlink()
    assert not left_since(before)
