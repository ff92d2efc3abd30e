"""A revert line that hangs or is stopped never holds a lease for ever: the watchdog
kills each line after ``LINE_TIMEOUT_S`` and goes on (removing the record); its lines
never get the lease folder's descriptor; ``status`` says what a watchdog past its
deadline does (never "in 0s"), and a revert that fails while the watchdog hangs past
its deadline stops that watchdog and its line, keeping the record.

Real leases (record and detached watchdog), real lines run as ``nobody`` with
``setpriv`` (as gc-storm's revert runs as the target's user), real signals."""

from __future__ import annotations

import io
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from rich.console import Console

from faultlab.injectors.base import Cmd
from faultlab.lifecycle.commands import print_status, revert_faults, status_rows
from faultlab.lifecycle import lease as lease_mod
from faultlab.lifecycle.hostview import host_view
from faultlab.lifecycle.lease import Lease
from faultlab.lifecycle.watchdog import LINE_TIMEOUT_S, OVERDUE_S, WATCHDOG_SH
from faultlab.nodes import LocalNode
from tests.helpers import needs_root, wait_for

pytestmark = [needs_root, pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv (util-linux)")]

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
#: the line bound the stopped-line test gives its watchdog (s): the watchdog's own
#: script with this number in place of ``LINE_TIMEOUT_S``, so the test waits seconds
#: for the kill, not a minute
SHORT_LINE_S = 5


def _procs_naming(text: str) -> list[int]:
    """PIDs of the processes whose argv contains ``text``."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if text.encode() in (d / "cmdline").read_bytes():
                    out.append(int(d.name))
            except OSError:
                continue
    return [p for p in out if p != os.getpid()]


def _kill(pids: list[int]) -> None:
    for p in pids:
        try:
            os.kill(p, 9)
        except ProcessLookupError:
            pass


def _status_line(fid: str, row_change: dict | None = None) -> str:
    rows, _ = status_rows()
    row = next(r for r in rows if r["fault_id"] == fid)
    out = io.StringIO()
    print_status([{**row, **(row_change or {})}], [], Console(file=out, width=400))
    return out.getvalue()


def test_a_revert_line_its_user_stops_is_killed_and_the_watchdog_ends(nobody_dir, monkeypatch):
    bound = f"timeout -s KILL {LINE_TIMEOUT_S} "
    assert WATCHDOG_SH.count(bound) == 1, "the watchdog no longer bounds each line with timeout"
    monkeypatch.setattr(lease_mod, "WATCHDOG_SH", WATCHDOG_SH.replace(bound, f"timeout -s KILL {SHORT_LINE_S} "))
    fds = nobody_dir / "fds"
    # the line, as nobody, notes its open descriptors, then stops itself (as that user may)
    line = [*NOBODY, "sh", "-c", f"ls -l /proc/$$/fd > {shlex.quote(str(fds))}; kill -STOP $$"]
    fid = "process-5e5a01"
    le = Lease.create_for(LocalNode("local"), fid, "process-pause", "pid:0", {}, [Cmd(tuple(line))], time.time() + 1)
    try:
        try:
            le.proc.wait(timeout=SHORT_LINE_S + 90)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the watchdog still waits on the stopped line {SHORT_LINE_S + 90}s after its deadline")
        assert not le.exists(), "the watchdog ended without removing the record"
        assert wait_for(lambda: not _procs_naming(str(fds)), 10), "the stopped line was left"
        seen = fds.read_text()
        assert seen and le.folder not in seen, f"the line (another user's process) held the lease folder: {seen}"
    finally:
        _kill(_procs_naming(str(fds)))
        le.release()


def test_status_tells_a_watchdog_past_its_deadline_and_a_failed_revert_stops_a_stuck_one(tmp_path):
    fail, done = tmp_path / "fail", tmp_path / "done"
    # the revert line fails once `fail` exists, and hangs until `done` exists
    script = f"if [ -e {shlex.quote(str(fail))} ]; then exit 3; fi; [ -e {shlex.quote(str(done))} ] || sleep 600"
    fid = "process-5e5a02"
    dl = time.time() + 1
    le = Lease.create_for(LocalNode("local"), fid, "process-pause", "pid:0", {}, [Cmd(("sh", "-c", script))], dl)
    try:
        assert wait_for(lambda: time.time() > dl + 1 and _procs_naming(str(done)), 30), "the watchdog never ran its line"
        line = _status_line(fid)
        assert "in 0s" not in line and "reverting it now" in line and "has passed" in line, line
        v = next(v for v in host_view()[0] if v.fault_id == fid)
        assert not v.overdue() and v.overdue(now=v.deadline_ts + OVERDUE_S + 1)
        stuck = _status_line(fid, {"watchdog_overdue": True})
        assert "WATCHDOG STUCK" in stuck and "run faultlab recover" in stuck and "in 0s" not in stuck, stuck

        fail.touch()  # the revert of `faultlab revert ID` / recover fails for real now
        got, _, _ = revert_faults(fid)
        left = got[0]["left"]
        assert any("revert command failed" in x for x in left) and any(x.startswith("lease record") for x in left), left
        assert not any(x.startswith("watchdog PID") for x in left), left
        le.proc.wait(timeout=10)  # the watchdog, past its deadline, is stopped
        assert wait_for(lambda: not _procs_naming(str(done)), 10), "the hanging line outlived its watchdog"
        assert le.exists()  # the record stays: what failed is retried by revert ID
        assert "WATCHDOG GONE: run faultlab recover" in _status_line(fid)

        fail.unlink()
        done.touch()
        got, _, _ = revert_faults(fid)
        assert got[0]["left"] == [] and not le.exists()
    finally:
        _kill(_procs_naming(str(done)))
        le.release()
