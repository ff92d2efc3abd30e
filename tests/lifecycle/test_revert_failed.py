"""A revert whose commands fail keeps the lease, and says what happens next truly.

``faultlab revert``/``recover`` (``hostrevert.revert_view``) and ``lease.recover`` stop
the watchdog and delete the record only when no revert line failed for real; a
removal whose object is already gone (a half-applied fault) is no failure. Real
leases (record, ``sh`` watchdog) in this session's lease folder, real revert lines
(``test -e`` of a file the test creates to "fix the cause", ``ip link del`` and ``tc
qdisc del`` of objects that do not exist)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time

from faultlab.injectors.base import Cmd
from faultlab.lifecycle.lease import Lease, load_leases, recover
from faultlab.nodes import LocalNode
from tests.helpers import fl, lease_dir, wait_for

NODE = LocalNode("local")


def _lease(fixed, deadline_s: float = 120.0) -> Lease:
    """A lease of this process whose one revert line fails until ``fixed`` exists."""
    fid = f"process-{secrets.token_hex(3)}"
    return Lease.create_for(NODE, fid, "process-pause", "pid:0", {}, [Cmd(("test", "-e", str(fixed)))], time.time() + deadline_s)


def _watchdog_pids(fid: str) -> list[int]:
    rows = json.loads(fl("status", "--json").stdout)
    return next((r["watchdog_pids"] for r in rows if r["fault_id"] == fid), [])


def test_failed_revert_keeps_record_and_watchdog_and_says_it_retries(tmp_path, no_residue):
    fixed = tmp_path / "fixed"
    lease = _lease(fixed)
    fid = lease.fault_id
    try:
        rc = fl("revert", fid)
        assert rc.returncode == 1, rc.stdout + rc.stderr
        assert "NOT reverted" in rc.stdout and "test -e" in rc.stdout, rc.stdout
        assert "its lease is kept: its watchdog retries at" in rc.stderr, rc.stderr
        assert lease.exists(), "the record was deleted although its revert failed"
        assert lease.proc.poll() is None and _watchdog_pids(fid) == [lease.proc.pid], "the watchdog was stopped"
        fixed.touch()  # the cause fixed: the retry reverts it and only now releases
        rc = fl("revert", fid)
        assert rc.returncode == 0 and f"{fid}: reverted" in rc.stdout, rc.stdout + rc.stderr
        assert not lease.exists()
        lease.proc.wait(timeout=10)
    finally:
        lease.release()


def test_failed_revert_without_watchdog_keeps_the_record_and_says_none_retries(tmp_path, no_residue):
    """The controller is gone and so is the watchdog: ``recover`` keeps the record
    (the only trace of the fault) and says nothing will retry by itself."""
    fixed = tmp_path / "fixed"
    code = ("import time, sys\nfrom faultlab.injectors.base import Cmd\nfrom faultlab.lifecycle.lease import Lease\n"
            "from faultlab.nodes import LocalNode\n"
            f"le = Lease.create_for(LocalNode('local'), 'process-{secrets.token_hex(3)}', 'process-pause', 'pid:0', {{}}, "
            f"[Cmd(('test', '-e', {str(fixed)!r}))], time.time() + 120)\nprint(le.fault_id, le.proc.pid, flush=True)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    fid, wd = out.split()
    os.killpg(int(wd), signal.SIGKILL)
    assert wait_for(lambda: not _watchdog_pids(fid), 10)
    rec = lease_dir() / f"{fid}.json"
    try:
        rc = fl("recover")
        assert rc.returncode == 1, rc.stdout + rc.stderr
        assert f"{fid} not fully reverted" in rc.stderr and "no watchdog is left to retry" in rc.stderr, rc.stderr
        assert "watchdogs retry" not in rc.stderr and rec.exists()
        fixed.touch()
        rc = fl("recover")
        assert rc.returncode == 0 and fid in rc.stdout, rc.stdout + rc.stderr
        assert not rec.exists()
    finally:
        rec.unlink(missing_ok=True)


def test_lease_recover_keeps_a_lease_whose_revert_fails(tmp_path, no_residue):
    fixed = tmp_path / "fixed"
    lease = _lease(fixed)
    try:
        [d] = recover(NODE, lease.fault_id)
        assert d["revert_lines_failed"] == 1 and "test -e" in d["left"][0], d
        assert lease.exists() and lease.proc.poll() is None
        fixed.touch()
        [d] = recover(NODE, lease.fault_id)
        assert d["left"] == [] and not lease.exists()
        lease.proc.wait(timeout=10)
        assert not load_leases(NODE)
    finally:
        lease.release()


def test_a_removal_of_what_is_already_gone_is_no_failure(no_residue):
    """A half-applied fault: its ifb and qdisc were never made, so their removals fail;
    the revert still counts as done and the lease is released (exit 0)."""
    ifb = f"flifb{secrets.token_hex(3)}"
    lines = [Cmd(("ip", "link", "del", ifb)), Cmd(("tc", "qdisc", "del", "dev", "lo", "root", "handle", "fffe:"))]
    for c in lines:
        assert subprocess.run(list(c.argv), capture_output=True).returncode != 0
    lease = Lease.create_for(NODE, f"nic-{secrets.token_hex(3)}", "nic-slow", "lo", {}, lines, time.time() + 120)
    try:
        rc = fl("revert", lease.fault_id)
        assert rc.returncode == 0 and f"{lease.fault_id}: reverted" in rc.stdout, rc.stdout + rc.stderr
        assert not lease.exists()
        lease.proc.wait(timeout=10)
    finally:
        lease.release()


def test_a_limit_write_into_a_faultlab_cgroup_that_is_gone_is_no_failure(tmp_path, no_residue):
    """An io-slow or cpu fault killed before its cgroup was made: the revert's first
    line writes "no limit" into a file of that cgroup, and fails. Its limits went with
    the cgroup, so the revert counts as done (the chaos run of seed 31 kept such a lease
    until its deadline). The same write into a missing folder faultlab did not make is
    a real failure: the lease is kept."""
    from faultlab.injectors.base import write_cmd

    gone = tmp_path / f"faultlab-io-{secrets.token_hex(3)}" / "blkio.throttle.write_bps_device"
    other = tmp_path / "not-faultlabs" / "blkio.throttle.write_bps_device"
    ok = Lease.create_for(NODE, f"io-{secrets.token_hex(3)}", "io-slow", "pid:0", {}, [write_cmd(str(gone), "254:0 0")], time.time() + 120)
    kept = Lease.create_for(NODE, f"io-{secrets.token_hex(3)}", "io-slow", "pid:0", {}, [write_cmd(str(other), "254:0 0")], time.time() + 120)
    try:
        rc = fl("revert", ok.fault_id)
        assert rc.returncode == 0 and f"{ok.fault_id}: reverted" in rc.stdout, rc.stdout + rc.stderr
        assert not ok.exists()
        rc = fl("revert", kept.fault_id)
        assert rc.returncode == 1 and kept.exists(), rc.stdout + rc.stderr
    finally:
        ok.release()
        kept.release()
