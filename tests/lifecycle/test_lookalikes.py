"""A process that merely looks like faultlab's (a watchdog's or a stress worker's argv)
never steers what root's faultlab does or reports.

A fault's processes are its own when their uid is the fault's owner and their PID and
start time are the ones its record names; argv only finds candidates. Root reads every
user's lease folder (the one a watchdog holds, with that user as the trusted owner),
so another user's fault has its record, and a look-alike of a third user is reported
as one, never signalled, never given the fault's objects, tc handles or controller.

Real processes of real users: a fault of ``nobody`` (65534) made by faultlab itself,
look-alikes of uid 65532 (lower than the owner's, so a guess by lowest uid fails) started
with ``setpriv``, real cgroups, a real netns testbed and real stress workers."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faultlab.lifecycle.watchdog import CONTROLLER_ENV, WATCHDOG_NAME
from tests.helpers import as_nobody, fl, holds_open, needs_root, nobody_env, stand_in_ssh_node, wait_for

LOOKALIKE_UID = 65532
DROP = ["setpriv", f"--reuid={LOOKALIKE_UID}", f"--regid={LOOKALIKE_UID}", "--clear-groups"]

# a fault of nobody's own: faultlab's own lease (record and watchdog) whose revert
# leaves a marker; the controller exits at once (its watchdog lives on, detached)
_USERS_FAULT = """
import sys, time
from faultlab.injectors.base import Cmd
from faultlab.lifecycle.lease import Lease
from faultlab.nodes import LocalNode
le = Lease.create_for(LocalNode("local"), sys.argv[1], "process-pause", "pid:0", {}, [Cmd(("touch", sys.argv[2]))], time.time() + 300)
print(le.proc.pid, flush=True)
"""


def _users_fault(d: Path, fid: str) -> tuple[int, Path]:
    """(watchdog PID, marker its revert touches) of a fault ``fid`` of nobody's."""
    marker = d / f"{fid}.reverted"
    cp = as_nobody([sys.executable, "-c", _USERS_FAULT, fid, str(marker)], nobody_env(d))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    return int(cp.stdout.split()[-1]), marker


def _look_alike(fid: str, *lines: str, script: str = "sleep 300; :", env: dict | None = None) -> subprocess.Popen:
    """A session leader of uid 65532 whose argv is a watchdog's (``sh -c SCRIPT
    faultlab-watchdog FID DEADLINE FD LINES...``)."""
    argv = [*DROP, "env", *[f"{k}={v}" for k, v in (env or {}).items()],
            "sh", "-c", script, WATCHDOG_NAME, fid, str(int(time.time()) + 300), "0", *(lines or ("true",))]
    return subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _end(*procs) -> None:
    for p in procs:
        if isinstance(p, int):
            try:
                os.killpg(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            continue
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def _alive(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split() or ["Z"])[0] != "Z"
    except OSError:
        return False


def _watchdog_pids(fid: str) -> set[int]:
    from faultlab.lifecycle.watchdog import find_watchdogs

    return {w.pid for w in find_watchdogs() if w.fault_id == fid}


@needs_root
@pytest.mark.parametrize("script", ["sleep 300; :", "trap '' USR1; sleep 300; :"], ids=["plain", "ignores-usr1"])
def test_root_ends_another_users_fault_not_a_lower_uid_look_alike(script, nobody_dir, no_residue):
    """nobody's fault and a look-alike of uid 65532 with its id: ``status`` shows the
    fault as nobody's and names the look-alike; ``revert ID`` tells nobody's watchdog to
    revert (its marker appears, it exits), never signals the look-alike, and does not
    wait on one that ignores SIGUSR1."""
    fid = f"process-{secrets.token_hex(3)}"
    wd, marker = _users_fault(nobody_dir, fid)
    fake = _look_alike(fid, script=script)
    try:
        assert wait_for(lambda: _watchdog_pids(fid) == {wd, fake.pid}, 10), _watchdog_pids(fid)
        st = fl("status", "--json")
        rows = [r for r in json.loads(st.stdout) if r["fault_id"] == fid]
        assert [(r["uid"], r["watchdog_pids"], r["record"] is not None) for r in rows] == [(65534, [wd], True)], rows
        assert f"process {fake.pid} (uid {LOOKALIKE_UID})" in st.stderr and "look-alike" in st.stderr, st.stderr
        t0 = time.monotonic()
        rc = fl("revert", fid, timeout=120)
        took = time.monotonic() - t0
        assert rc.returncode == 0 and f"{fid}: reverted" in rc.stdout, rc.stdout + rc.stderr
        assert wait_for(marker.exists, 10) and wait_for(lambda: not _alive(wd), 10), "nobody's fault went on"
        assert fake.poll() is None, "revert signalled a look-alike"
        assert took < 40, f"revert waited {took:.0f}s on a look-alike"
    finally:
        _end(fake, wd)


@needs_root
def test_recover_is_not_held_off_by_a_look_alike_naming_a_live_controller(nobody_dir, no_residue):
    """nobody's fault, its controller gone; a look-alike of uid 65532 with its id names
    PID 1 as its controller: ``recover`` still ends nobody's fault."""
    from faultlab import procid

    fid = f"process-{secrets.token_hex(3)}"
    wd, marker = _users_fault(nobody_dir, fid)
    fake = _look_alike(fid, env={CONTROLLER_ENV: f"1 {procid.starttime(1)}"})
    try:
        assert wait_for(lambda: _watchdog_pids(fid) == {wd, fake.pid}, 10)
        rc = fl("recover", timeout=120)
        assert rc.returncode == 0, rc.stdout + rc.stderr
        assert not (fid in rc.stderr and "still holds" in rc.stderr), rc.stderr
        assert wait_for(marker.exists, 10) and wait_for(lambda: not _alive(wd), 10), "recover left nobody's fault as held"
        assert fake.poll() is None
    finally:
        _end(fake, wd)


@needs_root
def test_an_orphan_cgroup_claimed_by_a_look_alike_is_still_removed(no_residue):
    """An orphan ``faultlab-cpu-*`` cgroup (no record, no watchdog) and a look-alike of
    uid 65532 carrying its id and naming its path: ``revert ID`` removes the cgroup and
    says so; the look-alike is never taken for its watchdog (which would leave the
    cgroup while revert said "reverted")."""
    base = Path("/sys/fs/cgroup/cpu")
    if not (base / "cgroup.procs").exists():
        pytest.skip("needs the cgroup v1 cpu hierarchy")
    fid = f"cpu-{secrets.token_hex(3)}"
    cg = base / f"faultlab-{fid}"
    cg.mkdir()
    fake = _look_alike(fid, shlex.join(["rmdir", str(cg)]))
    try:
        assert wait_for(lambda: _watchdog_pids(fid) == {fake.pid}, 10)
        rc = fl("revert", fid, timeout=120)
        assert not cg.exists(), "the orphan cgroup stayed: " + rc.stdout + rc.stderr
        assert rc.returncode == 0 and f"{fid}: reverted" in rc.stdout, rc.stdout + rc.stderr
        assert fake.poll() is None
    finally:
        _end(fake)
        if cg.exists():
            cg.rmdir()


@needs_root
def test_a_look_alike_listing_every_tc_handle_reserves_none(testbed2, no_residue):
    """A look-alike of uid 65532 whose argv names all 4,096 ``handle fXXX:``: root's
    nic-slow still gets a handle and runs (never exit 3, "all 4096 faultlab tc
    handles are held", while status lists no fault)."""
    lines = [f"tc qdisc del dev x root handle f{h:03x}:" for h in range(4096)]
    fake = _look_alike(f"nic-{secrets.token_hex(3)}", *lines)
    try:
        assert wait_for(lambda: fake.pid in _watchdog_pids_any(), 10)
        cp = fl("inject", "--type", "nic-slow", "--node", f"netns:{testbed2.nodes[0].netns}", "--rate", "20mbit",
                "--duration", "1s", timeout=120)
        assert cp.returncode == 0, cp.stdout + cp.stderr
        assert fake.poll() is None
    finally:
        _end(fake)


def _watchdog_pids_any() -> set[int]:
    from faultlab.lifecycle.watchdog import find_watchdogs

    return {w.pid for w in find_watchdogs()}


@needs_root
def test_a_stress_look_alike_of_another_user_does_not_fail_a_clean_revert(busy_loop, no_residue):
    """Real stress workers beside a target; a process of uid 65532 carrying the worker
    marker and this fault's pidfile path: the revert ends the real workers and reports
    the fault gone (the look-alike is no "worker process left", no exit 1); the
    look-alike is never signalled."""
    from faultlab import injectors
    from faultlab.injectors.cpu_stress import CpuStress
    from faultlab.nodes import LocalNode

    inj = CpuStress(LocalNode("local"), [busy_loop.pid], 30, workers=1)
    pidfile = inj._pidfile()
    fake = subprocess.Popen([*DROP, "sh", "-c", "sleep 300; :", "x", inj.marker, pidfile, "0"],
                            start_new_session=True, stdin=subprocess.DEVNULL)
    active = None
    try:
        active = injectors.apply(inj, 30, grace_s=0.0)
        status = active.revert()
        assert status == "reverted", active.evidence.get("left_behind")
        assert fake.poll() is None
    finally:
        _end(fake)
        if active is not None and active.lease.exists():  # (a failed revert keeps its lease)
            active.lease.run_revert()
            active.lease.release()


@needs_root
def test_a_remote_nodes_watchdog_is_the_login_users_not_a_look_alike(tmp_path, monkeypatch, no_residue):
    """The ssh node's view (lifecycle/remoteview.py), run against this host as the node:
    the node's lease record and its real remote watchdog, and look-alikes of uid 65532
    naming the same record path started before and after it. ``revert_remote`` tells
    the real watchdog to revert (its marker appears, record gone) and never signals a
    look-alike (not the last PID matching the path, of any uid)."""
    from faultlab.injectors.base import Cmd
    from faultlab.lifecycle.watchdog import REMOTE_WATCHDOG_SH
    from faultlab.lifecycle.lease_remote import RemoteLease
    from faultlab.lifecycle.remoteview import remote_view, revert_remote

    node, d = stand_in_ssh_node(tmp_path, monkeypatch)
    fid = f"process-{secrets.token_hex(3)}"
    rec = d / f"{fid}.json"
    marker = tmp_path / "reverted"
    fakes = [_fake_remote(rec)]
    lease = RemoteLease.create_for(node, fid, "process-pause", "pid:0", {}, [Cmd(("touch", str(marker)))],
                                   time.time() + 300, REMOTE_WATCHDOG_SH)
    fakes.append(_fake_remote(rec))
    try:
        assert wait_for(lambda: rec.exists(), 10)
        time.sleep(0.5)
        [f] = [x for x in remote_view(node)[0] if x.fault_id == fid]
        assert f.watchdog_pid not in {p.pid for p in fakes}, "a look-alike was taken for the watchdog"
        assert revert_remote(f, timeout_s=30) == []
        assert marker.exists() and not rec.exists()
        assert [p.poll() for p in fakes] == [None, None], "a look-alike was signalled"
    finally:
        _end(*fakes)
        with_pid = lease.record.get("watchdog_pid")
        if with_pid and _alive(with_pid):
            _end(with_pid)


def _fake_remote(rec: Path) -> subprocess.Popen:
    return subprocess.Popen([*DROP, "sh", "-c", "sleep 300; :", WATCHDOG_NAME, str(rec), str(int(time.time()) + 300), "true"],
                            start_new_session=True, stdin=subprocess.DEVNULL)


@needs_root
def test_root_sees_a_users_fault_in_that_users_runtime_folder_and_runs_none_of_its_lines(tmp_path, no_residue):
    """A record of nobody's in nobody's default lease folder
    (``/run/user/65534/faultlab/leases``), its watchdog gone: root's ``status`` shows it
    as nobody's fault (root reads other users' folders, read-only);
    root's ``revert`` runs none of its lines (they are nobody's) and says who can end
    it. A look-alike of another uid holding that folder open does not keep root from
    reading it as nobody's. The same folder owned by another uid is reported and never
    read."""
    base = Path("/run/user/65534")
    if os.path.lexists(base):
        pytest.skip(f"{base} exists on this host already: not this test's to touch")
    fid = f"process-{secrets.token_hex(3)}"
    marker = tmp_path / "ran"
    rec = {"fault_id": fid, "fault_type": "process-pause", "node": "local:local", "target": "pid:0", "params": {},
           "created_ts": time.time(), "deadline_ts": time.time() + 300, "controller_pid": 0, "uid": 65534,
           "revert": [shlex.join(["touch", str(marker)])]}
    try:
        folder = base / "faultlab" / "leases"
        # base 0755: other users can reach the folder, as they can one under a 0755 home
        for d, mode in ((base, 0o755), (base / "faultlab", 0o755), (folder, 0o755)):
            d.mkdir(mode=mode)
            os.chown(d, 65534, 65534)
        f = folder / f"{fid}.json"
        f.write_text(json.dumps(rec))
        os.chown(f, 65534, 65534)
        os.chmod(f, 0o644)
        st = fl("status", "--json")
        rows = [r for r in json.loads(st.stdout) if r["fault_id"] == fid]
        assert [(r["uid"], r["record"], r["watchdog_alive"]) for r in rows] == [(65534, str(folder), False)], (rows, st.stderr)
        rc = fl("revert", fid, timeout=120)
        assert rc.returncode == 1 and "as uid 65534" in rc.stderr, rc.stdout + rc.stderr
        assert not marker.exists() and f.exists(), "root ran another user's revert line"
        # a look-alike of another uid holding nobody's folder open (read as its own, and
        # refused) does not keep root from reading that folder as nobody's
        holder = subprocess.Popen([*DROP, "sh", "-c", f"exec 3<{shlex.quote(str(folder))}; sleep 300", WATCHDOG_NAME, fid,
                                   str(int(time.time()) + 300), "3", "true"],
                                  start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            assert wait_for(lambda: holds_open(holder.pid, 3, folder), 30), os.listdir(f"/proc/{holder.pid}/fd")
            st = fl("status", "--json")
            rows = [r for r in json.loads(st.stdout) if r["fault_id"] == fid and r["uid"] == 65534]
            assert [r["record"] for r in rows] == [str(folder)], (rows, st.stderr)
        finally:
            _end(holder)
        os.chown(folder, LOOKALIKE_UID, LOOKALIKE_UID)  # not nobody's: reported, not read
        st = fl("status", "--json")
        assert not [r for r in json.loads(st.stdout) if r["fault_id"] == fid]
        assert f"{folder}: is owned by uid {LOOKALIKE_UID}" in st.stderr, st.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


@needs_root
@pytest.mark.parametrize("held", ["/tmp", "/dev/null", "/var/tmp"])
def test_a_look_alike_holding_a_system_folder_gets_no_advice_to_change_it(held, no_residue):
    """A look-alike of uid 65532 holds a system path on its lease-folder descriptor:
    root's ``status`` says the path is not a lease folder it trusts and names the
    process, and advises no ``rm``/``chmod``/``chown`` of it (faultlab did not make it)."""
    fid = f"process-{secrets.token_hex(3)}"
    holder = subprocess.Popen([*DROP, "sh", "-c", f"exec 3<{shlex.quote(held)}; sleep 300", WATCHDOG_NAME, fid,
                               str(int(time.time()) + 300), "3", "true"],
                              start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: holds_open(holder.pid, 3, held), 30), os.listdir(f"/proc/{holder.pid}/fd")
        st = fl("status")
        lines = [ln for ln in st.stderr.splitlines() if f"lease folder {held}" in ln]
        assert lines and all(f"held by process {holder.pid} (uid {LOOKALIKE_UID})" in ln for ln in lines), st.stderr
        for ln in st.stderr.splitlines():
            assert not any(f"`{verb} " in ln and held in ln for verb in ("rm", "chmod", "chown")), ln
        assert f"process {holder.pid} (uid {LOOKALIKE_UID})" in st.stderr and "look-alike" in st.stderr
    finally:
        _end(holder)


_SETUID_LOOK_ALIKE = r"""
import fcntl, os, sys, time
r, w = os.pipe()
fcntl.fcntl(w, fcntl.F_SETFL, os.O_NONBLOCK)
try:
    while True:
        os.write(w, b"x" * 4096)  # fill the pipe: the program blocks printing its usage, alive
except BlockingIOError:
    pass
fcntl.fcntl(w, fcntl.F_SETFL, 0)
pid = os.fork()
if pid == 0:
    os.setsid()
    os.dup2(w, 1)
    os.dup2(w, 2)
    os.execv(sys.argv[1], [os.path.basename(sys.argv[1]), "-c", "x", sys.argv[2], sys.argv[3], sys.argv[4], "0", "true", "--bogus"])
print(pid, flush=True)
time.sleep(300)
"""


@needs_root
def test_a_setuid_root_program_named_like_a_watchdog_is_its_users_look_alike(no_residue):
    """Another user runs a setuid-root program (``chsh``: effective uid 0) with a
    watchdog's argv and keeps it alive: it is that user's look-alike (its real uid),
    never root's record-less watchdog, so root's ``status`` lists no such fault of
    root's."""
    prog = shutil.which("chsh") or "/usr/bin/chsh"
    if not os.path.exists(prog) or not os.stat(prog).st_mode & 0o4000:
        pytest.skip(f"{prog} is not a setuid program on this host")
    fid = f"nic-{secrets.token_hex(3)}"
    holder = subprocess.Popen([*DROP, sys.executable, "-c", _SETUID_LOOK_ALIKE, prog, WATCHDOG_NAME, fid,
                               str(int(time.time()) + 300)], start_new_session=True, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        pid = int(holder.stdout.readline())

        def uids() -> list[str]:
            return next(ln.split()[1:] for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("Uid:"))

        assert wait_for(lambda: uids()[:2] == [str(LOOKALIKE_UID), "0"], 30), f"not running setuid: Uid {uids()}"
        from faultlab.lifecycle.watchdog import find_watchdogs

        assert [w.uid for w in find_watchdogs() if w.fault_id == fid] == [LOOKALIKE_UID]
        st = fl("status", "--json")
        assert not [r for r in json.loads(st.stdout) if r["fault_id"] == fid and r["uid"] == 0], st.stdout
    finally:
        _end(holder)
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, UnboundLocalError):
            pass
