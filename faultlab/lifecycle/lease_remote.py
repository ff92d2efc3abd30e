"""Leases on a remote node (the ssh backend): the record and the watchdog live there.

The same watchdog ``sh`` loop as faultlab.lifecycle.lease, with every file operation
a command on the node, so a fault ends at its deadline even if the controller is
SIGKILLed *or the network between controller and node is cut*: nothing on the node
waits for us. The order differs from the local lease's (record, then watchdog): the
watchdog starts first because its PID goes into the record; when the record cannot be
written the watchdog is ended at once (its process group, TERM) and the record path
removed, so a failed lease leaves nothing on the node.

Records read back are untrusted: the same schema check as a local record
(``lease.valid_record``: fault id, numeric deadline, revert lines all strings) plus
integer PIDs; anything else is reported (``read_records``' problems), never used.

The lease folder (``/run/faultlab/leases`` on the node) is made 0700 and must be a
real folder owned by the login (or sudo) user; records are written with a ``umask
077`` temporary and ``mv``. The lock that serializes probe -> lease -> inject is held
on the controller (one lock file per node under the local lease folder's parent):
two controllers on different machines acting on one node are not serialized.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from faultlab import procid, safefs
from faultlab.errors import NodeError
from faultlab.lifecycle.procowner import MINE_SH
from faultlab.lifecycle.record import lease_folder_error, valid_record
from faultlab.nodefs import read_on_node

_CHECK_DIR_SH = ('mkdir -p -m 700 "$1" && [ -d "$1" ] && [ ! -L "$1" ] && [ -O "$1" ] && '
                 'case "$(stat -c %a "$1")" in *[2367]?|*?[2367]) exit 3;; esac')
_LIST_SH = 'for f in "$1"/*.json; do [ -f "$f" ] && [ ! -L "$f" ] && [ -O "$f" ] && printf "%s\\n" "$f"; done; exit 0'
#: the most lease records, and watchdog candidates (``remoteview``), of an ssh node
#: looked at: each costs a command there, and the node's root lists what it likes (a
#: real node holds a few faults at a time); the rest is one problem line
MAX_ON_NODE = 256
#: the most seconds one look at an ssh node's faults (its watchdog candidates, then its
#: records, ``remoteview.remote_view``) starts commands for: the node's root may make
#: each last up to the command timeout (60 s), some 8 hours for ``MAX_ON_NODE`` of
#: each; what is left is one problem line
VIEW_S = 300.0


def trusted_dir(node) -> PurePosixPath:
    """The node's lease folder (``node.lease_dir()``, ``/run/faultlab/leases`` on an ssh
    node), made 0700 when missing and checked in one ``sh`` command on the node: a real
    folder (no symlink) owned by the login (or sudo) user, not group/other-writable.
    Returns its path. Raises NodeError (field ``--node``) otherwise."""
    d = node.lease_dir()
    cp = node.run(["sh", "-c", _CHECK_DIR_SH, "sh", str(d)], timeout=node.command_timeout_s)
    if cp.returncode != 0:
        raise NodeError(f"lease folder {d} on ssh node {node.name} is not a private folder of the login user",
                        field="--node", fix="make it a 0700 folder owned by that user (or remove it)")
    return d


class RemoteLease:
    """A lease record on a remote node (same fields as a local Lease)."""

    def __init__(self, node, path: PurePosixPath, record: dict):
        self.node, self.path, self.record = node, path, record

    @property
    def fault_id(self) -> str:
        return self.record["fault_id"]

    @classmethod
    def create_for(cls, node, lease_id, kind, target, params, revert, deadline_ts, watchdog_sh) -> "RemoteLease":
        """Start the watchdog on ``node`` (detached ``sh``, running ``revert``, a list
        of Cmd, at ``deadline_ts``, unix s, rounded up to the second), then write the
        record naming its PID into the node's trusted lease folder.

        Returns the lease. Raises NodeError when the folder is not trusted or the
        watchdog cannot start; when the record cannot be written, the watchdog's
        process group is ended and the record path removed before the error goes on
        (nothing left on the node)."""
        d = trusted_dir(node)
        path = d / f"{lease_id}.json"
        lines = [c.render(node) for c in revert]
        proc = node.spawn(["sh", "-c", watchdog_sh, "faultlab-watchdog", str(path), str(int(deadline_ts + 0.999)), *lines], new_session=True)
        rec = {"fault_id": lease_id, "fault_type": kind, "node": node.describe(), "node_name": node.name, "target": target,
               "params": params, "created_ts": time.time(), "deadline_ts": float(deadline_ts), "controller_pid": os.getpid(),
               "controller_starttime": procid.starttime(os.getpid()), "controller": os.uname().nodename, "revert": lines, "watchdog_pid": proc.pid}
        lease = cls(node, path, rec)
        try:
            lease._write()
        except BaseException:
            lease._end_new_watchdog(proc)
            raise
        return lease

    def _end_new_watchdog(self, proc) -> None:
        """End the watchdog this process just started (its session's process group:
        the ``sh -c`` wrapper and the loop) and remove the record path; best effort,
        for a lease whose record could not be written."""
        with contextlib.suppress(Exception):
            self.node.run(["kill", "-TERM", "--", f"-{int(proc.pid)}"], timeout=30)
        with contextlib.suppress(Exception):
            proc.wait(10)
        with contextlib.suppress(Exception):
            self.node.run(["rm", "-f", "--", str(self.path)], timeout=30)

    def _write(self) -> None:
        self.node.write_file(str(self.path), json.dumps(self.record, indent=1))

    def renew(self, deadline_ts: float) -> None:
        """Move the deadline to ``deadline_ts`` (unix s): ``ID.deadline`` on the node
        (whole seconds, rounded up; the watchdog reads it as digits only at its next
        poll, <= 5 s) and the record's ``deadline_ts``. Raises NodeError /
        CalledProcessError when the node cannot be written."""
        self.node.write_file(str(self.path.with_name(f"{self.fault_id}.deadline")), str(int(deadline_ts + 0.999)))
        self.record["deadline_ts"] = deadline_ts
        self._write()

    def exists(self) -> bool:
        return self.node.exists(str(self.path))

    def watchdog_alive(self) -> bool:
        pid = self.record.get("watchdog_pid")
        return bool(pid) and _is_watchdog(self.node, pid, self.path)

    def watchdog_pid(self) -> int | None:
        return self.record.get("watchdog_pid") if self.watchdog_alive() else None

    def expired(self) -> bool:
        """Whether the watchdog has run: it is gone (it removes the record after)."""
        return not self.watchdog_alive()

    def hand_over(self) -> int | None:
        """Tell the watchdog to revert now (SIGUSR1); its PID, or None."""
        pid = self.watchdog_pid()
        if pid:
            self.node.run(["kill", "-USR1", str(int(pid))], timeout=30)
        return pid

    def controller_alive(self) -> bool:
        # the controller runs on this host (its name recorded): its PID and start time
        return self.record.get("controller") == os.uname().nodename and \
            procid.alive(self.record.get("controller_pid"), self.record.get("controller_starttime"))

    def release(self) -> None:
        """Stop the watchdog (its process group, after checking its command line names
        this record) and remove the record, the deadline file and their temporaries.
        Safe to call twice."""
        pid = self.record.get("watchdog_pid")
        if pid and _is_watchdog(self.node, pid, self.path):
            self.node.run(["kill", "-TERM", "--", f"-{int(pid)}"], timeout=30)
        # the record, the deadline file and what a writer cut off mid-write left of
        # either (SshNode.write_file's NAME.tmp.<pid>); the paths are arguments, never code
        self.node.run(["sh", "-c", 'rm -f -- "$1" "$2" "$1".tmp.[0-9]* "$2".tmp.[0-9]*', "sh", str(self.path),
                       str(self.path.with_name(f"{self.fault_id}.deadline"))], timeout=30)

    def run_revert(self, timeout_s: float = 60.0) -> int:
        """Run the record's revert lines on the node (each ``sh -c LINE``, at most
        ``timeout_s`` seconds each), in order, all of them even after a failure.
        Returns the number that exited non-zero (0: all done). Only for a record whose
        watchdog is gone (remoteview.revert_remote); the lines passed
        :func:`valid_remote_record` (strings) when the record was loaded."""
        failed = 0
        for line in self.record.get("revert", []):
            failed += self.node.run(["sh", "-c", line], timeout=timeout_s).returncode != 0
        return failed


def _is_watchdog(node, pid: int, path) -> bool:
    try:
        cmd = node.read_file(f"/proc/{int(pid)}/cmdline")
    except OSError:
        return False
    # The PID recorded is the detached ``sh -c LINE`` that ssh spawn starts (its
    # cmdline holds the watchdog's argv joined into one string), or the watchdog itself:
    # either names faultlab-watchdog and this lease's record path.
    # And it runs as the login user (checked on the node): a reused PID of another
    # user's process with that argv is never signalled.
    args = cmd.split("\0")
    if not ("faultlab-watchdog" in cmd and (str(path) in args or any(str(path) in a.split() for a in args))):
        return False
    return node.run(["sh", "-c", MINE_SH + 'mine "$1"', "sh", str(int(pid))], timeout=30).returncode == 0


def open_lock_dir(local_lease_dir: Path) -> safefs.TrustedDir:
    """The controller's ``node-locks`` folder beside its lease folder
    (``LEASE_DIR/../node-locks``), opened with the lease folder's checks
    (``faultlab.safefs``: every component owned by root or us, not writable by others,
    no symlink) and made private (0700) when missing. A lease folder whose parent others
    may write (``/tmp``) gets it in this user's private runtime folder instead
    (``/run/faultlab/node-locks`` as root), where nobody else can make that name first.
    Raises NodeError (one line: the folder, what is wrong, the fix; field
    ``FAULTLAB_LEASE_DIR``)."""
    d = Path(local_lease_dir).parent / "node-locks"
    try:
        shared = os.lstat(d.parent).st_mode & 0o022
    except OSError:
        shared = 0
    if shared:
        d = Path(safefs.private_runtime_base()) / "faultlab" / "node-locks"
    try:
        return safefs.open_dir(d, create=True, mode=0o700, private=True)
    except safefs.UntrustedPath as e:
        raise NodeError(f"node lock folder {e}", field="FAULTLAB_LEASE_DIR") from None
    except OSError as e:
        raise lease_folder_error(e, str(d), "create or open it") from None


@contextlib.contextmanager
def node_lock(node, local_lease_dir: Path):
    """A controller-side lock per remote node (see the module docstring): the
    :func:`held_lock` ``NAME.lock`` of the node's address. Raises NodeError (one line)
    when the folder or the lock file cannot be used."""
    name = hashlib.sha256(f"{node.describe()}@{node.address}:{getattr(node, 'port', '')}".encode()).hexdigest()[:16]
    with held_lock(local_lease_dir, name):
        yield


@contextlib.contextmanager
def held_lock(local_lease_dir: Path, name: str):
    """``flock`` on ``NAME.lock`` in :func:`open_lock_dir`'s private (0700) folder,
    opened relative to the checked folder's descriptor with ``O_NOFOLLOW``: no other
    user can open it, so none can hold the lock. Raises NodeError (one line) when the
    folder or the lock file cannot be used."""
    with open_lock_dir(local_lease_dir) as d:
        try:
            fd = os.open(f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=d.fd)
        except OSError as e:
            raise NodeError(f"node lock {d.path}/{name}.lock: {e.strerror or e}", field="FAULTLAB_LEASE_DIR",
                            fix="remove that file (a link or not a regular file), or point FAULTLAB_LEASE_DIR elsewhere") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def valid_remote_record(rec, name: str) -> str | None:
    """Why ``rec`` (parsed JSON of the file ``name``) is not a remote lease record, or
    None: the local record's checks (``lease.valid_record``: a ``fault_id`` matching
    LEASE_ID and the file name, a numeric ``deadline_ts``, a list of string revert
    lines, string fields) and, where present, integer ``watchdog_pid`` /
    ``controller_pid`` (> 0), a string ``controller`` and a numeric ``created_ts``."""
    why = valid_record(rec, name)
    if why:
        return why
    for k in ("watchdog_pid", "controller_pid"):
        v = rec.get(k)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
            return f"{k} is not a PID"
    if rec.get("controller") is not None and not isinstance(rec["controller"], str):
        return "controller is not a string"
    c = rec.get("created_ts")
    if c is not None and (not isinstance(c, (int, float)) or isinstance(c, bool)):
        return "created_ts is not a number"
    return None


def looked_at(listed: list[str], problems: list[str], deadline: float, where: str, what: str) -> Iterator[str]:
    """The first :data:`MAX_ON_NODE` rows of ``listed`` (what a node answered), none
    once ``deadline`` (monotonic s) has passed; each cut is one line in ``problems``
    (``WHERE: N WHAT; ...``): the node's root chooses how many rows it answers and how
    long each look at one takes."""
    if len(listed) > MAX_ON_NODE:
        problems.append(f"{where}: {len(listed)} {what}; the first {MAX_ON_NODE} looked at, the rest not")
    for i, row in enumerate(listed[:MAX_ON_NODE]):
        if time.monotonic() > deadline:
            problems.append(f"{where}: answered too slowly; {min(len(listed), MAX_ON_NODE) - i} {what} not looked at")
            return
        yield row


def read_records(node, deadline: float | None = None) -> tuple[list[RemoteLease], list[str]]:
    """(leases, problems) of the node's lease folder: every record there (owned by the
    login user, not links; the whole path checked on the node as it is read) that
    passes :func:`valid_remote_record`, oldest first; each file that does not is one
    line in problems (``NODE:PATH: not a lease record (why)``), never acted on. No
    record is read past ``deadline`` (monotonic s; default VIEW_S from now): the rest
    is one problem line."""
    deadline = time.monotonic() + VIEW_S if deadline is None else deadline
    d = node.lease_dir()
    cp = node.run(["sh", "-c", _LIST_SH, "sh", str(d)], timeout=node.command_timeout_s)
    out, problems = [], []
    for line in looked_at(cp.stdout.splitlines(), problems, deadline, f"{node.describe()}:{d}", "records"):
        p = PurePosixPath(line)
        try:  # the whole path checked on the node (owner, mode, no symlink) as it is read
            rec = json.loads(read_on_node(node, str(p)))
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as e:
            problems.append(f"{node.describe()}:{p}: not read ({' '.join(str(e).split())[:200]})")
            continue
        why = valid_remote_record(rec, p.name)
        if why:
            problems.append(f"{node.describe()}:{p}: not a lease record ({why})")
            continue
        out.append(RemoteLease(node, p, rec))
    return sorted(out, key=lambda le: le.record.get("created_ts") or 0), problems


def load_leases(node) -> list[RemoteLease]:
    """The valid lease records of the node's lease folder, oldest first (anything else
    there is ignored, never run; ``faultlab status --inventory`` reports it)."""
    return read_records(node)[0]
