"""Shared fixtures. Every test leaves the machine as it found it: the session checks
that no faultlab namespace, link, qdisc, cgroup, lease or process is left behind."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = os.geteuid() == 0
#: a qdisc line of a faultlab fault (handles fXXX:/eXXX:, see faultlab.injectors.nic)
FAULT_QDISC = re.compile(r"qdisc \w+ [ef][0-9a-f]{3}: ")
needs_root = pytest.mark.skipif(not ROOT, reason="needs root (namespaces, qdiscs, cgroups)")


def proc_argvs():
    """Yield ``(pid, argv)`` of every process on this host now: argv is
    ``/proc/PID/cmdline`` split at NUL bytes (bytes; a trailing b"" after the last
    argument); a process that ends while it is read is skipped."""
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        yield int(p.name), argv


def residue() -> dict[str, set]:
    """What faultlab-made objects exist on this machine right now."""
    out: dict[str, set] = {}
    cp = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    out["netns"] = {l.split()[0] for l in cp.stdout.splitlines() if l.startswith("fl")}
    out["links"] = {p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith("fl")}
    cp = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True)
    out["qdiscs"] = {l for l in cp.stdout.splitlines() if FAULT_QDISC.search(l) or "ingress" in l}
    out["cgroups"] = {str(p) for p in Path("/sys/fs/cgroup").glob("**/faultlab-*")}
    lease_dir = Path(os.environ["FAULTLAB_LEASE_DIR"])
    out["leases"] = {p.name for p in lease_dir.glob("*")} if lease_dir.exists() else set()
    me = os.getpid()
    procs = set()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == me:
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(k in cmd for k in ("faultlab-watchdog", "faultlab-pause", "faultlab.benchmarks", "faultlab.probe")):
            try:  # only processes of this test session (other sessions may run beside it)
                mine = f"FAULTLAB_LEASE_DIR={lease_dir}".encode() in (p / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if mine:
                procs.add(f"{p.name} {cmd[:80]}")
    out["processes"] = procs
    # stress / mem-bw workers (python3 -I -c CODE MARK PIDFILE ...) of this session's faults
    workers = set()
    for pid, argv in proc_argvs():
        if any(a.startswith(b"faultlab-") and a.endswith((b"stress", b"membw", b"mem-bw")) for a in argv) and \
                any(a.startswith(str(lease_dir).encode()) for a in argv):
            workers.add(f"{pid} {' '.join(x.decode(errors='replace') for x in argv[4:6])}")
    out["workers"] = workers
    # testbed state files of this session
    tb_dir = Path(os.environ["FAULTLAB_STATE_DIR"]) / "testbeds"
    # (state files, also in a backend's subfolder such as docker/; an empty folder is no state)
    out["testbed_state"] = {str(p.relative_to(tb_dir)) for p in tb_dir.rglob("*") if not p.is_dir()} if tb_dir.exists() else set()
    # agent command/status files: the folder tests point FAULTLAB_AGENT_DIR at, and the default
    agent_dirs = {Path("/run/faultlab/agents")}
    if os.environ.get("FAULTLAB_AGENT_DIR"):
        agent_dirs.add(Path(os.environ["FAULTLAB_AGENT_DIR"]))
    out["agent_files"] = {str(p) for d in agent_dirs if d.is_dir() for pat in ("*.gc-storm*", "*.agent", "*.agent.tmp*")
                          for p in d.glob(pat)}
    # iptables rules faultlab adds (testbed FORWARD ACCEPT, commented faultlab-<id>)
    cp = subprocess.run(["iptables", "-S"], capture_output=True, text=True) if _which("iptables") else None
    out["iptables"] = {l for l in cp.stdout.splitlines() if "faultlab" in l} if cp and cp.returncode == 0 else set()
    # qdiscs inside namespaces (nic-slow on a netns node shapes its interface there)
    nsq = set()
    for ns in out["netns"]:
        cp = subprocess.run(["tc", "-n", ns, "qdisc", "show"], capture_output=True, text=True)
        nsq |= {f"{ns}: {l}" for l in cp.stdout.splitlines() if FAULT_QDISC.search(l) or "ingress" in l}
    out["netns_qdiscs"] = nsq
    # docker testbed containers and networks (label faultlab.testbed) on faultlab's own
    # dockerd, when it is up (the cached node image is not residue)
    out["docker"] = _docker_objects()
    return out


def _docker_objects() -> set[str]:
    from faultlab.nodes import dockerd as d

    if os.environ.get("FAULTLAB_DOCKER_HOST") is None and not d.SOCKET.exists():
        return set()
    try:
        cli = d.client(timeout_s=10)
    except Exception:  # a daemon that does not answer holds nothing we can see
        return set()
    try:
        flt = {"label": "faultlab.testbed"}
        out = {f"container {c.name}" for c in cli.containers.list(all=True, filters=flt)}
        return out | {f"network {n.name}" for n in cli.networks.list(filters=flt)}
    finally:
        cli.close()


def _which(prog: str) -> bool:
    import shutil

    return shutil.which(prog) is not None


@pytest.fixture(scope="session", autouse=True)
def _isolated_state(tmp_path_factory):
    """Leases and testbed state of this session live in a temporary folder, so tests
    never see or touch the faults of a real user on the same machine."""
    d = tmp_path_factory.mktemp("faultlab-state")
    os.environ["FAULTLAB_LEASE_DIR"] = str(d / "leases")
    os.environ["FAULTLAB_STATE_DIR"] = str(d)
    yield


def left_since(before: dict[str, set], settle_s: float = 2.0) -> dict[str, set]:
    """What exists now of faultlab's that did not in ``before`` (a ``residue()``).
    A process just signalled may take a moment to exit: what is left is looked at
    again for up to ``settle_s`` seconds, and only what stays counts."""
    import time

    end = time.monotonic() + settle_s
    while True:
        after = residue()
        left = {k: after[k] - before[k] for k in after if after[k] - before[k]}
        if not left or time.monotonic() >= end:
            return left
        time.sleep(0.1)


@pytest.fixture(scope="session", autouse=True)
def _no_residue_after_session(_isolated_state):
    before = residue()
    yield
    left = left_since(before)
    assert not left, f"the test session left faultlab state behind: {left}"


@pytest.fixture
def no_residue():
    """Assert that the test itself left nothing behind (compared with its start)."""
    before = residue()
    yield
    left = left_since(before)
    assert not left, f"left behind: {left}"


@pytest.fixture
def testbed2():
    """Two netns nodes on a faultlab bridge, torn down afterwards."""
    if not ROOT:
        pytest.skip("needs root")
    from faultlab.nodes.testbed import NetnsTestbed

    tb = NetnsTestbed(2).up()
    try:
        yield tb
    finally:
        assert tb.down() == []


@pytest.fixture
def busy_loop():
    """A CPU-bound child process (pure-Python busy loop); killed by its PID after."""
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def cpu_rate(pid: int, seconds: float = 1.5) -> float:
    """CPU-seconds per second the process used over ``seconds`` (user+system)."""
    import time

    import psutil

    p = psutil.Process(pid)
    c0 = sum(p.cpu_times()[:2])
    time.sleep(seconds)
    return (sum(p.cpu_times()[:2]) - c0) / seconds


@pytest.fixture(scope="session")
def dockerd():
    """faultlab's own dockerd (``--iptables=false``, its own socket and data root),
    started when none answers and stopped after the session if this session started
    it. Skips without root or dockerd (fails under CI=true: CI installs docker.io)."""
    import shutil

    if not ROOT or not shutil.which("dockerd"):
        if os.environ.get("CI"):
            pytest.fail("CI needs root and dockerd (apt-get install docker.io)")
        pytest.skip("needs root and dockerd")
    from faultlab.nodes import dockerd as d

    started = d.ensure_started()
    yield d.client()
    if started:
        d.stop()


def docker_residue(cli) -> set[str]:
    """faultlab testbed containers and networks, and images other than the node image."""
    from faultlab.nodes.image import IMAGE

    flt = {"label": "faultlab.testbed"}
    out = {f"container {c.name}" for c in cli.containers.list(all=True, filters=flt)}
    out |= {f"network {n.name}" for n in cli.networks.list(filters=flt)}
    out |= {f"image {t}" for i in cli.images.list() for t in (i.tags or [i.id]) if t != IMAGE}
    return out
