"""Faults in force on remote (ssh) nodes: what ``faultlab status|revert|recover
--inventory FILE --node NAME`` (or ``--all-nodes``) see and do.

A remote node's faults are known from the node alone (faultlab.lifecycle.lease_remote):

- lease records in the node's lease folder (trusted as there: regular files owned by
  the login user, not links, passing the local record's schema check; any other file
  there is a problem line, never acted on);
- watchdog processes on the node whose argv is ``... faultlab-watchdog RECORD DEADLINE
  LINE...`` with RECORD in that folder, also when their record was lost (the watchdog
  carries its own revert lines, so it can still be told to revert).

Reverting never runs a line read from a record while its watchdog lives: the watchdog
is told to revert now (SIGUSR1, the same as a third signal in faultlab inject) and
removes the record when done; only a record whose watchdog is gone has its (recorded)
revert lines run by the controller, then the record is removed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from faultlab.lifecycle.lease import node_lock
from faultlab.lifecycle.lease_remote import VIEW_S, RemoteLease, looked_at, read_records
from faultlab.lifecycle.procowner import MINE_SH
from faultlab.lifecycle.record import LEASE_ID
from faultlab.lifecycle.watchdog import WHOLE_NUMBER

# "PID PPID" of every process of the login user whose argv holds faultlab-watchdog
# (the uid is checked on the node: another user's process with that argv is a
# look-alike, never a watchdog)
_FIND_WATCHDOGS_SH = MINE_SH + r"""
for f in $(grep -l -a -F -- faultlab-watchdog /proc/[0-9]*/cmdline 2>/dev/null); do
  p=${f#/proc/}; p=${p%/cmdline}
  mine "$p" || continue
  s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
  set -- ${s##*") "}
  echo "$p $2"
done
exit 0
"""


@dataclass
class RemoteFault:
    """One fault on a remote node: its lease (None when only its watchdog is left)
    and its watchdog PID (None when gone)."""

    node: object
    fault_id: str
    lease: RemoteLease | None = None
    watchdog_pid: int | None = None
    deadline_ts: float | None = None
    notes: list[str] = field(default_factory=list)

    def row(self) -> dict:
        """This fault as one row of ``faultlab status --inventory --json``.

        Keys: ``fault_id``, ``type`` (fault type or None when the record is lost),
        ``node`` (``ssh:NAME``), ``target``, ``record`` (bool: the record is there),
        ``watchdog_alive`` (bool), ``remaining_s`` (int s to the deadline, >= 0; None
        when unknown), ``deadline_ts`` (unix time s, or None), ``controller`` (``HOST:PID`` or None), ``controller_alive``
        (bool: that PID lives on this host; PID only, no start time). Raises nothing:
        the record passed :func:`lease_remote.valid_remote_record`."""
        rec = self.lease.record if self.lease else {}
        left = None if self.deadline_ts is None else max(0, round(self.deadline_ts - time.time()))
        alive = bool(self.lease and self.lease.controller_alive())
        return {"fault_id": self.fault_id, "type": rec.get("fault_type"), "node": self.node.describe(), "target": rec.get("target"),
                "record": self.lease is not None, "watchdog_alive": self.watchdog_pid is not None, "remaining_s": left,
                "deadline_ts": self.deadline_ts,
                "controller": f"{rec.get('controller')}:{rec.get('controller_pid')}" if rec else None, "controller_alive": alive}


def _watchdogs(node, problems: list[str], deadline: float) -> dict[str, list[tuple[int, int, float | None]]]:
    """fault id -> [(PID, parent PID, deadline)] of the login user's watchdog processes
    on ``node`` for records of its lease folder (argv checked token by token; the
    detached ``sh -c`` wrapper, whose argv is one joined string, is not matched), in
    PID order. At most ``lease_remote.MAX_ON_NODE`` candidates are looked at, none past ``deadline``
    (monotonic s; one line in ``problems`` names the rest)."""
    d = str(node.lease_dir())
    out: dict[str, list[tuple[int, int, float | None]]] = {}
    rows = node.run(["sh", "-c", _FIND_WATCHDOGS_SH], timeout=node.command_timeout_s).stdout.splitlines()
    for row in looked_at(rows, problems, deadline, node.describe(), "processes named like a watchdog"):
        pid, _, ppid = row.partition(" ")
        if not WHOLE_NUMBER.fullmatch(pid) or not (ppid == "0" or WHOLE_NUMBER.fullmatch(ppid)):
            continue
        try:
            args = node.read_file(f"/proc/{pid}/cmdline").split("\0")
        except OSError:
            continue
        if "faultlab-watchdog" not in args:
            continue
        i = args.index("faultlab-watchdog")
        rec = PurePosixPath(args[i + 1]) if i + 1 < len(args) else None
        # as on this host (watchdog._watchdog): a record named by a fault id, a deadline of
        # digits; the argv is the node's word (its root runs what it likes)
        dl = args[i + 2] if i + 2 < len(args) else ""
        if rec is None or str(rec.parent) != d or rec.suffix != ".json" or not LEASE_ID.fullmatch(rec.stem) or not WHOLE_NUMBER.fullmatch(dl):
            continue
        out.setdefault(rec.stem, []).append((int(pid), int(ppid), float(dl)))
    return {k: sorted(v) for k, v in out.items()}


def _its_watchdog(lease: RemoteLease, dogs: list[tuple[int, int, float | None]]) -> tuple[int | None, float | None]:
    """(PID, deadline) of the watchdog ``lease``'s record names (``watchdog_pid``: the
    watchdog, or the detached wrapper that started it), among the login user's
    candidates ``dogs``; a record without one takes the first. (None, None) if none."""
    want = lease.record.get("watchdog_pid")
    for pid, ppid, dl in dogs:
        if want is None or want in (pid, ppid):
            return pid, dl
    return None, None


def remote_view(node) -> tuple[list[RemoteFault], list[str]]:
    """(faults, problems) on ``node``: every fault (records and watchdogs), oldest
    record first, and one line per file of the lease folder that is not a valid,
    trusted record (never acted on; its watchdog, if one lives, still shows as a fault
    whose record is lost).

    Only the login user's processes are watchdogs (checked on the node); a record's
    watchdog is the process it names. Raises NodeError when the node cannot be reached
    (its host key refused, unreachable)."""
    scan: list[str] = []
    deadline = time.monotonic() + VIEW_S
    dogs = _watchdogs(node, scan, deadline)
    out = []
    leases, problems = read_records(node, deadline)
    problems = scan + problems
    for le in leases:
        pid, dl = _its_watchdog(le, dogs.pop(le.fault_id, []))
        out.append(RemoteFault(node, le.fault_id, le, pid, le.record.get("deadline_ts") or dl))
    out += [RemoteFault(node, fid, None, ds[0][0], ds[0][2], ["lease record lost: the watchdog still ends it"])
            for fid, ds in sorted(dogs.items())]
    return out, problems


def remote_faults(node) -> list[RemoteFault]:
    """The faults of :func:`remote_view` (problems left out)."""
    return remote_view(node)[0]


def revert_remote(f: RemoteFault, timeout_s: float = 60.0) -> list[str]:
    """Revert fault ``f`` now (see the module docstring), under the node's lock
    (``lease.node_lock``: a create on the node holds it from its watchdog's start to its
    last inject command, so the watchdog told to revert ends the whole fault). Returns
    what is left (empty when the fault is gone)."""
    with node_lock(f.node):
        return _revert_remote_locked(f, timeout_s)


def _revert_remote_locked(f: RemoteFault, timeout_s: float) -> list[str]:
    node = f.node
    if f.watchdog_pid is not None:
        node.run(["kill", "-USR1", str(int(f.watchdog_pid))], timeout=30)
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if node.run(["kill", "-0", str(int(f.watchdog_pid))], timeout=30).returncode != 0:
                break
            time.sleep(0.2)
        else:
            return [f"watchdog {f.watchdog_pid} on {node.describe()} still reverting after {timeout_s:g}s"]
        if f.lease is not None and f.lease.exists():  # the watchdog removes it when done
            return [f"lease record {f.lease.path} on {node.describe()} left by its watchdog"]
        return []
    if f.lease is None:
        return []
    failed = f.lease.run_revert(timeout_s)
    if failed:
        return [f"{failed} revert command(s) failed on {node.describe()} (record kept for faultlab recover)"]
    f.lease.release()
    return []
