"""The workload's user against root's cgroup faults (cpu-contention's quota, io-slow):
the target is their process, which they may end at any moment, and a PID is reused.
If it ends between root's probe and the move, the next process to take its PID is
whoever forks then: another user's, or root's own.

Real processes, a real ``faultlab inject`` on this host's cgroup v1 cpu hierarchy, in
a private PID namespace (``unshare``) whose next PID root sets (``ns_last_pid``), so
that the reuse comes at once; the window between the probe and the move is widened
with the test seam ``FAULTLAB_TEST_CREATE_PAUSE_S``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from faultlab.lifecycle.lease import TEST_CREATE_PAUSE_ENV
from tests.helpers import needs_root

V1_CPU = Path("/sys/fs/cgroup/cpu")

pytestmark = [needs_root, pytest.mark.skipif(not (V1_CPU / "cpu.cfs_quota_us").exists() or not shutil.which("unshare"),
                                             reason="needs the cgroup v1 cpu controller at /sys/fs/cgroup/cpu and unshare")]

# PID 1 of a new PID namespace: nobody's target in the cgroup $1; root's inject on it;
# in the inject's window (its watchdog runs) nobody ends the target and root's next
# process (the victim, a sleep) takes its PID; then what became of the victim.
_DRIVER = r"""
import json, os, subprocess, sys, time
home, py = sys.argv[1], sys.argv[2]
nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

def cpu_line(pid):
    for ln in open(f"/proc/{pid}/cgroup").read().splitlines():
        if "cpu" in ln.split(":")[1].split(","):
            return ln.split(":", 2)[2]

def watchdog_runs():
    for d in os.listdir("/proc"):
        try:
            argv = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0") if d.isdigit() else []
        except OSError:
            continue
        if len(argv) > 3 and argv[3] == b"faultlab-watchdog":
            return True
    return False

target = subprocess.Popen([*nobody, "sleep", "600"])
with open(home + "/cgroup.procs", "w") as f:
    f.write(str(target.pid))
ctl = subprocess.Popen([py, "-P", "-m", "faultlab.cli", "inject", "--type", "cpu-contention", "--target", str(target.pid),
                        "--cpu-fraction", "0.5", "--duration", "20s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
end = time.time() + 60
while not watchdog_runs() and ctl.poll() is None and time.time() < end:
    time.sleep(0.05)
subprocess.run([*nobody, "kill", str(target.pid)], check=True)
target.wait()
victim = None
for _ in range(20):  # the watchdog's loop forks too: retry until the victim has the PID
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(target.pid - 1))
    victim = subprocess.Popen(["sleep", "600"])
    if victim.pid == target.pid:
        break
    victim.kill()
    victim.wait()
before = cpu_line(victim.pid)
out, err = ctl.communicate(timeout=180)
after = cpu_line(victim.pid)
victim.kill()
victim.wait()
print(json.dumps({"target": target.pid, "victim": victim.pid, "before": before, "after": after, "rc": ctl.returncode,
                  "out": out, "err": err}))
"""


def test_a_target_that_ends_before_the_move_never_has_its_pid_moved_into_the_faults_cgroup(tmp_path):
    """nobody's target ends in the window between root's probe and the move, and
    root's next process takes its PID: the inject fails in one line and that process
    stays in its own cgroup. The move wrote the PID alone: root's process was put in
    the fault's throttled cgroup, and the revert swept it into nobody's target's
    cgroup, where it stayed."""
    home = V1_CPU / f"fltest-pidreuse-{os.getpid()}"
    home.mkdir()
    env = dict(os.environ, **{TEST_CREATE_PAUSE_ENV: "4"})
    try:
        cp = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", _DRIVER, str(home), sys.executable],
                            capture_output=True, text=True, timeout=300, env=env)
        assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
        got = json.loads(cp.stdout.splitlines()[-1])
        assert got["victim"] == got["target"], got
        assert got["after"] == got["before"], f"root's process {got['victim']} was moved: {got}"
        assert got["rc"] != 0 and "Traceback" not in got["err"], got
        assert f"process {got['target']} is not the target any more" in got["err"], got["err"]
    finally:
        for child in sorted(home.glob("faultlab-*")):
            for pid in (child / "cgroup.procs").read_text().split():
                (V1_CPU / "cgroup.procs").write_text(pid)
            child.rmdir()
        for pid in (home / "cgroup.procs").read_text().split():
            (V1_CPU / "cgroup.procs").write_text(pid)
        home.rmdir()
