"""``faultlab recover`` of a lease whose controller was
SIGKILLed, an inject that fails half-way after earlier commands took effect, and a
second revert that really runs its commands again (the watchdog re-runs a plan's
revert after the controller did, so every revert command must be idempotent and
still work).

All on real processes and the real cgroup v1 cpu hierarchy of this host."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faultlab.errors import FaultlabError
from faultlab.injectors import CpuContention, apply
from faultlab.injectors.base import Hooks, run_revert
from faultlab.injectors.cgroups import MOVE_SH
from faultlab.lifecycle.lease import load_leases
from faultlab.lifecycle.watchdog import WATCHDOG_NAME
from faultlab.nodes import LocalNode
from tests.helpers import FL, ROOT, as_nobody, cpu_cgroup, proc_argvs

NODE = LocalNode("local")
needs_v1_cpu = pytest.mark.skipif(not ROOT or not Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists(),
                                  reason="needs root and the cgroup v1 cpu controller at /sys/fs/cgroup/cpu")


def _watchdogs(fault_id: str) -> list[int]:
    return [pid for pid, argv in proc_argvs() if WATCHDOG_NAME.encode() in argv and fault_id.encode() in argv]


@needs_v1_cpu
def test_recover_reverts_the_lease_of_a_sigkilled_controller(busy_loop, no_residue):
    """A controller applies a cpu quota for 120 s and is SIGKILLed: its lease record and
    watchdog stay, the target stays throttled. ``faultlab recover`` (the CLI, a fresh
    process) reverts it now: the target is back in its own cgroup, the faultlab cgroup,
    the record and the watchdog are gone, exit 0."""
    pid = busy_loop.pid
    home = cpu_cgroup(pid)
    code = ("import time\nfrom faultlab.injectors import CpuContention, apply\nfrom faultlab.nodes import LocalNode\n"
            f"a = apply(CpuContention(LocalNode('local'), [{pid}], 0.3), 120.0)\nprint(a.fault_id, a.facts['cgroup'], flush=True)\ntime.sleep(300)\n")
    ctl = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        fault_id, cg = ctl.stdout.readline().split()
    finally:
        os.kill(ctl.pid, signal.SIGKILL)
        ctl.wait()
    assert Path(cg).is_dir() and cpu_cgroup(pid).endswith(f"/faultlab-{fault_id}")
    assert [le.fault_id for le in load_leases(NODE)] == [fault_id] and _watchdogs(fault_id)
    cp = subprocess.run([sys.executable, "-c", "from faultlab.cli import app; app()", "recover"],
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert fault_id in cp.stdout and "reverted 1 fault(s)" in cp.stdout, cp.stdout
    assert cpu_cgroup(pid) == home
    assert not Path(cg).exists()
    assert not load_leases(NODE)
    end = time.time() + 10
    while _watchdogs(fault_id) and time.time() < end:
        time.sleep(0.1)
    assert not _watchdogs(fault_id), "recover stopped the watchdog"


class _KillSecondTargetAtInject(Hooks):
    """Kills (and reaps) the second target just as the inject commands start: the
    cgroup is made, its quota set and the first target moved, then moving the second
    one fails for real (ESRCH)."""

    def __init__(self, victim: subprocess.Popen):
        self.victim = victim

    def phase(self, name: str) -> None:
        if name == "inject":
            self.victim.kill()
            self.victim.wait()


@needs_v1_cpu
def test_inject_failing_half_way_undoes_the_commands_that_succeeded(busy_loop, no_residue):
    first = busy_loop
    home = cpu_cgroup(first.pid)
    second = subprocess.Popen(["sleep", "60"])
    try:
        inj = CpuContention(NODE, [first.pid, second.pid], 0.3)
        with pytest.raises(FaultlabError, match=r"inject: inject step failed .*cgroup\.procs") as e:
            apply(inj, 30, hooks=_KillSecondTargetAtInject(second))
        active = e.value.active
        # the commands before the failing one had taken effect
        assert [c.argv[4] for c in active.plan.inject if c.argv[2:3] == (MOVE_SH,)] == [str(first.pid), str(second.pid)]
        assert active.status == "reverted"
        assert cpu_cgroup(first.pid) == home, "the target moved by the inject's first steps is back home"
        assert not Path(active.facts["cgroup"]).exists()
        assert not load_leases(NODE)
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()


@needs_v1_cpu
def test_second_revert_runs_its_commands_again(busy_loop, no_residue):
    """After a revert, the effect is made again by hand (the same faultlab cgroup, the
    target moved into it: what a watchdog firing late finds if someone re-applied it):
    running the plan's revert once more really moves the target back and removes the
    cgroup. A second run on a clean host changes nothing."""
    pid = busy_loop.pid
    home = cpu_cgroup(pid)
    active = apply(CpuContention(NODE, [pid], 0.3), 30)
    cg = Path(active.facts["cgroup"])
    assert active.revert() == "reverted" and cpu_cgroup(pid) == home and not cg.exists()
    cg.mkdir()
    try:
        (cg / "cgroup.procs").write_text(str(pid))
        assert cpu_cgroup(pid) == str(Path(home) / cg.name)
        run_revert(NODE, active.plan.revert)
        assert cpu_cgroup(pid) == home, "the second revert moved the target back"
        assert not cg.exists(), "the second revert removed the cgroup"
        run_revert(NODE, active.plan.revert)  # nothing left to do: nothing else is touched
        assert cpu_cgroup(pid) == home and not cg.exists()
    finally:
        if cg.exists():
            for q in (cg / "cgroup.procs").read_text().split():
                (cg.parent / "cgroup.procs").write_text(q)
            cg.rmdir()


@pytest.mark.skipif(not ROOT or not Path("/usr/bin/setpriv").exists(), reason="needs root (to act as nobody) and setpriv")
def test_status_and_recover_find_leases_in_the_legacy_tmp_folder(tmp_path):
    """A non-root user's leases may sit in the legacy folder /tmp/faultlab-UID/leases
    (that of faultlab versions without trusted runtime folders): ``status`` and
    ``recover`` (as that user, nobody here) look there too, with the same trust checks: a record of the user's own there is
    shown and recovered (its revert line runs, the record goes); the same folder owned
    by someone else is reported and never acted on."""
    import shlex
    import shutil
    import tempfile

    uid = 65534
    base = Path(f"/tmp/faultlab-{uid}")
    if os.path.lexists(base):
        pytest.skip(f"{base} exists on this host already: not this test's to touch")
    work = Path(tempfile.mkdtemp(prefix="fl-nobody-"))
    os.chown(work, uid, uid)
    os.chmod(work, 0o755)
    env = {"FAULTLAB_LEASE_DIR": str(work / "leases"), "FAULTLAB_STATE_DIR": str(work), "HOME": str(work), "PATH": os.environ["PATH"]}

    assert pwd.getpwnam("nobody").pw_uid == uid
    marker = work / "reverted"
    rec = {"fault_id": "process-abc123", "fault_type": "process-pause", "node": "local", "target": "pid:1", "params": {},
           "created_ts": time.time(), "deadline_ts": time.time() + 600, "controller_pid": 0,
           "revert": [shlex.join(["touch", str(marker)])]}
    try:
        for d in (base, base / "leases"):
            d.mkdir(mode=0o700)
            os.chown(d, uid, uid)
        f = base / "leases" / "process-abc123.json"
        f.write_text(json.dumps(rec))
        os.chown(f, uid, uid)
        os.chmod(f, 0o600)
        # planted by someone else (uid 65533): reported, not acted on
        os.chown(base / "leases", 65533, 65533)
        os.chmod(base / "leases", 0o755)  # (readable: the check, not EACCES, must refuse it)
        st = as_nobody([*FL, "status"], env)
        assert f"{base}/leases" in st.stderr + st.stdout and "owned by uid 65533" in st.stderr + st.stdout, st
        rc = as_nobody([*FL, "recover"], env)
        assert not marker.exists() and f.exists(), rc
        # the user's own: shown and recovered
        os.chown(base / "leases", uid, uid)
        os.chmod(base / "leases", 0o700)
        st = as_nobody([*FL, "status", "--json"], env)
        assert "process-abc123" in st.stdout, st
        rc = as_nobody([*FL, "recover"], env)
        assert rc.returncode == 0, rc
        assert marker.exists() and not f.exists(), rc
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
