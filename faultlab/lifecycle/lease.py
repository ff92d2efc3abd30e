"""Leases: a fault ends even when its controller is killed, its record is lost or its
folder is swapped.

A lease has two halves that do not depend on each other:

- the **record** ``<fault_id>.json`` in the lease folder (``/run/faultlab/leases`` as
  root, or ``$FAULTLAB_LEASE_DIR``): type, node, target, params, deadline (unix s),
  controller and watchdog PIDs and the revert commands (one ``shlex.join``-ed line
  each). It is written atomically, fsynced and read back right *after* the watchdog
  starts (so a controller killed in between leaves a watchdog, which ends itself, never
  a record nothing ends) and before anything is applied; any failure there is a
  one-line ``NodeError`` naming the folder and the fix, and nothing is left (no record,
  no temporary, no process: the watchdog is stopped). It is what
  ``faultlab status`` shows and ``recover`` runs.
- the **watchdog**: a detached ``sh`` in its own session that needs only ``sh`` and
  coreutils. Its own argv carries the fault id, the deadline and every revert line,
  so deleting or truncating the record changes nothing: at the deadline it runs the
  revert lines (idempotent; they touch only what faultlab made; each killed after
  ``watchdog.LINE_TIMEOUT_S``) and removes the files. It holds the lease folder as an
  open descriptor, its stdin (checked by ``faultlab.safefs`` before it was passed; no
  revert line inherits it), and reads a renewed deadline only through that descriptor
  (``/dev/fd/N/<id>.deadline``), so a folder swapped later is never read; the value
  is taken only when it is 1 to 12 digits with no leading zero, never evaluated as
  shell code. SIGUSR1 makes it revert now (``recover`` of a fault whose record is
  lost, a controller handing over on the third Ctrl-C). Its environment names the
  controller (``CONTROLLER_ENV``), so ``recover`` leaves a fault whose record was
  lost alone while that controller lives. After the revert it removes the record,
  the deadline file and any temporary of theirs a writer killed mid-write left.

A controller that reverts in time stops the watchdog's process group and removes the
files itself. ``watchdog.find_watchdogs`` finds watchdogs by their argv
(``faultlab-watchdog ID DEADLINE FD LINES...``), so a fault with no record is still
seen and ended.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from faultlab import procid, safefs
from faultlab.errors import NodeError
from faultlab.lifecycle.lease_remote import RemoteLease, held_lock, load_leases as load_remote, node_lock as remote_lock
from faultlab.lifecycle.record import LEASE_ID, ROOT_LEASE_DIR, lease_folder_error, valid_record
from faultlab.lifecycle.revertcheck import already_gone
from faultlab.lifecycle.watchdog import CONTROLLER_ENV, REMOTE_WATCHDOG_SH, WATCHDOG_NAME, WATCHDOG_SH, find_watchdogs
from faultlab.nodes import LEASE_HERE, LEASE_ON_NODE, Node, lease_dir
from faultlab.nodes.base import LINE_OUTPUT_BYTES, run_bounded

def open_lease_dir(node: Node, *, create: bool = True) -> safefs.TrustedDir:
    """The node's lease folder opened through ``faultlab.safefs`` (every component of
    its path owned by root or us and not writable by others; no symlinks), created
    0755 when missing (records are not secret: every user's ``status`` reads root's).
    Raises NodeError (one line naming the folder and the fix) or FileNotFoundError
    when it is missing and ``create`` is False."""
    d = str(node.lease_dir())
    try:
        td = safefs.open_dir(d, create=create, mode=0o755)
        if td.path == ROOT_LEASE_DIR and os.geteuid() == 0:
            os.fchmod(td.fd, 0o755)  # an older faultlab made it 0700: every user's status reads it
        return td
    except safefs.UntrustedPath as e:
        raise NodeError(f"lease folder {e}", field="FAULTLAB_LEASE_DIR") from None
    except FileNotFoundError:
        if not create:
            raise
        raise NodeError(f"lease folder {d}: a parent folder is missing", field="FAULTLAB_LEASE_DIR",
                        fix="create it, or point FAULTLAB_LEASE_DIR at a private folder") from None
    except OSError as e:
        raise lease_folder_error(e, d, "create or open it") from None


def trusted_lease_dir(node: Node) -> Path:
    """The lease folder's path after the checks of ``open_lease_dir``."""
    with open_lease_dir(node) as d:
        return Path(d.path)


@dataclass
class Lease:
    """A lease: its record (``path`` in the lease folder) and, for leases this process
    created, the watchdog's Popen (``proc``)."""

    path: Path
    record: dict
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def fault_id(self) -> str:
        return self.record["fault_id"]

    @property
    def folder(self) -> str:
        return str(self.path.parent)

    @classmethod
    def create(cls, injector, plan, deadline_ts: float) -> "Lease":
        """Lease for a fault's ``plan`` (see :meth:`create_for`)."""
        return cls.create_for(injector.node, plan.fault_id, plan.fault_type, plan.target, injector.params, plan.revert, deadline_ts)

    @classmethod
    def create_for(cls, node: Node, lease_id: str, kind: str, target: str, params: dict, revert: list, deadline_ts: float) -> "Lease":
        """Start the watchdog that runs ``revert`` (a list of Cmd) at ``deadline_ts``
        (unix s) unless released, then write the record durably (fsync, read back).
        Raises NodeError (one line: the folder and the fix) when the folder cannot be
        used; nothing is left then (no record, no temporary file, no watchdog)."""
        if not LEASE_ID.match(lease_id):
            raise NodeError(f"lease id {lease_id!r} is not of the form type-hex", field="fault_id")
        if node.lease_host() == LEASE_ON_NODE:  # record and watchdog on the node
            return RemoteLease.create_for(node, lease_id, kind, target, params, revert, deadline_ts, REMOTE_WATCHDOG_SH)
        lines = [c.render(node) for c in revert]
        deadline = int(deadline_ts + 0.999)
        record = {
            "fault_id": lease_id,
            "fault_type": kind,
            "node": node.describe(),
            "node_name": node.name,
            "target": target,
            "params": params,
            "created_ts": time.time(),
            "deadline_ts": float(deadline_ts),
            "controller_pid": os.getpid(),
            "controller_starttime": procid.starttime(os.getpid()),
            "uid": os.geteuid(),
            "revert": lines,
        }
        with open_lease_dir(node) as d:
            name = f"{lease_id}.json"
            # the watchdog first: a controller killed at any instant after this leaves
            # nothing the watchdog does not end (a record written first would be left,
            # ended by nothing, by a kill between the record and the watchdog)
            proc = _start_watchdog(node, d, lease_id, deadline, lines)
            try:
                _test_pause_after_watchdog()
                _note_watchdog(record, proc.pid)
                _write_durable(d, name, record)
            except BaseException:  # also a stop signal landing after the rename
                _unlink_quietly(d, name)
                _stop_started(proc)
                raise
            return cls(Path(d.path) / name, record, proc)

    def _dir(self) -> safefs.TrustedDir:
        try:
            return safefs.open_dir(self.folder)
        except safefs.UntrustedPath as e:
            raise NodeError(f"lease folder {e}", field="FAULTLAB_LEASE_DIR") from None

    def renew(self, deadline_ts: float) -> None:
        """Move the deadline (unix s); the watchdog reads it within 5 s. Raises NodeError
        when the folder cannot be written (the watchdog keeps its last deadline)."""
        dl = int(deadline_ts + 0.999)
        self.record["deadline_ts"] = float(deadline_ts)
        try:
            with self._dir() as d:
                d.write_atomic(f"{self.fault_id}.deadline", str(dl), 0o644, durable=False)
                d.write_atomic(f"{self.fault_id}.json", json.dumps(self.record, sort_keys=True, indent=1), 0o644, durable=False)
        except OSError as e:
            raise lease_folder_error(e, self.folder, "renew the lease") from None

    def exists(self) -> bool:
        """Whether the record is still there."""
        try:
            with self._dir() as d:
                return d.exists(f"{self.fault_id}.json")
        except (OSError, NodeError):
            return False

    def expired(self) -> bool:
        """Whether the watchdog has run (its deadline came, or it was told to revert
        now): our own watchdog has exited, or (a lease read back) none of its own
        watchdogs (:meth:`own_watchdogs`: a look-alike does not count) is alive and its
        record is gone."""
        if self.proc is not None:
            return self.proc.poll() is not None
        return not self.own_watchdogs() and not self.exists()

    def watchdogs(self) -> list:
        """The live watchdog processes of this lease (see ``watchdog.find_watchdogs``)."""
        return [w for w in find_watchdogs() if w.fault_id == self.fault_id]

    def own_watchdogs(self) -> list:
        """The live watchdogs that are this lease's, not just named like it: the PID
        and start time its record notes (``watchdog_pid``, ``watchdog_starttime``),
        and in any case run by the record's user (``uid``); a record without them (an
        older version) names the one of faultlab's PID namespace holding its folder (a
        container's root, uid 0 here, may hold a folder it names like this one). A
        process of anyone else that merely looks like one (any user can start
        ``sh -c x faultlab-watchdog ID ...``) is never signalled."""
        rec = self.record
        uid = rec.get("uid")
        pid, start = rec.get("watchdog_pid"), rec.get("watchdog_starttime")
        out = []
        for w in self.watchdogs():
            if isinstance(uid, int) and w.uid != uid:
                continue
            if isinstance(pid, int) and not isinstance(pid, bool):
                if w.pid != pid or (isinstance(start, int) and w.starttime != str(start)):
                    continue
            elif not w.same_ns or w.folder != self.folder:
                continue
            out.append(w)
        return out

    def watchdog_pid(self) -> int | None:
        """The PID of this lease's live watchdog (see :meth:`own_watchdogs`), or None."""
        if self.proc is not None and self.proc.poll() is None:
            return self.proc.pid
        ws = self.own_watchdogs()
        return ws[0].pid if ws else None

    def release(self) -> None:
        """Remove the record, the deadline file and any temporary of theirs a killed
        writer left, then stop the watchdog (its process group: this process's own
        child, or one of :meth:`own_watchdogs`).

        In that order: a controller killed at any instant of it leaves either nothing or
        a watchdog that runs the (idempotent) revert lines again at its deadline and
        removes what is left, never a record that nothing removes. Safe to call twice."""
        try:
            with self._dir() as d:
                for name in (f"{self.fault_id}.json", f"{self.fault_id}.deadline"):
                    d.unlink(name)
                    d.unlink_temporaries(name)
        except (OSError, NodeError):
            pass
        if self.proc is not None and self.proc.poll() is None:
            _kill_group(self.proc.pid)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for w in self.own_watchdogs():
            if w.stop():
                w.wait_gone(5.0)

    def hand_over(self) -> int | None:
        """Tell the watchdog to revert now (SIGUSR1) and leave the fault to it. Returns
        its PID, or None when no watchdog is alive."""
        pid = self.watchdog_pid()
        if pid is None:
            return None
        try:
            os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:
            return None
        return pid

    def run_revert(self, timeout_s: float = 60.0) -> int:
        """Run the recorded revert lines now (what the watchdog would do at the
        deadline). Returns the number of lines that failed for real (see
        :meth:`revert_left`)."""
        return len(self.revert_left(timeout_s))

    def revert_left(self, timeout_s: float = 60.0) -> list[str]:
        """Run the recorded revert lines now, each with ``timeout_s`` (s). Returns one
        line per command that failed for real (``faultlab.lifecycle.revertcheck``: a
        failed removal whose object is already gone is no failure); empty when the
        fault is gone. The caller releases the lease only then. Raises nothing."""
        left = []
        for line in self.record.get("revert", []):
            try:
                cp = run_bounded(["sh", "-c", line], input=None, timeout=timeout_s, limit=LINE_OUTPUT_BYTES)
                err = cp.stderr.decode(errors="replace").strip().splitlines()
                why = None if cp.returncode == 0 else (err or [f"exit {cp.returncode}"])[-1][:200]
            except (OSError, subprocess.TimeoutExpired) as e:
                why = f"did not finish: {e}"
            if why is not None and not already_gone(line):
                left.append(f"revert command failed: {line} ({why})")
        return left

    def watchdog_alive(self) -> bool:
        return self.watchdog_pid() is not None

    def controller_alive(self) -> bool:
        """Whether the faultlab process that made this lease still runs: its PID, with
        the start time it recorded (``faultlab.procid.alive``: a reused PID is not it;
        a record of an older version without one is checked by PID only)."""
        return procid.alive(self.record.get("controller_pid"), self.record.get("controller_starttime"))


def _write_durable(d: safefs.TrustedDir, name: str, record: dict) -> None:
    """Write ``record`` as ``name`` in ``d`` atomically, fsynced, and read it back."""
    data = json.dumps(record, sort_keys=True, indent=1).encode()
    try:
        d.write_atomic(name, data, 0o644)
        back = d.read_bytes(name)
    except OSError as e:
        _unlink_quietly(d, name)
        raise lease_folder_error(e, d.path, "write the lease record") from None
    if back != data:
        _unlink_quietly(d, name)
        raise NodeError(f"lease folder {d.path}: the lease record read back differs from what was written",
                        field="FAULTLAB_LEASE_DIR", fix="check the file system, or point FAULTLAB_LEASE_DIR elsewhere; nothing was applied")


def _note_watchdog(record: dict, pid: int) -> None:
    """Add the watchdog's PID and start time (``/proc/PID/stat`` field 22) to the
    record, so ``release`` signals that process only. When the start time cannot be
    read the record stays valid without them (``own_watchdogs`` then matches uid and
    folder)."""
    start = procid.starttime(pid)
    if start is not None:
        record.update(watchdog_pid=pid, watchdog_starttime=start)


#: a test seam: seconds (0-30) ``Lease.create_for`` waits between starting the
#: watchdog and writing the record, so a test can act inside that window (a revert of
#: a fault being created); unset, empty or anything else is no wait
TEST_CREATE_PAUSE_ENV = "FAULTLAB_TEST_CREATE_PAUSE_S"


def _test_pause_after_watchdog() -> None:
    """Wait ``TEST_CREATE_PAUSE_ENV`` seconds (0 to 30; anything else: not at all)."""
    raw = os.environ.get(TEST_CREATE_PAUSE_ENV, "")
    if re.fullmatch(r"[0-9]{1,2}(\.[0-9]{1,3})?", raw) and float(raw) <= 30:
        time.sleep(float(raw))


def _stop_started(proc: subprocess.Popen) -> None:
    """End the watchdog just started for a lease whose record could not be written
    (its process group), and reap it: no process is left."""
    _kill_group(proc.pid)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def _unlink_quietly(d: safefs.TrustedDir, name: str) -> None:
    try:
        d.unlink(name)
    except OSError:  # a read-only or foreign folder: there was nothing to remove
        pass


def _start_watchdog(node: Node, d: safefs.TrustedDir, lease_id: str, deadline: int, lines: list[str]) -> subprocess.Popen:
    """The detached watchdog, holding the checked folder descriptor ``d.fd`` as its
    stdin (descriptor 0, which its revert lines never inherit: ``WATCHDOG_SH``), with
    this process named in its environment (``CONTROLLER_ENV``). The lease host of every
    backend here is this host, so it is started locally."""
    argv = node.argv(["sh", "-c", WATCHDOG_SH, WATCHDOG_NAME, lease_id, str(deadline), "0", *lines], "host")
    env = dict(os.environ, **{CONTROLLER_ENV: f"{os.getpid()} {procid.starttime(os.getpid()) or 0}"})
    try:
        return subprocess.Popen(argv, stdin=d.fd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, env=env)
    except OSError as e:
        raise NodeError(f"cannot start the lease watchdog: {e.strerror or e}", field="node", fix="check that sh is installed; nothing was applied") from None


@contextlib.contextmanager
def node_lock(node: Node, *, create: bool = True):
    """Serialize probe -> lease -> inject, revert and recover on one lease host, so two
    faultlab processes never act on a node at once.

    It is a flock on a lock file of the lease folder in the private ``node-locks``
    folder beside it (``lease_remote.held_lock``: a lease folder is readable by every
    user, a lock there could be held by any of them). A second inject sees the first's
    lease and refuses, and a revert never runs between a fault's watchdog start and its
    last inject command. Not reentrant (a second lock of the same folder in one process
    waits for the first). Raises NodeError (one line) when the folder cannot be used,
    FileNotFoundError when it is missing and ``create`` is False."""
    if node.lease_host() == LEASE_ON_NODE:
        with remote_lock(node, lease_dir()):
            yield
        return
    with open_lease_dir(node, create=create) as d:
        folder = d.path
    with held_lock(Path(folder), "local-" + hashlib.sha256(folder.encode()).hexdigest()[:16]):
        yield


@dataclass
class RecordBudget:
    """How many more record files may be read of one other user's lease folders, all
    of them together (:func:`read_records`' ``limit``), and how many more of those
    folders may be opened (``folders``, counted by the caller): a user can make any
    number of folders, each held by a look-alike watchdog process, so a bound per
    folder would not bound root's reads."""

    left: int
    folders: int = 0


#: the most entries of another user's lease folder looked at (:func:`read_records` with
#: a ``limit``): names cost them no more than directory blocks (hard links of one file),
#: and listing a folder of a million took root a few seconds each
MAX_LISTED = 4096


def _record_names(fd: int, cap: int | None) -> tuple[list[str], bool]:
    """The record names (``*.json``, not hidden) of the folder ``fd``, sorted, and
    whether every entry was looked at. With ``cap``: at most ``cap + 1`` names, from
    at most :data:`MAX_LISTED` entries in the folder's order."""
    out: list[str] = []
    seen = 0
    dup = os.dup(fd)
    try:
        os.lseek(dup, 0, os.SEEK_SET)
        with os.scandir(dup) as it:
            for e in it:
                seen += 1
                if e.name.endswith(".json") and not e.name.startswith("."):
                    out.append(e.name)
                if cap is not None and (len(out) > cap or seen >= MAX_LISTED):
                    return sorted(out), False
    finally:
        os.close(dup)
    return sorted(out), True


def read_records(folder: str, *, owner: int | None = None, held_by: str | None = None,
                 limit: int | RecordBudget | None = None) -> tuple[list[Lease], list[str]]:
    """(leases, problems) of the records in ``folder``: files that are not valid lease
    records, or not trusted (owner, mode, symlink), are listed in problems and never
    acted on.

    A missing folder is empty. ``owner``: the user whose folder it is (root reading
    another user's lease folder): the whole path and the records must then be owned by
    root or that user, with the same mode and no-symlink checks. ``held_by``: the
    folder is known only as the one a process holds (``process PID (uid U)``), not as
    one of faultlab's paths: its problems name that process and carry no fix (a
    look-alike may hold ``/tmp`` or ``/etc``: an ``rm`` or ``chmod`` of it would be
    wrong). ``limit``: read at most that many ``.json`` files (in name order), and
    say so in one problem line naming the folder when there are more (another user's
    folder: whatever they write there must not make root's reads unbounded); a
    :class:`RecordBudget` is shared by several folders and lowered by the files read
    here. Read only. Raises nothing for an untrusted folder: it is one problem."""
    leases, problems = [], []

    def why(e: safefs.UntrustedPath) -> str:
        return str(e) if held_by is None else e.reason

    try:
        d = safefs.open_dir(folder, uids=None if owner is None else frozenset({0, owner}))
    except FileNotFoundError:
        return leases, problems
    except safefs.UntrustedPath as e:
        if held_by is not None:
            return leases, [f"lease folder {why(e)}: held by {held_by}, which looks like a watchdog; "
                            "not a folder faultlab made, so not read (nothing to change there)"]
        return leases, [f"lease folder {e}"]
    except OSError as e:
        return leases, [f"lease folder {folder}: {e.strerror or e}"]
    with d:
        cap = limit.left if isinstance(limit, RecordBudget) else limit
        try:
            names, whole = _record_names(d.fd, cap)
        except OSError as e:
            return leases, [f"lease folder {folder}: {e.strerror or e}"]
        if cap is not None and len(names) > cap:
            left = " (what is left to read of its user's lease folders)" if isinstance(limit, RecordBudget) else ""
            problems.append(f"lease folder {folder}: more than {cap} lease records{left}; the rest not read")
            names = names[:cap]
        elif not whole:
            problems.append(f"lease folder {folder}: more than {MAX_LISTED} entries; the rest not looked at")
        if isinstance(limit, RecordBudget):
            limit.left -= len(names)
        for name in names:
            try:
                rec = d.read_json(name)
            except FileNotFoundError:
                continue
            except safefs.UntrustedPath as e:
                problems.append(f"{folder}/{name}: not read ({why(e)})")
                continue
            except (ValueError, OSError, RecursionError) as e:
                problems.append(f"{folder}/{name}: not read ({e})")
                continue
            bad = valid_record(rec, name)
            if bad:
                problems.append(f"{folder}/{name}: not a lease record ({bad})")
                continue
            leases.append(Lease(Path(d.path) / name, rec))
    return sorted(leases, key=lambda le: le.record.get("created_ts", 0) or 0), problems


def load_leases(node: Node) -> list[Lease]:
    """Every valid, trusted lease record in ``node``'s lease folder, oldest first
    (anything else there is ignored, never run; ``faultlab status`` reports it)."""
    if node.lease_host() == LEASE_ON_NODE:
        return load_remote(node)
    return read_records(str(node.lease_dir()))[0]


def recover(node: Node, fault_id: str | None = None) -> list[dict]:
    """Revert every lease recorded in ``node``'s lease folder (or only ``fault_id``):
    run its revert lines; when none failed for real, stop its watchdog and remove its
    files; otherwise keep both (the watchdog retries at the deadline) and list what
    failed in ``left``.

    Returns one dict a lease. Raises NodeError (one line) for an unusable folder.
    (``faultlab.lifecycle.hostrevert.revert_view`` also ends faults without a record.)"""
    done = []
    if node.lease_host() == LEASE_HERE and not node.lease_dir().exists():
        return done
    with node_lock(node):
        leases = load_leases(node)
    for lease in leases:
        if fault_id and lease.fault_id != fault_id:
            continue
        with node_lock(node):
            if not lease.exists():
                continue
            if hasattr(lease, "revert_left"):
                left = lease.revert_left()
            else:  # a remote lease: any failed line keeps it
                n = lease.run_revert()
                left = [f"{n} revert command(s) failed on {node.describe()}"] if n else []
            if not left:
                lease.release()
        done.append({"fault_id": lease.fault_id, "type": lease.record.get("fault_type"), "node": lease.record.get("node"),
                     "revert_lines_failed": len(left), "left": left})
    return done


def _kill_group(pid: int) -> None:
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    try:
        if pgid == pid:  # a session leader we started: its whole group (sleep, sh -c)
            os.killpg(pgid, signal.SIGTERM)
        else:
            os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
