"""A cgroup fault must only slow. The faultlab cgroup is made
inside the target's *own* cgroup (v1 and v2), so every limit the target already had
still holds during the fault.

What runs for real here: this kernel binds cpu, io (blkio), pids and memory to cgroup
v1; its cgroup2 hierarchy (``/sys/fs/cgroup/unified``) offers only ``hugetlb``, and a
fresh cgroup2 mounted in a private mount + cgroup namespace offers the same (checked:
``unshare -C -m sh -c 'mount -t cgroup2 none D; cat D/cgroup.controllers'`` prints
``hugetlb``). So the v2 *placement* (child path, the no-internal-process ordering of
the moves and the ``cgroup.subtree_control`` writes, the revert, the refusal) runs on
the real unified hierarchy with the hugetlb controller standing in for cpu/io, and the
limit that must survive the move is a real ``hugetlb.2MB.max`` / ``rsvd.max`` on the
target's own cgroup (a 2 MiB huge page the kernel must refuse). The ``cpu.max`` /
``io.max`` writes themselves are checked as planned argv; on a host whose v2 hierarchy
has cpu and pids, ``test_v2_cpu_quota_keeps_the_targets_pids_max`` runs the whole
fault for real and skips here, naming the missing controllers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faultlab.errors import Refused
from faultlab.injectors import CpuContention, IoSlow, apply, cgroups
from faultlab.injectors.cgroups import MOVE_SH, RMDIR_SH
from faultlab.nodes import LocalNode
from tests.helpers import ROOT, needs_root

NODE = LocalNode("local")
#: argv prefix: join cgroup folder $1, then exec the rest (a process born in it)
_IN_CGROUP = ["sh", "-c", 'printf "%s\\n" $$ > "$1/cgroup.procs"; shift; exec "$@"', "sh"]
PR = 'printf "%s\\n" "$1" > "$2"'


def _v2_mount() -> str | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        if post.split()[:1] == ["cgroup2"]:
            return pre.split()[4]
    return None


V2 = _v2_mount()
needs_v2 = pytest.mark.skipif(not ROOT or V2 is None, reason="needs root and a cgroup2 mount")


# -- the path read from /proc/PID/cgroup is untrusted ---------------------------------------

@pytest.mark.parametrize("home", ["/../../etc", "/a/../b", "a/b", "/a//b", "/a/", "/x (deleted)", "/a\nb", "/./a"])
def test_cgroup_path_from_proc_must_be_clean(home):
    h = cgroups.Hierarchy(2, "/sys/fs/cgroup", "cpu")
    with pytest.raises(Refused, match="--target: the cgroup path .* is not a clean path"):
        cgroups.child_path(h, home, "faultlab-cpu-abc123")


def test_child_path_is_inside_the_targets_cgroup():
    h = cgroups.Hierarchy(2, "/sys/fs/cgroup", "cpu")
    assert cgroups.child_path(h, "/", "faultlab-cpu-abc123") == "/sys/fs/cgroup/faultlab-cpu-abc123"
    assert cgroups.child_path(h, "/system.slice/docker-1.scope", "faultlab-cpu-abc123") == \
        "/sys/fs/cgroup/system.slice/docker-1.scope/faultlab-cpu-abc123"
    with pytest.raises(ValueError):
        cgroups.child_path(h, "/a", "../faultlab-cpu-abc123")


# -- v2 plans (the cpu.max / io.max writes cannot run here: no cpu/io controller in v2) ----

def _v2_facts(inj, controller: str, enable: bool, home: str = "/box") -> dict:
    d = f"/sys/fs/cgroup{home}/faultlab-{inj.fault_id}"
    return {"hierarchy": {"version": 2, "mount": "/sys/fs/cgroup", "controller": controller},
            "orig": {p: home for p in inj.pids}, "starts": [f"9{p}" for p in inj.pids], "home": home, "cgroup": d, "enable_subtree": enable,
            "ancestor_cpu_fraction": None, "inherited": {},
            "device": {"dev": "259:0", "name": "nvme0n1", "fs_dev": "259:1"}}


def test_v2_cpu_plan_nests_moves_before_enabling_and_disables_before_moving_back():
    """Exact argv (the real run of the same sequence is
    test_v2_nesting_on_the_real_unified_hierarchy, with hugetlb for cpu)."""
    inj = CpuContention(NODE, [123, 456], 0.5, fault_id="cpu-abc123")
    p = inj.plan(_v2_facts(inj, "cpu", True))
    d, sc = "/sys/fs/cgroup/box/faultlab-cpu-abc123", "/sys/fs/cgroup/box/cgroup.subtree_control"
    assert [c.argv for c in p.inject] == [
        ("mkdir", d),
        ("sh", "-c", MOVE_SH, "sh", "123", f"{d}/cgroup.procs", "9123"),
        ("sh", "-c", MOVE_SH, "sh", "456", f"{d}/cgroup.procs", "9456"),
        ("sh", "-c", PR, "sh", "+cpu", sc),
        ("sh", "-c", PR, "sh", f"{inj.quota_us} {inj.period_us}", f"{d}/cpu.max"),
    ]
    rv = [c.argv for c in p.revert]
    assert rv[0] == ("sh", "-c", PR, "sh", "-cpu", sc)
    # back to the target's own cgroup only: never the hierarchy's root
    assert rv[1][-3:] == (f"{d}/cgroup.procs", "/sys/fs/cgroup/box/cgroup.procs", "/sys/fs/cgroup/box/cgroup.procs")
    assert rv[2] == ("sh", "-c", RMDIR_SH, "sh", d)
    # a target at the root of the hierarchy: no subtree_control write (the root is exempt)
    p = inj.plan({**_v2_facts(inj, "cpu", False, home="/"), "cgroup": "/sys/fs/cgroup/faultlab-cpu-abc123"})
    assert not any("subtree_control" in " ".join(c.argv) for c in p.inject + p.revert)


def test_v2_io_plan_nests_and_clears_before_moving_back():
    inj = IoSlow(NODE, [123], "/data", read_bps=10_000_000, fault_id="io-abc123")
    p = inj.plan(_v2_facts(inj, "io", True))
    d, sc = "/sys/fs/cgroup/box/faultlab-io-abc123", "/sys/fs/cgroup/box/cgroup.subtree_control"
    assert [c.argv for c in p.inject] == [
        ("mkdir", d),
        ("sh", "-c", MOVE_SH, "sh", "123", f"{d}/cgroup.procs", "9123"),
        ("sh", "-c", PR, "sh", "+io", sc),
        ("sh", "-c", PR, "sh", "259:0 rbps=10000000", f"{d}/io.max"),
    ]
    rv = [c.argv for c in p.revert]
    assert rv[0] == ("sh", "-c", PR, "sh", "259:0 rbps=max wbps=max riops=max wiops=max", f"{d}/io.max")
    assert rv[1] == ("sh", "-c", PR, "sh", "-io", sc)
    assert rv[-2][-2:] == ("/sys/fs/cgroup/box/cgroup.procs", "/sys/fs/cgroup/box/cgroup.procs")
    assert rv[-1] == ("sh", "-c", RMDIR_SH, "sh", d)


# -- v2 placement on the real unified hierarchy -----------------------------------------------

_HUGE = r"""
import ctypes, sys
sys.stdin.readline()
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
n = 2 * 1024 * 1024
a = libc.mmap(None, n, 3, 0x02 | 0x20 | 0x40000, -1, 0)  # PROT_RW, MAP_PRIVATE|ANONYMOUS|HUGETLB
if a in (None, ctypes.c_void_p(-1).value):
    print("refused", ctypes.get_errno(), flush=True)
else:
    ctypes.memset(a, 1, n)
    print("allocated", flush=True)
sys.stdin.readline()  # stay alive (in its cgroup) until told
"""


@pytest.fixture
def unified_hugetlb():
    """The real cgroup2 hierarchy with ``+hugetlb`` in its root's subtree_control and
    one free 2 MiB huge page (both as found again afterwards), and a test cgroup
    ``fltest-nest-PID`` there; yields (hierarchy, test cgroup path relative to it)."""
    if "hugetlb" not in (Path(V2) / "cgroup.controllers").read_text().split():
        pytest.skip(f"the cgroup2 hierarchy at {V2} offers no hugetlb controller: the real v2 placement check is missing")
    root_sc = Path(V2) / "cgroup.subtree_control"
    had = "hugetlb" in root_sc.read_text().split()
    nr = Path("/proc/sys/vm/nr_hugepages")
    nr0 = nr.read_text().strip()
    own = Path(V2) / f"fltest-nest-{os.getpid()}"
    try:
        if not had:
            root_sc.write_text("+hugetlb\n")
        own.mkdir()
        nr.write_text(str(int(nr0) + 1) + "\n")
        yield cgroups.Hierarchy(2, V2, "hugetlb"), "/" + own.name, int(nr.read_text()) > int(nr0)
    finally:
        nr.write_text(nr0 + "\n")
        for p in sorted(own.glob("**/"), key=lambda x: -len(x.parts)):
            for pid in (p / "cgroup.procs").read_text().split():
                (Path(V2) / "cgroup.procs").write_text(pid)
            p.rmdir()
        if not had:
            root_sc.write_text("-hugetlb\n")
        assert nr.read_text().strip() == nr0


def _run_cmds(cmds, skip: str) -> None:
    """Run planned argv for real, except those naming ``skip`` (a file of a controller
    this kernel has not got in v2); each must succeed."""
    for c in cmds:
        if any(skip in a for a in c.argv):
            continue
        cp = subprocess.run(list(c.argv), capture_output=True, text=True, timeout=10)
        assert cp.returncode == 0, (c.argv, cp.stderr)


def _v2_line(pid: int) -> str:
    return next(ln[3:] for ln in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if ln.startswith("0::"))


@needs_v2
def test_v2_nesting_on_the_real_unified_hierarchy(unified_hugetlb, no_residue):
    """A target in its own v2 cgroup with a 0 huge-page limit: the cpu-contention plan
    (placement from cgroups.placement, hugetlb standing in for cpu) moves it into a
    *child* of that cgroup, enables the controller there only once the cgroup is
    empty, and the cgroup's limit still holds (the kernel refuses a huge page that the
    same process gets at the root). Revert puts it back and restores
    cgroup.subtree_control exactly. (A child at the hierarchy's root would get the
    page.)"""
    h, own, have_page = unified_hugetlb
    base = Path(h.path(own))
    (base / "hugetlb.2MB.max").write_text("0\n")
    (base / "hugetlb.2MB.rsvd.max").write_text("0\n")
    sc0 = (base / "cgroup.subtree_control").read_text()
    p = subprocess.Popen([*_IN_CGROUP, str(base), sys.executable, "-c", _HUGE],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        end = time.time() + 10
        while _v2_line(p.pid) != own and time.time() < end:
            time.sleep(0.02)
        inj = CpuContention(NODE, [p.pid], 0.5)
        where = cgroups.placement(NODE, h, [p.pid], inj.fault_id, "cpu")
        facts = {"hierarchy": {"version": 2, "mount": h.mount, "controller": "hugetlb"}, "orig": where["orig"], "starts": where["starts"],
                 "home": own, "cgroup": where["cgroup"], "enable_subtree": where["enable"], "ancestor_cpu_fraction": None}
        plan = inj.plan(facts)
        assert [c.argv[-2:] for c in plan.inject if "cpu.max" in c.argv[-1]] == [(f"{inj.quota_us} {inj.period_us}", f"{where['cgroup']}/cpu.max")]
        _run_cmds(plan.inject, skip="cpu.max")
        try:
            if have_page:  # the limit first: what the fix is for
                p.stdin.write("go\n")
                p.stdin.flush()
                assert p.stdout.readline().split()[0] == "refused", "the target's own hugetlb limit was lifted by the move"
            assert where["cgroup"] == str(base / f"faultlab-{inj.fault_id}") and where["enable"]
            assert _v2_line(p.pid) == f"{own}/faultlab-{inj.fault_id}", "the target is in a child of its own cgroup"
            assert "hugetlb" in (base / "cgroup.subtree_control").read_text().split()
            assert (base / "cgroup.procs").read_text() == ""
        finally:
            _run_cmds(plan.revert, skip="cpu.max")
        assert _v2_line(p.pid) == own
        assert (base / "cgroup.subtree_control").read_text() == sc0
        assert not Path(where["cgroup"]).exists()
        if not have_page:
            pytest.skip("no free 2 MiB huge page could be reserved: placement checked, the kernel's limit check is missing")
    finally:
        p.kill()
        p.wait()


@needs_v2
def test_v2_refuses_a_cgroup_that_holds_other_processes(unified_hugetlb, no_residue):
    """The kernel cannot enable a controller in a v2 cgroup holding processes (EBUSY:
    checked for real first), so a target sharing its cgroup with a non-target is
    refused, one line, nothing written."""
    h, own, _ = unified_hugetlb
    base = Path(h.path(own))
    procs = [subprocess.Popen([*_IN_CGROUP, str(base), "sleep", "60"]) for _ in range(2)]
    try:
        end = time.time() + 10
        while len((base / "cgroup.procs").read_text().split()) < 2 and time.time() < end:
            time.sleep(0.02)
        with pytest.raises(OSError):
            (base / "cgroup.subtree_control").write_text("+hugetlb\n")
        with pytest.raises(Refused, match=r"--target: cgroup v2: cgroup .* also holds processes that are not targets \(\d+\)") as e:
            cgroups.placement(NODE, h, [procs[0].pid], "cpu-abc123", "cpu")
        assert "\n" not in str(e.value)
        assert not list(base.glob("faultlab-*")) and (base / "cgroup.subtree_control").read_text().strip() == ""
    finally:
        for q in procs:
            q.kill()
            q.wait()


def test_v2_refuses_when_the_controller_is_not_delegated(tmp_path):
    """A v2 cgroup whose parent does not delegate the controller (no ``cpu`` in its
    cgroup.controllers): refused. Simulated cgroupfs files: on this host the real
    unified hierarchy has no cpu controller at all."""
    (tmp_path / "box").mkdir()
    (tmp_path / "box" / "cgroup.controllers").write_text("memory pids\n")
    (tmp_path / "box" / "cgroup.subtree_control").write_text("\n")
    (tmp_path / "box" / "cgroup.procs").write_text("123\n")
    h = cgroups.Hierarchy(2, str(tmp_path), "cpu")
    with pytest.raises(Refused, match="--type: cgroup v2: the cpu controller is not delegated to cgroup /box"):
        cgroups.v2_enable_needed(NODE, h, "/box", [123])


def _v2_has(*ctrls: str) -> bool:
    if V2 is None:
        return False
    return set(ctrls) <= set((Path(V2) / "cgroup.subtree_control").read_text().split())


@needs_root
@pytest.mark.skipif(not _v2_has("cpu", "pids"),
                    reason=f"the cgroup2 hierarchy ({V2}) has no cpu and pids controllers enabled (this kernel binds them to v1); "
                           "test_v2_nesting_on_the_real_unified_hierarchy checks the same placement with hugetlb")
def test_v2_cpu_quota_keeps_the_targets_pids_max(no_residue):
    """On a v2 host: a target in its own cgroup with pids.max = 1 cannot fork during a
    cpu-contention fault (its limit still holds), is throttled, and goes back."""
    own = Path(V2) / f"fltest-pids-{os.getpid()}"
    own.mkdir()
    code = "import os, sys, time\nsys.stdin.readline()\ntry:\n    os.fork() or os._exit(0)\n    print('forked', flush=True)\nexcept OSError:\n    print('refused', flush=True)\nwhile True: pass\n"
    p = subprocess.Popen([*_IN_CGROUP, str(own), sys.executable, "-c", code],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.3)
        (own / "pids.max").write_text("1\n")
        active = apply(CpuContention(NODE, [p.pid], 0.5), 30)
        try:
            assert active.facts["cgroup"] == str(own / f"faultlab-{active.fault_id}")
            p.stdin.write("go\n")
            p.stdin.flush()
            assert p.stdout.readline().strip() == "refused"
            assert active.evidence["verify"]["ok"]
        finally:
            assert active.revert() == "reverted"
        assert _v2_line(p.pid) == "/" + own.name
    finally:
        p.kill()
        p.wait()
        own.rmdir()


def _nest_with_plan(h, own: str, pid: int):
    """Apply the cpu-contention plan's inject commands for ``pid`` (hugetlb standing in
    for cpu: this kernel has no cpu controller in v2), as a fault would; returns the
    faultlab cgroup's path."""
    inj = CpuContention(NODE, [pid], 0.5)
    where = cgroups.placement(NODE, h, [pid], inj.fault_id, "cpu")
    facts = {"hierarchy": {"version": 2, "mount": h.mount, "controller": "hugetlb"}, "orig": where["orig"], "starts": where["starts"],
             "home": own, "cgroup": where["cgroup"], "enable_subtree": where["enable"], "ancestor_cpu_fraction": None}
    _run_cmds(inj.plan(facts).inject, skip="cpu.max")
    return where["cgroup"]


def _start_in(base: Path, own: str):
    p = subprocess.Popen([*_IN_CGROUP, str(base), "sleep", "60"])
    end = time.time() + 10
    while _v2_line(p.pid) != own and time.time() < end:
        time.sleep(0.02)
    return p


@needs_v2
def test_v2_orphan_recovery_gives_back_the_controller_faultlab_enabled(unified_hugetlb, monkeypatch, no_residue):
    """A nested v2 fault whose lease record and watchdog are lost: ``recover`` finds
    its cgroup as an orphan (hostview.Orphan), and its revert gives ``-hugetlb`` back
    first (only there: a non-root domain cgroup whose one child is faultlab's): with
    faultlab's ``+hugetlb`` left in the parent's subtree_control the kernel would refuse
    every move back (no internal processes) and the target and the cgroup would stay.
    The parent ends exactly as found. (hugetlb stands in for cpu, ORPHAN_CONTROLLER
    patched to match: this kernel offers no cpu controller in v2.)"""
    from faultlab.lifecycle.hostrevert import orphan_argv
    from faultlab.lifecycle.hostview import Orphan

    monkeypatch.setattr(cgroups, "ORPHAN_CONTROLLER", {"cpu": "hugetlb", "io": "io"}, raising=False)
    h, own, _ = unified_hugetlb
    base = Path(h.path(own))
    sc0 = (base / "cgroup.subtree_control").read_text()
    p, d = _start_in(base, own), ""
    try:
        d = _nest_with_plan(h, own, p.pid)
        assert "hugetlb" in (base / "cgroup.subtree_control").read_text().split()
        orphan = Orphan("cgroup", "", d, Path(d).name.split("-")[-1])
        for argv in orphan_argv(orphan):
            subprocess.run(argv, capture_output=True, timeout=30)
        assert _v2_line(p.pid) == own, "the target is back in its own cgroup"
        assert (base / "cgroup.subtree_control").read_text() == sc0
        assert not Path(d).exists()
    finally:
        p.kill()
        p.wait()
        if d:
            _rmdir_when_empty(Path(d))


@needs_v2
def test_v2_orphan_recovery_leaves_a_controller_another_child_uses(unified_hugetlb, monkeypatch, no_residue):
    """The parent also has a child that is not faultlab's: the controller may be the
    user's now, so it is not written; the sweep back then fails (the kernel refuses)
    and the target stays under its own cgroup's subtree, never at the root."""
    from faultlab.lifecycle.hostrevert import orphan_argv
    from faultlab.lifecycle.hostview import Orphan

    monkeypatch.setattr(cgroups, "ORPHAN_CONTROLLER", {"cpu": "hugetlb", "io": "io"}, raising=False)
    h, own, _ = unified_hugetlb
    base = Path(h.path(own))
    p, d = _start_in(base, own), ""
    try:
        d = _nest_with_plan(h, own, p.pid)
        (base / "users-own").mkdir()
        for argv in orphan_argv(Orphan("cgroup", "", d, Path(d).name.split("-")[-1])):
            subprocess.run(argv, capture_output=True, timeout=30)
        assert "hugetlb" in (base / "cgroup.subtree_control").read_text().split()
        assert _v2_line(p.pid) == f"{own}/{Path(d).name}"
    finally:
        p.kill()
        p.wait()
        if d:
            _rmdir_when_empty(Path(d))


def _rmdir_when_empty(d: Path) -> None:
    end = time.time() + 5
    while d.exists() and time.time() < end:
        try:
            d.rmdir()
        except OSError:  # the killed target not yet gone
            time.sleep(0.05)
