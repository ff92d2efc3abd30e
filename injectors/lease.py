"""Leases: a fault ends even when its controller is killed with SIGKILL.

Before the first inject command runs, three files are written on the node's lease
host (``/run/faultlab/leases`` as root)::

    <fault_id>.json        the record: type, node, target, params, deadline (unix s),
                           controller PID, watchdog PID, the revert commands
                           (one ``shlex.join``-ed line each)

and, just before it, a detached watchdog in its own session whose arguments carry
the same revert lines. It needs only ``sh`` and coreutils (``sleep``, ``date``,
``rm``): it sleeps until the deadline and, if the record still exists, runs each
revert line and removes the record. A controller that
reverts in time kills the watchdog's process group and removes the files itself.
``faultlab recover`` runs the revert script of every record left behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from faultlab.errors import NodeError

from faultlab.nodes import Node

# Positional args: $1 record path, $2 deadline (unix s, integer), $3... revert lines
# (each a shlex.join-ed command line). The watchdog is started *before* the record is
# written: if the controller dies in between, the watchdog finds no record at the
# deadline and leaves (nothing was applied: inject commands run after the record).
WATCHDOG_SH = r"""
trap '' HUP INT
rec="$1"; dl="$2"; shift 2
renew="${rec%.json}.deadline"
while :; do
  [ -f "$renew" ] && dl=$(cat "$renew" 2>/dev/null || echo "$dl")
  now=$(date +%s)
  [ "$now" -ge "$dl" ] && break
  left=$(( dl - now ))
  [ "$left" -gt 5 ] && left=5
  sleep "$left"
done
if [ -e "$rec" ]; then
  for line in "$@"; do sh -c "$line" >/dev/null 2>&1; done
fi
rm -f "$rec" "${rec%.json}.tmp" "$renew"
"""


@dataclass
class Lease:
    """A lease record on the lease host. ``path`` is the JSON record."""

    path: Path
    record: dict

    @property
    def fault_id(self) -> str:
        return self.record["fault_id"]

    @classmethod
    def create(cls, injector, plan, deadline_ts: float) -> "Lease":
        """Lease for a fault's ``plan`` (see :meth:`create_for`)."""
        return cls.create_for(injector.node, plan.fault_id, plan.fault_type, plan.target, injector.params, plan.revert, deadline_ts)

    @classmethod
    def create_for(cls, node: Node, lease_id: str, kind: str, target: str, params: dict, revert: list, deadline_ts: float) -> "Lease":
        """Start the watchdog, then write the record. ``revert`` is a list of Cmd run
        at ``deadline_ts`` (unix s) unless released. Raises OSError when the lease
        folder cannot be written (nothing is applied then: ``apply`` creates the lease
        before the first inject command)."""
        if getattr(node, "remote", False):  # ssh: record and watchdog on the node
            from faultlab.injectors.lease_remote import RemoteLease

            return RemoteLease.create_for(node, lease_id, kind, target, params, revert, deadline_ts, WATCHDOG_SH)
        d = trusted_lease_dir(node)
        path = d / f"{lease_id}.json"
        lines = [c.render(node) for c in revert]
        proc = node.spawn(
            ["sh", "-c", WATCHDOG_SH, "faultlab-watchdog", str(path), str(int(deadline_ts + 0.999)), *lines],
            scope="host",
            new_session=True,
        )
        record = {
            "fault_id": lease_id,
            "fault_type": kind,
            "node": node.describe(),
            "node_name": node.name,
            "target": target,
            "params": params,
            "created_ts": time.time(),
            "deadline_ts": deadline_ts,
            "controller_pid": os.getpid(),
            "revert": lines,
            "watchdog_pid": proc.pid,
        }
        lease = cls(path, record)
        lease._write()
        return lease

    def renew(self, deadline_ts: float) -> None:
        """Move the deadline (unix s); the watchdog reads it within 5 s."""
        p = self.path.with_name(f"{self.fault_id}.deadline")
        tmp = p.with_suffix(".deadline.tmp")
        tmp.write_text(str(int(deadline_ts + 0.999)))
        os.replace(tmp, p)
        self.record["deadline_ts"] = deadline_ts
        self._write()

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(self.record, f, indent=1)
        os.replace(tmp, self.path)

    def exists(self) -> bool:
        return self.path.exists()

    def release(self) -> None:
        """Stop the watchdog (by the PID recorded, its whole process group, after
        checking it is still our watchdog) and remove the record. Safe to call twice."""
        pid = self.record.get("watchdog_pid")
        if pid and _is_our_watchdog(pid, self.path):
            _kill_group(pid)
        self.path.unlink(missing_ok=True)
        self.path.with_name(f"{self.fault_id}.deadline").unlink(missing_ok=True)

    def run_revert(self, timeout_s: float = 60.0) -> int:
        """Run the recorded revert lines now (what the watchdog would do at the
        deadline). Returns the number of lines that failed (they are idempotent, so a
        failure usually means the object was already gone)."""
        failed = 0
        for line in self.record.get("revert", []):
            cp = subprocess.run(["sh", "-c", line], capture_output=True, timeout=timeout_s)
            failed += cp.returncode != 0
        return failed

    def watchdog_alive(self) -> bool:
        pid = self.record.get("watchdog_pid")
        return bool(pid) and _is_our_watchdog(pid, self.path)

    def controller_alive(self) -> bool:
        pid = self.record.get("controller_pid")
        if not pid:
            return False
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True


def trusted_lease_dir(node: Node) -> Path:
    """The lease folder, created 0700 if missing. Raises NodeError when it exists but
    is not a folder owned by us and closed to others (a record planted there would be
    run as root by ``recover``)."""
    d = node.lease_dir()
    if not d.exists():
        d.mkdir(parents=True, mode=0o700)
    st = d.stat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise NodeError(
            f"lease folder {d} is not a folder owned by uid {os.geteuid()} and closed to others (mode {oct(st.st_mode & 0o777)})",
            field="FAULTLAB_LEASE_DIR", fix="point FAULTLAB_LEASE_DIR at a private folder, or fix its owner and mode",
        )
    return d


@contextlib.contextmanager
def node_lock(node: Node):
    """Serialize probe -> lease -> inject, revert and recover on one lease host
    (flock on the lease folder itself: no lock file is left), so two faultlab
    processes never act on a node at once: a second inject sees the first's lease and
    refuses."""
    if getattr(node, "remote", False):
        from faultlab.injectors.lease_remote import node_lock as remote_lock
        from faultlab.nodes import lease_dir

        with remote_lock(node, lease_dir()):
            yield
        return
    d = trusted_lease_dir(node)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def load_leases(node: Node) -> list[Lease]:
    """Every faultlab lease record on ``node``'s lease host, oldest first. Files that
    are not lease records, or not owned by us, are ignored (never run)."""
    if getattr(node, "remote", False):
        from faultlab.injectors.lease_remote import load_leases as load_remote

        return load_remote(node)
    d = node.lease_dir()
    out = []
    if not d.exists():
        return out
    for p in sorted(d.glob("*.json")):
        try:
            if p.stat().st_uid != os.geteuid():
                continue
            rec = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("fault_id"), str) or p.stem != rec["fault_id"] or not isinstance(rec.get("revert", []), list):
            continue
        out.append(Lease(p, rec))
    return sorted(out, key=lambda le: le.record.get("created_ts", 0))


def recover(node: Node, fault_id: str | None = None) -> list[dict]:
    """Revert every lease left on ``node`` (or only ``fault_id``): run its revert
    script, stop its watchdog, remove its files. Returns one dict a lease."""
    done = []
    if not getattr(node, "remote", False) and not node.lease_dir().exists():
        return done
    with node_lock(node):
        leases = load_leases(node)
    for lease in leases:
        if fault_id and lease.fault_id != fault_id:
            continue
        with node_lock(node):
            if not lease.exists():
                continue
            failed = lease.run_revert()
            lease.release()
        done.append({"fault_id": lease.fault_id, "type": lease.record.get("fault_type"), "node": lease.record.get("node"), "revert_lines_failed": failed})
    return done


def _is_our_watchdog(pid: int, record_path: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(record_path).encode() in cmdline


def _kill_group(pid: int) -> None:
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    if pgid != pid:  # not a session leader we started: kill only that PID
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        return
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
