"""cpu-contention on targets that fork while the fault is in force: every revert brings
the whole tree home and removes faultlab's cgroup.

A child forked between reading ``cgroup.procs`` and moving its parent is born inside
faultlab's cgroup after the list was read, so one sweep would leave it there
(throttled) and the ``rmdir`` would fail with EBUSY; the watchdog runs each revert
line once, so after a SIGKILL of the controller that cgroup would stay for good. The
revert sweeps until the cgroup is empty."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faultlab.injectors import CpuContention, apply
from faultlab.lifecycle.lease import load_leases
from faultlab.nodes import LocalNode
from tests.helpers import needs_root

V1_CPU = Path("/sys/fs/cgroup/cpu/cgroup.procs").exists()
needs_v1_cpu = pytest.mark.skipif(not V1_CPU, reason="needs the cgroup v1 cpu controller at /sys/fs/cgroup/cpu (the v2 sweep is the same script)")

#: forks /bin/true as fast as it can: a rank starting dataloader workers, at its worst
FORKER = ["sh", "-c", "while :; do /bin/true; done"]


def _cpu_cgroup(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        _, ctrls, path = line.split(":", 2)
        if "cpu" in ctrls.split(","):
            return path
    return None


def _tree(pid: int) -> list[int]:
    """``pid`` and every descendant of it alive now."""
    kids: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            ppid = int((p / "stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(p.name))
    out, todo = [], [pid]
    while todo:
        q = todo.pop()
        out.append(q)
        todo += kids.get(q, [])
    return out


def _in_faultlab_cgroup(pids: list[int]) -> list[str]:
    return [f"{q}: {cg}" for q in pids for cg in [_cpu_cgroup(q)] if cg and "faultlab-" in cg]


@pytest.fixture
def forkers():
    procs = [subprocess.Popen(FORKER) for _ in range(3)]
    yield procs
    for p in procs:
        for q in reversed(_tree(p.pid)):
            try:
                os.kill(q, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.wait()


@needs_root
@needs_v1_cpu
def test_cpu_revert_brings_back_children_forked_during_the_fault(forkers, no_residue):
    """Three targets forking all the time under a 20% quota, 12 inject/revert cycles:
    every revert ends ``reverted`` with faultlab's cgroup gone and no process of the
    targets' trees left in it (one sweep and one rmdir would leave the cgroup busy in
    about 2 of 10 cycles with one forker: a throttled target forking holds off its own
    move, and its child is born in faultlab's cgroup after the list was read)."""
    node = LocalNode("local")
    pids = [p.pid for p in forkers]
    home = {q: _cpu_cgroup(q) for q in pids}
    for cycle in range(12):
        active = apply(CpuContention(node, pids, 0.2), 30)
        cg = active.facts["cgroup"]
        time.sleep(0.3)  # the targets fork inside faultlab's cgroup meanwhile
        status = active.revert()
        assert status == "reverted", (cycle, status, active.evidence.get("left_behind"), active.evidence.get("revert_errors"))
        assert not Path(cg).exists(), (cycle, cg)
        assert not _in_faultlab_cgroup([q for p in pids for q in _tree(p)])
        assert {q: _cpu_cgroup(q) for q in pids} == home


@needs_root
@needs_v1_cpu
def test_watchdog_after_sigkill_leaves_no_cgroup_of_a_forking_target(forkers, no_residue):
    """The controller is SIGKILLed under a 1 s lease (no grace), 4 times: the
    watchdog's revert (each line run once) must leave the forking targets and every
    child at home and remove faultlab's cgroup, busy or empty, before the lease is
    gone."""
    pids = [p.pid for p in forkers]
    home = {q: _cpu_cgroup(q) for q in pids}
    for _ in range(4):
        _sigkill_controller_and_wait_for_the_watchdog(pids)
        assert not _in_faultlab_cgroup([q for p in pids for q in _tree(p)])
        assert {q: _cpu_cgroup(q) for q in pids} == home


def _sigkill_controller_and_wait_for_the_watchdog(pids: list[int]) -> None:
    code = (
        "import time\n"
        "from faultlab.injectors import CpuContention, apply\n"
        "from faultlab.nodes import LocalNode\n"
        f"a = apply(CpuContention(LocalNode('local'), {pids!r}, 0.2), 1.0, grace_s=0.0)\n"
        "print(a.fault_id, a.facts['cgroup'], flush=True)\n"
        "time.sleep(60)\n"
    )
    ctl = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    fault_id, cg = ctl.stdout.readline().split()
    os.kill(ctl.pid, signal.SIGKILL)
    ctl.wait()
    deadline = time.time() + 20  # 1 s lease + the watchdog's sweep and rmdir
    while time.time() < deadline and (Path(cg).exists() or any(le.fault_id == fault_id for le in load_leases(LocalNode("local")))):
        time.sleep(0.2)
    assert not any(le.fault_id == fault_id for le in load_leases(LocalNode("local")))
    assert not Path(cg).exists(), f"{cg} left after the watchdog ran: procs {Path(cg, 'cgroup.procs').read_text().split()}"
