"""Leases on a remote node (the ssh backend): the record and the watchdog live there.

The same protocol as faultlab.injectors.lease (watchdog first, then the record; the
watchdog ``sh`` script itself is shared), with every file operation a command on the
node, so a fault ends at its deadline even if the controller is SIGKILLed *or the
network between controller and node is cut*: nothing on the node waits for us.

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
from pathlib import Path, PurePosixPath

from faultlab import procid
from faultlab.errors import NodeError
from faultlab.safefs import read_on_node

_CHECK_DIR_SH = ('mkdir -p -m 700 "$1" && [ -d "$1" ] && [ ! -L "$1" ] && [ -O "$1" ] && '
                 'case "$(stat -c %a "$1")" in *[2367]?|*?[2367]) exit 3;; esac')
_LIST_SH = 'for f in "$1"/*.json; do [ -f "$f" ] && [ ! -L "$f" ] && [ -O "$f" ] && printf "%s\\n" "$f"; done; exit 0'


def trusted_dir(node) -> PurePosixPath:
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
        d = trusted_dir(node)
        path = d / f"{lease_id}.json"
        lines = [c.render(node) for c in revert]
        proc = node.spawn(["sh", "-c", watchdog_sh, "faultlab-watchdog", str(path), str(int(deadline_ts + 0.999)), *lines], new_session=True)
        rec = {"fault_id": lease_id, "fault_type": kind, "node": node.describe(), "node_name": node.name, "target": target,
               "params": params, "created_ts": time.time(), "deadline_ts": deadline_ts, "controller_pid": os.getpid(),
               "controller_starttime": procid.starttime(os.getpid()), "controller": os.uname().nodename, "revert": lines, "watchdog_pid": proc.pid}
        lease = cls(node, path, rec)
        lease._write()
        return lease

    def _write(self) -> None:
        self.node.write_file(str(self.path), json.dumps(self.record, indent=1))

    def renew(self, deadline_ts: float) -> None:
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
        this record) and remove the record. Safe to call twice."""
        pid = self.record.get("watchdog_pid")
        if pid and _is_watchdog(self.node, pid, self.path):
            self.node.run(["kill", "-TERM", "--", f"-{int(pid)}"], timeout=30)
        self.node.run(["rm", "-f", "--", str(self.path), str(self.path.with_name(f"{self.fault_id}.deadline"))], timeout=30)

    def run_revert(self, timeout_s: float = 60.0) -> int:
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
    args = cmd.split("\0")
    return "faultlab-watchdog" in cmd and (str(path) in args or any(str(path) in a.split() for a in args))


@contextlib.contextmanager
def node_lock(node, local_lease_dir: Path):
    """A controller-side lock per remote node (see the module docstring)."""
    d = local_lease_dir.parent / "node-locks"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    name = hashlib.sha256(f"{node.describe()}@{node.address}:{getattr(node, 'port', '')}".encode()).hexdigest()[:16]
    fd = os.open(d / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def load_leases(node) -> list[RemoteLease]:
    """Every lease record in the node's lease folder (owned by the login user, not
    links), oldest first; malformed records are ignored (never run)."""
    d = node.lease_dir()
    cp = node.run(["sh", "-c", _LIST_SH, "sh", str(d)], timeout=node.command_timeout_s)
    out = []
    for line in cp.stdout.splitlines():
        p = PurePosixPath(line)
        try:  # the whole path checked on the node (owner, mode, no symlink) as it is read
            rec = json.loads(read_on_node(node, str(p)))
        except (OSError, ValueError):
            continue
        if not isinstance(rec, dict) or rec.get("fault_id") != p.stem or not isinstance(rec.get("revert", []), list):
            continue
        out.append(RemoteLease(node, p, rec))
    return sorted(out, key=lambda le: le.record.get("created_ts", 0))
