"""A pause target whose command name holds ``) `` is resumed like any other.

``/proc/PID/stat`` puts the command name (up to 15 bytes the process chooses, with
``prctl(PR_SET_NAME)``) between parentheses as field 2, so a name such as
``x) T 1 (`` reads, to a parser that splits at the *first* ``)``, as other fields: a
start time that does not match the recorded one, so no SIGCONT. The target here toggles its name
between a plain one and such a one many times a millisecond, so it is sometimes
stopped while it holds the bad name (it cannot change a name while stopped). The
pause loop, the revert, the watchdog and the loop's own end must all still resume it;
a target that keeps the bad name all the time is paused and resumed like any other.
Targets are real processes started here and killed by PID.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faultlab import procid
from faultlab.injectors import ProcessPause, apply
from faultlab.lifecycle.lease import load_leases
from faultlab.injectors.pause import CONT_SH
from faultlab.nodes import LocalNode
from tests.helpers import deadline_now, needs_root

#: a command name that shifts every field after it for a first-``)`` parser
BAD_NAME = b"x) T 1 ("

TARGET = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
names = [b"x) T 1 (", b"fl-target"]
if sys.argv[1] == "always":
    assert libc.prctl(15, names[0], 0, 0, 0) == 0  # PR_SET_NAME
    while True:
        pass
i = 0
while True:
    libc.prctl(15, names[i & 1], 0, 0, 0)
    i += 1
    for _ in range(200):
        pass
"""


def _start_target(mode: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", TARGET, mode])
    end = time.time() + 10
    while time.time() < end and BAD_NAME not in Path(f"/proc/{p.pid}/comm").read_bytes():
        time.sleep(0.01)
    return p


@pytest.fixture
def toggling():
    """A busy process whose name toggles between ``fl-target`` and ``x) T 1 (``."""
    p = _start_target("toggle")
    try:
        yield p
    finally:
        p.kill()  # SIGKILL ends a stopped process too
        p.wait()


@pytest.fixture
def always_bad():
    """A busy process named ``x) T 1 (`` from start to end."""
    p = _start_target("always")
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def _name_and_state(pid: int) -> tuple[bytes, str]:
    """(command name, state) of ``pid``, parsed here at the last ``)`` (the oracle)."""
    raw = Path(f"/proc/{pid}/stat").read_bytes()
    return raw[raw.index(b"(") + 1: raw.rindex(b")")], raw.rpartition(b")")[2].split()[0].decode()


def _seen_stopped_with_bad_name(pid: int, timeout_s: float) -> bool:
    """Whether ``pid`` is seen stopped while it holds BAD_NAME within ``timeout_s``."""
    end = time.time() + timeout_s
    while time.time() < end:
        name, st = _name_and_state(pid)
        if st == "T" and b") " in name:
            return True
        time.sleep(0.003)
    return False


def _stays_running(pid: int, seconds: float = 1.5) -> bool:
    """Whether ``pid`` is never seen stopped over ``seconds``."""
    end = time.time() + seconds
    while time.time() < end:
        if _name_and_state(pid)[1] == "T":
            return False
        time.sleep(0.02)
    return True


def _loop_gone(active, timeout_s: float) -> bool:
    pidfile = Path(active.facts["pidfile"])
    end = time.time() + timeout_s
    while time.time() < end and pidfile.exists():
        time.sleep(0.05)
    return not pidfile.exists()


def _drop(active) -> None:
    """End what a failed test left of ``active``: its loop (it stops itself once the
    target is gone), its watchdog and its record."""
    if active is not None and active.lease.exists():
        active.lease.release()


def test_revert_resumes_a_target_stopped_while_its_name_holds_a_paren(toggling, no_residue):
    active = apply(ProcessPause(LocalNode("local"), toggling.pid, 0.1, 0.3, 60), 60)
    try:
        assert _seen_stopped_with_bad_name(toggling.pid, 30), "never stopped while named x) T 1 ( (the loop gave up)"
        assert active.revert() == "reverted", active.evidence.get("left_behind")
        assert _stays_running(toggling.pid), "left stopped after revert"
    finally:
        _drop(active)


def test_watchdog_resumes_a_target_stopped_while_its_name_holds_a_paren(toggling, no_residue):
    """The controller is SIGKILLed once the target is seen stopped with the bad name;
    the loop is given 120 s, so only the watchdog's revert (at the lease's end, moved to
    now once the controller is dead) ends the fault: the target must then run."""
    code = (
        "import time\n"
        "from faultlab.injectors import ProcessPause, apply\n"
        "from faultlab.nodes import LocalNode\n"
        f"a = apply(ProcessPause(LocalNode('local'), {toggling.pid}, 0.1, 0.3, 120.0), 8.0, grace_s=0.0)\n"
        "print(a.fault_id, flush=True)\n"
        "time.sleep(120)\n"
    )
    ctl = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        fid = ctl.stdout.readline().strip()
        assert fid.startswith("process-")
        seen = _seen_stopped_with_bad_name(toggling.pid, 7)
        os.kill(ctl.pid, signal.SIGKILL)
        ctl.wait()
        deadline_now(fid)  # the lease's end now, not at its 8 s
        end = time.time() + 30
        while time.time() < end and load_leases(LocalNode("local")):
            time.sleep(0.2)
        assert not load_leases(LocalNode("local")), "the watchdog did not end the lease"
        assert seen, "never stopped while named x) T 1 ( (the loop gave up)"
        assert _stays_running(toggling.pid), "left stopped after the watchdog's revert"
    finally:
        if ctl.poll() is None:
            ctl.kill()
            ctl.wait()
        for le in load_leases(LocalNode("local")):
            le.release()


def test_loop_resumes_the_target_at_its_own_deadline(toggling, no_residue):
    """The loop's deadline (5 s) comes long before the lease's (60 s): the loop ends
    by itself, and the target runs once it has."""
    active = apply(ProcessPause(LocalNode("local"), toggling.pid, 0.1, 0.3, 5), 60)
    try:
        assert _seen_stopped_with_bad_name(toggling.pid, 4.5), "never stopped while named x) T 1 ( (the loop gave up)"
        assert _loop_gone(active, 20), "the loop did not end at its deadline"
        assert _stays_running(toggling.pid), "left stopped by the loop's own end"
        assert active.revert() == "reverted"
    finally:
        _drop(active)


def test_loop_resumes_the_target_when_it_is_told_to_stop(toggling, no_residue):
    """SIGTERM to the loop (what the revert sends it) while the target is stopped with
    the bad name: the loop's own trap resumes it before it exits."""
    active = apply(ProcessPause(LocalNode("local"), toggling.pid, 0.4, 0.5, 60), 60)
    try:
        pid, start = Path(active.facts["pidfile"]).read_text().split()
        assert _seen_stopped_with_bad_name(toggling.pid, 30), "never stopped while named x) T 1 ( (the loop gave up)"
        assert procid.starttime(int(pid)) == int(start)
        os.kill(int(pid), signal.SIGTERM)
        assert _loop_gone(active, 10), "the loop did not end on SIGTERM"
        assert _stays_running(toggling.pid), "left stopped by the loop's SIGTERM trap"
        assert active.revert() == "reverted"
    finally:
        _drop(active)


def test_target_named_with_a_paren_all_the_time_is_paused_and_resumed(always_bad, no_residue):
    active = apply(ProcessPause(LocalNode("local"), always_bad.pid, 0.1, 0.3, 30), 30)
    try:
        assert active.evidence["verify"]["ok"]
        episodes, prev = 0, None
        end = time.time() + 20
        while time.time() < end and episodes < 3:
            st = _name_and_state(always_bad.pid)[1]
            if st == "T" and prev not in (None, "T"):
                episodes += 1
            prev = st
            time.sleep(0.005)
        assert episodes >= 3, f"stopped {episodes} time(s) after the first"
        assert active.revert() == "reverted"
        assert _stays_running(always_bad.pid)
    finally:
        _drop(active)


@needs_root
def test_resume_that_cannot_resume_says_so(always_bad):
    """The revert's SIGCONT run by a user who may not signal the target (nobody, in a
    session of its own: SIGCONT is allowed within a session) leaves it stopped: the
    line fails, saying the process is still stopped, so the lease is kept and the
    revert reported failed, never "reverted"."""
    os.kill(always_bad.pid, signal.SIGSTOP)
    try:
        end = time.time() + 5
        while time.time() < end and _name_and_state(always_bad.pid)[1] != "T":
            time.sleep(0.01)
        start = str(procid.starttime(always_bad.pid))
        cp = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "setsid", "-w", "sh", "-c", CONT_SH, "sh",
                             str(always_bad.pid), start], capture_output=True, text=True, timeout=30)
        assert _name_and_state(always_bad.pid)[1] == "T"
        assert cp.returncode != 0, "a target left stopped read as resumed"
        assert len(cp.stderr.strip().splitlines()) == 1 and f"process {always_bad.pid}" in cp.stderr and "stopped" in cp.stderr, cp.stderr
    finally:
        os.kill(always_bad.pid, signal.SIGCONT)
