"""A controller SIGKILLed between writing a lease file's temporary and renaming it
(``safefs.write_atomic``: ``.NAME.<12 hex>.tmp``) leaves that temporary behind. The
state planted here is exactly that one (what a kill at that instant leaves; a real
kill lands there only by chance, as it did once in the chaos test's CI run): the
watchdog at its deadline and ``release`` remove it, and nothing of anyone else's."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time

import pytest

from faultlab import safefs
from faultlab.injectors.base import Cmd
from faultlab.lifecycle.watchdog import find_watchdogs
from faultlab.lifecycle.lease import Lease
from faultlab.nodes import LocalNode
from tests.helpers import wait_for

OURS = (".{id}.json.0123456789ab.tmp", ".{id}.deadline.fedcba987654.tmp")
NOT_OURS = (".{id}.json.short.tmp",  # not 12 hex digits: not a temporary write_atomic makes
            ".nic-fff999.json.0123456789ab.tmp",  # another lease's
            "{id}.json.notes")


def _plant(folder, fid: str) -> None:
    for pattern in OURS + NOT_OURS:
        (folder / pattern.format(id=fid)).write_text("{")


def _left(folder, fid: str) -> set[str]:
    return set(os.listdir(folder)) - {p.format(id=fid) for p in NOT_OURS}


def test_the_watchdog_removes_a_killed_writers_temporaries_at_the_deadline(tmp_path, monkeypatch):
    d = tmp_path / "leases"
    monkeypatch.setenv("FAULTLAB_LEASE_DIR", str(d))
    done = tmp_path / "reverted"
    lease = Lease.create_for(LocalNode("local"), "nic-abc125", "nic-slow", "x", {}, [Cmd(("touch", str(done)))], time.time() + 600)
    _plant(d, "nic-abc125")
    lease.hand_over()  # as at its deadline (SIGUSR1: revert now), with the files planted first
    assert lease.proc.wait(timeout=30) is not None  # the controller "died": the watchdog ends it alone
    assert done.exists()
    assert _left(d, "nic-abc125") == set(), "the watchdog left a file of its lease"
    assert {p.format(id="nic-abc125") for p in NOT_OURS} <= set(os.listdir(d)), "it removed a file not its own"


def test_release_removes_the_temporaries_of_its_record_and_deadline(tmp_path, monkeypatch):
    d = tmp_path / "leases"
    monkeypatch.setenv("FAULTLAB_LEASE_DIR", str(d))
    lease = Lease.create_for(LocalNode("local"), "nic-abc126", "nic-slow", "x", {}, [Cmd(("true",))], time.time() + 600)
    lease.renew(time.time() + 600)
    _plant(d, "nic-abc126")
    lease.release()
    lease.release()  # twice: nothing more to do, no error
    assert _left(d, "nic-abc126") == set()
    assert lease.proc.poll() is not None


def test_unlink_temporaries_removes_only_regular_files_named_as_its_temporaries(tmp_path):
    (tmp_path / ".a.json.0123456789ab.tmp").write_text("x")
    (tmp_path / ".a.json.0123456789ab.tmp.x").write_text("x")
    (tmp_path / ".a.json.0123456789AB.tmp").write_text("x")  # upper case: token_hex never writes it
    (tmp_path / ".a.json.aaaaaaaaaaaa.tmp").mkdir()
    os.symlink("/etc/passwd", tmp_path / ".a.json.bbbbbbbbbbbb.tmp")
    with safefs.open_dir(str(tmp_path)) as d:
        assert d.unlink_temporaries("a.json") == [".a.json.0123456789ab.tmp"]
    assert sorted(os.listdir(tmp_path)) == [".a.json.0123456789AB.tmp", ".a.json.0123456789ab.tmp.x",
                                            ".a.json.aaaaaaaaaaaa.tmp", ".a.json.bbbbbbbbbbbb.tmp"]


# A controller releasing a lease (its revert done) SIGKILLed at one instant of the
# release: `where` names the instant. Each kill is landed exactly there by wrapping the
# step it follows (a real kill lands there only by chance, as it did once in a long
# chaos run: a process-pause's record was left with no watchdog to remove it).
KILLED_RELEASER = r"""
import os, signal, sys, time
from faultlab import safefs
from faultlab.lifecycle import lease as L
from faultlab.injectors.base import Cmd
from faultlab.nodes import LocalNode

where, fid, done = sys.argv[1:4]
le = L.Lease.create_for(LocalNode("local"), fid, "process-pause", "pid:0", {}, [Cmd(("touch", done))], time.time() + 3)
le.renew(time.time() + 3)  # the deadline file too


def die():
    os.kill(os.getpid(), signal.SIGKILL)


if where == "after-the-watchdog-is-stopped":
    stop = L._kill_group
    L._kill_group = lambda pid: (stop(pid), die())
else:  # after the record is removed
    unlink = safefs.TrustedDir.unlink

    def unlink_then_die(self, name, *a, **k):
        unlink(self, name, *a, **k)
        if name == fid + ".json":
            die()

    safefs.TrustedDir.unlink = unlink_then_die
print(le.proc.pid, flush=True)
le.release()
"""


@pytest.mark.parametrize("where", ["after-the-watchdog-is-stopped", "after-the-record-is-removed"])
def test_a_controller_killed_while_releasing_leaves_no_lease_file_behind(tmp_path, monkeypatch, where):
    d = tmp_path / "leases"
    monkeypatch.setenv("FAULTLAB_LEASE_DIR", str(d))
    fid = f"process-{secrets.token_hex(3)}"
    ctl = subprocess.Popen([sys.executable, "-c", KILLED_RELEASER, where, fid, str(tmp_path / "reverted")],
                           stdout=subprocess.PIPE, text=True)
    watchdog = None
    try:
        watchdog = int(ctl.stdout.readline())
        assert ctl.wait(timeout=60) == -signal.SIGKILL
        # whatever is left, its watchdog (if still alive) removes at the deadline (3 s)
        assert wait_for(lambda: not [n for n in os.listdir(d) if fid in n], 15), \
            f"left with no watchdog to remove it: {os.listdir(d)}"
        assert wait_for(lambda: not any(w.fault_id == fid for w in find_watchdogs()), 15)
    finally:
        if ctl.poll() is None:
            ctl.kill()
            ctl.wait()
        if watchdog and any(w.pid == watchdog and w.fault_id == fid for w in find_watchdogs()):
            os.killpg(watchdog, signal.SIGKILL)
