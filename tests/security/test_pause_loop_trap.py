"""The process-pause loop (``injectors.pause.LOOP_SH``) that root runs ends on SIGTERM
(the revert's ``STOP_SH``) by resuming its target and removing its own pidfile: the
target's, the loop's pidfile's, named once when it starts. Its trap named them
``"$2"``, ``"$6"`` and ``"$1"``, which, when the signal came while the loop was inside
one of ``procid.STAT_SH``'s functions (``proc_resume``, ``proc_stat``), were that
function's arguments: root ran ``rm -f TARGET_PID`` (or ``rm -f T``, a state letter,
from ``proc_stat``'s fields) in the loop's working folder, the folder root started
faultlab in, removing a file faultlab never made.

Real: the target is nobody's process, which nobody's stopper stops again and again
once the loop has stopped it (its user may), so the loop's ``proc_resume`` waits
between SIGCONTs; the loop runs as root from a folder of root's holding files
named for the target's PID and for each state letter; SIGTERM comes, as ``STOP_SH``
sends it, while the loop waits in ``proc_resume``."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from faultlab import procid
from faultlab.injectors.pause import LOOP_SH
from tests.helpers import needs_root
from tests.security.test_link_writes import NOBODY

pytestmark = needs_root

# nobody's stopper, which stops the target ($1) again and again once it has been
# stopped (by the loop's first SIGSTOP)
_STOPPER = r"""
until grep -q "^State:.*T" "/proc/$1/status"; do sleep 0.01; done
while kill -STOP "$1" 2>/dev/null; do :; done
"""
#: nobody's target: a sleep, in the normal scheduling class (a stop signal takes
#: effect when its target runs: a target that waited behind the loop's SCHED_IDLE
#: shell showed R when the loop looked, a workload does not)
_TARGET = ["chrt", "-o", "0", "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "sleep", "600"]


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _argv(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def test_the_pause_loop_ended_inside_proc_resume_removes_nothing_in_its_working_folder(tmp_path):
    """SIGTERM while the loop waits in ``proc_resume``: the loop removes its pidfile and
    no file of its working folder (one named for the target's PID, ones named for each
    state letter)."""
    here = tmp_path / "roots-folder"
    here.mkdir()
    target = subprocess.Popen(_TARGET, start_new_session=True)
    stopper = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "sh", "-c", _STOPPER,
                                "sh", str(target.pid)], start_new_session=True)
    loop = None
    try:
        pid = target.pid
        start = str(procid.starttime(pid))
        kept = [str(pid), "R", "S", "T", "D", "Z", "t"]
        for name in kept:
            (here / name).write_text("root's file\n")
        pidfile = tmp_path / "process-0c0c0c.pause.pid"
        loop = subprocess.Popen(["sh", "-c", LOOP_SH, "faultlab-pause", str(pidfile), str(pid), "0.3", "0.3",
                                 str(int(time.time()) + 60), start], cwd=here, start_new_session=True)
        # the loop waits in proc_resume (a `sleep 0.05` of its own between two SIGCONTs)
        end = time.time() + 30
        while not any(_argv(c)[:2] == [b"sleep", b"0.05"] for c in _children(loop.pid)):
            assert time.time() < end and loop.poll() is None, "the loop never waited in proc_resume"
            time.sleep(0.001)
        os.kill(loop.pid, signal.SIGTERM)
        loop.wait(timeout=30)
        assert sorted(p.name for p in here.iterdir()) == sorted(kept), "the loop removed a file of its working folder"
        assert not pidfile.exists()
    finally:
        if loop is not None and loop.poll() is None:
            os.killpg(loop.pid, signal.SIGKILL)
            loop.wait()
        for p in (stopper, target):
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
