"""Releasing a lease signals its own watchdog only.

``Lease.release`` signals the watchdog the record names (PID and start time, written
when the watchdog started), run by the record's user; never a process of any user whose
argv merely looks like the lease's watchdog.
Real processes: a real lease with its real ``sh`` watchdog, and two look-alikes with
the same argv shape (session leaders, as a watchdog is): one of user ``nobody`` and
one of root that is not the recorded PID."""

from __future__ import annotations

import os
import secrets
import subprocess
import time

import pytest

from faultlab.injectors.base import Cmd
from faultlab.lifecycle.lease import Lease, read_records
from faultlab.lifecycle.watchdog import WATCHDOG_NAME
from faultlab.lifecycle.watchdog import find_watchdogs
from faultlab.nodes import LocalNode
from tests.helpers import fl, needs_root, wait_for


def _look_alike(fid: str, *, as_nobody: bool) -> subprocess.Popen:
    # `sleep 600; :` keeps sh itself alive (no exec of the last command), as a watchdog's sh
    argv = ["sh", "-c", "sleep 600; :", WATCHDOG_NAME, fid, str(int(time.time()) + 600), "0", "true"]
    if as_nobody:
        argv = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv]
    return subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL)


@needs_root
def test_release_stops_only_the_recorded_watchdog(tmp_path, no_residue):
    fid = f"process-{secrets.token_hex(3)}"
    lease = Lease.create_for(LocalNode("local"), fid, "process-pause", "pid:0", {}, [Cmd(("true",))], time.time() + 120)
    others = [_look_alike(fid, as_nobody=True), _look_alike(fid, as_nobody=False)]
    try:
        assert wait_for(lambda: {w.pid for w in find_watchdogs() if w.fault_id == fid} == {lease.proc.pid, *(p.pid for p in others)}, 10), \
            "the look-alikes do not look like watchdogs"
        # a lease read back from its record (another process's release, e.g. faultlab revert)
        [back] = [le for le in read_records(lease.folder)[0] if le.fault_id == fid]
        back.release()
        assert wait_for(lambda: lease.proc.poll() is not None, 10), "its own watchdog was not stopped"
        time.sleep(0.5)
        assert [p.poll() for p in others] == [None, None], "release signalled a process that only looks like its watchdog"
        assert not lease.exists()
        assert back.record["watchdog_pid"] == lease.proc.pid and isinstance(back.record["watchdog_starttime"], int)
    finally:
        lease.release()
        for p in others:
            if p.poll() is None:
                os.killpg(p.pid, 9)
            p.wait()


def test_a_record_without_watchdog_fields_matches_by_user_and_folder(tmp_path, no_residue):
    """A record of an older version (no watchdog_pid): the watchdog is told by its user
    and the lease folder it holds, never by argv alone."""
    fid = f"process-{secrets.token_hex(3)}"
    lease = Lease.create_for(LocalNode("local"), fid, "process-pause", "pid:0", {}, [Cmd(("true",))], time.time() + 120)
    other = _look_alike(fid, as_nobody=False)  # holds no lease folder descriptor
    try:
        old = Lease(lease.path, {k: v for k, v in lease.record.items() if not k.startswith("watchdog_")})
        assert wait_for(lambda: [w.pid for w in old.own_watchdogs()] == [lease.proc.pid], 10)
    finally:
        lease.release()
        os.killpg(other.pid, 9)
        other.wait()
    if lease.proc.poll() is None:
        pytest.fail("the lease's own watchdog survived its release")


@needs_root
def test_revert_of_a_lost_record_signals_the_faults_own_watchdog_not_another_users_look_alike(tmp_path, no_residue):
    """Root's fault lost its record; a process of nobody's looks like its watchdog (same
    id). ``faultlab revert ID`` tells root's watchdog to revert and leaves the look-alike
    alone (its sh dies of a SIGUSR1, so a signal would show); ``status`` names it."""

    fid = f"process-{secrets.token_hex(3)}"
    done = tmp_path / "reverted"
    lease = Lease.create_for(LocalNode("local"), fid, "process-pause", "pid:0", {}, [Cmd(("touch", str(done)))], time.time() + 120)
    other = _look_alike(fid, as_nobody=True)
    try:
        assert wait_for(lambda: {w.pid for w in find_watchdogs() if w.fault_id == fid} == {lease.proc.pid, other.pid}, 10)
        lease.path.unlink()
        st = fl("status")
        assert f"process {other.pid} (uid " in st.stderr + st.stdout and "not acted on" in st.stderr + st.stdout, st.stdout + st.stderr
        rc = fl("revert", fid, timeout=120)
        assert rc.returncode == 0, rc.stdout + rc.stderr
        assert wait_for(lambda: lease.proc.poll() is not None, 10) and done.exists(), "its own watchdog did not revert"
        time.sleep(0.5)
        assert other.poll() is None, "revert signalled another user's process that only looks like the watchdog"
    finally:
        lease.release()
        if other.poll() is None:
            os.killpg(other.pid, 9)
        other.wait()
