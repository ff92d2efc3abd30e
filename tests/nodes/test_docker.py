"""docker nodes, for real: faultlab's dockerd, containers of the offline node image,
faults applied from the host inside the containers' namespaces and cgroups."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faultlab.lifecycle.watchdog import OVERDUE_S
from faultlab.nodes.docker_testbed import DockerTestbed
from faultlab.runner import TESTBED_LEASE_S
from tests.helpers import FL, deadline_now, docker_residue, docker_testbed, end_leases_now, state, wait_for


pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def dtb(dockerd):
    """Two docker nodes, removed afterwards (nothing of them left)."""
    with docker_testbed(dockerd, DockerTestbed(2)) as tb:
        yield tb


def _qdiscs(node) -> str:
    return node.run(["tc", "qdisc", "show", "dev", "eth0"], scope="net").stdout


def test_docker_node_nic_slow_from_the_host(dtb, no_residue):
    """tc runs on the host inside the container's netns (the container has no
    NET_ADMIN): the cap is measured, and revert leaves the container's qdiscs as found."""
    from faultlab import injectors
    from faultlab.nodes import LocalNode

    n0 = dtb.nodes[0]
    found = _qdiscs(n0)
    inj = injectors.build("nic-slow", n0, target=None, duration_s=30, opts={"--rate": "50mbit"})
    inj.probe_peer, inj.probe_peer_addr = LocalNode("host"), dtb.bridge_address
    a = injectors.apply(inj, 30)
    try:
        v = a.evidence["verify"]
        assert v["ok"], v
        assert v["ingress_measured_bit_per_s"] < 60e6 and v["egress_measured_bit_per_s"] < 60e6
        # the container itself cannot change qdiscs: no capability was given to it
        cp = subprocess.run(["docker", "-H", _host(), "exec", n0.container, "tc", "qdisc", "del", "dev", "eth0", "root"], capture_output=True, text=True)
        assert cp.returncode != 0
    finally:
        assert a.revert() == "reverted"
    assert _qdiscs(n0) == found


def _host():
    from faultlab.nodes.dockerd import docker_host

    return docker_host()


def test_docker_node_cpu_quota_in_the_containers_own_cgroup(dtb, no_residue):
    """A rank-like process started in the container (docker exec; host PID mapped) is
    throttled in a faultlab cgroup nested in the container's own; its limits stay."""
    from faultlab import injectors

    n1 = dtb.nodes[1]
    p = n1.spawn_workload([sys.executable, "-c", "while True: pass"])
    try:
        assert p.pid and p.poll() is None
        cpid = n1.container_pid(p.pid)
        assert cpid and cpid != p.pid  # its own PID namespace
        home = [ln for ln in open(f"/proc/{p.pid}/cgroup").read().splitlines() if ln.split(":")[1] in ("cpu", "cpu,cpuacct", "")][0]
        assert n1.container in home
        inj = injectors.build("cpu-contention", n1, target=str(p.pid), duration_s=30, opts={"--cpu-fraction": "0.3"})
        a = injectors.apply(inj, 30)
        assert a.evidence["verify"]["ok"], a.evidence
        assert f"/docker/{n1.container}/faultlab-" in a.facts["cgroup"]
        assert a.revert() == "reverted"
        assert n1.container in open(f"/proc/{p.pid}/cgroup").read()
    finally:
        p.kill()
        assert p.wait(10) != 0


CONTROLLER = r"""
import sys, time
from faultlab import injectors
from faultlab.nodes.docker import resolve_docker
node = resolve_docker(sys.argv[1])
inj = injectors.build("nic-slow", node, target=None, duration_s=10, opts={"--rate": "20mbit"})
a = injectors.apply(inj, 10, grace_s=1, verify=False)
print(a.lease.path, flush=True)
time.sleep(600)
"""


def test_sigkill_of_the_controller_on_a_docker_node(dtb, no_residue):
    """The controller is SIGKILLed with the fault in force: the watchdog on the docker
    host reverts it at its deadline (moved to now once the controller is dead); nothing
    is left in the container's namespace."""
    n0 = dtb.nodes[0]
    ctl = subprocess.Popen([sys.executable, "-c", CONTROLLER, f"fl{dtb.id}-n0"], stdout=subprocess.PIPE, text=True)
    lease = ctl.stdout.readline().strip()
    assert lease and os.path.exists(lease)
    assert "faf" in _qdiscs(n0) or "tbf" in _qdiscs(n0)
    ctl.send_signal(signal.SIGKILL)
    ctl.wait()
    deadline_now(Path(lease).stem, Path(lease).parent)  # its deadline now, not in 11 s
    deadline = time.monotonic() + 60
    while os.path.exists(lease) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not os.path.exists(lease)
    assert "tbf" not in _qdiscs(n0)
    links = n0.run(["ip", "-o", "link"], scope="net").stdout
    assert "flifb" not in links


def test_testbed_down_after_up_killed_half_way(dockerd, tmp_path):
    """``faultlab testbed up`` SIGKILLed while making containers; ``testbed down``
    then leaves no container, network, link or image but the cached node image."""
    from faultlab.nodes.testbed import state_dir

    from faultlab.nodes.image import IMAGE, tarball

    def host_state():
        """namespaces and iptables rules (every table) of this host"""
        ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout if shutil.which("iptables-save") else ""
        return ns, sorted(x for x in rules.splitlines() if not x.startswith(("#", ":")))  # counters and comments vary

    before = docker_residue(dockerd)
    state_before = host_state()
    links_before = set(os.listdir("/sys/class/net"))
    up = subprocess.Popen([*FL, "testbed", "up", "--backend", "docker", "--nodes", "6", "--name", "b0d0"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    st = state_dir() / "docker" / "b0d0.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if len(json.loads(st.read_text()).get("containers", [])) >= 2:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    up.send_signal(signal.SIGKILL)
    up.wait()
    assert dockerd.containers.list(all=True, filters={"label": "faultlab.testbed=b0d0"}), "the killed up made containers"
    cp = subprocess.run([*FL, "testbed", "down", "--name", "b0d0"], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    assert docker_residue(dockerd) - before == set()  # containers, networks, images other than the node image
    assert {x for x in set(os.listdir("/sys/class/net")) - links_before if x.startswith("fl")} == set()
    assert host_state() == state_before  # no namespace, no iptables rule (faultlab's dockerd runs --iptables=false)
    assert dockerd.images.get(IMAGE) and tarball().exists()  # the cached node image stays
    assert not st.exists()
    cp = subprocess.run([*FL, "testbed", "down", "--name", "b0d0"], capture_output=True, text=True)
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1


MAKER = """
import sys, time
from faultlab.nodes.docker_testbed import DockerTestbed
tb = DockerTestbed(1, tb_id=sys.argv[1]).up()
print(tb.bridge, flush=True)
time.sleep(600)
"""


def test_a_testbed_no_state_file_records_is_reaped(dockerd, tmp_path):
    """A controller SIGKILLed after ``up`` (no lease: a bare DockerTestbed), then its
    state folder removed (a test's tmp folder; /run after a reboot): neither ``down``
    nor ``faultlab recover`` can find that testbed by a state file, and every dockerd
    start made its bridge again. The next ``up`` removes its container, network and
    bridge; while its maker lives, or while its state file is there, it is left alone."""
    from faultlab.nodes.docker_testbed import DockerTestbed, reap_orphans

    before = docker_residue(dockerd)
    flt = {"label": "faultlab.testbed=0fa1"}
    maker = subprocess.Popen([sys.executable, "-c", MAKER, "0fa1"], env=dict(os.environ, FAULTLAB_STATE_DIR=str(tmp_path / "st")),
                             stdout=subprocess.PIPE, text=True)
    try:
        bridge = maker.stdout.readline().strip()
        assert bridge == "fl0fa1br" and os.path.exists(f"/sys/class/net/{bridge}")
        assert "0fa1" not in reap_orphans(dockerd)  # its maker lives
        maker.send_signal(signal.SIGKILL)
        maker.wait()
        assert "0fa1" not in reap_orphans(dockerd)  # its state file is there: `faultlab recover` removes it
        assert dockerd.networks.list(filters=flt) and dockerd.containers.list(all=True, filters=flt)
        shutil.rmtree(tmp_path / "st")
        with DockerTestbed(1) as tb:
            assert not dockerd.networks.list(filters=flt) and not dockerd.containers.list(all=True, filters=flt)
            assert not os.path.exists(f"/sys/class/net/{bridge}")
            assert dockerd.networks.list(filters={"label": f"faultlab.testbed={tb.id}"})  # the new testbed is whole
    finally:
        maker.kill()
        maker.wait()
        DockerTestbed(1, tb_id="0fa1").down()  # by label, should the test fail half-way
    assert docker_residue(dockerd) - before == set()


def test_container_restart_during_a_fault_leaves_nothing(dtb, no_residue):
    """The container restarts while a nic-slow and a cpu quota are in force: both
    reverts end clean (the namespace and the processes died with the container), no
    faultlab cgroup or lease is left, and the restarted node is usable again."""
    from faultlab import injectors
    from faultlab.nodes.docker import resolve_docker

    n1 = dtb.nodes[1]
    p = n1.spawn_workload([sys.executable, "-c", "while True: pass"])
    nic = injectors.apply(injectors.build("nic-slow", n1, target=None, duration_s=30, opts={"--rate": "50mbit"}), 30, verify=False)
    cpu = injectors.apply(injectors.build("cpu-contention", n1, target=str(p.pid), duration_s=30, opts={"--cpu-fraction": "0.3"}), 30)
    dtb_cli = __import__("faultlab.nodes.dockerd", fromlist=["client"]).client()
    dtb_cli.containers.get(n1.container).restart(timeout=2)
    p.wait(30)
    assert nic.revert() in ("reverted", "expired")
    assert cpu.revert() in ("reverted", "expired")
    fresh = resolve_docker(f"fl{dtb.id}-n1")
    assert fresh.init_pid != n1.init_pid
    assert "tbf" not in fresh.run(["tc", "qdisc", "show", "dev", "eth0"], scope="net").stdout
    dtb.nodes[1] = fresh


def test_doctor_on_a_docker_node(dtb, no_residue):
    """doctor --node docker:CONTAINER: tc tried in the container's namespace from the
    host (a throw-away ifb there), CPU faults nest in the container's own cgroup."""
    n0 = dtb.nodes[0]
    name = subprocess.run(["docker", "-H", _host(), "inspect", "-f", "{{.Name}}", n0.container], capture_output=True, text=True).stdout.strip().lstrip("/")
    cp = subprocess.run([*FL, "doctor", "--node", f"docker:{name}", "--json"], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    rep = json.loads(cp.stdout)
    assert rep["facts"]["backend"] == "docker" and rep["types"]["nic-slow"]["ok"], rep
    assert rep["types"]["cpu-contention"]["ok"] and n0.container in rep["facts"]["cgroup_cpu"], rep["facts"]
    assert "flprb" not in n0.run(["ip", "link"], scope="net").stdout
    cp = subprocess.run([*FL, "doctor", "--node", "docker:no-such-container"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1 and "no-such-container" in cp.stderr, cp.stderr


def test_process_pause_of_a_process_inside_a_docker_node(dtb, no_residue):
    """process-pause on a process started in the container: addressed by its host PID
    (the container PID differs), stopped and resumed by the pause loop on the docker
    host; after revert it runs and no pause loop is left."""
    from faultlab import injectors

    n0 = dtb.nodes[0]
    p = n0.spawn_workload([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"])
    try:
        assert n0.container_pid(p.pid) not in (None, p.pid)
        inj = injectors.build("process-pause", n0, target=str(p.pid), duration_s=20, opts={"--pause": "800ms", "--period": "1s"})
        a = injectors.apply(inj, 20)
        assert a.evidence["verify"]["ok"], a.evidence
        states = set()
        for _ in range(30):
            states.add(open(f"/proc/{p.pid}/stat").read().rpartition(")")[2].split()[0])
            time.sleep(0.05)
        assert "T" in states, states  # really stopped, seen from the host
        assert a.revert() == "reverted"
        time.sleep(0.3)
        assert open(f"/proc/{p.pid}/stat").read().rpartition(")")[2].split()[0] != "T"
    finally:
        p.kill()
        p.wait(10)


RUN = """name: killed
testbed: {backend: docker, nodes: 2}
workload: {duration: 40s, hidden: 256, batch: 256}
faults:
  - {type: nic-slow, node: n1, at: 3s, duration: 6s, params: {rate: 50mbit}}
"""


def test_sigkill_of_the_runner_on_docker_nodes_run_readable_nothing_left(dockerd, tmp_path, no_residue):
    """`faultlab run` on docker nodes SIGKILLed with a fault in force: the run
    directory holds both ranks' steps up to the last collection (they were written
    in the containers), and the fault's and the testbed's leases remove everything."""
    from faultlab.rundir import RunDir

    before, faults_before = docker_residue(dockerd), state()
    (tmp_path / "s.yaml").write_text(RUN)
    out = tmp_path / "run"
    proc = subprocess.Popen([*FL, "run", str(tmp_path / "s.yaml"), "--out", str(out), "--no-label"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 180
    injected = False
    while time.time() < deadline and not injected and proc.poll() is None:
        if (out / "events.jsonl").exists():
            injected = any(json.loads(x)["event"] == "inject" for x in (out / "events.jsonl").read_text().splitlines() if x.strip())
        time.sleep(0.2)
    assert injected
    time.sleep(1.5)  # a few collections after the inject
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    rd = RunDir(out)
    assert rd.meta["complete"] is False
    steps = rd.read_table("steps")
    assert sorted(steps["rank"].unique()) == [0, 1] and steps.groupby("rank").size().min() > 20
    assert sorted(steps.node.unique()) == ["n0", "n1"]
    # the testbed's lease (here; the fault's is the node's) would end within
    # TESTBED_LEASE_S by itself: now
    ids = end_leases_now(TESTBED_LEASE_S + 1)
    assert any(i.startswith("testbed-") for i in ids), ids
    end = time.time() + 120
    while time.time() < end and docker_residue(dockerd) - before:
        time.sleep(1)
    assert docker_residue(dockerd) - before == set()  # the testbed's lease removed the containers and network
    # the fault's watchdog, told to end now too, runs its revert lines against a node
    # that may be going away: each may take up to LINE_TIMEOUT_S, so its records and
    # process are waited for (bounded by when `status` would call it stuck)
    assert wait_for(lambda: not state() - faults_before, OVERDUE_S + 10, step=0.5), state() - faults_before


def _ed25519_line(comment: bytes = b" root@n0") -> bytes:
    import base64

    blob = b"\0\0\0\x0bssh-ed25519\0\0\0\x20" + bytes(range(32))
    return b"ssh-ed25519 " + base64.b64encode(blob) + comment + b"\n"


@pytest.mark.parametrize("text", [b"", b"\n", b"ssh-ed25519", b"ssh-ed25519 \n", b"ssh-rsa AAAAB3Nza x\n",
                                  b"ssh-ed25519 AA;rm -rf x\n", b"ssh-ed25519 AAAA\n", _ed25519_line()[:40],
                                  _ed25519_line()[:40] + b"\n", _ed25519_line().rstrip(b"\n")])
def test_a_half_written_host_key_is_not_pinned(text):
    """The node's host key file is read while sshd starts: an empty, half-written or
    truncated file (as a loaded host may read it) is not a key, never a ValueError
    traceback; the wait goes on until a whole line is there
    (a 32-byte ed25519 key, its line ended)."""
    from faultlab.nodes.docker_testbed import _host_key

    assert _host_key(text) is None
    line = _ed25519_line()
    assert _host_key(line) == ("ssh-ed25519", line.split()[1].decode())
    assert _host_key(_ed25519_line(b"")) == ("ssh-ed25519", line.split()[1].decode())
