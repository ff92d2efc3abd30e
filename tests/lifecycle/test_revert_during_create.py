"""A ``faultlab revert ID`` from another process while a fault is being created (its
watchdog runs, its record is not yet written, nothing is applied yet) never leaves the
fault half there: either the revert waits for the create and reverts the whole fault,
or the creator finds its fault reverted under it, undoes what it applied and says so
(one line, non-zero exit). Once the revert has said "reverted", the target is never
in the fault's cgroup again and ``status`` never shows the fault without its watchdog.

Real processes: a real ``faultlab inject`` of a cgroup v1 cpu quota on a busy loop,
with the window between its watchdog's start and its record widened by the test seam
``FAULTLAB_TEST_CREATE_PAUSE_S`` (``lifecycle/lease.py``), and a real concurrent
``faultlab revert ID``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from faultlab.lifecycle.watchdog import find_watchdogs
from faultlab.lifecycle.lease import TEST_CREATE_PAUSE_ENV
from tests.helpers import FL, cpu_cgroup, fl, lease_dir, needs_root, wait_for

DURATION_S = 6


def _creating(ctl: subprocess.Popen) -> str | None:
    """The fault id of the watchdog ``ctl`` started, None before it runs."""
    return next((w.fault_id for w in find_watchdogs() if w.controller and w.controller[0] == ctl.pid), None)


def _gone_watchdog_rows(fid: str) -> list[dict]:
    rows = json.loads(fl("status", "--json", timeout=60).stdout or "[]")
    return [r for r in rows if r["fault_id"] == fid and not r["watchdog_alive"]]


@needs_root
@pytest.mark.parametrize("detach", [True, False], ids=["detached", "foreground"])
def test_a_revert_during_create_ends_the_whole_fault_or_the_create_says_so(busy_loop, no_residue, detach):
    if not Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists():
        pytest.skip("needs the cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
    home = cpu_cgroup(busy_loop.pid)
    env = dict(os.environ, **{TEST_CREATE_PAUSE_ENV: "3"})
    argv = [*FL, "inject", "--type", "cpu-contention", "--target", str(busy_loop.pid), "--cpu-fraction", "0.3",
            "--duration", f"{DURATION_S}s", "--grace", "2s", *(["--detach"] if detach else [])]
    ctl = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fid = None
    try:
        assert wait_for(lambda: _creating(ctl) is not None or ctl.poll() is not None, 60), "the inject started no watchdog"
        fid = _creating(ctl)
        assert fid, ctl.communicate()
        assert not (lease_dir() / f"{fid}.json").exists(), "the record came before the widened window"

        rv = fl("revert", fid, timeout=120)
        assert rv.returncode == 0 and f"{fid}: reverted" in rv.stdout, rv.stdout + rv.stderr
        # from here on the fault is reverted: its creator must not put it back, and it
        # is never shown in force without its watchdog
        in_cgroup, no_watchdog = [], []
        stop_at = time.time() + DURATION_S + 2 + 5  # past the lease's end, whatever the create does
        while time.time() < stop_at:
            if ctl.poll() is not None:  # a little longer: what it left shows
                stop_at = min(stop_at, time.time() + 2)
            if cpu_cgroup(busy_loop.pid).endswith(f"/faultlab-{fid}"):
                in_cgroup.append(round(time.time(), 1))
            if not no_watchdog and not in_cgroup:
                no_watchdog += _gone_watchdog_rows(fid)
            time.sleep(0.1)
        out, err = ctl.communicate(timeout=120)
        assert not in_cgroup, f"the target was put back in faultlab-{fid} after the revert said reverted (rc={ctl.returncode}, {err!r})"
        assert not no_watchdog, f"status showed {fid} with its watchdog gone: {no_watchdog}"
        assert cpu_cgroup(busy_loop.pid) == home
        if ctl.returncode != 0:  # the creator stopped: one line, naming the fault and why
            lines = [ln for ln in err.splitlines() if ln.strip()]
            assert len(lines) == 1 and fid in lines[0] and "reverted" in lines[0], err
        assert ctl.returncode in (0, 1), (ctl.returncode, out, err)
        assert wait_for(lambda: not any(lease_dir().glob(f"{fid}*")) and _creating(ctl) is None, 15), list(lease_dir().iterdir())
    finally:
        if ctl.poll() is None:
            ctl.send_signal(signal.SIGTERM)
            ctl.communicate(timeout=60)
        if fid:
            fl("revert", fid, timeout=120)
