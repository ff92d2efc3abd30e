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
