"""What ss prints in a docker node's network namespace costs root's host sampler a
bounded read.

The host sampler of `faultlab run` lists the established TCP connections of each
docker node's namespace with ss, every second, to keep those of the node's ranks.
The container's root may open as many connections there as its memory holds (each
loopback connection is two sockets, some 350 bytes of ss output each): ss's output
is read no further than ``tcpstats.SS_BYTES`` (256 KiB here), and past it that sample
has no TCP rows of the node and the sampler says so once. It was read and parsed
whole, every sample.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from faultlab.benchmarks.launch import RankProc, stop_ranks
from faultlab.nodes.docker_testbed import DockerTestbed
from faultlab.telemetry import tcpstats
from faultlab.telemetry.hostsampler import HostSampler
from tests.helpers import docker_testbed, wait_for

pytestmark = pytest.mark.root

#: run in the container as its root: N loopback connections, both ends held open
FLOOD = r"""
import resource, socket, sys, time
resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
lsn = socket.socket()
lsn.bind(("127.0.0.1", 0))
lsn.listen(4096)
keep = []
for _ in range(int(sys.argv[1])):
    keep.append(socket.create_connection(lsn.getsockname()))
    keep.append(lsn.accept()[0])
print("held", len(keep), flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def tb(dockerd):
    with docker_testbed(dockerd, DockerTestbed(1)) as tb:
        yield tb


def test_a_docker_nodes_countless_connections_are_read_no_further_than_the_bound(tb, tmp_path, monkeypatch):
    monkeypatch.setattr(tcpstats, "SS_BYTES", 256 << 10, raising=False)
    node = tb.nodes[0]
    procs = []
    try:
        with open(tmp_path / "rank.log", "wb") as out:
            procs.append(node.spawn_workload(["sleep", "600"], stdout=out))
        with open(tmp_path / "flood.log", "wb") as out:
            procs.append(node.spawn_workload([sys.executable, "-c", FLOOD, "3000"], stdout=out))
        assert wait_for(lambda: b"held" in (tmp_path / "flood.log").read_bytes(), 120), (tmp_path / "flood.log").read_bytes()[-500:]
        printed = subprocess.run(tcpstats.ss_argv(pid=procs[0].pid), capture_output=True, timeout=60).stdout
        assert len(printed) > 256 << 10, len(printed)  # the flood is past the bound
        sampler = HostSampler({node.name: [procs[0].pid]}, interval_s=60, gpu=False)
        sampler.start()
        sampler.sample_once()
        rows = sampler.stop()
        assert [e for e in sampler.errors if f"more than {256 << 10} bytes" in e], sampler.errors
        assert not rows["metric"].str.startswith("tcp_").any()
    finally:
        stop_ranks([RankProc(rank=i, node=node, popen=p, log_path=tmp_path / "rank.log") for i, p in enumerate(procs)], grace_s=1)


#: run in the container under the rank: N descriptors of one socket, held open
HOLD_FDS = r"""
import os, resource, socket, sys, time
n = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_NOFILE, (n + 100, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
s = socket.socket()
for i in range(n):
    os.dup2(s.fileno(), 50 + i)
print("held", n, flush=True)
time.sleep(600)
"""


def test_a_docker_ranks_countless_descriptors_are_looked_at_no_further_than_the_bound(tb, tmp_path, monkeypatch):
    """The sampler keeps a node's connections by the sockets its rank and the rank's
    children hold, a readlink of each descriptor every second, in the one thread that
    samples every node. The node's root may hold as many as its processes' limits allow
    (4096 processes of 20,000 here; 300,000 took 1.5 s a sample): past
    ``tcpstats.MAX_FDS`` (2,000 here) that sample has no TCP rows of the node and the
    sampler says so once. Every descriptor was looked at, every sample."""
    monkeypatch.setattr(tcpstats, "MAX_FDS", 2000, raising=False)
    node = tb.nodes[0]
    log = tmp_path / "rank.log"
    with open(log, "wb") as out:
        rank = node.spawn_workload(["sh", "-c", '"$0" -c "$1" 1500 & "$0" -c "$1" 1500 & wait', sys.executable, HOLD_FDS], stdout=out)
    try:
        assert wait_for(lambda: log.read_bytes().count(b"held") == 2, 60), log.read_bytes()[-500:]
        sampler = HostSampler({node.name: [rank]}, interval_s=60, gpu=False)
        sampler.start()
        sampler.sample_once()
        rows = sampler.stop()
        assert [e for e in sampler.errors if "more than 2000 descriptors" in e], sampler.errors
        assert not rows["metric"].str.startswith("tcp_").any()
    finally:
        stop_ranks([RankProc(rank=0, node=node, popen=rank, log_path=log)], grace_s=1)
