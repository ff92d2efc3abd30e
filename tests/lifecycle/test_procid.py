"""``faultlab.procid``: a process named by PID and start time, and the lease's
``controller_alive`` using it (a PID alone would read a lease whose controller has
died as "held by its controller" as soon as any process reuses that PID)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from faultlab import procid
from faultlab.lifecycle.lease import Lease


def test_parse_starttime_reads_field_22_after_the_last_paren():
    stat = "4242 (a) b) (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 987654 1000 10"
    assert procid.parse_starttime(stat) == 987654
    assert procid.parse_starttime("4242 (x) S 1") is None
    assert procid.parse_starttime("") is None


def test_starttime_of_this_process_and_of_none():
    me = procid.starttime(os.getpid())
    assert me is not None and me == procid.starttime("self")
    assert procid.starttime(2**22 + 17) is None  # above pid_max: never a process


def test_alive_needs_the_same_start_time():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        st = procid.starttime(p.pid)
        assert procid.alive(p.pid, st)
        assert not procid.alive(p.pid, st + 1), "a PID with another start time is another process"
        assert procid.alive(p.pid)  # nothing recorded (an older record): the PID alone
    finally:
        p.kill()
        p.wait()
    assert not procid.alive(p.pid, st)
    for bad in (0, -1, True, "1", None, 1.5):
        assert not procid.alive(bad, st)


def _lease(rec: dict) -> Lease:
    return Lease(Path("/nonexistent/lease.json"), {"fault_id": "nic-abc123", **rec})


def test_lease_controller_alive_refuses_a_reused_pid():
    """The controller's PID belongs to another process (here: this test process, with
    a start time that is not the recorded one): not alive (``os.kill(pid, 0)`` alone
    would say alive)."""
    me, st = os.getpid(), procid.starttime(os.getpid())
    assert _lease({"controller_pid": me, "controller_starttime": st}).controller_alive()
    assert not _lease({"controller_pid": me, "controller_starttime": st - 1}).controller_alive()
    assert _lease({"controller_pid": me}).controller_alive()  # a record written before the start time was kept
    assert not _lease({"controller_pid": "x"}).controller_alive()


def test_new_lease_records_carry_the_controllers_start_time(no_residue):
    """A real lease (record + watchdog) in this session's lease folder records our
    start time, and reads as held by us until released."""
    from faultlab.nodes import LocalNode

    le = Lease.create_for(LocalNode("local"), "nic-abc124", "nic-slow", "x", {}, [], time.time() + 30)
    try:
        assert le.record["controller_starttime"] == procid.starttime(os.getpid())
        assert le.controller_alive()
    finally:
        le.release()


#: command names a process may give itself that a parser splitting at the first ")"
#: (or at a newline) reads as other fields
TRICKY_NAMES = ["x) T 1 (", "a)\n) S 9 9", ") ) ) )", "(", "a b c", "a) ", "\n", ") R 1 2 3 4 5"]


def test_sh_and_python_stat_readers_agree_on_names_with_parens_and_newlines():
    """``procid.STAT_SH``'s ``proc_stat`` (dash and bash) and ``procid.read_stat`` read
    the same state and start time of a real process, whatever name it gave itself;
    both read nothing for a PID that is not a process."""
    code = "import ctypes, sys, time; ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0); time.sleep(60)"
    for name in TRICKY_NAMES:
        p = subprocess.Popen([sys.executable, "-c", code, name])
        try:
            end = time.time() + 10
            while time.time() < end and Path(f"/proc/{p.pid}/comm").read_text() != name[:15] + "\n":
                time.sleep(0.01)
            py = procid.read_stat(p.pid)
            assert py is not None and py[0] == "S" and int(py[19]) == procid.starttime(p.pid)
            assert procid.parse_state(Path(f"/proc/{p.pid}/stat").read_text()) == "S"
            for sh in ("dash", "bash"):
                cp = subprocess.run([sh, "-c", procid.STAT_SH + 'proc_stat "$1" && echo "$ps_state $ps_ppid $ps_start"', "sh", str(p.pid)],
                                    capture_output=True, text=True, timeout=10)
                assert cp.stdout.split() == [py[0], str(os.getpid()), py[19]], (name, sh, cp.stdout, cp.stderr)
        finally:
            p.kill()
            p.wait()
    cp = subprocess.run(["sh", "-c", procid.STAT_SH + 'proc_stat "$1"; echo "$? [$ps_state$ps_ppid$ps_start]"', "sh", str(2**22 + 17)],
                        capture_output=True, text=True, timeout=10)
    assert cp.stdout == "1 []\n" and cp.stderr == ""
    assert procid.read_stat(2**22 + 17) is None


def test_stat_fields_refuse_a_line_that_is_cut_short():
    assert procid.stat_fields("4242 (x) S 1 2") is None
    assert procid.stat_fields("no paren S " + " ".join(["1"] * 30)) is None
    assert procid.parse_state("1 (x) T " + " ".join(["0"] * 30)) == "T"
