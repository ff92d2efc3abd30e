"""A host-like testbed node's root cannot write a host file nor run code as host root.

The nodes of ``--backend ssh`` testbeds are containers whose root is uid 0 on the host
(faultlab's dockerd has no user-namespace remap), with faultlab's source and the
controller's Python bind-mounted read-only. A real node (one container of a real
SshTestbed) tries the known ways out as its root, both as a login over ssh (what a
workload or a user of the node runs) and as ``docker exec`` (the container's full
configured capabilities): remount a bind read-write and write into it, write it
directly, mount the host's disk or a device node of it, mount a cgroup hierarchy
(``release_agent``: a command the host's kernel runs as root), remount ``/proc/sys``
or ``/sys`` read-write (``core_pattern``, ``uevent_helper``: the same), and a user
namespace to try the remount from. Every attempt must fail and the host's files stay
as they were. The attempts that write into ``/proc/sys`` or ``/sys`` write back the
value they read, so an attempt that works changes nothing on the host.

The node still does what faults need: its root makes cgroups under the cpu and blkio
hierarchies and holds CAP_NET_ADMIN (in its own network namespace), not
CAP_SYS_ADMIN.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest

import faultlab
from faultlab.nodes.backends import SshTestbed
from faultlab.nodes.docker import WORK_DIR
from tests.helpers import docker_testbed

pytestmark = pytest.mark.root

#: faultlab's source folder and the controller's Python prefix: bind-mounted into nodes
SRC = Path(faultlab.__file__).resolve().parent.parent
PREFIX = Path(sys.base_prefix).resolve()
MARK = f".fl-escape-{os.getpid()}"
CAP_SYS_ADMIN, CAP_NET_ADMIN = 21, 12


def _attempts() -> dict[str, str]:
    """Name -> sh script that exits 0 only when the attempt got through."""
    dev = os.stat(SRC).st_dev
    maj, mnr = os.major(dev), os.minor(dev)
    write_back = 'v=$(cat "$1") && printf "%s\\n" "$v" > "$1"'
    return {
        "write the source bind": f"echo x > {SRC}/{MARK}",
        "remount the source bind rw": f"mount -o remount,bind,rw {SRC} && echo x > {SRC}/{MARK}",
        "remount the python prefix rw": f"mount -o remount,bind,rw {PREFIX} && echo x > {PREFIX}/{MARK}",
        "remount from a user namespace": (f"unshare --user --map-root-user --mount sh -c "
                                          f"'mount -o remount,bind,rw {SRC} && echo x > {SRC}/{MARK}'"),
        "read a device node of the host disk": f"mknod /tmp/fl-disk b {maj} {mnr}; head -c 512 /tmp/fl-disk > /dev/null",
        "mount the host disk": f"mknod /tmp/fl-disk2 b {maj} {mnr}; mkdir -p /mnt/fl-disk && mount -o ro /tmp/fl-disk2 /mnt/fl-disk",
        "make a device node in the host folder mounted at WORK_DIR": f"mknod {WORK_DIR}/fl-disk b {maj} {mnr}",
        "mount a cgroup v1 hierarchy": "mkdir -p /mnt/fl-cg1 && mount -t cgroup -o none,name=flx cgroup /mnt/fl-cg1",
        "mount the cgroup v2 hierarchy": "mkdir -p /mnt/fl-cg2 && mount -t cgroup2 none /mnt/fl-cg2",
        "write a release_agent": ("for f in /sys/fs/cgroup/*/release_agent /mnt/*/release_agent; do [ -e \"$f\" ] && "
                                  f"sh -c '{write_back}' sh \"$f\" && exit 0; done; exit 1"),
        "remount /proc/sys rw": "mount -o remount,rw /proc/sys",
        "write core_pattern": f"sh -c '{write_back}' sh /proc/sys/kernel/core_pattern",
        "remount /sys rw": "mount -o remount,rw /sys",
        "write uevent_helper": f"sh -c '{write_back}' sh /sys/kernel/uevent_helper",
    }


def _digest(paths: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


@pytest.fixture(scope="module")
def stb(dockerd):
    """One host-like node: ``stb.nodes[0]`` over ssh, ``stb.inner.nodes[0]`` as docker sees it."""
    with docker_testbed(dockerd, SshTestbed(1)) as tb:
        yield tb


@pytest.fixture
def host_files():
    """Files of the host that a node sees read-only: unchanged afterwards, and no marker
    left in the bound folders (removed, and the test failed, when one appears)."""
    watched = [Path(faultlab.__file__).resolve(), Path(os.__file__).resolve()]
    before = _digest(watched)
    yield
    marks = [p for p in (SRC / MARK, PREFIX / MARK) if p.exists()]
    for p in marks:
        p.unlink()
    assert not marks, f"a node's root wrote host files: {marks}"
    assert _digest(watched) == before


def _exec(stb, script: str) -> tuple[int, str]:
    """Run ``script`` with ``docker exec`` (the container's configured capabilities)."""
    from faultlab.nodes.dockerd import client

    rc, out = client().containers.get(stb.inner.nodes[0].container).exec_run(["sh", "-c", script])
    return rc, out.decode(errors="replace")


def _ssh(stb, script: str) -> tuple[int, str]:
    """Run ``script`` as the node's root logged in over ssh."""
    cp = stb.nodes[0].run(["sh", "-c", script], timeout=30)
    return cp.returncode, cp.stdout + cp.stderr


@pytest.mark.parametrize("via", ["ssh", "docker exec"])
def test_a_nodes_root_cannot_write_host_files_nor_reach_host_root(stb, via, host_files):
    run = _ssh if via == "ssh" else _exec
    got_through = {}
    for name, script in _attempts().items():
        rc, out = run(stb, script)
        if rc == 0:
            got_through[name] = out.strip()[-200:]
    assert not got_through, f"as the node's root over {via}, these got through: {got_through}"


def test_the_node_keeps_what_faults_need_and_no_cap_sys_admin(stb):
    """Its root makes (and removes) a cgroup in the cpu and blkio hierarchies; its
    capabilities hold NET_ADMIN, and no SYS_ADMIN even in the bounding set, under a
    seccomp filter, over ssh and through ``docker exec``."""
    for run in (_ssh, _exec):
        rc, out = run(stb, "grep -E '^(Cap(Eff|Bnd)|Seccomp):' /proc/self/status")
        assert rc == 0, out
        caps = {line.split(":")[0]: int(line.split()[1], 16) for line in out.splitlines() if line.startswith("Cap")}
        assert caps["CapEff"] & (1 << CAP_NET_ADMIN), out
        assert not caps["CapBnd"] & (1 << CAP_SYS_ADMIN), out
        assert "Seccomp:\t2" in out, out  # docker's default profile: no mount, unshare or setns without SYS_ADMIN
    rc, out = _ssh(stb, "for c in cpu blkio; do mkdir /sys/fs/cgroup/$c/fl-probe && echo $$ > /sys/fs/cgroup/$c/fl-probe/cgroup.procs "
                        "&& echo $$ > /sys/fs/cgroup/$c/cgroup.procs && rmdir /sys/fs/cgroup/$c/fl-probe || exit 1; done")
    assert rc == 0, out


@pytest.mark.parametrize("fault", ["cpu-contention", "io-slow"])
def test_cgroup_faults_still_inject_and_revert_inside_the_node(stb, fault, no_residue):
    """The faults that make cgroups in the node (its cpu and blkio hierarchies, written
    by its root over ssh) apply, verify and revert there; doctor on the node finds them
    supported."""
    from faultlab import injectors
    from faultlab.doctor import diagnose

    node = stb.nodes[0]
    assert diagnose(node)["types"][fault]["ok"]
    rc, out = _exec(stb, "sleep 120 > /dev/null 2>&1 & echo $!")
    assert rc == 0, out
    pid = out.strip()
    opts = {"--cpu-fraction": "0.3"} if fault == "cpu-contention" else {"--path": WORK_DIR, "--read-bps": "5mb"}
    a = injectors.apply(injectors.build(fault, node, target=pid, duration_s=30, opts=opts), 30)
    try:
        rc, cg = _ssh(stb, f"cat /proc/{pid}/cgroup")
        assert f"faultlab-{a.fault_id}" in cg, cg
    finally:
        assert a.revert() == "reverted"
        _exec(stb, f"kill {pid}")
    rc, cg = _ssh(stb, f"ls /sys/fs/cgroup/cpu /sys/fs/cgroup/blkio")
    assert "faultlab-" not in cg


def _host_cgroup(pid: int, controller: str) -> Path:
    """The host folder of ``pid``'s cgroup in the v1 ``controller`` hierarchy."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if controller in ctrls.split(","):
            return Path(f"/sys/fs/cgroup/{controller}") / path.lstrip("/")
    raise AssertionError(f"{pid} has no {controller} cgroup")


def test_a_nodes_root_writes_only_its_own_cgroup(stb):
    """The cpu and blkio hierarchies the host made writable in the node reach its own
    container cgroup and nothing above it: the node's root sees no other container's
    cgroup there, and what it writes at their top (cpu.shares, blkio.weight) lands in
    its own container's cgroup on the host, while the cgroup above it (every node's
    parent) and the host's root cgroup stay as they were."""
    node = stb.inner.nodes[0]
    files = {"cpu": "cpu.shares", "blkio": "blkio.weight"}
    own = {c: _host_cgroup(node.init_pid, c) for c in files}
    above = {c: [p / files[c] for p in (own[c].parent, Path(f"/sys/fs/cgroup/{c}")) if (p / files[c]).exists()] for c in files}
    before = {str(f): f.read_text() for fs in above.values() for f in fs}
    was = {c: (own[c] / files[c]).read_text().strip() for c in files if (own[c] / files[c]).exists()}
    try:
        for c in files:  # the top of the node's hierarchy is its own cgroup: the same folder
            rc, out = _ssh(stb, f"ls -A /sys/fs/cgroup/{c}")
            assert rc == 0, out
            assert set(out.split()) == set(os.listdir(own[c])), (c, out)
        for c, f in files.items():
            if c not in was:
                continue
            rc, out = _ssh(stb, f"echo 500 > /sys/fs/cgroup/{c}/{f} && cat /sys/fs/cgroup/{c}/{f}")
            assert rc == 0 and out.strip() == "500", out
            assert (own[c] / f).read_text().strip() == "500"  # its own cgroup, as the host sees it
        assert {str(f): f.read_text() for fs in above.values() for f in fs} == before
    finally:
        for c, v in was.items():
            (own[c] / files[c]).write_text(v)
