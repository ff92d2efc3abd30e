"""A fault always ends, and faultlab never says otherwise: signal storms,
lost or truncated lease records, watchdogs that never evaluate what they read,
privileges, unusable lease folders, verify failures, an exact --force restore.

Every case drives the real CLI as a subprocess (or the real watchdog script) against
real namespaces, qdiscs, cgroups and processes, and checks the host's state after.
Tests that act as another user run the CLI as ``nobody`` (``setpriv``); where the
Python interpreter lives under a folder only root may enter (``/root/.pyenv``), a
private mount namespace makes that one path readable for the child only.

The ways a fault could outlive what faultlab says, and the tests that guard each:

1. a second signal aborts the revert: ``test_signal_storm_never_leaves_a_fault_behind_an_exit_0``,
   ``test_three_signals_as_the_revert_begins``
2. a lost lease record: ``test_lost_or_corrupt_record_still_ends_the_fault_and_is_seen``,
   ``test_orphans_without_record_or_watchdog_are_shown_and_recovered``
3. an unverifiable pause as another user: ``test_unverifiable_pause_as_another_user_exits_3_and_reverts``
4. a non-root user told nothing is in force: ``test_another_user_sees_roots_faults_and_is_told_it_cannot_revert``
5. an unwritable or full lease folder: ``test_unusable_lease_folder_is_one_line_nothing_applied_no_process[inject-*]``
6. revert --all / recover with a folder of another user: the same test, ``[revert --all-*]``, ``[recover-*]``,
   and ``test_as_nobody_a_folder_of_another_user_or_root_is_one_line``
7. --force restores a foreign tbf exactly: ``test_force_restores_foreign_tbf_in_the_kernels_own_units``,
   ``test_force_fault_with_lost_record_restores_the_foreign_tbf_from_the_watchdog`` (record lost)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from faultlab.lifecycle.hostview import cgroups_named
from tests.helpers import (
    FAULT_QDISC,
    FL,
    as_nobody,
    deadline_now,
    faultlab_procs,
    fl,
    lease_dir,
    needs_root,
    nobody_env,
    state,
    wait_for,
)



def proc_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


# -- 1. signal storms: a revert is not interruptible ---------------------------------------

def _storm_args(kind: str, request, busy) -> list[str]:
    if kind == "nic":
        tb = request.getfixturevalue("testbed2")
        return ["--type", "nic-slow", "--node", f"netns:{tb.nodes[0].netns}", "--rate", "20mbit"]
    if kind == "quota":
        return ["--type", "cpu-contention", "--target", str(busy.pid), "--cpu-fraction", "0.3"]
    return ["--type", "cpu-contention", "--mode", "stress", "--workers", "1", "--target", str(busy.pid)]


@needs_root
@pytest.mark.parametrize("n_signals", [2, 5])
@pytest.mark.parametrize("kind", ["nic", "quota", "stress"])
def test_signal_storm_never_leaves_a_fault_behind_an_exit_0(kind, n_signals, request, busy_loop, no_residue):
    """2 or 5 SIGTERM/SIGINT 10 ms apart while inject or verify runs: exit 0 only with
    the host clean at that moment; otherwise exit 1 saying the fault was handed to its
    lease, and the host clean once the lease ends it. Two signals never hand over."""
    args = _storm_args(kind, request, busy_loop)
    before = state()
    for moment in (0.0, 0.05, 0.3):
        old = set(lease_dir().glob("*.json"))
        p = subprocess.Popen([*FL, "inject", *args, "--duration", "30s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert wait_for(lambda: set(lease_dir().glob("*.json")) - old or p.poll() is not None, 30)
        time.sleep(moment)
        for i in range(n_signals):
            try:
                p.send_signal(signal.SIGTERM if i % 2 == 0 else signal.SIGINT)
            except ProcessLookupError:
                break
            time.sleep(0.01)
        out, err = p.communicate(timeout=90)
        now = state()
        if p.returncode == 0:
            assert now == before, (moment, out, err, now)
            assert "reverted" in out, (out, err)
        else:
            assert n_signals >= 3 and p.returncode == 1 and "handed to its lease" in err, (moment, p.returncode, out, err)
            # the lease ends it by its deadline (--duration 30s from the inject) plus the
            # watchdog's 5 s poll: a fault still there after that outlived its lease
            assert wait_for(lambda: state() == before, 45), state()
        assert "Traceback" not in err
    assert proc_state(busy_loop.pid) != "T"


@needs_root
def test_three_signals_as_the_revert_begins(busy_loop, no_residue):
    """At the end of the duration the revert begins; three SIGINTs then land before,
    during or after the revert commands: exit 0 with the host clean, or exit 1 saying
    the fault was handed to its lease (with its watchdog's PID), and clean after."""
    before = state()
    p = subprocess.Popen([*FL, "inject", "--type", "cpu-contention", "--target", str(busy_loop.pid), "--cpu-fraction", "0.3",
                          "--duration", "1s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: any(lease_dir().glob("*.json")), 30)
    time.sleep(1.0)
    for _ in range(3):
        p.send_signal(signal.SIGINT)
        time.sleep(0.01)
    out, err = p.communicate(timeout=60)
    assert p.returncode in (0, 1), (out, err)
    if p.returncode == 1:
        assert "handed to its lease" in err and "watchdog (PID" in err
    else:
        assert state() == before
    assert wait_for(lambda: state() == before, 20), state()


# -- 2. a lost lease record cannot keep a fault alive -------------------------------------

@needs_root
@pytest.mark.parametrize("damage", ["deleted", "truncated", "garbage"])
def test_lost_or_corrupt_record_still_ends_the_fault_and_is_seen(testbed2, no_residue, damage):
    ns = testbed2.nodes[0].netns
    # 20 s: the status call and the second inject below must see the fault still in force;
    # with 4 s a loaded 2-core machine (CI, 16:00 and 17:10 UTC) saw it end before them
    cp = fl("inject", "--type", "nic-slow", "--node", f"netns:{ns}", "--rate", "20mbit", "--duration", "20s", "--detach", "--json")
    assert cp.returncode == 0, cp.stderr
    fid = json.loads(cp.stdout)["fault_id"]
    rec = lease_dir() / f"{fid}.json"
    if damage == "deleted":
        rec.unlink()
    elif damage == "truncated":
        os.truncate(rec, 0)
    else:
        rec.write_text('{"fault_id": "nic-ffffff", "revert": "rm -rf /"}')
    st = json.loads(fl("status", "--json").stdout)
    row = next(r for r in st if r["fault_id"] == fid)
    assert row["watchdog_alive"] and row["record"] is None
    # faultlab's own qdisc is never called foreign
    again = fl("inject", "--type", "nic-slow", "--node", f"netns:{ns}", "--rate", "10mbit", "--duration", "5s")
    assert again.returncode == 3 and "faultlab's own" in again.stderr and "did not create" not in again.stderr, again.stderr
    assert "at the latest at " in again.stderr and " UTC (in " in again.stderr and "unix" not in again.stderr, again.stderr  # when, in words
    q = lambda: subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "show"], capture_output=True, text=True).stdout  # noqa: E731
    assert FAULT_QDISC.search(q())
    # the deadline moved to now (the watchdog reads it without the record): it reverts
    # at its next poll, not at the 20 s deadline; wait with room for a loaded machine
    deadline_now(fid)
    assert wait_for(lambda: not FAULT_QDISC.search(q()) and "ingress" not in q(), 45), q()
    links = subprocess.run(["ip", "-n", ns, "link"], capture_output=True, text=True).stdout
    assert "flifb" not in links
    rec.unlink(missing_ok=True)  # the planted garbage (the watchdog removed only its own)


@needs_root
def test_orphans_without_record_or_watchdog_are_shown_and_recovered(testbed2, busy_loop, no_residue):
    ns = testbed2.nodes[0].netns
    ids = []
    for args in (["--type", "nic-slow", "--node", f"netns:{ns}", "--rate", "20mbit"],
                 ["--type", "cpu-contention", "--target", str(busy_loop.pid), "--cpu-fraction", "0.3"]):
        cp = fl("inject", *args, "--duration", "120s", "--detach", "--json")
        assert cp.returncode == 0, cp.stderr
        ids.append(json.loads(cp.stdout)["fault_id"])
    for r in json.loads(fl("status", "--json").stdout):
        if r["fault_id"] in ids:
            for pid in r["watchdog_pids"]:
                os.killpg(pid, signal.SIGKILL)
    for fid in ids:
        (lease_dir() / f"{fid}.json").unlink()
    st = {r["fault_id"]: r for r in json.loads(fl("status", "--json").stdout)}
    assert ids[1] in st and any("cgroup" in o for o in st[ids[1]]["orphan_objects"])
    nic = [r for r in st.values() if any("flifb" in o or "qdisc" in o for o in r["orphan_objects"])]
    assert nic, st
    text = fl("status").stdout
    assert "NO LEASE" in text and "no faults in force" not in text
    rc = fl("recover")
    assert rc.returncode == 0, rc.stderr
    assert not [r for r in json.loads(fl("status", "--json").stdout) if r["fault_id"] in ids or r["orphan_objects"]]
    assert not list(cgroups_named("faultlab-"))
    assert proc_state(busy_loop.pid) != "T"


# -- the watchdog never evaluates file content, never follows a swap ---------------------

@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_watchdog_reads_deadline_as_digits_only(tmp_path, shell):
    from faultlab.lifecycle.watchdog import WATCHDOG_SH

    if not shutil.which(shell):
        pytest.skip(f"no {shell}")
    d = tmp_path / "leases"
    d.mkdir()
    pwned, done = tmp_path / "pwned", tmp_path / "reverted"
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        dl = int(time.time()) + 3
        (d / "nic-abc123.deadline").write_text(f"x[$(touch {pwned})]")
        p = subprocess.Popen([shell, "-c", WATCHDOG_SH, "faultlab-watchdog", "nic-abc123", str(dl), str(fd), f"touch {done}"], pass_fds=(fd,))
        time.sleep(1.5)
        (d / "nic-abc123.deadline").write_text("0777")  # octal / leading zero: ignored too
        p.wait(timeout=30)
    finally:
        os.close(fd)
    assert not pwned.exists(), "the deadline file's content was run"
    assert done.exists() and time.time() >= dl


def test_watchdog_of_a_swapped_folder_keeps_its_own(tmp_path, monkeypatch):
    from faultlab.injectors.base import Cmd
    from faultlab.lifecycle.lease import Lease
    from faultlab.nodes import LocalNode

    parent = tmp_path / "p"
    d = parent / "leases"
    monkeypatch.setenv("FAULTLAB_LEASE_DIR", str(d))
    done = tmp_path / "reverted"
    lease = Lease.create_for(LocalNode("local"), "nic-abc124", "nic-slow", "x", {}, [Cmd(("touch", str(done)))], time.time() + 3)
    d.rename(parent / "old")
    d.mkdir()
    (d / "nic-abc124.deadline").write_text(str(int(time.time()) + 3600))  # whoever swapped it wants the fault kept
    (d / "nic-abc124.json").write_text("{}")
    assert lease.proc.wait(timeout=30) is not None
    assert done.exists(), "the watchdog obeyed the swapped-in folder"


# -- 3 and 5: verify failing is a failed inject -------------------------------------------

@needs_root
def test_unverifiable_pause_as_another_user_exits_3_and_reverts(busy_loop, nobody_dir):
    env = nobody_env(nobody_dir)
    cp = as_nobody([*FL, "inject", "--type", "process-pause", "--target", str(busy_loop.pid), "--pause", "100ms", "--period", "300ms",
                    "--duration", "30s"], env)
    assert cp.returncode == 3, (cp.stdout, cp.stderr)
    err = [ln for ln in cp.stderr.splitlines() if ln.startswith("faultlab: error:")]
    assert len(err) == 1 and "verify" in err[0] and "not in force" in err[0] and "measured" in err[0], cp.stderr
    assert "reverted" in err[0]
    assert proc_state(busy_loop.pid) != "T"
    assert not faultlab_procs(env["FAULTLAB_LEASE_DIR"])
    assert not list((nobody_dir / "leases").glob("*.json"))
    # --allow-unverified: the user's explicit choice
    ok = as_nobody([*FL, "inject", "--type", "process-pause", "--target", str(busy_loop.pid), "--pause", "100ms", "--period", "300ms",
                    "--duration", "1s", "--allow-unverified", "--json"], env)
    assert ok.returncode == 0 and json.loads(ok.stdout)["status"] == "reverted", ok.stderr
    assert not faultlab_procs(env["FAULTLAB_LEASE_DIR"])


# -- 4: one view of the host --------------------------------------------------------------

@needs_root
def test_another_user_sees_roots_faults_and_is_told_it_cannot_revert(busy_loop, nobody_dir, no_residue):
    cp = fl("inject", "--type", "cpu-contention", "--target", str(busy_loop.pid), "--cpu-fraction", "0.5", "--duration", "60s", "--detach", "--json")
    assert cp.returncode == 0, cp.stderr
    fid = json.loads(cp.stdout)["fault_id"]
    env = nobody_env(nobody_dir)
    try:
        st = as_nobody([*FL, "status", "--json"], env)
        row = next(r for r in json.loads(st.stdout) if r["fault_id"] == fid)
        assert row["uid"] == 0 and not row["can_revert"] and row["watchdog_alive"]
        text = as_nobody([*FL, "status"], env).stdout
        assert fid in text and "no faults in force" not in text
        for argv in (["revert", fid], ["revert", "--all"], ["recover"]):
            r = as_nobody([*FL, *argv], env)
            assert r.returncode == 3, (argv, r.stdout, r.stderr)
            assert fid in r.stderr and "another user" in r.stderr and "Traceback" not in r.stderr, r.stderr
            assert "no fault" not in r.stdout
        assert any(r["fault_id"] == fid for r in json.loads(fl("status", "--json").stdout)), "still in force"
    finally:
        rv = fl("revert", fid)
    assert rv.returncode == 0, (rv.stdout, rv.stderr)


# -- 5, 6 and the bad-input corpus: unusable lease folders ----------------------------------

def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], check=True)


def _umount(path: Path) -> None:
    cp = subprocess.run(["umount", str(path)], capture_output=True, text=True)
    assert cp.returncode == 0, f"cannot unmount {path} (a process left holding it?): {cp.stderr}"


def _setup_readonly(base: Path) -> tuple[dict, callable]:
    m = base / "ro"
    _mount_tmpfs(m, "64k")
    (m / "leases").mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(m)], check=True)
    return {"FAULTLAB_LEASE_DIR": str(m / "leases")}, lambda: _umount(m)


def _setup_full(base: Path) -> tuple[dict, callable]:
    # the chaos campaign's own full folder, so this also checks that it really is full
    from faultlab.chaos import full_lease_dir

    leases, _ = full_lease_dir(base)
    return {"FAULTLAB_LEASE_DIR": str(leases)}, lambda: _umount(leases.parent)


def _setup_foreign_owner(base: Path) -> tuple[dict, callable]:
    d = base / "theirs"
    d.mkdir()
    os.chown(d, 65534, 65534)
    return {"FAULTLAB_LEASE_DIR": str(d)}, lambda: None


def _setup_symlink(base: Path) -> tuple[dict, callable]:
    (base / "real").mkdir()
    (base / "link").symlink_to(base / "real")
    return {"FAULTLAB_LEASE_DIR": str(base / "link")}, lambda: None


def _setup_group_writable(base: Path) -> tuple[dict, callable]:
    d = base / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    return {"FAULTLAB_LEASE_DIR": str(d)}, lambda: None


LEASE_FOLDER_FAULTS = {
    "read-only mount": (_setup_readonly, "EROFS"),
    "full tmpfs": (_setup_full, "ENOSPC"),
    "owned by another user": (_setup_foreign_owner, "owned by uid 65534"),
    "symlink": (_setup_symlink, "symlink"),
    "writable by others": (_setup_group_writable, "writable by group or others"),
}


@needs_root
@pytest.mark.parametrize("case", list(LEASE_FOLDER_FAULTS))
@pytest.mark.parametrize("command", ["inject", "revert --all", "recover"])
def test_unusable_lease_folder_is_one_line_nothing_applied_no_process(case, command, busy_loop, tmp_path):
    setup, says = LEASE_FOLDER_FAULTS[case]
    base = Path(tempfile.mkdtemp(prefix="fl-lease-", dir="/tmp"))
    try:
        env_extra, teardown = setup(base)
    except BaseException:
        subprocess.run(["umount", "-R", *[str(p) for p in base.iterdir()]], capture_output=True)
        raise
    env = dict(os.environ, **env_extra)
    try:
        before = state(env_extra["FAULTLAB_LEASE_DIR"])
        files = sorted(p.name for p in Path(env_extra["FAULTLAB_LEASE_DIR"]).iterdir())
        if command == "inject":
            argv = ["inject", "--type", "cpu-contention", "--target", str(busy_loop.pid), "--cpu-fraction", "0.3", "--duration", "167h"]
        else:
            argv = command.split()
        cp = fl(*argv, env=env)
        if command != "inject" and case in ("read-only mount", "full tmpfs"):
            # a trusted folder with nothing in it: nothing to revert is the truth
            assert cp.returncode == 0 and "Traceback" not in cp.stderr, cp.stderr
            return
        assert cp.returncode != 0, (cp.stdout, cp.stderr)
        lines = [ln for ln in cp.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("faultlab: error: ") and "Traceback" not in cp.stderr, cp.stderr
        assert "FAULTLAB_LEASE_DIR" in lines[0] and says in lines[0], lines[0]
        assert state(env_extra["FAULTLAB_LEASE_DIR"]) == before
        assert sorted(p.name for p in Path(env_extra["FAULTLAB_LEASE_DIR"]).iterdir()) == files, "a .tmp or record was left"
    finally:
        teardown()
        shutil.rmtree(base, ignore_errors=True)


@needs_root
@pytest.mark.parametrize("command", ["inject", "status", "revert --all", "recover"])
def test_as_nobody_a_folder_of_another_user_or_root_is_one_line(command, busy_loop, nobody_dir):
    """As nobody: a lease folder owned by another user is refused; root's own folder
    (trusted but not writable) gives EACCES at the first write. One line, no process."""
    other = Path(tempfile.mkdtemp(prefix="fl-other-"))
    os.chown(other, 1, 1)  # daemon
    os.chmod(other, 0o755)
    rootdir = Path(tempfile.mkdtemp(prefix="fl-rootdir-"))
    os.chmod(rootdir, 0o755)
    try:
        for folder, says in ((other, "owned by uid 1"), (rootdir, "EACCES")):
            env = dict(nobody_env(nobody_dir), FAULTLAB_LEASE_DIR=str(folder))
            if command == "inject":
                argv = ["inject", "--type", "process-pause", "--target", str(busy_loop.pid), "--pause", "100ms", "--period", "300ms", "--duration", "30s"]
            else:
                argv = command.split()
            cp = as_nobody([*FL, *argv], env)
            if command == "status" or (folder == rootdir and command != "inject"):
                assert "Traceback" not in cp.stderr, cp.stderr  # nothing to write: a readable view
                continue
            lines = [ln for ln in cp.stderr.splitlines() if ln.strip()]
            assert cp.returncode != 0 and len(lines) == 1 and lines[0].startswith("faultlab: error: ") and says in lines[0], (cp.returncode, cp.stderr)
            assert not faultlab_procs(str(folder)) and not list(folder.iterdir())
        assert proc_state(busy_loop.pid) != "T"
    finally:
        shutil.rmtree(other, ignore_errors=True)
        shutil.rmtree(rootdir, ignore_errors=True)


# -- 7: --force over a foreign tbf restores it byte-exactly ----------------------------------

@contextlib.contextmanager
def _foreign_tbf(node):
    """A tbf of another tool at the root of ``node``'s fleth0 (handle 7:, rate 10mbit,
    burst 32kbit, latency 40ms) for the block; yields a reader of that root qdisc as
    ``tc -j -raw`` shows it (a dict); the root qdisc is deleted after the block."""
    node.run(["tc", "qdisc", "add", "dev", "fleth0", "root", "handle", "7:", "tbf", "rate", "10mbit", "burst", "32kbit", "latency", "40ms"],
             scope="net", check=True)
    try:
        yield lambda: json.loads(node.run(["tc", "-j", "-raw", "qdisc", "show", "dev", "fleth0", "root"], scope="net").stdout)[0]
    finally:
        node.run(["tc", "qdisc", "del", "dev", "fleth0", "root"], scope="net")


@needs_root
def test_force_restores_foreign_tbf_in_the_kernels_own_units(testbed2, no_residue):
    from faultlab.injectors import NicSlow, apply

    n0, _ = testbed2.nodes
    with _foreign_tbf(n0) as raw:
        before = raw()
        for _ in range(3):  # never a byte less per cycle
            assert apply(NicSlow(n0, 20e6, force=True), 30).revert() == "reverted"
            after = raw()
            assert after["handle"] == "7:" and after["options"] == before["options"], (before, after)
        assert before["options"]["burst"] == 4095 and before["options"]["lat"] == 40000


@needs_root
def test_force_fault_with_lost_record_restores_the_foreign_tbf_from_the_watchdog(testbed2, no_residue):
    """--force over a foreign tbf, --detach, the lease record deleted: the watchdog's
    own argv holds the restore command in the kernel's units (rate in bit/s, burst and
    limit in bytes, read with tc -j -raw), and at the deadline it puts the foreign tbf
    back byte-exact."""
    n0, _ = testbed2.nodes
    ns = n0.netns
    with _foreign_tbf(n0) as raw:
        before = raw()
        o = before["options"]
        cp = fl("inject", "--type", "nic-slow", "--node", f"netns:{ns}", "--rate", "20mbit", "--force", "--duration", "10s", "--grace", "0s",
                "--detach", "--json")
        assert cp.returncode == 0, cp.stderr
        fid = json.loads(cp.stdout)["fault_id"]
        assert raw()["handle"] != "7:"
        (lease_dir() / f"{fid}.json").unlink()
        from faultlab.lifecycle.watchdog import find_watchdogs
        from faultlab.injectors.nic import tbf_burst_for_ticks

        wd = [w for w in find_watchdogs() if w.fault_id == fid]
        assert len(wd) == 1
        argv = Path(f"/proc/{wd[0].pid}/cmdline").read_bytes().decode().split("\0")
        burst = tbf_burst_for_ticks(int(o["rate"]), int(str(o["burst_raw"]), 16))
        want = f"tc qdisc add dev fleth0 root handle 7: tbf rate {int(o['rate']) * 8}bit burst {burst} limit {int(o['limit'])}"
        assert any(a.endswith(want) for a in argv), (want, argv)
        deadline_now(fid)  # its deadline now, not in 10 s
        assert wait_for(lambda: not [w for w in find_watchdogs() if w.fault_id == fid], 30)
        after = raw()
        assert after["handle"] == "7:" and after["options"] == before["options"], (before, after)
        assert not FAULT_QDISC.search(n0.run(["tc", "qdisc", "show"], scope="net").stdout)


# -- the hand-over message: when the lease ends it, and what is left ----------------------

@needs_root
def test_hand_over_says_when_the_lease_ends_it_and_what_is_left(busy_loop, no_residue):
    """A real cpu quota fault whose revert is handed over after its first command (the
    hooks raise HandOver as the third signal would): the message names the watchdog,
    the lease deadline as UTC wall-clock time and seconds from now, and the revert
    commands it left; the watchdog (told SIGUSR1) then ends the fault."""
    import re

    from faultlab.lifecycle.injectrun import outcome
    from faultlab.injectors import HandOver, Hooks, apply, build
    from faultlab.nodes import LocalNode

    class ThirdSignalAfterOne(Hooks):
        def revert_progress(self, done, total, handover_ok):
            if handover_ok and done == 1:
                raise HandOver()

    inj = build("cpu-contention", LocalNode("local"), target=str(busy_loop.pid), duration_s=60, opts={"--cpu-fraction": "0.3"})
    active = apply(inj, 60, grace_s=0.0)
    assert active.revert(ThirdSignalAfterOne()) == "handed-to-lease"
    active.evidence["revert_done"] = 1
    code, msg = outcome(active)
    n = len(active.plan.revert)
    assert code == 1 and f"watchdog (PID {active.evidence['watchdog_pid']})" in msg, msg
    m = re.search(r"lease deadline (\d\d:\d\d:\d\d) UTC \(in (\d+)s\)", msg)
    assert m, msg
    dl = active.lease.record["deadline_ts"]
    assert m[1] == time.strftime("%H:%M:%S", time.gmtime(dl)) and abs(int(m[2]) - (dl - time.time())) <= 2, msg
    assert f"{n - 1} of {n} revert command(s) not run" in msg, msg
    assert wait_for(lambda: not list(cgroups_named("faultlab-")), 20), "the watchdog did not end it"
    assert wait_for(lambda: not any(lease_dir().glob("*")), 10)


# -- verify failing in a scenario run --------------------------------------------------------

@needs_root
@pytest.mark.parametrize("allow", [False, True])
def test_run_reverts_an_unverified_fault_at_once_and_records_it(tmp_path, allow, no_residue):
    """The runner's step for one scheduled fault, on a real cpu quota over a process
    that sleeps (never throttled: verify truly fails). Without --allow-unverified it
    is reverted at once, its row says status unverified, verified false, it is listed
    in failed_faults and said plainly, and the labeler does not take it as a cause;
    with it, the fault stays in force until its end."""
    from rich.console import Console

    from faultlab import injectors
    from faultlab.lifecycle.hostview import host_view
    from faultlab.labeler.reconcile import reconcile
    from faultlab.nodes import LocalNode
    from faultlab.rundir import RunDir
    from faultlab.runner import RunResult, _Due, _start, _stop
    from faultlab.scenario import FaultSpec

    sleeper = subprocess.Popen(["sleep", "120"])
    d = None
    try:
        rank = type("Rank", (), {"rank": 0, "pid": sleeper.pid, "node": LocalNode("n0"), "popen": sleeper})()
        spec = FaultSpec.model_validate({"type": "cpu-contention", "rank": 0, "at": "1s", "duration": "20s", "params": {"cpu_fraction": 0.5}})
        rd = RunDir.create(tmp_path / "run", run_id="t-unverified", scenario={}, seed=0)
        res, buf = RunResult(rd), tmp_path / "out.txt"
        with open(buf, "w") as fh:
            con = Console(file=fh, width=400)
            d = _Due(spec, 0, 1.0, None)
            _start(d, [rank.node], [rank], None, rd, res, con, time.time(), injectors, **({"allow_unverified": True} if allow else {}))
            in_force = [v for v in host_view()[0] if d.active is not None and v.fault_id == d.active.fault_id]
            if allow:
                assert not d.done and in_force and not res.failed_faults
                _stop(d, rd, res, con, time.time())
                assert res.injections[0]["status"] == "reverted" and not res.injections[0]["verified"]
                return
        text = buf.read_text()
        assert d.done and not in_force, in_force
        row = res.injections[0]
        assert row["status"] == "unverified" and row["verified"] is False and row["end_ts"] >= row["start_ts"]
        assert len(res.failed_faults) == 1 and "was not in force" in res.failed_faults[0] and "reverted at once" in res.failed_faults[0]
        assert "NOT IN FORCE" in text and "throttl" in text, text
        assert not list(cgroups_named("faultlab-"))
        import pandas as pd

        labels = pd.DataFrame([{"run_id": "t-unverified", "component": "rank:0", "start_ts": row["start_ts"] - 1, "end_ts": row["end_ts"] + 1,
                                "slowdown": 2.0, "confidence": 1.0, "views": "temporal", "evidence": "{}"}])
        rec = reconcile(labels, pd.DataFrame([row]))
        assert list(rec["source"]) == ["observed"] and rec["fault_id"].isna().all(), rec
        # the same row, had it been in force, is the label's cause: the status is what decides
        assert list(reconcile(labels, pd.DataFrame([{**row, "status": "reverted"}]))["source"]) == ["injected"]
    finally:
        if d is not None and d.active is not None:
            d.active.revert()  # a no-op when the step already reverted it
        sleeper.kill()
        sleeper.wait()


def test_status_reads_the_record_of_a_fault_in_another_lease_folder(busy_loop, tmp_path, no_residue):
    """A detached pause made with ``FAULTLAB_LEASE_DIR=OTHER``: the default ``status``
    finds it by its watchdog and reads the record in OTHER (same trust checks): node
    and target shown, never "lease record lost"; it names the folder, and ``revert``
    ends it."""
    other = tmp_path / "other-leases"
    other.mkdir(mode=0o700)
    cp = fl("inject", "--type", "process-pause", "--target", str(busy_loop.pid), "--pause", "100ms", "--period", "500ms",
             "--duration", "60s", "--detach", "--json", env={"FAULTLAB_LEASE_DIR": str(other)})
    assert cp.returncode == 0, cp.stderr
    fid = json.loads(cp.stdout)["fault_id"]
    try:
        st = fl("status", "--json")
        row = next(r for r in json.loads(st.stdout) if r["fault_id"] == fid)
        assert row["record"] == str(other), row
        assert row["type"] == "process-pause" and row["target"] == f"pid:{busy_loop.pid}", row
        text = fl("status").stdout
        line = next(ln for ln in text.splitlines() if ln.startswith(fid))
        assert "record lost" not in line and f"record in {other}" in line and f"pid:{busy_loop.pid}" in line, line
    finally:
        rv = fl("revert", fid)
    assert rv.returncode == 0, rv.stdout + rv.stderr
    assert not list(other.iterdir()), "the record and the pause pidfile are gone"
    time.sleep(0.3)
    assert Path(f"/proc/{busy_loop.pid}/stat").read_text().rpartition(")")[2].split()[0] != "T"
