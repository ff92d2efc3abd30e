"""Defects found by the lifecycle probes (H10, /tmp/h10/life.sh: the adversarial
review's unrun experiments), each with the test that failed before its fix.

Probe D: cpu-contention on targets that fork while the fault is in force. The revert
swept ``cgroup.procs`` once: a child forked between reading the list and moving its
parent was born inside faultlab's cgroup after the list was read, so it stayed there
(throttled) and the ``rmdir`` failed with EBUSY. The watchdog runs each revert line
once, so after a SIGKILL of the controller the cgroup was left for good (the probe saw
``faultlab-cpu-56b67e`` past its deadline, "NO LEASE")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import needs_root
from faultlab.injectors import CpuContention, apply
from faultlab.lifecycle.lease import load_leases
from faultlab.nodes import LocalNode

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
    targets' trees left in it. One sweep + one rmdir (before the fix) left the cgroup
    busy in 2 of 10 cycles with one forker (/tmp/h10/race.sh); a throttled target
    forking holds off its own move, and its child is born in faultlab's cgroup after
    the list was read."""
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
    child at home and remove faultlab's cgroup (before the fix: the cgroup stayed,
    busy or empty, after the lease was gone: probe D's ``faultlab-cpu-56b67e``)."""
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


# -- probe F: a fault made with another FAULTLAB_LEASE_DIR, seen by the default status ----


def _fl(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "faultlab.cli", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_status_reads_the_record_of_a_fault_in_another_lease_folder(busy_loop, tmp_path, no_residue):
    """A detached pause made with ``FAULTLAB_LEASE_DIR=OTHER``: the default ``status``
    finds it by its watchdog and, before the fix, printed "- -" for node and target
    and "lease record lost" although the record sat in OTHER. Now it reads the record
    there (same trust checks), names the folder, and ``revert`` ends it."""
    import json

    other = tmp_path / "other-leases"
    other.mkdir(mode=0o700)
    cp = _fl("inject", "--type", "process-pause", "--target", str(busy_loop.pid), "--pause", "100ms", "--period", "500ms",
             "--duration", "60s", "--detach", "--json", env={"FAULTLAB_LEASE_DIR": str(other)})
    assert cp.returncode == 0, cp.stderr
    fid = json.loads(cp.stdout)["fault_id"]
    try:
        st = _fl("status", "--json")
        row = next(r for r in json.loads(st.stdout) if r["fault_id"] == fid)
        assert row["record"] == str(other), row
        assert row["type"] == "process-pause" and row["target"] == f"pid:{busy_loop.pid}", row
        text = _fl("status").stdout
        line = next(ln for ln in text.splitlines() if ln.startswith(fid))
        assert "record lost" not in line and f"record in {other}" in line and f"pid:{busy_loop.pid}" in line, line
    finally:
        rv = _fl("revert", fid)
    assert rv.returncode == 0, rv.stdout + rv.stderr
    assert not list(other.iterdir()), "the record and the pause pidfile are gone"
    time.sleep(0.3)
    assert Path(f"/proc/{busy_loop.pid}/stat").read_text().rpartition(")")[2].split()[0] != "T"


# -- probe G: a pause target killed mid-fault ----------------------------------------------


def test_foreground_pause_ends_when_its_target_exits(no_residue):
    """The target of a 60 s foreground pause is SIGKILLed: the loop stops itself, and
    the inject now says so and ends within seconds, exit 0, nothing left. Before, it
    held a fault on nothing for the full 60 s (probe G: 'reverted' only at the end)."""
    target = subprocess.Popen(["sleep", "300"])
    inj = subprocess.Popen([sys.executable, "-m", "faultlab.cli", "inject", "--type", "process-pause", "--target", str(target.pid),
                            "--pause", "100ms", "--period", "300ms", "--duration", "60s"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        said = ""
        while not said.startswith("injected "):  # the CLI's progress lines go to stderr
            line = inj.stderr.readline()
            assert line, "inject ended before it printed 'injected'"
            said = line
        target.kill()
        target.wait()
        t0 = time.time()
        out, err = inj.communicate(timeout=20)
        assert inj.returncode == 0, (out, err)
        assert time.time() - t0 < 10
        told = " ".join(err.split())  # rich wraps lines at 80 columns in a pipe
        assert f"process {target.pid} exited" in told and "ending it" in told, err
        assert out.strip().endswith(": reverted"), out
    finally:
        if inj.poll() is None:
            inj.terminate()
            inj.communicate(timeout=30)
        if target.poll() is None:
            target.kill()
            target.wait()
