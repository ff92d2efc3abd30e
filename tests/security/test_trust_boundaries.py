"""Root's faultlab against what another party can plant: a process of a container's
root (uid 0 in another PID namespace), another user's record reusing the
id of root's fault, a cgroup made inside a container's cgroup, another user holding
a lock on root's lease folder, and a lease record built to crash its reader.

Real namespaces (``unshare``), real cgroups, real second users (``setpriv``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from faultlab.lifecycle.watchdog import WATCHDOG_NAME
from faultlab.lifecycle.procowner import MINE_SH
from tests.helpers import NOBODY_LEASES, as_nobody, fl, holds_open, needs_root, sandboxed_root_beside_records, wait_for

pytestmark = [needs_root, pytest.mark.skipif(not shutil.which("unshare") or not shutil.which("setpriv"),
                                             reason="needs unshare and setpriv (util-linux)")]

ALL_HANDLES = " ".join(f"handle f{h:03x}:" for h in range(4096))


def _in_new_namespaces(*argv: str) -> subprocess.Popen:
    """``argv`` as root in a new PID and mount namespace (as a container's root runs),
    its own session leader."""
    return subprocess.Popen(["unshare", "--pid", "--mount", "--fork", "setsid", *argv], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _end(p: subprocess.Popen) -> None:
    """End ``p`` and the process tree below it (a new namespace's first process runs
    in a session of its own: it is ended by its PID, the namespace with it)."""
    for c in _children(p.pid):
        try:
            os.kill(c, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def _watchdog_pid(fid: str) -> int | None:
    """The host PID of the process whose argv names ``fid`` as a watchdog's would."""
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                argv = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if len(argv) > 4 and argv[3] == WATCHDOG_NAME.encode() and argv[4] == fid.encode():
                return int(d.name)
    return None


def test_a_containers_root_process_named_like_a_watchdog_is_a_look_alike():
    """uid 0 in another PID and mount namespace, argv naming every tc handle: root's
    ``status`` lists it as a look-alike, not as root's fault; it reserves no handle;
    ``revert`` of its id neither signals it nor waits on it; the node-side owner check
    (``procowner.MINE_SH``) says it is not root's."""
    fid = "nic-0ddba1"
    p = _in_new_namespaces("sh", "-c", "trap : USR1; while :; do sleep 1; done", WATCHDOG_NAME, fid,
                           str(int(time.time()) + 300), "0", f"tc qdisc del dev lo root {ALL_HANDLES}")
    try:
        assert wait_for(lambda: _watchdog_pid(fid) is not None, 30)
        pid = _watchdog_pid(fid)
        st = fl("status", "--json")
        assert not [r for r in json.loads(st.stdout) if r["fault_id"] == fid], st.stdout
        assert "look-alike" in st.stderr and "namespace" in st.stderr, st.stderr
        cp = subprocess.run([sys.executable, "-c", "from faultlab.injectors.nic import taken_handles, host_revert_lines\n"
                             "from faultlab.nodes import LocalNode\n"
                             "print(len(taken_handles(host_revert_lines(LocalNode('local')))))"],
                            capture_output=True, text=True, timeout=120)
        assert cp.returncode == 0 and int(cp.stdout) < 4096, cp.stdout + cp.stderr
        t0 = time.monotonic()
        rv = fl("revert", fid, timeout=120)
        assert time.monotonic() - t0 < 30 and "no fault nic-0ddba1" in rv.stdout + rv.stderr, \
            rv.stdout + rv.stderr
        assert Path(f"/proc/{pid}").exists(), "root signalled a container's process"
        seen = as_nobody([sys.executable, "-c", "from faultlab.lifecycle.watchdog import find_watchdogs\n"
                          f"print([w.same_ns for w in find_watchdogs() if w.fault_id == {fid!r}])"], {"PATH": os.environ["PATH"]})
        assert seen.stdout.strip() == "[False]", seen.stdout + seen.stderr  # nobody's view: not root's either
        mine = subprocess.run(["sh", "-c", MINE_SH + 'mine "$1"', "sh", str(pid)], timeout=30)
        assert mine.returncode == 1
        assert subprocess.run(["sh", "-c", MINE_SH + 'mine "$1"', "sh", str(os.getpid())], timeout=30).returncode == 0
    finally:
        _end(p)


def _cgroup_base() -> Path:
    v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    return Path("/sys/fs/cgroup") if v2 else Path("/sys/fs/cgroup/cpu")


@pytest.mark.parametrize("where", ["beside-its-processes", "processes-in-a-sibling"])
def test_a_faultlab_named_cgroup_made_inside_a_containers_cgroup_is_never_removed(where, no_residue):
    """A cgroup ``faultlab-cpu-0f0f0f`` that a container's root made inside its own
    cgroup (processes of another PID namespace live there, or in a sibling cgroup it
    moved them to) and no lease names: root's ``status`` names it as not faultlab's to
    remove, lists no orphan fault for it, and ``recover`` leaves it (and the
    container's processes) where they are."""
    base = _cgroup_base()
    if not os.access(base, os.W_OK):
        pytest.skip(f"{base} is not writable here")
    ctr = base / f"fltest-ctr-{os.getpid()}"
    ctr.mkdir()
    home = ctr / "sib" if where == "processes-in-a-sibling" else ctr
    home.mkdir(exist_ok=True)
    p = _in_new_namespaces("sleep", "300")
    planted = ctr / "faultlab-cpu-0f0f0f"
    try:
        assert wait_for(lambda: any(Path(f"/proc/{c}/ns/pid").exists() and
                                    os.stat(f"/proc/{c}/ns/pid").st_ino != os.stat("/proc/self/ns/pid").st_ino
                                    for c in _children(p.pid)), 30)
        for c in _children(p.pid):
            (home / "cgroup.procs").write_text(str(c))
        planted.mkdir()
        st = fl("status", "--json")
        assert not [r for r in json.loads(st.stdout) if str(planted) in " ".join(r.get("orphan_objects", []))], st.stdout
        assert "inside a container's cgroup" in st.stderr, st.stderr
        fl("recover", timeout=120)
        assert planted.is_dir(), "recover removed a cgroup a container made"
    finally:
        _end(p)
        wait_for(lambda: not (home / "cgroup.procs").read_text().split(), 10)
        if planted.exists():
            planted.rmdir()
        if home != ctr:
            home.rmdir()
        ctr.rmdir()


def _children(pid: int) -> list[int]:
    """PIDs of ``pid``'s process tree below it (host PIDs)."""
    out, todo = [], [pid]
    while todo:
        q = todo.pop()
        try:
            kids = [int(x) for t in Path(f"/proc/{q}/task").iterdir()
                    for x in (t / "children").read_text().split()]
        except OSError:
            kids = []
        out += kids
        todo += kids
    return out


@pytest.fixture
def shared_lease_dir():
    """A lease folder of root's that every user can read (0755, as /run/faultlab/leases
    is), under a folder every user can reach."""
    d = Path(tempfile.mkdtemp(prefix="fl-shared-leases-", dir="/tmp"))
    os.chmod(d, 0o755)
    (d / "leases").mkdir(mode=0o755)
    try:
        yield d / "leases"
    finally:
        shutil.rmtree(d)


def test_another_user_holding_a_lock_on_roots_lease_folder_stalls_nothing(shared_lease_dir, busy_loop, no_residue):
    """nobody opens root's readable lease folder and holds an flock on it: root's
    ``inject`` (create and its end-of-duration revert) still runs to its end."""
    holder = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               "flock", str(shared_lease_dir), "sleep", "300"], start_new_session=True,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: any(os.path.realpath(f"/proc/{c}/fd/{n}") == str(shared_lease_dir)
                                    for c in [holder.pid, *_children(holder.pid)]
                                    for n in (os.listdir(f"/proc/{c}/fd") if os.path.exists(f"/proc/{c}/fd") else [])), 30)
        env = dict(os.environ, FAULTLAB_LEASE_DIR=str(shared_lease_dir))
        cp = fl("inject", "--type", "process-pause", "--pause", "100ms", "--period", "1s", "--target",
                str(busy_loop.pid), "--duration", "2s", env=env, timeout=120)
        assert cp.returncode == 0, cp.stdout + cp.stderr
        assert [p.name for p in shared_lease_dir.iterdir()] == []
    finally:
        _end(holder)


@pytest.mark.parametrize("body", ['{"fault_id": "cpu-00bad1", "deadline_ts": 1, "revert": [], "created_ts": "x"}',
                                  "[" * 200000,
                                  '{"fault_id": "cpu-00bad1", "deadline_ts": 1' + "0" * 400 + ', "revert": [], "watchdog_pid": 1}'],
                         ids=["text-created_ts", "nested-200000", "deadline-10e400"])
def test_a_record_built_to_crash_its_reader_is_reported_in_one_line(body, shared_lease_dir):
    """Beside a good record, one whose ``created_ts`` is text (records are sorted by
    it), that nests 200,000 lists deep, or whose deadline is an integer no float holds
    (valid JSON): ``status`` reports the bad file on one line
    and still lists the good record; nothing is a traceback."""
    good = {"fault_id": "cpu-00900d", "deadline_ts": time.time() + 300, "revert": [], "created_ts": time.time()}
    (shared_lease_dir / "cpu-00900d.json").write_text(json.dumps(good))
    (shared_lease_dir / "cpu-00bad1.json").write_text(body)
    env = dict(os.environ, FAULTLAB_LEASE_DIR=str(shared_lease_dir))
    st = fl("status", "--json", env=env)
    assert "Traceback" not in st.stderr, st.stderr
    listed = [r["fault_id"] for r in json.loads(st.stdout)]
    assert "cpu-00900d" in listed and "cpu-00bad1" not in listed, st.stdout
    bad = [ln for ln in st.stderr.splitlines() if "cpu-00bad1.json" in ln]
    assert len(bad) == 1, st.stderr



# as nobody, beside the made-up record of its lease folder ($1): a link named like a
# record (sorted after it) to a root-only file; then root's status --json and recover
_LINK_AFTER_RECORD = r"""
setpriv --reuid=65534 --regid=65534 --clear-groups ln -s /etc/shadow "$1/process-ffffff.json"
shift
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
"$@" status --json > "$out/st.out" 2> "$out/st.err"; echo "status $?" >> "$out/rc"
"$@" recover > "$out/rc.out" 2> "$out/rc.err"; echo "recover $?" >> "$out/rc"
/usr/bin/python3 -c '
import json, sys
r = {}
for k in ("st.out", "st.err", "rc.out", "rc.err", "rc"):
    r[k] = open(sys.argv[1] + "/" + k).read()
print(json.dumps(r))
' "$out"
"""


def test_another_users_untrusted_file_beside_their_record_is_one_line_in_roots_status_and_recover():
    """nobody's lease folder holds a good record and, sorted after it, a link named
    like a record: root's ``status`` and ``recover`` name the link in one line and go
    on: a traceback there would let any user stop root's status, revert and recover
    on the whole host."""
    cp = sandboxed_root_beside_records(1, ["sh", "-c", _LINK_AFTER_RECORD, "sh", NOBODY_LEASES, sys.executable, "-P", "-m", "faultlab.cli"],
                                       timeout=300)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    got = json.loads(cp.stdout.splitlines()[-1])
    assert "Traceback" not in got["st.err"] + got["rc.err"], got["st.err"][-2000:]
    assert "status 0" in got["rc"] and "recover 0" in got["rc"], got
    assert [r["fault_id"] for r in json.loads(got["st.out"]) if r["uid"] == 65534] == ["process-000000"], got["st.out"]
    assert len([ln for ln in got["st.err"].splitlines() if "process-ffffff.json" in ln and "symlink" in ln]) == 1, got["st.err"]

def test_revert_of_roots_fault_leaves_another_users_record_of_the_same_id_alone(shared_lease_dir, no_residue):
    """nobody copies the id of root's fault into a record of its own, naming its own
    process that ignores SIGUSR1: root's ``revert ID`` reverts root's fault, says the
    other is not touched, exits 0 and returns without waiting on nobody's process."""
    marker = shared_lease_dir.parent / "reverted"
    fid = "process-5a3e1d"
    code = ("import sys, time\nfrom faultlab.injectors.base import Cmd\nfrom faultlab.lifecycle.lease import Lease\n"
            "from faultlab.nodes import LocalNode\n"
            "le = Lease.create_for(LocalNode('local'), sys.argv[1], 'process-pause', 'pid:0', {}, "
            "[Cmd(('touch', sys.argv[2]))], time.time() + 300)\nprint(le.proc.pid, flush=True)\n")
    env = dict(os.environ, FAULTLAB_LEASE_DIR=str(shared_lease_dir))
    cp = subprocess.run([sys.executable, "-c", code, fid, str(marker)], capture_output=True, text=True, env=env, timeout=60)
    assert cp.returncode == 0, cp.stderr
    theirs = Path(tempfile.mkdtemp(prefix="fl-nobody-", dir="/tmp"))
    os.chmod(theirs, 0o755)
    (theirs / "leases").mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    os.chown(theirs / "leases", 65534, 65534)
    fake = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c",
                             f"exec 3<{theirs / 'leases'}; trap : USR1; while :; do sleep 1; done", WATCHDOG_NAME, fid,
                             str(int(time.time()) + 300), "3", "true"],
                            start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: holds_open(fake.pid, 3, theirs / "leases"), 30)
        rec = {"fault_id": fid, "deadline_ts": time.time() + 300, "revert": ["true"], "created_ts": time.time(),
               "watchdog_pid": fake.pid, "watchdog_starttime": int(Path(f"/proc/{fake.pid}/stat").read_text().rpartition(")")[2].split()[19])}
        f = theirs / "leases" / f"{fid}.json"
        f.write_text(json.dumps(rec))
        os.chown(f, 65534, 65534)
        t0 = time.monotonic()
        rv = fl("revert", fid, env=env, timeout=120)
        assert rv.returncode == 0 and marker.exists(), rv.stdout + rv.stderr
        assert "uid 65534 also has a fault" in rv.stderr and time.monotonic() - t0 < 30, rv.stderr
        assert fake.poll() is None and f.exists()
    finally:
        _end(fake)
        shutil.rmtree(theirs)


def test_other_users_look_alike_faults_cost_root_one_short_wait_in_all(shared_lease_dir):
    """Three faults of nobody's, each a record naming a process of nobody's that looks
    like its watchdog and ignores SIGUSR1: root's ``revert --all`` and ``recover`` wait
    for them once (``OTHER_USER_WAIT_S`` in all, not each), leave them to nobody, and
    report them as a note: exit 0, no retry advice (root's own faults are not at stake)."""
    from faultlab.lifecycle.hostrevert import OTHER_USER_WAIT_S

    theirs = Path(tempfile.mkdtemp(prefix="fl-nobody-", dir="/tmp"))
    os.chmod(theirs, 0o755)
    (theirs / "leases").mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    os.chown(theirs / "leases", 65534, 65534)
    fakes = []
    try:
        for k in range(3):
            fid = f"process-5a3e2{k}"
            fake = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c",
                                     f"exec 3<{theirs / 'leases'}; trap : USR1; while :; do sleep 1; done", WATCHDOG_NAME,
                                     fid, str(int(time.time()) + 300), "3", "true"],
                                    start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            fakes.append(fake)
            assert wait_for(lambda: holds_open(fake.pid, 3, theirs / "leases"), 30)
            start = int(Path(f"/proc/{fake.pid}/stat").read_text().rpartition(")")[2].split()[19])
            rec = {"fault_id": fid, "deadline_ts": time.time() + 300, "revert": ["true"], "created_ts": time.time(),
                   "watchdog_pid": fake.pid, "watchdog_starttime": start}
            f = theirs / "leases" / f"{fid}.json"
            f.write_text(json.dumps(rec))
            os.chown(f, 65534, 65534)
        env = dict(os.environ, FAULTLAB_LEASE_DIR=str(shared_lease_dir))
        t0 = time.monotonic()
        rv = fl("revert", "--all", env=env, timeout=300)
        took = time.monotonic() - t0
        assert took < OTHER_USER_WAIT_S + 15, (took, rv.stdout, rv.stderr)
        rc = fl("recover", env=env, timeout=300)
        assert all(f.poll() is None for f in fakes), "root ended a process of nobody's that only looks like a watchdog"
        for cp in (rv, rc):
            assert cp.returncode == 0, (cp.returncode, cp.stdout, cp.stderr)
            assert "retry" not in cp.stdout + cp.stderr and "error" not in cp.stderr, cp.stderr
            assert all(f"process-5a3e2{k} of uid 65534" in cp.stderr for k in range(3)), cp.stderr
    finally:
        for f in fakes:
            _end(f)
        shutil.rmtree(theirs)


def test_a_lease_folder_right_under_tmp_takes_no_lock_folder_another_user_can_make_first(busy_loop, no_residue):
    """A lease folder directly under the shared /tmp, where nobody has made
    ``/tmp/node-locks`` first: root's ``inject`` still runs (its node lock lives in
    root's private runtime folder), and nothing of root's lands in nobody's folder."""
    locks = Path("/tmp/node-locks")
    made = not locks.exists()
    if made:
        subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "mkdir", "-m", "0777", str(locks)],
                       check=True, timeout=30)
    assert locks.stat().st_uid != 0
    leases = Path(tempfile.mkdtemp(prefix="fl-leases-", dir="/tmp"))
    try:
        before = sorted(p.name for p in locks.iterdir()) if os.access(locks, os.R_OK) else None
        cp = fl("inject", "--type", "process-pause", "--pause", "100ms", "--period", "1s", "--target",
                str(busy_loop.pid), "--duration", "2s", env={"FAULTLAB_LEASE_DIR": str(leases)}, timeout=120)
        assert cp.returncode == 0, cp.stdout + cp.stderr
        if before is not None:
            assert sorted(p.name for p in locks.iterdir()) == before
    finally:
        shutil.rmtree(leases)
        if made:
            shutil.rmtree(locks)
