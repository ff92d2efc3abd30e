"""A rank on a docker node is signalled as the process its ``docker exec`` started,
never by a host PID that another process holds now.

A rank's handle waits on its exec's output stream, which outlives the rank's process
while anything in the container holds that output (the container's root can open the
rank's ``/proc/PID/fd/1``, or the rank leaves a child behind). Its host PID is then
free, and this host's PIDs wrap at ``kernel.pid_max`` (32768 here): a container can
cycle them in seconds. Here a real container's rank exits leaving a child that holds
its output, and a host process is given the rank's old PID (``ns_last_pid``); the
run's end stops the ranks as ``faultlab run`` does, and the host process must live.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from faultlab import injectors
from faultlab.benchmarks.launch import RankProc, stop_ranks
from faultlab.errors import FaultlabError
from faultlab.nodes.docker_testbed import DockerTestbed
from faultlab.runner import build_injector
from faultlab.scenario import FaultSpec
from tests.helpers import docker_testbed, wait_for

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def tb(dockerd):
    with docker_testbed(dockerd, DockerTestbed(1)) as tb:
        yield tb


def _host_process_at(pid: int) -> subprocess.Popen | None:
    """A host ``sleep`` whose PID is ``pid`` (the kernel's next PID set to it through
    ``ns_last_pid``; other processes of the host may take it first: a few tries), or
    None."""
    for _ in range(50):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        p = subprocess.Popen(["sleep", "300"])
        if p.pid == pid:
            return p
        p.kill()
        p.wait()
    return None


def test_a_rank_whose_process_is_gone_is_never_signalled_by_its_old_pid(tb, tmp_path):
    node = tb.nodes[0]
    log = tmp_path / "rank0.log"
    with open(log, "wb") as out:
        p = node.spawn_workload(["sh", "-c", "setsid sleep 600 & exit 0"], stdout=out)  # the child leaves its group and session: the PID is free
    assert p.pid > 0
    assert wait_for(lambda: not os.path.exists(f"/proc/{p.pid}"), 20), "the rank's process did not end"
    assert p.poll() is None  # its output is still held in the container: the rank counts as running
    victim = _host_process_at(p.pid)
    if victim is None:
        pytest.skip(f"PID {p.pid} was taken by another process of this host each time")
    try:
        stop_ranks([RankProc(rank=0, node=node, popen=p, log_path=log)], grace_s=1)
        assert victim.poll() is None, f"root's faultlab signalled host PID {victim.pid} (exit {victim.returncode}), no longer the rank's"
    finally:
        victim.kill()
        victim.wait()


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0]
    except OSError:
        return None


def test_a_rank_fault_never_takes_the_old_pid_of_a_rank_whose_process_is_gone(tb, tmp_path):
    """A run's rank fault targets its rank's PID. The rank's process ends while its
    output is held in the container (its handle counts it as running) and a host
    process takes its PID: the scheduled process-pause is refused in one line, never
    pausing that host process (state T) for the fault's length."""
    node = tb.nodes[0]
    log = tmp_path / "rank0.log"
    with open(log, "wb") as out:
        p = node.spawn_workload(["sh", "-c", "setsid sleep 600 & exit 0"], stdout=out)
    assert wait_for(lambda: not os.path.exists(f"/proc/{p.pid}"), 20), "the rank's process did not end"
    assert p.poll() is None
    victim = _host_process_at(p.pid)
    if victim is None:
        pytest.skip(f"PID {p.pid} was taken by another process of this host each time")
    spec = FaultSpec(type="process-pause", rank=0, at="1s", duration="6s", params={"pause": "500ms", "period": "1s"})
    active, states = None, set()
    try:
        try:
            inj = build_injector(spec, [node], [RankProc(rank=0, node=node, popen=p, log_path=log)], tb, injectors)
            active = injectors.apply(inj, spec.duration, grace_s=15.0)
        except FaultlabError as e:
            assert "has ended" in str(e) and "\n" not in str(e), str(e)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3:
            states.add(_state(victim.pid))
            time.sleep(0.05)
        assert "T" not in states, f"root's faultlab paused host PID {victim.pid}, no longer the rank's"
    finally:
        if active is not None:
            active.revert()
        os.kill(victim.pid, 18)  # SIGCONT
        victim.kill()
        victim.wait()
        stop_ranks([RankProc(rank=0, node=node, popen=p, log_path=log)], grace_s=1)
