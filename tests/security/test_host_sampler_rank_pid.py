"""Root's host sampler samples a rank's process, never another process that took its
PID after it ended.

`faultlab run`'s host sampler reads, every second, the CPU, memory, run delay and
network counters of each local, netns and docker rank by its PID, and enters that
PID's network namespace (`nsenter --net=/proc/PID/ns/net ss`) to list its connections.
A rank's process may end while the run goes on (a docker rank's handle counts it as
running while anything in its container holds its output), and this host's PIDs wrap
at `kernel.pid_max`: the PID may then be another user's process, whose figures would
be the rank's rows in root's run folder, and whose namespace root would enter. Here
such a process is `nobody`'s, in a user and network namespace of its own, given the
rank's old PID through `ns_last_pid`.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from faultlab.benchmarks.launch import RankProc, stop_ranks
from faultlab.nodes.docker_testbed import DockerTestbed
from faultlab.telemetry import tcpstats
from faultlab.telemetry.hostsampler import HostSampler
from tests.helpers import docker_testbed, wait_for

pytestmark = pytest.mark.root

#: nobody's process in a user and network namespace of its own, some 40 MiB resident (the
#: system's python3: nobody may not reach this session's interpreter)
VICTIM = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", "unshare", "-rn",
          "python3", "-c", "import time; x = b'.' * (40 << 20); time.sleep(120)"]


def _process_at(pid: int, argv: list[str]) -> subprocess.Popen | None:
    """A process running ``argv`` whose PID is ``pid`` (the kernel's next PID set to it
    through ``ns_last_pid``; other processes of the host may take it first: a few
    tries), or None."""
    for _ in range(50):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        p = subprocess.Popen(argv)
        if p.pid == pid:
            return p
        p.kill()
        p.wait()
    return None


def _entered(monkeypatch) -> list[int]:
    """The PIDs whose network namespace the sampler lists connections of, from now on."""
    pids: list[int] = []
    real = tcpstats.read_conns

    def read_conns(**kw):
        if kw.get("pid") is not None:
            pids.append(kw["pid"])
        return real(**kw)

    monkeypatch.setattr(tcpstats, "read_conns", read_conns)
    return pids


def _in_own_namespace(pid: int) -> bool:
    """Whether process ``pid`` runs, in a network namespace other than this process's."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
    except OSError:
        return False


def _sampled_after(rows, t: float) -> list[str]:
    late = rows[(rows["ts"] > t) & rows["metric"].str.startswith(("proc_", "net_", "tcp_"))]
    return sorted(set(late["metric"]))


def test_a_local_ranks_pid_taken_by_another_process_after_it_ended_is_never_sampled(monkeypatch):
    rank = subprocess.Popen(["sleep", "300"])
    victim = None
    sampler = HostSampler({"n0": [rank]}, interval_s=0.2, gpu=False).start()
    try:
        assert wait_for(lambda: _sampled_after(sampler.frame(), 0), 10), "the rank was never sampled"
        rank.kill()
        rank.wait()  # reaped, as the run's loop does: its PID is free
        ended = time.time()
        entered = _entered(monkeypatch)
        victim = _process_at(rank.pid, VICTIM)
        if victim is None:
            pytest.skip(f"PID {rank.pid} was taken by another process of this host each time")
        assert wait_for(lambda: _in_own_namespace(victim.pid), 10), "nobody's process did not start"
        time.sleep(1.5)
        assert victim.poll() is None
        rows = sampler.stop()
        assert _sampled_after(rows, ended) == [], f"root's sampler took nobody's process {victim.pid} for the rank"
        assert victim.pid not in entered, f"root's sampler entered the network namespace of nobody's process {victim.pid}"
    finally:
        sampler.stop()
        if victim is not None:
            victim.kill()
            victim.wait()


@pytest.fixture(scope="module")
def tb(dockerd):
    with docker_testbed(dockerd, DockerTestbed(1)) as tb:
        yield tb


def test_a_docker_ranks_pid_taken_by_another_process_after_it_ended_is_never_sampled(tb, tmp_path, monkeypatch):
    """A docker rank's process ends while a child it left holds its output (its handle
    counts it as running) and a host process takes its PID before the sampler's first
    look: the sampler, given the rank as `faultlab run` gives it, samples nothing of
    that process."""
    node = tb.nodes[0]
    log = tmp_path / "rank0.log"
    with open(log, "wb") as out:
        p = node.spawn_workload(["sh", "-c", "setsid sleep 600 & exit 0"], stdout=out)
    victim = None
    try:
        assert wait_for(lambda: not os.path.exists(f"/proc/{p.pid}"), 20), "the rank's process did not end"
        assert p.poll() is None
        victim = _process_at(p.pid, VICTIM)
        if victim is None:
            pytest.skip(f"PID {p.pid} was taken by another process of this host each time")
        assert wait_for(lambda: _in_own_namespace(victim.pid), 10), "nobody's process did not start"
        entered = _entered(monkeypatch)
        sampler = HostSampler({node.name: [p]}, interval_s=0.2, gpu=False).start()
        time.sleep(1.5)
        assert victim.poll() is None
        rows = sampler.stop()
        assert _sampled_after(rows, 0) == [], f"root's sampler took host PID {victim.pid} for node {node.name}'s rank"
        assert victim.pid not in entered, f"root's sampler entered the network namespace of host PID {victim.pid}"
    finally:
        if victim is not None:
            victim.kill()
            victim.wait()
        stop_ranks([RankProc(rank=0, node=node, popen=p, log_path=log)], grace_s=1)
