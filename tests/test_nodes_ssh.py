"""ssh nodes, for real: sshd in host-like testbed containers, paramiko with pinned
host keys, leases and watchdogs on the nodes, fan-out all or nothing."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import docker_residue

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def stb(dockerd):
    from faultlab.nodes.backends import SshTestbed

    before = docker_residue(dockerd)
    tb = SshTestbed(2).up()
    try:
        yield tb
    finally:
        assert tb.down() == []
        assert docker_residue(dockerd) - before == set()


def _docker_view(stb, i):
    """The same node seen from the docker host (nsenter), to check it without SSH."""
    return stb.inner.nodes[i]


def _ssh(stb, i, **kw):
    from faultlab.nodes.ssh import SshNode

    n = stb.nodes[i]
    args = dict(name=n.name, address=n.address, iface="eth0", user="root", key=n.key, known_hosts=n.known_hosts)
    args.update(kw)
    return SshNode(**args)


def _leases_on(stb, i) -> str:
    return _docker_view(stb, i).run(["sh", "-c", "ls /proc/$1/root/run/faultlab/leases 2>/dev/null; exit 0", "sh", str(_docker_view(stb, i).init_pid)]).stdout


def test_pinned_host_key_nic_slow_with_on_node_lease(stb, no_residue):
    from faultlab import injectors
    from faultlab.nodes import LocalNode

    n0 = stb.nodes[0]
    inj = injectors.build("nic-slow", n0, target=None, duration_s=30, opts={"--rate": "50mbit"})
    inj.probe_peer, inj.probe_peer_addr = LocalNode("host"), stb.bridge_address
    a = injectors.apply(inj, 30)
    try:
        assert a.evidence["verify"]["ok"], a.evidence
        assert str(a.lease.path).startswith("/run/faultlab/leases/")
        assert f"{a.fault_id}.json" in _leases_on(stb, 0)  # the record lives on the node
        assert not os.path.exists(a.lease.path) or not str(a.lease.path).startswith(os.environ["FAULTLAB_LEASE_DIR"])
    finally:
        assert a.revert() == "reverted"
    assert "tbf" not in _docker_view(stb, 0).run(["tc", "qdisc", "show", "dev", "eth0"], scope="net").stdout
    assert f"{a.fault_id}.json" not in _leases_on(stb, 0)


@pytest.mark.parametrize("case", ["unknown", "changed"])
def test_unknown_or_changed_host_key_refused_nothing_applied(stb, tmp_path, case, no_residue):
    """An unknown and a changed host key: a one-line NodeError, nothing applied, no
    lease on the node; ``accept_new`` pins an unknown key (never a changed one)."""
    from faultlab import injectors
    from faultlab.errors import NodeError

    n0 = stb.nodes[0]
    kh = tmp_path / "known_hosts"
    if case == "unknown":
        kh.write_text("")
    else:
        other = open(stb.nodes[1].known_hosts).read().split("\n")[1].split()  # node 1's key under node 0's address
        kh.write_text(f"{n0.address} {other[1]} {other[2]}\n")
    node = _ssh(stb, 0, known_hosts=str(kh))
    inj = injectors.build("nic-slow", node, target="eth0", duration_s=30, opts={"--rate": "50mbit"})
    with pytest.raises(NodeError) as e:
        injectors.apply(inj, 30)
    msg = str(e.value)
    assert "\n" not in msg and ("not pinned" if case == "unknown" else "CHANGED") in msg and "nothing applied" in msg
    assert "tbf" not in _docker_view(stb, 0).run(["tc", "qdisc", "show", "dev", "eth0"], scope="net").stdout
    assert ".json" not in _leases_on(stb, 0)
    pinned = _ssh(stb, 0, known_hosts=str(kh), accept_new=True)
    if case == "unknown":
        assert pinned.run(["true"]).returncode == 0
        assert n0.address in kh.read_text()
    else:
        with pytest.raises(NodeError, match="CHANGED"):
            pinned.run(["true"])


def test_every_remote_command_is_shlex_joined(stb):
    n0 = stb.nodes[0]
    weird = "a b; echo INJECTED $(id) 'q\""
    assert n0.run(["printf", "%s", weird]).stdout == weird
    assert _ssh(stb, 0, sudo=True).line(["echo", "x y"]) == "sudo -n -- echo 'x y'"


def test_fanout_unreachable_node_fails_within_timeout_nothing_applied(stb, no_residue):
    """One node of the fan-out does not answer: the error names it within its connect
    timeout, and the node that was applied is reverted (no qdisc, no lease)."""
    from faultlab import injectors
    from faultlab.nodes.fanout import FanoutError, apply_all

    dead = _ssh(stb, 1, name="ghost", address=str(stb.subnet.network_address + 250), connect_timeout_s=2.0)
    injs = [injectors.build("nic-slow", n, target="eth0", duration_s=30, opts={"--rate": "50mbit"}) for n in (stb.nodes[0], dead)]
    t = time.monotonic()
    with pytest.raises(FanoutError) as e:
        apply_all(injs, 30, verify=False)
    took = time.monotonic() - t
    assert "ghost" in str(e.value) and "unreachable" in str(e.value) and "\n" not in str(e.value)
    assert took < 2.0 + 8.0, took
    assert "tbf" not in _docker_view(stb, 0).run(["tc", "qdisc", "show", "dev", "eth0"], scope="net").stdout
    assert ".json" not in _leases_on(stb, 0)


CONTROLLER = r"""
import sys, time
from faultlab import injectors
from faultlab.nodes.ssh import SshNode
node = SshNode(name="n0", address=sys.argv[1], iface="eth0", key=sys.argv[2], known_hosts=sys.argv[3])
inj = injectors.build("nic-slow", node, target="eth0", duration_s=3, opts={"--rate": "20mbit"})
a = injectors.apply(inj, 3, grace_s=1, verify=False)
print(a.lease.path, flush=True)
time.sleep(600)
"""


def test_sigkill_and_network_cut_on_an_ssh_node(stb, no_residue):
    """The controller is SIGKILLed with the fault in force and the network to the node
    is cut (the node's host-side link set down): the watchdog *on the node* reverts at
    the deadline (seen from the docker host, without SSH); the link comes back after."""
    n0 = stb.nodes[0]
    view = _docker_view(stb, 0)
    ctl = subprocess.Popen([sys.executable, "-c", CONTROLLER, n0.address, n0.key, n0.known_hosts], stdout=subprocess.PIPE, text=True)
    lease = ctl.stdout.readline().strip()
    assert lease.startswith("/run/faultlab/leases/")
    assert "tbf" in view.run(["tc", "qdisc", "show", "dev", "eth0"], scope="net").stdout
    # "eth0@if153": the host-side veth's ifindex (sysfs under nsenter is still the host's)
    peer_idx = re.search(r"eth0@if(\d+)", view.run(["ip", "-o", "link", "show", "eth0"], scope="net").stdout).group(1)
    host_if = next(p for p in os.listdir("/sys/class/net") if open(f"/sys/class/net/{p}/ifindex").read().strip() == peer_idx)
    subprocess.run(["ip", "link", "set", host_if, "down"], check=True)
    try:
        ctl.send_signal(signal.SIGKILL)
        ctl.wait()
        assert subprocess.run(["ping", "-c1", "-W1", n0.address], capture_output=True).returncode != 0  # really cut
        deadline = time.monotonic() + 60
        while "tbf" in view.run(["tc", "qdisc", "show", "dev", "eth0"], scope="net").stdout and time.monotonic() < deadline:
            time.sleep(0.3)
        assert "tbf" not in view.run(["tc", "qdisc", "show", "dev", "eth0"], scope="net").stdout
        assert "flifb" not in view.run(["ip", "-o", "link"], scope="net").stdout
        time.sleep(0.5)
        assert ".json" not in _leases_on(stb, 0)
    finally:
        subprocess.run(["ip", "link", "set", host_if, "up"], check=True)


def _inventory(stb, tmp_path, extra: str = "") -> str:
    import yaml

    inv = yaml.safe_load(open(stb.inventory_path).read())
    if extra:
        inv["nodes"]["ghost"] = {"address": extra, "labels": {"rack": "9"}}
        inv["defaults"]["connect_timeout_s"] = 2.0
    p = tmp_path / "cluster.yaml"
    p.write_text(yaml.safe_dump(inv))
    return str(p)


def test_cli_fanout_by_inventory_and_sigterm_reverts_every_node(stb, tmp_path, no_residue):
    inv = _inventory(stb, tmp_path)
    p = subprocess.Popen(["faultlab", "inject", "--type", "nic-slow", "--inventory", inv, "--nodes", f"testbed={stb.id}", "--rate", "50mbit",
                          "--duration", "60s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    assert "injected on 2 nodes" in line, line + p.stderr.read()
    for i in (0, 1):
        assert "tbf" in _docker_view(stb, i).run(["tc", "qdisc", "show", "dev", "eth0"], scope="net").stdout
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert out.count(": reverted") == 2
    for i in (0, 1):
        assert "tbf" not in _docker_view(stb, i).run(["tc", "qdisc", "show", "dev", "eth0"], scope="net").stdout
        assert ".json" not in _leases_on(stb, i)


def test_cli_fanout_unreachable_node_one_line_nothing_applied(stb, tmp_path, no_residue):
    inv = _inventory(stb, tmp_path, extra=str(stb.subnet.network_address + 250))
    t = time.monotonic()
    cp = subprocess.run(["faultlab", "inject", "--type", "nic-slow", "--inventory", inv, "--node", "n0,n1,ghost", "--rate", "50mbit",
                         "--duration", "60s", "--detach"], capture_output=True, text=True, timeout=60)
    assert time.monotonic() - t < 2.0 + 15
    assert cp.returncode == 1 and cp.stderr.count("\n") == 1 and "ghost" in cp.stderr and "unreachable" in cp.stderr, cp.stderr
    for i in (0, 1):
        assert "tbf" not in _docker_view(stb, i).run(["tc", "qdisc", "show", "dev", "eth0"], scope="net").stdout
        assert ".json" not in _leases_on(stb, i)
