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

from faultlab.nodes.backends import SshTestbed
from tests.helpers import FL, docker_testbed, fl


pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def stb(dockerd):
    """Two ssh nodes (sshd in host-like containers), removed afterwards."""
    with docker_testbed(dockerd, SshTestbed(2)) as tb:
        yield tb


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
    from faultlab.lifecycle.fanout import FanoutError, apply_all

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
inj = injectors.build("nic-slow", node, target="eth0", duration_s=10, opts={"--rate": "20mbit"})
a = injectors.apply(inj, 10, grace_s=1, verify=False)
print(a.lease.path, flush=True)
time.sleep(600)
"""


def test_sigkill_and_network_cut_on_an_ssh_node(stb, no_residue):
    """The controller is SIGKILLed with the fault in force and the network to the node
    is cut (the node's host-side link set down): the watchdog *on the node* reverts at
    the deadline, moved to now (seen from the docker host, without SSH); the link comes
    back after."""
    n0 = stb.nodes[0]
    view = _docker_view(stb, 0)
    ctl = subprocess.Popen([sys.executable, "-c", CONTROLLER, n0.address, n0.key, n0.known_hosts], stdout=subprocess.PIPE, text=True)
    lease = ctl.stdout.readline().strip()
    assert lease.startswith("/run/faultlab/leases/")
    assert "tbf" in view.run(["tc", "qdisc", "show", "dev", "eth0"], scope="net").stdout
    # "eth0@if153": the host-side veth's ifindex (sysfs under nsenter is still the host's)
    peer_idx = re.search(r"eth0@if(\d+)", view.run(["ip", "-o", "link", "show", "eth0"], scope="net").stdout).group(1)
    host_if = next(p for p in os.listdir("/sys/class/net") if open(f"/sys/class/net/{p}/ifindex").read().strip() == peer_idx)
    # what a write cut off by the kill leaves (SshNode.write_file's NAME.tmp.<pid>)
    view.run(["sh", "-c", 'touch "/proc/$1/root$2.tmp.4242"', "sh", str(view.init_pid), lease])
    subprocess.run(["ip", "link", "set", host_if, "down"], check=True)
    try:
        ctl.send_signal(signal.SIGKILL)
        ctl.wait()
        assert subprocess.run(["ping", "-c1", "-W1", n0.address], capture_output=True).returncode != 0  # really cut
        # the deadline moved to now in the node's deadline file (as a renewal writes it), not in 11 s
        view.run(["sh", "-c", 'printf %s "$3" > "/proc/$1/root${2%.json}.deadline"', "sh", str(view.init_pid), lease, str(int(time.time()))])
        deadline = time.monotonic() + 60
        while "tbf" in view.run(["tc", "qdisc", "show", "dev", "eth0"], scope="net").stdout and time.monotonic() < deadline:
            time.sleep(0.3)
        assert "tbf" not in view.run(["tc", "qdisc", "show", "dev", "eth0"], scope="net").stdout
        assert "flifb" not in view.run(["ip", "-o", "link"], scope="net").stdout
        end = time.monotonic() + 10  # the watchdog removes its record after the revert
        while _leases_on(stb, 0).strip() and time.monotonic() < end:
            time.sleep(0.2)
        assert _leases_on(stb, 0).strip() == "", "the watchdog left its record, deadline or a temporary"
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
    p = subprocess.Popen(["faultlab", "inject", "--type", "nic-slow", "--inventory", inv, "--select", f"testbed={stb.id}", "--rate", "50mbit",
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


PINNED_PAIR = """
import os, subprocess, sys
loop = "import os, time\\nos.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\\nt = time.time()\\nwhile time.time() - t < 2.5: pass"
kids = [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(2)]
for k in kids:
    k.wait()
"""


def test_node_sampler_samples_become_host_rows_untrusted_lines_skipped(tmp_path):
    """The node sampler (the very source sent to ssh nodes, run here as ``python3 -c``)
    samples a real process tree (two busy loops pinned to one CPU) until it ends; the
    controller turns the raw lines into host rows, the CPU the loops used and the run
    delay they waited for it among them, and skips lines of the wrong shape (the node
    is not trusted)."""
    from faultlab.telemetry import remote

    # two busy children pinned to one CPU: each waits for it about half the time
    busy = subprocess.Popen([sys.executable, "-c", PINNED_PAIR])
    out = tmp_path / "n0" / "host-n0.jsonl"  # the collected layout: each node's samples in its own folder
    out.parent.mkdir()
    try:
        cp = subprocess.run(remote.sampler_argv([busy.pid], str(out), until=time.time() + 30, interval_s=0.5), timeout=20)
    finally:
        busy.wait()
    assert cp.returncode == 0  # ended by itself once its PIDs were gone, long before --until
    with open(out, "a") as f:
        f.write('{"ts": 1, "mono": "x"}\nnot json\n{"ts":1,"mono":1,"hz":100,"cpu":[1,2],"procs":{"1:1":[-5,0]},"net":null,"ino":[],"ss":null}\n'
                '{"ts":1,"mono":1,"hz":100,"cpu":[1,2],"procs":{"1:1":[5,0]},"delay":{"1:1:1":-3},"net":null,"ino":[],"ss":null}\n'
                '{"ts":1,"mono":1,"hz":100,"cpu":[1,2],"procs":{"1:1":[5,0]},"delay":[1],"net":null,"ino":[],"ss":null}\n'
                '{"ts":1,"mono":1,"hz":100,"cpu":[1,2],"procs":{"1:1":[5,0]},"delay":{"1:1:1":1%s},"net":null,"ino":[],"ss":null}\n' % ("0" * 400))
    samples = remote.read_samples(out)
    assert len(samples) >= 4 and all(s["procs"] for s in samples)
    df = remote.host_rows(tmp_path, ["n0"], {}, "r1")
    cpu = df[df.metric == "proc_cpu_util_pct"].value
    assert len(cpu) == len(samples) - 1 and cpu.median() > 50  # two busy loops on one CPU: ~100% of one CPU
    # the parent's and both children's threads (the first or last sample may catch the
    # tree before its children start or after one ended: CI saw that)
    assert max(len(s["delay"]) for s in samples) >= 3
    delay = df[df.metric == "proc_run_delay_s_per_s"].value
    assert len(delay) == len(cpu) and delay.median() > 0.3  # each waits ~0.5 s/s for the CPU the other holds
    assert set(df.metric) >= {"cpu_util_pct", "proc_rss_bytes", "net_rx_bytes_per_s", "net_tx_bytes_per_s"}
    assert (df.run_id == "r1").all() and (df.node == "n0").all()


def test_inventory_run_fault_on_a_named_node_host_rows_from_each(stb, tmp_path, no_residue):
    """`faultlab run --inventory` on the testbed's nodes renamed gpu-a/gpu-b (a real
    cluster's shape: no testbed made, ranks and faults over SSH): the scenario's
    nic-slow names gpu-b, is verified (throughput against gpu-a) and reverted; each
    node's host sampler ran there and its rows came back."""
    import pandas as pd
    import yaml

    inv = yaml.safe_load(open(stb.inventory_path).read())
    inv["nodes"] = {"gpu-a": inv["nodes"]["n0"], "gpu-b": inv["nodes"]["n1"]}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(inv))
    (tmp_path / "s.yaml").write_text("name: inv\nworkload: {duration: 25s, hidden: 256, batch: 256}\nfaults:\n"
                                     "  - {type: nic-slow, node: gpu-b, at: 8s, duration: 6s, params: {rate: 50mbit}}\n")
    out = tmp_path / "run"
    cp = subprocess.run([*FL, "run", str(tmp_path / "s.yaml"), "--inventory", str(tmp_path / "cluster.yaml"),
                         "--out", str(out), "--no-label"], capture_output=True, text=True, timeout=240)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    inj = pd.read_parquet(out / "injections.parquet")
    assert list(inj.node) == ["gpu-b"] and inj.verified.all() and (inj.status == "reverted").all()
    steps = pd.read_parquet(out / "steps.parquet")
    assert sorted(steps.node.unique()) == ["gpu-a", "gpu-b"]
    host = pd.read_parquet(out / "host.parquet")
    for node, peer in (("gpu-a", "gpu-b"), ("gpu-b", "gpu-a")):
        m = set(host[host.node == node].metric)
        assert {"proc_cpu_util_pct", "proc_rss_bytes", "net_tx_bytes_per_s", f"tcp_rtt_ms:{peer}"} <= m, (node, sorted(m))
    for i in (0, 1):
        assert ".json" not in _leases_on(stb, i)
        assert "tbf" not in _docker_view(stb, i).run(["tc", "qdisc", "show", "dev", "eth0"], scope="net").stdout


def _tbf_on(stb, i) -> bool:
    return "tbf" in _docker_view(stb, i).run(["tc", "qdisc", "show", "dev", "eth0"], scope="net").stdout


def test_doctor_on_an_ssh_node_through_its_inventory(stb, tmp_path, no_residue):
    """doctor --inventory --node n0: checked on the node over SSH (tc on a throw-away
    ifb there, the node's own cgroup mounts, the ranks' Python there)."""
    import json

    cp = fl("doctor", "--inventory", _inventory(stb, tmp_path), "--node", "n0", "--json")
    assert cp.returncode == 0, cp.stderr
    (rep,) = json.loads(cp.stdout)
    assert rep["node"] == "ssh:n0" and "host key pinned" in rep["facts"]["access"]
    t = rep["types"]
    assert t["nic-slow"]["ok"] and t["cpu-contention"]["ok"] and t["gc-storm"]["ok"], t
    assert not t["gpu-clock-cap"]["ok"] and "nvidia-smi not found" in t["gpu-clock-cap"]["why"]
    assert rep["facts"]["python"] == sys.version.split()[0]  # the ranks' interpreter, run on the node
    assert "flprb" not in _docker_view(stb, 0).run(["ip", "link"], scope="net").stdout
    # an unknown host key: one line naming the node, nothing checked
    import yaml

    inv = yaml.safe_load(open(_inventory(stb, tmp_path)))
    inv["known_hosts"] = str(tmp_path / "empty_known_hosts")
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(inv))
    cp = fl("doctor", "--inventory", str(tmp_path / "bad.yaml"), "--node", "n0")
    assert cp.returncode == 1 and cp.stderr.count("\n") == 1 and "not pinned" in cp.stderr and "n0" in cp.stderr, cp.stderr


def test_status_revert_recover_of_faults_on_an_ssh_node(stb, tmp_path, no_residue):
    """Faults left on an ssh node by a controller that is gone (--detach): status sees
    them there; revert FAULT_ID tells the node's watchdog to revert now; recover ends
    one whose record was lost (by its watchdog) and one whose watchdog was killed (by
    the recorded revert lines)."""
    import json

    inv = _inventory(stb, tmp_path)

    def inject(node="n0"):
        cp = fl("inject", "--type", "nic-slow", "--inventory", inv, "--node", node, "--rate", "50mbit", "--duration", "120s", "--detach", "--json")
        assert cp.returncode == 0, cp.stderr
        return json.loads(cp.stdout)[0]["fault_id"]

    fid = inject()
    cp = fl("status", "--inventory", inv, "--node", "n0", "--json")
    (row,) = json.loads(cp.stdout)
    assert row["fault_id"] == fid and row["type"] == "nic-slow" and row["record"] and row["watchdog_alive"] and 60 < row["remaining_s"] <= 120
    assert not row["controller_alive"]
    cp = fl("status", "--inventory", inv, "--node", "n0")
    assert fid in cp.stdout and "left to its lease" in cp.stdout
    cp = fl("revert", fid, "--inventory", inv, "--node", "n0")
    assert cp.returncode == 0 and f"{fid} on ssh:n0: reverted" in cp.stdout, cp.stdout + cp.stderr
    assert not _tbf_on(stb, 0) and ".json" not in _leases_on(stb, 0)
    assert json.loads(fl("status", "--inventory", inv, "--all-nodes", "--json").stdout) == []

    # the record lost (deleted on the node): its watchdog is still found and told to revert
    lost = inject()
    view = _docker_view(stb, 0)
    root = f"/proc/{view.init_pid}/root/run/faultlab/leases"
    subprocess.run(["rm", "-f", f"{root}/{lost}.json"], check=True)
    (row,) = json.loads(fl("status", "--inventory", inv, "--node", "n0", "--json").stdout)
    assert row["fault_id"] == lost and not row["record"] and row["watchdog_alive"]
    # the watchdog killed (on n1): the record's revert lines are run by recover
    dead = inject("n1")
    rows = {r["fault_id"]: r for r in json.loads(fl("status", "--inventory", inv, "--all-nodes", "--json").stdout)}
    assert set(rows) == {lost, dead}, rows
    me = _ssh(stb, 1)
    from faultlab.lifecycle.remoteview import remote_faults

    f = next(x for x in remote_faults(me) if x.fault_id == dead)
    me.run(["kill", "-9", str(f.watchdog_pid)])
    me.close()
    rows = {r["fault_id"]: r for r in json.loads(fl("status", "--inventory", inv, "--node", "n1", "--json").stdout)}
    assert rows[dead]["record"] and not rows[dead]["watchdog_alive"] and _tbf_on(stb, 1)
    cp = fl("recover", "--inventory", inv, "--all-nodes")
    assert cp.returncode == 0 and cp.stdout.count(": reverted") == 2, cp.stdout + cp.stderr
    for i in (0, 1):
        assert not _tbf_on(stb, i) and ".json" not in _leases_on(stb, i)
    assert json.loads(fl("status", "--inventory", inv, "--all-nodes", "--json").stdout) == []


_ADD_USER = ('id -u "$1" >/dev/null 2>&1 || useradd -m -s /bin/sh "$1"; install -d -m 700 -o "$1" -g "$1" "/home/$1/.ssh" && '
             'install -m 600 -o "$1" -g "$1" /root/.ssh/authorized_keys "/home/$1/.ssh/authorized_keys" && '
             'if [ "$2" = yes ]; then printf "%s ALL=(root) NOPASSWD: ALL\\n" "$1" > "/etc/sudoers.d/$1" && chmod 440 "/etc/sudoers.d/$1"; fi')


def _add_user(stb, i, user: str, sudo: bool) -> None:
    """A non-root login on testbed node i (the testbed's key), with a NOPASSWD sudo
    rule or none; removed with the testbed's container."""
    from faultlab.nodes.dockerd import client

    rc, out = client().containers.get(_docker_view(stb, i).container).exec_run(["sh", "-c", _ADD_USER, "sh", user, "yes" if sudo else "no"])
    assert rc == 0, out


def test_non_root_login_with_sudo_applies_and_reverts_without_sudo_refused(stb, no_residue):
    """A login user with NOPASSWD sudo: the fault is applied, verified and reverted
    through ``sudo -n`` (its lease record root's, on the node). A login without a sudo
    rule: one line naming the fix, before anything is applied."""
    from faultlab import injectors
    from faultlab.errors import NodeError
    from faultlab.nodes import LocalNode

    _add_user(stb, 0, "flops", True)
    _add_user(stb, 0, "flnone", False)
    ok = _ssh(stb, 0, user="flops", sudo=True)
    assert ok.run(["id", "-u"]).stdout.strip() == "0"  # every command through sudo -n
    assert ok.line(["tc", "qdisc"]).startswith("sudo -n -- ")
    inj = injectors.build("nic-slow", ok, target=None, duration_s=30, opts={"--rate": "50mbit"})
    inj.probe_peer, inj.probe_peer_addr = LocalNode("host"), stb.bridge_address
    a = injectors.apply(inj, 30)
    try:
        assert a.evidence["verify"]["ok"], a.evidence
        assert _tbf_on(stb, 0) and f"{a.fault_id}.json" in _leases_on(stb, 0)
        owner = _docker_view(stb, 0).run(["stat", "-c", "%U", f"/proc/{_docker_view(stb, 0).init_pid}/root{a.lease.path}"]).stdout.strip()
        assert owner == "root"
    finally:
        assert a.revert() == "reverted"
    ok.close()
    assert not _tbf_on(stb, 0) and f"{a.fault_id}.json" not in _leases_on(stb, 0)

    bad = _ssh(stb, 0, user="flnone", sudo=True)
    with pytest.raises(NodeError) as e:
        injectors.apply(injectors.build("nic-slow", bad, target=None, duration_s=30, opts={"--rate": "50mbit"}), 30)
    msg = str(e.value)
    assert "\n" not in msg and "sudo -n refused" in msg and "flnone" in msg and "NOPASSWD" in msg and "nothing applied" in msg, msg
    assert not _tbf_on(stb, 0) and ".json" not in _leases_on(stb, 0)


def test_a_refused_channel_leaves_the_nodes_other_processes_running(stb, no_residue):
    """sshd refuses a session beyond its MaxSessions (10 by default) while others run:
    the refused command is retried, then fails alone, one line; the processes on the
    connection's other channels (a rank, a sampler) keep running, never ended with
    exit 255 by that one refusal."""
    from faultlab.errors import NodeError

    node = _ssh(stb, 0)
    held = []
    try:
        while True:  # open sessions until sshd refuses one (a command fails)
            try:
                held.append(node.spawn(["sleep", "120"], stdout=subprocess.PIPE))
            except NodeError as e:
                assert "cannot run a command" in str(e) and "\n" not in str(e)
                break
            assert len(held) < 64, "sshd never refused a session"
        assert held and all(p.poll() is None for p in held), "a refused session killed the others"
        with pytest.raises(NodeError):
            node.run(["true"])
        assert all(p.poll() is None for p in held), "a refused command killed the others"
    finally:
        # the held sessions fill this connection: the kills go over a second one
        killer = _ssh(stb, 0)
        for p in held:
            killer.run(["kill", "-9", str(p.pid)])
        for p in held:
            p.wait()
        killer.close()
        node.close()
