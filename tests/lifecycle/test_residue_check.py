"""The residue check (tests/conftest.py) sees every kind of object faultlab makes:
each is made here for real, must show up in ``left_since``, and is removed."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import left_since, needs_root, residue






def test_residue_sees_stress_workers_state_and_agent_files(tmp_path, monkeypatch):
    agent_dir = tmp_path / "agents"
    agent_dir.mkdir(mode=0o700)
    monkeypatch.setenv("FAULTLAB_AGENT_DIR", str(agent_dir))
    before = residue()
    lease_dir = Path(os.environ["FAULTLAB_LEASE_DIR"])
    # a worker as injectors/stress.py starts it: python3 -I -c CODE MARK PIDFILE ...
    w = subprocess.Popen([sys.executable, "-I", "-c", "import time; time.sleep(60)", "faultlab-membw",
                          str(lease_dir / "mem-000000.workers"), "0", "0", "mem", "0"])
    tb = Path(os.environ["FAULTLAB_STATE_DIR"]) / "testbeds"
    tb.mkdir(parents=True, exist_ok=True)
    (tb / "ab12.json").write_text("{}")
    (agent_dir / "1.gc-storm.json").write_text("{}")
    try:
        left = left_since(before, settle_s=0)
        assert {"workers", "testbed_state", "agent_files"} <= set(left), left
    finally:
        w.kill()
        w.wait()
        (tb / "ab12.json").unlink()
        (agent_dir / "1.gc-storm.json").unlink()
    assert not left_since(before)


def _sh(*argv: str) -> None:
    cp = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0, (argv, cp.stderr)


@needs_root
def test_residue_sees_one_of_every_kind_faultlab_makes(tmp_path, monkeypatch):
    """One object of each kind, made for real with faultlab's names: a namespace, a
    veth, an ifb and a bridge link, a fault qdisc on a host link and one inside the
    namespace, an iptables rule with a faultlab comment (in a chain nothing jumps to),
    faultlab cgroups in v1 and in v2, a watchdog and a pause loop (by their argv[0]),
    a stress and a mem-bw worker, a lease record and deadline, a testbed state file,
    agent heartbeat and command files. Each must be reported under its own key; all
    are removed and the report is empty again."""
    hx = secrets.token_hex(3)
    ns, va, vb, ifb, br = f"flres{hx}", f"flr{hx}a", f"flr{hx}b", f"flifb{hx}", f"flbr{hx}"
    chain = f"FLRES{hx.upper()}"
    agent_dir = tmp_path / "agents"
    agent_dir.mkdir(mode=0o700)
    monkeypatch.setenv("FAULTLAB_AGENT_DIR", str(agent_dir))
    lease_dir = Path(os.environ["FAULTLAB_LEASE_DIR"])
    lease_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    tb = Path(os.environ["FAULTLAB_STATE_DIR"]) / "testbeds"
    tb.mkdir(parents=True, exist_ok=True)
    cgs = [Path(f"/sys/fs/cgroup/cpu/faultlab-res-{hx}")]
    if Path("/sys/fs/cgroup/unified/cgroup.procs").exists():
        cgs.append(Path(f"/sys/fs/cgroup/unified/faultlab-res-{hx}"))
    files = [lease_dir / f"res-{hx}.json", lease_dir / f"res-{hx}.deadline", tb / f"{hx[:4]}.json",
             agent_dir / "1.agent", agent_dir / "1.gc-storm.json"]
    before = residue()
    procs: list[subprocess.Popen] = []
    try:
        _sh("ip", "netns", "add", ns)
        _sh("ip", "link", "add", va, "type", "veth", "peer", "name", vb)
        _sh("ip", "link", "set", vb, "netns", ns)
        _sh("ip", "link", "add", ifb, "type", "ifb")
        _sh("ip", "link", "add", br, "type", "bridge")
        _sh("tc", "qdisc", "add", "dev", va, "root", "handle", "f1e5:", "tbf", "rate", "1mbit", "burst", "32kb", "latency", "50ms")
        _sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", vb, "root", "handle", "e1e5:", "tbf", "rate", "1mbit", "burst", "32kb", "latency", "50ms")
        _sh("iptables", "-N", chain)
        _sh("iptables", "-A", chain, "-m", "comment", "--comment", f"faultlab-res-{hx}", "-j", "RETURN")
        for cg in cgs:
            cg.mkdir()
        for f in files:
            f.write_text("{}")
        loop = "while :; do sleep 0.2; done"  # (no exec: the sh keeps its argv[0])
        procs.append(subprocess.Popen(["sh", "-c", loop, "faultlab-watchdog", f"res-{hx}"]))
        procs.append(subprocess.Popen(["sh", "-c", loop, "faultlab-pause"]))
        for mark in ("faultlab-stress", "faultlab-membw"):
            procs.append(subprocess.Popen([sys.executable, "-I", "-c", "import time; time.sleep(60)", mark,
                                           str(lease_dir / f"res-{hx}.workers"), "0", "0", "cpu", "0"]))
        left = left_since(before, settle_s=0)
        want = {
            "netns": {ns}, "links": {va, ifb, br}, "iptables": None, "cgroups": {str(c) for c in cgs},
            "leases": {f.name for f in files[:2]}, "testbed_state": {files[2].name}, "agent_files": {str(f) for f in files[3:]},
        }
        for key, names in want.items():
            assert key in left, (key, left)
            if names is not None:
                assert names <= left[key], (key, left[key])
        assert any(f"faultlab-res-{hx}" in r for r in left["iptables"]), left["iptables"]
        assert any("f1e5:" in q for q in left["qdiscs"]), left.get("qdiscs")
        assert any(q.startswith(f"{ns}: ") and "e1e5:" in q for q in left["netns_qdiscs"]), left.get("netns_qdiscs")
        # the two loops by PID; any other entry must be a child a loop forked for its
        # `sleep` and caught before its exec (same argv and environ), not another process
        cmds = {int(r.split(" ", 1)[0]): r.split(" ", 1)[1] for r in left["processes"]}
        wd, pl = procs[0].pid, procs[1].pid
        assert {wd, pl} <= set(cmds), (left["processes"], wd, pl)
        assert "faultlab-watchdog" in cmds[wd] and "faultlab-pause" in cmds[pl], cmds
        assert set(cmds.values()) == {cmds[wd], cmds[pl]}, (left["processes"], wd, pl)
        assert len(left["workers"]) == 2, left.get("workers")
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for f in files:
            f.unlink(missing_ok=True)
        for cg in cgs:
            if cg.exists():
                cg.rmdir()
        subprocess.run(["iptables", "-F", chain], capture_output=True)
        subprocess.run(["iptables", "-X", chain], capture_output=True)
        for link in (va, ifb, br):
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    assert not left_since(before)


def test_residue_sees_docker_testbed_objects(dockerd):
    """A network and a (created, never started) container labeled faultlab.testbed on
    faultlab's own dockerd are reported; the node image is not."""
    from faultlab.nodes.image import IMAGE

    if not dockerd.images.list(name=IMAGE):
        pytest.skip(f"the node image {IMAGE} is not cached here")
    hx = secrets.token_hex(3)
    before = residue()
    net = dockerd.networks.create(f"flres{hx}", driver="bridge", internal=True, labels={"faultlab.testbed": f"res{hx}"})
    c = None
    try:
        c = dockerd.containers.create(IMAGE, ["true"], name=f"flres{hx}", labels={"faultlab.testbed": f"res{hx}"}, network_mode="none")
        left = left_since(before, settle_s=0)
        assert left.get("docker") == {f"container flres{hx}", f"network flres{hx}"}, left
    finally:
        if c is not None:
            c.remove(force=True)
        net.remove()
    assert not left_since(before)
