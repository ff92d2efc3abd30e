"""cgroup v1 / v2 discovery, read-only. Used by the cgroup-based injectors.

v1: each controller has its own mount (``/sys/fs/cgroup/cpu`` here); a process's
place is the ``cpu`` line of ``/proc/PID/cgroup``. v2: one unified hierarchy; the
``0::/path`` line; a controller is usable below the root only when listed in the
root's ``cgroup.subtree_control``.

Placement (:func:`placement`): the faultlab cgroup ``faultlab-<fault_id>`` is always
made *inside the target's own cgroup*, on v1 and v2 alike, so every limit the target
already had (``memory.max``, ``pids.max``, ``cpu.max``, io, devices) still applies
for the fault's length: a fault only slows. The path read from ``/proc/PID/cgroup``
is untrusted: it must be a clean absolute path (no ``.``/``..``/empty parts, no
``(deleted)``) that stays inside the mount. On v2 the kernel's no-internal-process
rule (Documentation/admin-guide/cgroup-v2.rst, "No Internal Process Constraint")
forbids enabling a controller in a cgroup that holds processes, so the targets must
be *all* the processes of their cgroup: they move into the child first, then the
controller is enabled in their (now empty) cgroup's ``cgroup.subtree_control``, and
revert disables it again before moving them back. Otherwise the fault is refused.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from faultlab import procid
from faultlab.errors import BadInput, Refused
from faultlab.nodes import Node
from faultlab.injectors.base import Cmd, write_cmd


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


#: the name of a faultlab cgroup: ``faultlab-<fault_id>``
FAULT_CGROUP = re.compile(r"^faultlab-[a-z]+-[0-9a-f]{6}$")


def clean_home(home: str, what: str = "--target") -> str:
    """``home`` (a cgroup path as ``/proc/PID/cgroup`` gives it) when it is a clean
    absolute path: starts with ``/``, no ``.``/``..``/empty component, every character
    printable (no control character, escape sequence or bidirectional override: the
    target's user names the cgroups of a subtree of theirs, and the path is in the plan
    ``inject --dry-run`` prints and the lines root runs), not a removed cgroup
    (`` (deleted)``). Raises Refused otherwise (a process outside our cgroup namespace
    shows ``/../x``)."""

    parts = home.split("/")
    bad = (not home.startswith("/") or home.endswith(" (deleted)") or not home.isprintable()
           or any(p in (".", "..") for p in parts) or (home != "/" and "" in parts[1:]))
    if bad:
        raise Refused(f"the cgroup path {home!r} read from /proc/PID/cgroup is not a clean path inside this hierarchy", field=what,
                      fix="target a process of this host's cgroup namespace whose cgroup still exists")
    return home


def child_path(h: Hierarchy, home: str, name: str) -> str:
    """Absolute path of faultlab cgroup ``name`` (``faultlab-<fault_id>``) inside
    ``home``; Refused when ``home`` is not clean (see :func:`clean_home`) or the result
    would leave the mount; ValueError for a name that is not faultlab's."""

    if not FAULT_CGROUP.match(name):
        raise ValueError(f"{name!r} is not a faultlab cgroup name")
    clean_home(home)
    mount = posixpath.normpath(h.mount)
    d = posixpath.normpath(h.path(home) + "/" + name)
    if posixpath.dirname(d) != posixpath.normpath(h.path(home)) or not d.startswith(mount.rstrip("/") + "/"):
        raise Refused(f"cgroup {home!r} + {name} leaves the hierarchy at {mount}", field="--target", fix="target a process of this host")
    return d


def v2_enable_needed(node: Node, h: Hierarchy, home: str, pids: list[int]) -> bool:
    """Whether a v2 fault under ``home`` must enable ``h.controller`` in ``home``'s
    ``cgroup.subtree_control`` (and disable it on revert). False for the root (exempt
    from the no-internal-process rule) or when already enabled. Raises Refused when
    ``home`` lacks the controller (its parent does not delegate it) or holds processes
    that are not ``pids`` (the kernel would refuse to enable it: EBUSY)."""

    if h.version != 2 or home.strip("/") == "":
        return False
    base = h.path(home)
    try:
        have = node.read_file(f"{base}/cgroup.controllers").split()
        enabled = node.read_file(f"{base}/cgroup.subtree_control").split()
    except OSError as e:
        raise Refused(f"cannot read cgroup {home}: {e}", field="--target", fix="give the PID of a running process") from None
    if h.controller not in have:
        raise Refused(f"cgroup v2: the {h.controller} controller is not delegated to cgroup {home} (its parent's cgroup.subtree_control lacks +{h.controller})",
                      field="--type", fix=f"enable it in the parent: echo +{h.controller} > PARENT/cgroup.subtree_control")
    if h.controller in enabled:
        return False
    others = sorted(set(procs(node, base)) - set(pids))
    if others:
        shown = ", ".join(map(str, others[:5])) + (" ..." if len(others) > 5 else "")
        raise Refused(f"cgroup v2: cgroup {home} also holds processes that are not targets ({shown}); a cgroup holding processes cannot get a "
                      f"{h.controller}-limited child, and moving the targets out would lift its limits", field="--target",
                      fix=f"give every PID in {base}/cgroup.procs as --target")
    return True


def placement(node: Node, h: Hierarchy, pids: list[int], fault_id: str, what: str) -> dict:
    """Where the faultlab cgroup of fault ``fault_id`` goes: ``{"home": cgroup of the
    targets, "cgroup": absolute path of its faultlab child, "enable": bool (v2: the
    controller must be enabled in home's subtree_control), "orig": {pid: home},
    "starts": the start time of each of ``pids``, in order (what :func:`move_cmd`
    checks)}``.

    Raises BadInput for a missing process, Refused for a target already under a
    faultlab cgroup, targets in different cgroups, or a home that cannot be nested
    under (see :func:`clean_home`, :func:`v2_enable_needed`)."""

    starts = [start_of(node, pid) for pid in pids]  # before the cgroup: a PID reused in between fails the move
    orig = targets_home(node, pids, h, what)
    homes = sorted(set(orig.values()))
    if len(homes) > 1:
        raise Refused(f"the targets are in different cgroups ({', '.join(homes)})", field="--target",
                      fix="inject one fault per cgroup, or give PIDs of one cgroup")
    home = clean_home(homes[0])
    return {"home": home, "cgroup": child_path(h, home, f"faultlab-{fault_id}"),
            "enable": v2_enable_needed(node, h, home, pids), "orig": orig, "starts": starts}


def start_of(node: Node, pid: int) -> str:
    """The start time of process ``pid`` on ``node`` (field 22 of ``/proc/PID/stat``).
    Raises BadInput when there is no such process."""
    try:
        start = procid.parse_starttime(node.read_file(f"/proc/{pid}/stat"))
    except (OSError, ValueError):
        start = None
    if start is None:
        raise BadInput(f"no process {pid} on node {node.name}", field="--target", fix="give the PID of a running process")
    return str(start)


# Move PID $1 into $2 (a cgroup.procs) only while it is the process that started at $3
# (procid.STAT_SH): a target that ended after the probe (its owner may end it at will)
# leaves its PID to whatever process takes it next, which must never be moved into a
# fault's cgroup (nor swept into the target's cgroup by the revert); one line and exit 1.
MOVE_SH = procid.STAT_SH + (
    'proc_stat "$1" && [ "$ps_start" = "$3" ] && { printf "%s\\n" "$1" > "$2"; exit; }; '
    'echo "process $1 is not the target any more: it ended after the probe (its PID may name another process now); not moved" >&2; exit 1')


def move_cmd(cgroup_dir: str, pid: int, start: str) -> Cmd:
    """The command that moves target ``pid`` (started at ``start``, from
    :func:`placement`) into faultlab cgroup ``cgroup_dir``: :data:`MOVE_SH`."""
    return Cmd(("sh", "-c", MOVE_SH, "sh", str(pid), f"{cgroup_dir}/cgroup.procs", str(start)), "host", f"move {pid}")


def subtree_cmds(h: Hierarchy, home: str, enable: bool):
    """The ``cgroup.subtree_control`` writes of a nested v2 fault: ``(inject, revert)``
    lists of Cmd (both empty unless ``enable``). Inject runs after the targets moved
    out of ``home``; revert runs before they move back (``home`` may hold processes
    again only once the controller is off)."""

    if not enable:
        return [], []
    f = h.path(home).rstrip("/") + "/cgroup.subtree_control"
    return ([write_cmd(f, f"+{h.controller}", f"enable {h.controller} below {home}")],
            [write_cmd(f, f"-{h.controller}", f"disable {h.controller} below {home} again")])


#: the controller a faultlab cgroup's fault enabled in its parent (v2), by fault-id prefix
#: (``faultlab-cpu-…``: cpu-contention, ``faultlab-io-…``: io-slow)
ORPHAN_CONTROLLER = {"cpu": "cpu", "io": "io"}

# A PID goes back home ($3) only while it is in faultlab's cgroup ($2): never a reused
# PID, never a process a later fault has moved.
BACK_SH = 'grep -qx "$1" "$2" 2>/dev/null && printf "%s\\n" "$1" > "$3"; exit 0'

# Move every process still in the faultlab cgroup ($1/cgroup.procs) back to the
# cgroup the targets came from ($2), or to the hierarchy's root ($3) should that one
# be gone. Only processes inside faultlab's own cgroup are ever moved: a stale revert
# (a watchdog firing late) or a reused PID cannot touch anything else. It sweeps again
# until the cgroup is empty (at most 200 rounds, ~2 s): a target that forks while it
# is being moved leaves a child born inside faultlab's cgroup after the list was read,
# and one pass would leave that child throttled and the cgroup busy (EBUSY on rmdir;
# found by a lifecycle probe). Exit 0 when the cgroup is empty or gone, 1 when
# processes are still in it.
SWEEP_SH = ('i=0; while [ "$i" -lt 200 ]; do left=$(cat "$1" 2>/dev/null) || exit 0; [ -z "$left" ] && exit 0; '
            'for p in $left; do printf "%s\\n" "$p" > "$2" 2>/dev/null || printf "%s\\n" "$p" > "$3" 2>/dev/null; done; '
            'i=$((i+1)); [ "$i" -gt 5 ] && sleep 0.01; done; exit 1')
# Remove the (swept) faultlab cgroup $1, retrying for ~2 s while the kernel still
# counts an exiting task in it (EBUSY); exit 0 when it is gone.
RMDIR_SH = ('i=0; while [ -d "$1" ]; do rmdir "$1" 2>/dev/null && exit 0; i=$((i+1)); '
            '[ "$i" -ge 100 ] && exit 1; sleep 0.02; done; exit 0')


# Recovery of an orphan v2 faultlab cgroup ($1 its parent, $2 the controller its fault
# enabled there, $3 its own name) whose record and watchdog are gone: write -$2 to the
# parent's cgroup.subtree_control only when faultlab must have written +$2 and nothing
# else depends on it: the parent is a non-root *domain* cgroup (v1 and the root have no
# cgroup.type; a threaded subtree may have had it before), $2 is enabled there, and the
# parent's only child is this cgroup. A domain cgroup that held the targets had an empty
# subtree_control (the kernel's no-internal-process rule), so $2 there is faultlab's.
# Anything else: left as it is (the sweep back then fails and is reported).
ORPHAN_DISABLE_SH = (
    't=$(cat "$1/cgroup.type" 2>/dev/null) || exit 0; [ "$t" = domain ] || exit 0; '
    'case " $(cat "$1/cgroup.subtree_control" 2>/dev/null) " in *" $2 "*) ;; *) exit 0;; esac; '
    'for c in "$1"/*/; do [ "${c%/}" = "$1/$3" ] || exit 0; done; '
    'printf -- "-%s\\n" "$2" > "$1/cgroup.subtree_control"'
)


def orphan_revert_argv(cgroup_dir: str, controller: str | None) -> list[list[str]]:
    """The commands that end an orphan faultlab cgroup ``cgroup_dir`` (no record, no
    watchdog): on v2, ``-controller`` back into its parent's subtree_control when
    faultlab wrote it (ORPHAN_DISABLE_SH; nothing on v1), then every process back to
    the parent (never the root: the targets' own limits keep applying) and rmdir."""

    d = PurePosixPath(cgroup_dir)
    home = str(d.parent / "cgroup.procs")
    out = [["sh", "-c", ORPHAN_DISABLE_SH, "sh", str(d.parent), controller, d.name]] if controller else []
    return out + [["sh", "-c", SWEEP_SH, "sh", str(d / "cgroup.procs"), home, home],
                  ["sh", "-c", RMDIR_SH, "sh", str(d)]]


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

    orig = {}
    for pid in pids:
        cg = cgroup_of(node, pid, h)
        if cg is None:
            raise BadInput(f"no process {pid} on node {node.name}", field="--target", fix="give the PID of a running process")
        if "faultlab-" in cg:
            raise Refused(f"process {pid} is already under a faultlab {what} fault ({cg})", field="--target", fix="revert that fault first: faultlab status")
        orig[pid] = cg
    return orig
