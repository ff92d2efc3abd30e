"""cgroup v1 / v2 discovery, read-only. Used by the cgroup-based injectors.

v1: each controller has its own mount (``/sys/fs/cgroup/cpu`` here); a process's
place is the ``cpu`` line of ``/proc/PID/cgroup``. v2: one unified hierarchy; the
``0::/path`` line; a controller is usable below the root only when listed in the
root's ``cgroup.subtree_control``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from faultlab.nodes import Node


@dataclass(frozen=True)
class Hierarchy:
    """Where one controller lives: ``version`` 1 or 2, ``mount`` (absolute path)."""

    version: int
    mount: str
    controller: str

    def path(self, rel: str) -> str:
        """Absolute path of cgroup ``rel`` (as in /proc/PID/cgroup) in this hierarchy."""
        return str(PurePosixPath(self.mount) / rel.lstrip("/"))


def find_hierarchy(node: Node, controller: str) -> Hierarchy | None:
    """The hierarchy holding ``controller`` (``cpu``, ``blkio``/``io``) on ``node``:
    cgroup v1 first (a controller mounted there is not usable in v2), else v2 when
    the controller is enabled for children of the root. None when neither has it."""
    try:
        mountinfo = node.read_file("/proc/self/mountinfo")
    except OSError:
        return None
    v2_mount = None
    for line in mountinfo.splitlines():
        pre, _, post = line.partition(" - ")
        fields, post_f = pre.split(), post.split()
        if len(fields) < 5 or len(post_f) < 3:
            continue
        mnt, fstype, super_opts = fields[4], post_f[0], post_f[2].split(",")
        if fstype == "cgroup" and controller in super_opts:
            return Hierarchy(1, mnt, controller)
        if fstype == "cgroup2" and v2_mount is None:
            v2_mount = mnt
    if v2_mount:
        try:
            enabled = node.read_file(f"{v2_mount}/cgroup.subtree_control").split()
        except OSError:
            enabled = []
        v2_name = {"blkio": "io"}.get(controller, controller)
        if v2_name in enabled:
            return Hierarchy(2, v2_mount, v2_name)
    return None


def cgroup_of(node: Node, pid: int, h: Hierarchy) -> str | None:
    """The cgroup path (relative to the hierarchy's mount) of ``pid``; None when the
    process does not exist."""
    try:
        text = node.read_file(f"/proc/{pid}/cgroup")
    except (OSError, ValueError):
        return None
    for line in text.splitlines():
        num, _, rest = line.partition(":")
        ctrls, _, path = rest.partition(":")
        if h.version == 2 and num == "0" and ctrls == "":
            return path
        if h.version == 1 and h.controller in ctrls.split(","):
            return path
    return None


def read_stat(node: Node, path: str) -> dict[str, int]:
    """A flat-keyed cgroup stat file (``cpu.stat``) as ints; empty when unreadable."""
    try:
        text = node.read_file(path)
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        try:
            out[k] = int(v)
        except ValueError:
            pass
    return out


def procs(node: Node, cgroup_dir: str) -> list[int]:
    """PIDs in ``cgroup_dir/cgroup.procs`` (empty when the cgroup is gone)."""
    try:
        return [int(x) for x in node.read_file(f"{cgroup_dir}/cgroup.procs").split()]
    except (OSError, ValueError):
        return []


def targets_home(node: Node, pids: list[int], h: Hierarchy, what: str) -> dict[int, str]:
    """``{pid: cgroup path}`` of the target processes in hierarchy ``h``. Raises
    BadInput for a missing process and Refused for a process already under a
    faultlab cgroup (a second fault of the same kind, ``what``, on the same target)."""
    from faultlab.errors import BadInput, Refused

    orig = {}
    for pid in pids:
        cg = cgroup_of(node, pid, h)
        if cg is None:
            raise BadInput(f"no process {pid} on node {node.name}", field="--target", fix="give the PID of a running process")
        if "faultlab-" in cg:
            raise Refused(f"process {pid} is already under a faultlab {what} fault ({cg})", field="--target", fix="revert that fault first: faultlab status")
        orig[pid] = cg
    return orig
