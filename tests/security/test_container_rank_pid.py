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

import pytest

from faultlab.benchmarks.launch import RankProc, stop_ranks
from faultlab.nodes.docker_testbed import DockerTestbed
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
