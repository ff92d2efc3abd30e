"""A testbed node's root cannot starve the host nor spoof its peers.

Real host-like docker nodes (NET_ADMIN, as ssh testbeds make them), made with small
limits (``FAULTLAB_NODE_PIDS``, ``FAULTLAB_NODE_MEMORY``): their root forks and
allocates past them, opens a raw socket (what forged ARP replies need), and takes a
peer's address with ``ip addr add`` and talks from it, as an ARP spoofer would.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from faultlab.nodes import docker_testbed as dt
from faultlab.nodes.docker_testbed import DockerTestbed
from faultlab.nodes.testbed import state_dir
from tests.helpers import docker_testbed

pytestmark = pytest.mark.root

PIDS, MEMORY = 64, 256 << 20
CAP_NET_RAW = 13


@pytest.fixture(scope="module")
def tb(dockerd):
    """Three host-like nodes with PIDS processes and MEMORY bytes each; removed afterwards."""
    old = {k: os.environ.get(k) for k in (dt.PIDS_ENV, dt.MEMORY_ENV)}
    os.environ[dt.PIDS_ENV], os.environ[dt.MEMORY_ENV] = str(PIDS), str(MEMORY)
    try:
        with docker_testbed(dockerd, DockerTestbed(3, host_like=True)) as t:
            yield t
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def as_root(node, script: str, *args: str) -> tuple[int, str]:
    """Run ``sh -c script`` as the node's root (``docker exec``)."""
    from faultlab.nodes.dockerd import client

    rc, out = client().containers.get(node.container).exec_run(["sh", "-c", script, "sh", *args])
    return rc, out.decode(errors="replace")


FORK = """
import os, time
n = 0
kids = []
try:
    for _ in range(500):
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        kids.append(pid)
except OSError as e:
    print("refused", e.errno)
for k in kids:
    os.kill(k, 9)
    os.waitpid(k, 0)
print(len(kids))
"""


def test_a_nodes_root_cannot_fork_nor_allocate_past_its_limits(tb):
    """Forking 500 processes stops below PIDS (EAGAIN) and every child is reaped;
    allocating twice MEMORY fails in the node (killed or MemoryError): the host's PIDs
    and memory are not the node's to take. The limits are docker's, as set."""
    n0 = tb.nodes[0]
    rc, out = as_root(n0, 'python3 -c "$1"', FORK)
    assert rc == 0 and "refused 11" in out and int(out.split()[-1]) < PIDS, out
    rc, out = as_root(n0, 'python3 -c "import sys; b = b\"x\" * int(sys.argv[1]); print(\"got it\")" "$1"', str(2 * MEMORY))
    assert rc != 0 and "got it" not in out, out
    from faultlab.nodes.dockerd import client

    hc = client().api.inspect_container(n0.container)["HostConfig"]
    assert (hc["PidsLimit"], hc["Memory"], hc["MemorySwap"]) == (PIDS, MEMORY, MEMORY)
    assert "NET_RAW" in hc["CapDrop"]


def test_work_folders_are_off_run_and_removed_with_the_testbed(tb):
    """Each node's host work folder is under the work base (on the disk), not the
    testbed's state folder (/run by default), and is the node's bind mount."""
    for node in tb.nodes:
        assert node.work_host.startswith(str(dt.work_base()) + "/"), node.work_host
        assert not node.work_host.startswith(str(state_dir()) + "/") and not node.work_host.startswith("/run/")
    assert dt.work_base() / tb.id == tb.work_folder and tb.work_folder.is_dir()


def test_a_nodes_root_has_no_raw_socket(tb):
    """No CAP_NET_RAW in the node (its effective or bounding set): the AF_PACKET socket
    that forged ARP replies need is refused."""
    rc, out = as_root(tb.nodes[1], "grep -E '^Cap(Eff|Bnd):' /proc/self/status; "
                                    "python3 -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)' 2>&1; echo rc=$?")
    caps = [int(line.split()[1], 16) for line in out.splitlines() if line.startswith("Cap")]
    assert len(caps) == 2 and not any(c & (1 << CAP_NET_RAW) for c in caps), out
    assert "PermissionError" in out and "rc=1" in out, out


def test_a_nodes_root_taking_a_peers_address_does_not_reach_the_peer(tb):
    """n1's root adds n0's address (NET_ADMIN) and connects from it to n2 and to the
    host, which makes them ask and learn who holds n0's address: n2 and the host still
    reach n0 at n0's MAC, and n1's frames from n0's address never arrive."""
    n0, n1, n2 = tb.nodes
    rc, mac0 = as_root(n0, "cat /sys/class/net/eth0/address")
    assert rc == 0
    mac0 = mac0.strip()
    rc, out = as_root(n1, "ip addr add $1/24 dev eth0 && python3 -c \"$2\"; ip addr del $1/24 dev eth0", n0.address, f"""
import socket
for peer in ({n2.address!r}, {tb.bridge_address!r}):
    s = socket.socket(); s.settimeout(2); s.bind(({n0.address!r}, 0))
    try:
        s.connect((peer, 22)); print('reached', peer)
    except OSError as e:
        print('refused', peer, e)
""")
    assert rc == 0, out
    assert "reached" not in out, out
    rc, neigh = as_root(n2, "ip neigh show $1", n0.address)
    assert mac0 in neigh or not neigh.strip(), (neigh, mac0)
    host = subprocess.run(["ip", "neigh", "show", n0.address, "dev", tb.bridge], capture_output=True, text=True).stdout
    assert mac0 in host or not host.strip(), (host, mac0)
    rc, out = as_root(n2, "python3 -c \"import socket; socket.create_connection(('$1', 22), timeout=5); print('n0 ok')\"", n0.address)
    assert rc == 0 and "n0 ok" in out, out
