"""io-slow, cpu-contention --mode stress and mem-bw on real parts: blk-throttle on this
machine's real disk (direct I/O through dd), pinned worker processes, leases that end
everything after the controller is SIGKILLed.

Not tested for real here (this machine's cgroup v2 has no controllers enabled): the v2
``io.max`` path is checked only as the exact commands planned
(``test_io_slow_plan_v2_exact_commands``); the partition -> whole-disk step is checked on a
simulated sysfs (this machine's disk, vda, has no partitions).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faultlab.errors import BadInput, Refused
from faultlab.injectors import FAULT_TYPES, PLANNED_TYPES, CpuContention, CpuStress, IoSlow, MemBw, apply, build
from faultlab.injectors.io import block_device_of, parse_bytes_rate, parse_iops
from faultlab.lifecycle.lease import load_leases
from faultlab.injectors.cgroups import MOVE_SH, RMDIR_SH
from faultlab.injectors.stress import SCAN_SH, STOP_SH, parse_cpu_list
from faultlab.nodes import LocalNode
from tests.helpers import ROOT, cpu_rate, real_disk_dir, wait_for

NODE = LocalNode("local")


# -- parsing and options -----------------------------------------------------------------

@pytest.mark.parametrize("text,want", [
    ("10mb", 10_000_000), ("512kb", 512_000), ("1gb", 10**9), ("10MB", 10_000_000), ("1.5mb", 1_500_000),
    ("1mib", 2**20), ("4KiB", 4096), ("100b", 100), (" 5mb ", 5_000_000),
])
def test_parse_bytes_rate(text, want):
    assert parse_bytes_rate(text, "--write-bps") == want


@pytest.mark.parametrize("text,match", [
    ("10 mb", "space"), ("10mbit", "bits are for network"), ("10mbps", "bits are for network"), ("10Mb", "bits"),
    ("10", "no unit"), (10, "no unit"), ("-5mb", "negative"), ("0mb", "not positive"), ("10mb/s", "/s"),
    ("10xb", "unknown unit"), ("", "empty"), ("fast", "not a rate"),
])
def test_parse_bytes_rate_refuses_typos(text, match):
    with pytest.raises(BadInput, match=match) as e:
        parse_bytes_rate(text, "--read-bps")
    assert str(e.value).startswith("--read-bps: ") and "(" in str(e.value)  # field named, fix given


def test_parse_iops():
    assert parse_iops("200") == 200
    for bad in ("0", "-3", "2.5", "200iops", "", str(2**32)):
        with pytest.raises(BadInput, match="--write-iops"):
            parse_iops(bad, "--write-iops")


def test_cpu_list():
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]


def test_types_registered():
    assert FAULT_TYPES["io-slow"] is IoSlow and FAULT_TYPES["mem-bw"] is MemBw
    assert "io-slow" not in PLANNED_TYPES and "mem-bw" not in PLANNED_TYPES


def test_build_options(busy_loop):
    t = str(busy_loop.pid)
    inj = build("io-slow", NODE, target=t, duration_s=5, opts={"--path": "/tmp", "--write-bps": "5mb", "--read-iops": "100"})
    assert isinstance(inj, IoSlow) and inj.caps == {"write_bps": 5_000_000, "read_iops": 100}
    assert inj.params["write_bytes_per_s"] == 5_000_000 and inj.severity == 100.0  # max(1e8/5e6, 1e4/100)
    with pytest.raises(BadInput, match="--path"):
        build("io-slow", NODE, target=t, duration_s=5, opts={"--write-bps": "5mb"})
    with pytest.raises(BadInput, match="at least one cap"):
        build("io-slow", NODE, target=t, duration_s=5, opts={"--path": "/tmp"})
    with pytest.raises(BadInput, match="--write-bps: .*bits"):
        build("io-slow", NODE, target=t, duration_s=5, opts={"--path": "/tmp", "--write-bps": "40mbit"})
    with pytest.raises(BadInput, match="--target"):
        build("io-slow", NODE, target=None, duration_s=5, opts={"--path": "/tmp", "--write-bps": "5mb"})

    s = build("cpu-contention", NODE, target=t, duration_s=5, opts={"--mode": "stress", "--workers": "3"})
    assert isinstance(s, CpuStress) and s.workers == 3 and s.type == "cpu-contention"
    assert isinstance(build("cpu-contention", NODE, target=t, duration_s=5, opts={"--mode": "stress"}), CpuStress)
    assert isinstance(build("cpu-contention", NODE, target=t, duration_s=5, opts={"--cpu-fraction": "0.5"}), CpuContention)
    with pytest.raises(BadInput, match="--mode"):
        build("cpu-contention", NODE, target=t, duration_s=5, opts={"--mode": "burn"})
    with pytest.raises(BadInput, match="--workers: applies to --mode stress"):
        build("cpu-contention", NODE, target=t, duration_s=5, opts={"--cpu-fraction": "0.5", "--workers": "2"})
    with pytest.raises(BadInput, match="--cpu-fraction"):
        build("cpu-contention", NODE, target=t, duration_s=5, opts={"--mode": "stress", "--cpu-fraction": "0.5"})
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(BadInput, match="--workers"):
            build("mem-bw", NODE, target=t, duration_s=5, opts={"--workers": bad})
    assert isinstance(build("mem-bw", NODE, target=t, duration_s=5, opts={"--workers": "1"}), MemBw)
    with pytest.raises(BadInput, match="--path: does not apply"):
        build("mem-bw", NODE, target=t, duration_s=5, opts={"--path": "/tmp"})


# -- the device behind a path --------------------------------------------------------------

def test_path_on_fs_without_block_device():
    for path, fs in (("/dev/shm", "tmpfs"), ("/proc/self", "proc")):
        if not Path(path).exists():
            continue
        with pytest.raises(BadInput, match=f"--path: '{path}' is on {fs} .*with no block device") as e:
            block_device_of(NODE, path)
        assert e.value.fix and "findmnt" in e.value.fix
    with pytest.raises(BadInput, match="--path: no such path"):
        block_device_of(NODE, "/no/such/faultlab/path")


def test_path_on_real_disk_is_whole_disk():
    d = real_disk_dir()
    if d is None:
        pytest.skip("no filesystem on a block device here")
    dev = block_device_of(NODE, str(d))
    st = os.stat(d)
    assert dev["fs_dev"] == f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    assert Path(f"/sys/dev/block/{dev['dev']}").exists()
    assert not Path(f"/sys/dev/block/{dev['dev']}/partition").exists()  # a whole disk
    node_path = Path("/dev") / dev["name"]
    if node_path.exists():  # a block device node names itself
        assert block_device_of(NODE, str(node_path))["dev"] == dev["dev"]


class _FakePartitionNode(LocalNode):
    """A node whose /tmp sits on partition 8:1 of disk 8:0 (simulated sysfs)."""

    def run(self, argv, **kw):
        assert argv[:2] == ["stat", "-L"]
        return subprocess.CompletedProcess(argv, 0, f"{os.makedev(8, 1)} 0 0 directory\n", "")

    def exists(self, path):
        return str(path) in ("/sys/dev/block/8:1", "/sys/dev/block/8:1/partition", "/sys/dev/block/8:0")

    def read_file(self, path):
        return {"/sys/dev/block/8:1/../dev": "8:0\n", "/sys/dev/block/8:0/uevent": "MAJOR=8\nMINOR=0\nDEVNAME=sda\n"}[str(path)]


def test_partition_maps_to_parent_disk():
    """Simulated sysfs: no partitioned disk on this machine (real check missing here)."""
    assert block_device_of(_FakePartitionNode("fake"), "/tmp") == {"dev": "8:0", "name": "sda", "fs_dev": "8:1"}


def test_io_slow_plan_v2_exact_commands():
    """cgroup v2 io.max at the root of the hierarchy (no subtree_control write: the root
    is exempt from the no-internal-process rule): the plan only (this machine's v2
    hierarchy has no io controller; the real v2 placement check is
    tests/injectors/test_cgroup_nesting.py::test_v2_nesting_on_the_real_unified_hierarchy)."""
    inj = IoSlow(NODE, [123, 456], "/data", read_bps=10_000_000, write_iops=200, fault_id="io-abc123")
    facts = {
        "hierarchy": {"version": 2, "mount": "/sys/fs/cgroup", "controller": "io"},
        "orig": {123: "/", 456: "/"}, "starts": ["9123", "9456"], "home": "/", "enable_subtree": False,
        "cgroup": "/sys/fs/cgroup/faultlab-io-abc123",
        "device": {"dev": "259:0", "name": "nvme0n1", "fs_dev": "259:1"},
    }
    p = inj.plan(facts)
    pr = 'printf "%s\\n" "$1" > "$2"'
    d = "/sys/fs/cgroup/faultlab-io-abc123"
    assert [c.argv for c in p.inject] == [
        ("mkdir", d),
        ("sh", "-c", pr, "sh", "259:0 rbps=10000000 wiops=200", f"{d}/io.max"),
        ("sh", "-c", MOVE_SH, "sh", "123", f"{d}/cgroup.procs", "9123"),
        ("sh", "-c", MOVE_SH, "sh", "456", f"{d}/cgroup.procs", "9456"),
    ]
    rv = [c.argv for c in p.revert]
    assert rv[0] == ("sh", "-c", pr, "sh", "259:0 rbps=max wbps=max riops=max wiops=max", f"{d}/io.max")
    from faultlab.injectors.cgroups import BACK_SH as back_sh

    # each PID goes back only while it is still in faultlab's cgroup
    assert rv[1] == ("sh", "-c", back_sh, "sh", "123", f"{d}/cgroup.procs", "/sys/fs/cgroup/cgroup.procs")
    assert rv[2] == ("sh", "-c", back_sh, "sh", "456", f"{d}/cgroup.procs", "/sys/fs/cgroup/cgroup.procs")
    assert rv[3][:2] == ("sh", "-c") and rv[3][-3:] == (f"{d}/cgroup.procs", "/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/cgroup.procs")
    assert rv[4] == ("sh", "-c", RMDIR_SH, "sh", d)


# -- io-slow on the real disk ---------------------------------------------------------------

needs_disk = pytest.mark.skipif(not ROOT or not Path("/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device").exists(),
                                reason="needs root and the cgroup v1 blkio controller with blk-throttle")


def _dd_child(args: list[str]) -> subprocess.Popen:
    """A shell that waits for a line on stdin, then becomes ``dd ARGS``: its PID can be
    put under a fault before the I/O starts."""
    return subprocess.Popen(["sh", "-c", 'read go; exec dd "$@" 2>/dev/null', "sh", *args], stdin=subprocess.PIPE, text=True)


def _timed(p: subprocess.Popen, timeout: float = 60) -> float:
    t = time.perf_counter()
    p.stdin.write("go\n")
    p.stdin.close()
    assert p.wait(timeout) == 0
    return time.perf_counter() - t


@pytest.fixture
def disk_dir(tmp_path):
    d = real_disk_dir()
    if d is None:
        pytest.skip("no filesystem on a real block device here: the end-to-end io-slow check is missing")
    work = Path(d) / f"faultlab-io-test-{os.getpid()}-{time.monotonic_ns()}"
    work.mkdir()
    try:
        yield work
    finally:
        for f in work.iterdir():
            f.unlink()
        work.rmdir()


@needs_disk
def test_io_slow_caps_direct_io_on_real_disk(disk_dir, no_residue):
    """20 MiB of direct writes, then 10 MiB of direct reads, without and with a 5 MB/s
    cap: the capped ones take about size / cap (loose bounds)."""
    f = str(disk_dir / "data")
    write = ["if=/dev/zero", f"of={f}", "bs=1M", "count=20", "oflag=direct"]
    read = [f"if={f}", "of=/dev/null", "bs=1M", "count=10", "iflag=direct"]
    base_w = _timed(_dd_child(write))
    base_r = _timed(_dd_child(read))

    pw = _dd_child(write)
    active = apply(IoSlow(NODE, [pw.pid], str(disk_dir), write_bps=5_000_000, read_bps=5_000_000), 60)
    try:
        ev = active.evidence["verify"]
        assert ev["ok"], ev
        assert ev["limits"] == {"read_bps": 5_000_000, "write_bps": 5_000_000}
        assert f"/faultlab-{active.fault_id}" in Path(f"/proc/{pw.pid}/cgroup").read_text()
        capped_w = _timed(pw)
    finally:
        pw.kill() if pw.poll() is None else None
        assert active.revert() == "reverted"
    w_expected = 20 * 2**20 / 5e6  # 4.2 s
    assert 0.6 * w_expected < capped_w < 3 * w_expected, (capped_w, base_w)
    assert capped_w > 2 * base_w, (capped_w, base_w)
    served = active.evidence["at_revert"]["blkio.throttle.io_service_bytes"]
    written = next(int(line.split()[2]) for line in served if line.split()[1] == "Write")
    assert written >= 20 * 2**20, served

    pr = _dd_child(read)
    active = apply(IoSlow(NODE, [pr.pid], str(disk_dir), read_bps=5_000_000), 60)
    try:
        capped_r = _timed(pr)
    finally:
        pr.kill() if pr.poll() is None else None
        assert active.revert() == "reverted"
    r_expected = 10 * 2**20 / 5e6  # 2.1 s
    assert 0.6 * r_expected < capped_r < 3 * r_expected, (capped_r, base_r)
    assert capped_r > 2 * base_r, (capped_r, base_r)
    # a target still alive goes back exactly where it was
    p = subprocess.Popen(["sleep", "30"])
    try:
        cg0 = Path(f"/proc/{p.pid}/cgroup").read_text()
        a = apply(IoSlow(NODE, [p.pid], str(disk_dir), write_bps=5_000_000), 30)
        assert a.revert() == "reverted"
        assert Path(f"/proc/{p.pid}/cgroup").read_text() == cg0
    finally:
        p.kill()
        p.wait()


@needs_disk
def test_io_slow_iops_cap(disk_dir, no_residue):
    """100 direct 4 KiB writes under a 50 IO/s cap take about 2 s."""
    p = _dd_child(["if=/dev/zero", f"of={disk_dir / 'small'}", "bs=4k", "count=100", "oflag=direct"])
    active = apply(IoSlow(NODE, [p.pid], str(disk_dir), write_iops=50), 60)
    try:
        assert active.evidence["verify"]["limits"] == {"write_iops": 50}
        took = _timed(p)
    finally:
        p.kill() if p.poll() is None else None
        assert active.revert() == "reverted"
    assert 1.0 < took < 8.0, took


@needs_disk
def test_io_slow_refuses_conflicts(disk_dir, no_residue):
    p = subprocess.Popen(["sleep", "60"])
    try:
        a = apply(IoSlow(NODE, [p.pid], str(disk_dir), write_bps=5_000_000), 30)
        try:
            with pytest.raises(Refused, match="--target: process .* already under a faultlab io fault"):
                IoSlow(NODE, [p.pid], str(disk_dir), read_bps=1_000_000).probe()
        finally:
            assert a.revert() == "reverted"
    finally:
        p.kill()
        p.wait()
    with pytest.raises(BadInput, match="no process"):
        IoSlow(NODE, [2**22 + 17], str(disk_dir), write_bps=5_000_000).probe()
    with pytest.raises(BadInput, match="no block device"):
        IoSlow(NODE, [os.getpid()], "/dev/shm", write_bps=5_000_000).probe()


@needs_disk
def test_io_slow_v1_nests_and_keeps_the_targets_own_cap(disk_dir, no_residue):
    """A target in its own blkio cgroup capped at 2 MB/s of direct writes, under a
    looser 50 MB/s io-slow: the faultlab cgroup is made inside the target's cgroup and
    (v1 blk-throttle is flat) carries a copy of its rules, so 4 MiB still take about
    2 s, as without the fault; a read cap of the target's cgroup on the same disk is
    copied too. Revert: back in its cgroup, whose rules are untouched. (A faultlab
    cgroup at the blkio root would drop the target's cap: the write would take a tenth
    of that.)"""
    own = Path(f"/sys/fs/cgroup/blkio/fltest-own-{os.getpid()}")
    own.mkdir()
    dev = block_device_of(NODE, str(disk_dir))["dev"]
    f = str(disk_dir / "data")
    try:
        (own / "blkio.throttle.write_bps_device").write_text(f"{dev} 2000000\n")
        (own / "blkio.throttle.read_bps_device").write_text(f"{dev} 7000000\n")
        pw = _dd_child(["if=/dev/zero", f"of={f}", "bs=1M", "count=4", "oflag=direct"])
        (own / "cgroup.procs").write_text(str(pw.pid))
        # force=True has no effect on nesting: a cgroup with limits of its own is nested
        # into, never left for the blkio root
        active = apply(IoSlow(NODE, [pw.pid], str(disk_dir), write_bps=50_000_000, force=True), 60)
        try:
            took = _timed(pw)
            cg, ev = active.facts["cgroup"], active.evidence["verify"]
            copied = (Path(cg) / "blkio.throttle.read_bps_device").read_text().split()
        finally:
            pw.kill() if pw.poll() is None else None
            assert active.revert() == "reverted"
        assert took > 0.5 * 4 * 2**20 / 2e6, f"4 MiB in {took:.2f} s: the target's own 2 MB/s cap was lifted"
        assert cg == str(own / f"faultlab-{active.fault_id}")
        assert ev["ok"] and ev["limits"] == {"write_bps": 2_000_000}, ev
        assert copied == [dev, "7000000"]
        assert (own / "blkio.throttle.write_bps_device").read_text().split() == [dev, "2000000"]
        p = subprocess.Popen(["sleep", "30"])
        try:
            (own / "cgroup.procs").write_text(str(p.pid))
            a = apply(IoSlow(NODE, [p.pid], str(disk_dir), write_bps=5_000_000), 30)
            assert a.revert() == "reverted"
            assert f":/{own.name}" in Path(f"/proc/{p.pid}/cgroup").read_text()
        finally:
            p.kill()
            p.wait()
    finally:
        for q in (own / "cgroup.procs").read_text().split():
            Path("/sys/fs/cgroup/blkio/cgroup.procs").write_text(q)
        own.rmdir()


# -- SIGKILLed controller --------------------------------------------------------------------

def _sigkill_controller(code: str) -> str:
    """Run ``code`` (which prints the fault id once applied) in a controller process and
    SIGKILL it; returns the fault id."""
    ctl = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        fault_id = ctl.stdout.readline().strip()
    finally:
        os.kill(ctl.pid, signal.SIGKILL)
        ctl.wait()
    assert fault_id, "the controller applied the fault"
    return fault_id


def _workers_of(pidfile: str, marker: str) -> list[str]:
    return subprocess.run(["sh", "-c", SCAN_SH, "sh", pidfile, marker], capture_output=True, text=True).stdout.split()


@needs_disk
def test_io_slow_ends_after_controller_sigkill(disk_dir, no_residue):
    p = subprocess.Popen(["sleep", "60"])
    try:
        cg0 = Path(f"/proc/{p.pid}/cgroup").read_text()
        fid = _sigkill_controller(
            "from faultlab.injectors import IoSlow, apply\nfrom faultlab.nodes import LocalNode\nimport time\n"
            f"a = apply(IoSlow(LocalNode('local'), [{p.pid}], {str(disk_dir)!r}, write_bps=5_000_000), 1.0, grace_s=0.0)\n"
            "print(a.fault_id, flush=True)\ntime.sleep(60)\n"
        )
        cg = Path(f"/sys/fs/cgroup/blkio/faultlab-{fid}")
        assert wait_for(lambda: not cg.exists() and not load_leases(NODE), 15), (cg.exists(), load_leases(NODE))
        assert Path(f"/proc/{p.pid}/cgroup").read_text() == cg0
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize("cls,kind,marker", [(CpuStress, "cpu", "faultlab-stress"), (MemBw, "mem", "faultlab-membw")])
def test_workers_end_after_controller_sigkill(busy_loop, no_residue, cls, kind, marker):
    fid = _sigkill_controller(
        f"from faultlab.injectors import {cls.__name__}, apply\nfrom faultlab.nodes import LocalNode\nimport time\n"
        f"a = apply({cls.__name__}(LocalNode('local'), [{busy_loop.pid}], 1.0, workers=1), 1.0, grace_s=0.0, verify=False)\n"
        "print(a.fault_id, flush=True)\ntime.sleep(60)\n"
    )
    pidfile = str(Path(os.environ["FAULTLAB_LEASE_DIR"]) / f"{fid}.{kind}.pid")
    assert wait_for(lambda: not _workers_of(pidfile, marker) and not load_leases(NODE) and not Path(pidfile).exists(), 15), (
        _workers_of(pidfile, marker), load_leases(NODE), Path(pidfile).exists())


# -- cpu-contention --mode stress --------------------------------------------------------------

def _pin(pid: int, cpus: set[int]) -> None:
    os.sched_setaffinity(pid, cpus)


def test_cpu_stress_slows_pinned_busy_loop(busy_loop, no_residue):
    cpu = min(os.sched_getaffinity(0))
    _pin(busy_loop.pid, {cpu})
    base = cpu_rate(busy_loop.pid)
    assert base > 0.2
    inj = CpuStress(NODE, [busy_loop.pid], 60, workers=2)
    active = apply(inj, 60)
    try:
        ev = active.evidence["verify"]
        assert ev["ok"], ev
        assert [w["cpu"] for w in ev["workers"]] == [cpu, cpu] and all(w["pinned"] for w in ev["workers"])
        assert inj.cpus == [cpu] and inj.severity == 2.0 and inj.params["mode"] == "stress"
        for w in ev["workers"]:  # really pinned, as the kernel sees it
            assert os.sched_getaffinity(w["pid"]) == {cpu}
        during = cpu_rate(busy_loop.pid)
        pidfile = active.facts["pidfile"]
        assert len(_workers_of(pidfile, "faultlab-stress")) == 2
        with pytest.raises(Refused, match="already has faultlab cpu-contention workers"):
            CpuStress(NODE, [busy_loop.pid], 60, workers=1).probe()
    finally:
        assert active.revert() == "reverted"
    # two busy workers on the target's only CPU leave it about a third (loose: the
    # machine is shared)
    assert during < 0.75 * base, (base, during)
    assert not _workers_of(pidfile, "faultlab-stress") and not Path(pidfile).exists()
    assert cpu_rate(busy_loop.pid) > 0.8 * during


def test_cpu_stress_default_workers_one_per_allowed_cpu(busy_loop, no_residue):
    allowed = sorted(os.sched_getaffinity(busy_loop.pid))
    active = apply(CpuStress(NODE, [busy_loop.pid], 30), 30)
    try:
        ev = active.evidence["verify"]
        assert ev["ok"], ev
        assert sorted(w["cpu"] for w in ev["workers"]) == allowed
        assert active.injector.severity == 1.0
    finally:
        assert active.revert() == "reverted"


def test_stress_workers_end_by_themselves_at_deadline(busy_loop, no_residue):
    """Workers exit at their own deadline even when nobody reverts (the lease watchdog
    here would only act 10 s later)."""
    active = apply(CpuStress(NODE, [busy_loop.pid], 6, workers=1), 6, verify=False)
    pidfile = active.facts["pidfile"]
    try:
        assert wait_for(lambda: len(_workers_of(pidfile, "faultlab-stress")) == 1, 5)
        assert wait_for(lambda: not _workers_of(pidfile, "faultlab-stress"), 15)
        assert load_leases(NODE)  # the lease is still there: the workers ended by themselves
    finally:
        assert active.revert() in ("reverted", "expired")
    assert not Path(pidfile).exists()


def test_stop_script_never_kills_a_reused_pid(tmp_path, no_residue):
    """A PID in the pidfile whose cmdline is not our worker's (the PID was reused) is left
    alone; the pidfile is removed."""
    other = subprocess.Popen(["sleep", "30"])
    try:
        pf = tmp_path / "x.cpu.pid"
        pf.write_text(f"{other.pid}\n{2**22 + 17}\n")
        rc = subprocess.run(["sh", "-c", STOP_SH, "sh", str(pf), "faultlab-stress"], timeout=10).returncode
        assert rc == 0 and not pf.exists()
        assert other.poll() is None, "an unrelated process was killed"
    finally:
        other.kill()
        other.wait()


def test_stress_missing_target():
    with pytest.raises(BadInput, match="--target: no process"):
        CpuStress(NODE, [2**22 + 17], 10).probe()
    with pytest.raises(BadInput, match="--target"):
        MemBw(NODE, [], 10)


# -- mem-bw -------------------------------------------------------------------------------------

def test_mem_bw_workers_stream_beside_target(busy_loop, no_residue):
    inj = MemBw(NODE, [busy_loop.pid], 60, workers=1)
    active = apply(inj, 60)
    try:
        ev = active.evidence["verify"]
        assert ev["ok"], ev
        (w,) = ev["workers"]
        assert w["pinned"] and w["rss_bytes"] >= 0.9 * 256 * 2**20
        assert inj.params["buffer_bytes"] >= 256 * 2**20 and inj.severity == 1.0
        assert ev["memcpy_gbps_before"] > 0 and ev["memcpy_gbps_during"] > 0  # evidence only
        assert ev["worker_cpu_rate"][str(w["pid"])] > 0.05
        pidfile = active.facts["pidfile"]
        with pytest.raises(Refused, match="already has faultlab mem-bw workers"):
            MemBw(NODE, [busy_loop.pid], 60, workers=1).probe()
    finally:
        assert active.revert() == "reverted"
    assert not _workers_of(pidfile, "faultlab-membw") and not Path(pidfile).exists()
    assert not Path(f"/proc/{w['pid']}/cmdline").exists() or b"faultlab-membw" not in Path(f"/proc/{w['pid']}/cmdline").read_bytes()


# A memory-bound target: copies a 64 MiB buffer over and over, pinned to one CPU
# (argv[1]), printing the number of copies done after each one.
_COPY_LOOP = """
import os, sys
import numpy as np
os.sched_setaffinity(0, {int(sys.argv[1])})
src = np.ones(8 * 2**20); dst = np.empty_like(src)
n = 0
while True:
    np.copyto(dst, src); n += 1
    print(n, flush=True)
"""


def _copy_rate(p: subprocess.Popen, seconds: float) -> float:
    """Copies per second the copy loop ``p`` reports over ``seconds``."""
    def last_within(t_end: float) -> int:
        n = int(p.stdout.readline())
        while time.monotonic() < t_end:
            n = int(p.stdout.readline())
        return n

    n0 = last_within(time.monotonic() + 0.3)
    t0 = time.monotonic()
    n1 = last_within(t0 + seconds)
    return (n1 - n0) / (time.monotonic() - t0)


def test_mem_bw_slows_a_memory_bound_target(no_residue):
    """The point of mem-bw: a memory-bound target gets slower. Its copy rate with the
    workers beside it, as a ratio of its rate before (same run, same machine; a
    generous bound: at most 0.8, where sharing its one CPU and the memory bus with a
    streaming worker gives about 0.5 here); after revert it recovers. (On this
    2-core machine the worker shares the target's CPU, so CPU time and memory
    bandwidth both count: the test shows the target slows, not which of the two.)"""
    cpu = sorted(os.sched_getaffinity(0))[-1]
    p = subprocess.Popen([sys.executable, "-c", _COPY_LOOP, str(cpu)], stdout=subprocess.PIPE, text=True)
    try:
        before = _copy_rate(p, 2.0)
        active = apply(MemBw(NODE, [p.pid], 60, workers=1), 60)
        try:
            during = _copy_rate(p, 2.0)
        finally:
            assert active.revert() == "reverted"
        after = _copy_rate(p, 2.0)
    finally:
        p.kill()
        p.wait()
    assert before > 0 and during / before < 0.8, f"copies/s before {before:.1f}, during {during:.1f}"
    assert after > during, f"copies/s during {during:.1f}, after {after:.1f}"
    assert active.evidence["verify"]["ok"]


def test_mem_bw_refuses_more_memory_than_available(busy_loop):
    with pytest.raises(Refused, match="--workers: .*more than half"):
        MemBw(NODE, [busy_loop.pid], 10, workers=1000).probe()


def test_io_slow_severity_with_only_one_kind_of_cap():
    assert IoSlow(NODE, [123], "/tmp", write_bps=5_000_000).severity == 20.0
    assert IoSlow(NODE, [123], "/tmp", write_iops=100).severity == 100.0
