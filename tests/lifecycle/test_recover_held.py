"""``faultlab recover`` and ``revert --all`` leave what a running faultlab holds alone.

``recover`` reverts only what is left behind: leases whose controller is gone (its
PID and start time), lost records, orphan objects. ``revert --all`` ends every fault,
also a running controller's, but never tears down the testbed of a running run
(``faultlab revert testbed-ID`` does that, by its id).

Real processes: a controller brings up a real netns testbed with the runner's own
lease (``faultlab.runner.testbed_lease``) and renews it as the runner does; a real
foreground ``faultlab inject`` holds a real cgroup quota."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import FL, cpu_cgroup, fl, lease_dir, needs_root, wait_for




CONTROLLER = """
import time
from faultlab.nodes.testbed import NetnsTestbed
from faultlab.runner import TESTBED_LEASE_S, testbed_lease

tb = NetnsTestbed(2).up()
lease = testbed_lease(tb)
print(tb.id, flush=True)
while True:  # renewed as the runner renews it while the run lives
    lease.renew(time.time() + TESTBED_LEASE_S)
    time.sleep(1)
"""


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {ln.split()[0] for ln in out.splitlines() if ln.strip()}




@needs_root
def test_a_running_runs_testbed_survives_recover_and_revert_all(no_residue):
    ctl = subprocess.Popen([sys.executable, "-c", CONTROLLER], stdout=subprocess.PIPE, text=True)
    tb_id = None
    try:
        tb_id = ctl.stdout.readline().strip()
        assert len(tb_id) == 4, "the controller brought up no testbed"
        mine = {f"fl{tb_id}n0", f"fl{tb_id}n1"}
        record = lease_dir() / f"testbed-{tb_id}.json"
        assert mine <= _netns() and record.exists()
        row = next(r for r in json.loads(fl("status", "--json").stdout) if r["fault_id"] == f"testbed-{tb_id}")
        assert row["controller_alive"] and row["watchdog_alive"], row

        rc = fl("recover", timeout=120)
        assert rc.returncode == 0, rc.stdout + rc.stderr
        assert mine <= _netns(), "recover tore down the testbed of a running controller"
        assert record.exists() and f"testbed-{tb_id}" in rc.stderr and "still holds" in rc.stderr, rc.stderr
        assert f"testbed-{tb_id}" not in rc.stdout.split("removed")[0], rc.stdout

        rc = fl("revert", "--all", timeout=120)
        assert rc.returncode == 0, rc.stdout + rc.stderr
        assert mine <= _netns(), "revert --all tore down the testbed of a running controller"
        assert record.exists() and ctl.poll() is None

        # the controller dies: now it is left behind, and recover removes it
        os.kill(ctl.pid, signal.SIGKILL)
        ctl.wait()
        rc = fl("recover", timeout=120)
        assert rc.returncode == 0, rc.stdout + rc.stderr
        assert not mine & _netns() and not record.exists()
        assert wait_for(lambda: not any(lease_dir().glob(f"testbed-{tb_id}*")), 10)
    finally:
        if ctl.poll() is None:
            os.kill(ctl.pid, signal.SIGKILL)
            ctl.wait()
        if tb_id:  # (a failed run: whatever is left of it, now left behind)
            fl("recover", timeout=120)


@contextlib.contextmanager
def _running_inject(pid: int):
    """A foreground ``faultlab inject`` holding a real cgroup v1 cpu quota on ``pid``:
    yields (the controller, the fault id) once applied; SIGTERM ends it after."""
    if not Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists():
        import pytest

        pytest.skip("needs the cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
    ctl = subprocess.Popen([*FL, "inject", "--type", "cpu-contention", "--target",
                            str(pid), "--cpu-fraction", "0.3", "--duration", "120s"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: "/faultlab-" in cpu_cgroup(pid) or ctl.poll() is not None, 60), "inject never applied"
        assert ctl.poll() is None, ctl.communicate()
        yield ctl, cpu_cgroup(pid).rsplit("/faultlab-", 1)[1]
    finally:
        if ctl.poll() is None:
            ctl.send_signal(signal.SIGTERM)
            ctl.communicate(timeout=60)
        time.sleep(0.1)


@needs_root
def test_recover_leaves_a_running_injects_fault_and_revert_all_ends_it(busy_loop, no_residue):
    home = cpu_cgroup(busy_loop.pid)
    with _running_inject(busy_loop.pid) as (ctl, fid):
        rc = fl("recover", timeout=120)
        assert rc.returncode == 0, rc.stdout + rc.stderr
        assert cpu_cgroup(busy_loop.pid).endswith(f"/faultlab-{fid}"), "recover reverted a fault its live controller holds"
        assert fid in rc.stderr and "still holds" in rc.stderr, rc.stderr
        rc = fl("revert", "--all", timeout=120)  # the user asks for every fault: it ends
        assert rc.returncode == 0 and fid in rc.stdout, rc.stdout + rc.stderr
        assert cpu_cgroup(busy_loop.pid) == home
        ctl.send_signal(signal.SIGTERM)
        out, err = ctl.communicate(timeout=60)
        assert ctl.returncode == 0, out + err


@needs_root
def test_recover_leaves_a_fault_whose_record_was_lost_while_its_controller_lives(busy_loop, no_residue):
    """The record of a running inject's fault is deleted: only its watchdog is left to
    say who holds it (its environment names the controller, PID and start time), and
    ``recover`` leaves it alone until that controller is gone."""
    home = cpu_cgroup(busy_loop.pid)
    with _running_inject(busy_loop.pid) as (ctl, fid):
        (lease_dir() / f"{fid}.json").unlink()
        row = next(r for r in json.loads(fl("status", "--json").stdout) if r["fault_id"] == fid)
        assert row["record"] is None and row["watchdog_alive"] and row["controller_alive"], row
        rc = fl("recover", timeout=120)
        assert rc.returncode == 0, rc.stdout + rc.stderr
        assert cpu_cgroup(busy_loop.pid).endswith(f"/faultlab-{fid}"), "recover fired the watchdog of a fault a live controller holds"
        assert f"{fid} (controller PID {ctl.pid})" in rc.stderr and "still holds" in rc.stderr, rc.stderr

        os.kill(ctl.pid, signal.SIGKILL)  # now it is left behind: recover ends it through its watchdog
        ctl.communicate()
        rc = fl("recover", timeout=120)
        assert rc.returncode == 0 and fid in rc.stdout, rc.stdout + rc.stderr
        assert wait_for(lambda: cpu_cgroup(busy_loop.pid) == home, 30), cpu_cgroup(busy_loop.pid)
        assert wait_for(lambda: not any(lease_dir().glob(f"*{fid}*")), 10), list(lease_dir().iterdir())
