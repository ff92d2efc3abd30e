"""One view of the host: every faultlab fault in force, whoever started it, with or
without its lease record.

Three sources, joined by (fault id, owner uid):

1. lease records in the trusted lease folders: this user's (``FAULTLAB_LEASE_DIR`` or
   the default) and root's ``/run/faultlab/leases`` (mode 0755, records 0644: every
   user's ``status`` sees root's faults); as root also every other user's (the folder
   each watchdog candidate holds, and the users' default folders), read-only, with
   that user as the trusted owner; a record's owner is its file's uid;
2. watchdog processes (``/proc/*/cmdline``: ``sh -c ... faultlab-watchdog ID
   DEADLINE FD LINES...``): argv only finds candidates. A candidate is a fault's own
   when its uid is the record's owner and its PID and start time are the ones the
   record names; with no record of its uid, one of this user's or root's is a fault
   whose record was deleted (still seen, with its deadline); any other is a
   *look-alike*: reported, never signalled, and it gives no fault a record, objects,
   tc handles or a controller;
3. faultlab-owned objects (root only, where they are visible): root qdiscs with
   faultlab's reserved handles ``fXXX:``, ``flifb*`` devices, ingress qdiscs whose
   redirect points at one, probe devices ``flprb*`` (``lifecycle/probedev.py``) and
   ``faultlab-<fault_id>`` cgroups, in this namespace and every named network
   namespace. Each is put under the fault whose revert commands name it (a fault of
   root or this user; a cgroup only one of the cgroup folder's owner); those no
   record and no watchdog names are *orphans* that ``recover`` removes (a cgroup is
   its folder owner's orphan; as root, one another user made is reported), under an id
   ``faultlab revert`` takes (``nic-<ifb hex>``, ``nic-f<qdisc handle>``,
   ``probe-<hex>``). A ``flprb*`` device without faultlab's mark (an ifb with alias
   ``faultlab-probe``) that no lease names is reported as a problem, never removed.

A fault can be reverted by its owner (the record's file uid, or its watchdog's) and by root
(root ends another user's fault by telling its watchdog to revert now, so the revert
runs with that user's own privileges). Anyone else is told so, never "nothing in
force".
"""

from __future__ import annotations

import json
import os
import pwd
import re
from stat import S_ISDIR
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from faultlab.lifecycle.lease import Lease, RecordBudget, read_records
from faultlab.lifecycle.names import CGROUP, FAULT_HANDLE, IFB
from faultlab.lifecycle.probedev import PROBE_ALIAS, PROBE_DEV
from faultlab.lifecycle.record import ROOT_LEASE_DIR
from faultlab.lifecycle.watchdog import OVERDUE_S, Watchdog, find_watchdogs
from faultlab.nodes import lease_dir



@dataclass
class Orphan:
    """A faultlab-made object: ``kind`` (qdisc, ingress, ifb, probe, cgroup), where
    (netns or "" for this namespace), what (device, handle, path), the fault id hex it
    carries; ``marked``: a probe device carries faultlab's mark (an ifb device with
    alias ``faultlab-probe``)."""

    kind: str
    netns: str
    what: str
    hexid: str
    dev: str = ""
    marked: bool = True
    uid: int = 0  # its owner: a cgroup folder's uid; network objects are root's

    def describe(self) -> str:
        where = f"netns {self.netns}" if self.netns else "host"
        return f"{self.kind} {self.what} ({where})"

def run_quietly(argv: list[str], timeout: float = 15) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _netns_names() -> list[str]:
    return [ln.split()[0] for ln in run_quietly(["ip", "netns", "list"]).splitlines() if ln.strip()]


def walk(top: str) -> Iterator[tuple[str, list[str], list[str]]]:
    """``(folder, its subfolders, its other names)`` for ``top`` and every folder below
    it, as ``os.walk`` gives them (no link followed down; a folder removed or unreadable
    meanwhile is passed over), but with no recursion: a user whose cgroup subtree is
    theirs makes a chain of cgroups as deep as they like, and ``os.walk`` (and
    ``Path.glob("**")``) of Python 3.11 recurses once a folder: 1,000 deep ended root's
    ``status``, ``revert`` and ``recover`` in a RecursionError. A folder whose path
    is longer than the kernel takes (``PATH_MAX``) cannot be listed and is passed over:
    nothing of faultlab's is there, its commands name cgroups by path."""
    todo = [top]
    while todo:
        folder = todo.pop()
        dirs, names = [], []
        try:
            with os.scandir(folder) as it:
                for e in it:
                    try:
                        (dirs if e.is_dir(follow_symlinks=False) else names).append(e.name)
                    except OSError:
                        continue
        except OSError:
            continue
        yield folder, dirs, names
        todo.extend(os.path.join(folder, d) for d in reversed(dirs))


def cgroups_named(prefix: str, base: str = "/sys/fs/cgroup") -> Iterator[Path]:
    """Every folder under ``base`` whose name starts with ``prefix`` (:func:`walk`: no
    link followed down, any depth). A folder removed while it is walked (a container
    stopping, a cgroup another user removes in a subtree delegated to them) is passed
    over: ``Path.glob`` raised FileNotFoundError then, and root's ``status``,
    ``revert`` and ``recover`` ended in a traceback."""
    for top, dirs, _ in walk(base):
        for d in dirs:
            if d.startswith(prefix):
                yield Path(top) / d


def find_objects() -> list[Orphan]:
    """faultlab-made network and cgroup objects on this host (root sees all network
    namespaces; without root only this namespace and the cgroups)."""
    out: list[Orphan] = []
    spaces = [""] + (_netns_names() if os.geteuid() == 0 else [])
    for ns in spaces:
        pre = ["ip", "netns", "exec", ns] if ns else []
        try:
            links = json.loads(run_quietly([*pre, "ip", "-d", "-j", "link", "show"]) or "[]")
            qds = json.loads(run_quietly([*pre, "tc", "-j", "qdisc", "show"]) or "[]")
        except ValueError:
            continue
        for lk in links:
            m = IFB.match(lk.get("ifname", ""))
            if m:
                out.append(Orphan("ifb", ns, lk["ifname"], m.group(1)))
            m = PROBE_DEV.match(lk.get("ifname", ""))
            if m:
                marked = lk.get("ifalias") == PROBE_ALIAS and (lk.get("linkinfo") or {}).get("info_kind") == "ifb"
                out.append(Orphan("probe", ns, lk["ifname"], m.group(1), marked=marked))
        for q in qds:
            dev = q.get("dev", "")
            m = FAULT_HANDLE.match(q.get("handle", ""))
            if q.get("root") and m:
                out.append(Orphan("qdisc", ns, f"{q['handle']} {q.get('kind')} on {dev}", m.group(1), dev))
            if q.get("kind") == "ingress":
                flt = run_quietly([*pre, "tc", "filter", "show", "dev", dev, "parent", "ffff:"])
                for ifb in set(re.findall(r"device (flifb[0-9a-f]{6})\)", flt)):
                    out.append(Orphan("ingress", ns, f"ffff: on {dev} -> {ifb}", IFB.match(ifb).group(1), dev))
    for base in ("/sys/fs/cgroup",):
        for p in cgroups_named("faultlab-", base):
            m = CGROUP.match(p.name)
            try:
                st = p.lstat()
            except OSError:
                continue
            if m and S_ISDIR(st.st_mode):
                out.append(Orphan("cgroup", "", str(p), m.group(1).split("-")[1], uid=st.st_uid))
    return out


@dataclass
class FaultView:
    """One fault in force on the host (see the module docstring)."""

    fault_id: str
    uid: int | None = None
    record: dict | None = None
    lease: Lease | None = None
    watchdogs: list[Watchdog] = field(default_factory=list)
    objects: list[Orphan] = field(default_factory=list)
    #: its revert lines as one text (``_line_text``), made once its watchdogs are known
    line_text: str | None = field(default=None, repr=False, compare=False)

    @property
    def deadline_ts(self) -> float | None:
        """When its watchdog reverts it (unix s): the latest of its watchdogs' argv and
        its record (``Lease.renew`` moves the record's and the file the watchdog reads,
        never the argv); None when neither says."""
        times = [float(w.deadline_ts) for w in self.watchdogs]
        if self.record:
            times.append(float(self.record["deadline_ts"]))
        return max(times) if times else None

    def overdue(self, now: float | None = None) -> bool:
        """Whether a live watchdog of it is past its deadline by more than
        ``watchdog.OVERDUE_S``: its revert lines hang or it was stopped; it will not
        revert again by itself."""
        dl = self.deadline_ts
        return bool(self.watchdogs) and dl is not None and (time.time() if now is None else now) > dl + OVERDUE_S

    @property
    def kind(self) -> str:
        if self.record and self.record.get("fault_type"):
            return self.record["fault_type"]
        return self.fault_id.split("-")[0]

    @property
    def orphan(self) -> bool:
        """Objects with no record and no watchdog accounting for them."""
        return self.record is None and not self.watchdogs

    def controller_alive(self) -> bool:
        """Whether the faultlab that made this fault still runs: its record's controller,
        or (record lost) the one its watchdog names (a watchdog of the fault's user)."""
        if self.lease is not None:
            return bool(self.lease.controller_alive())
        return any(w.controller_alive() for w in self.watchdogs if w.uid == self.uid)

    def revert_lines(self) -> list[str]:
        """Its revert command lines: its record's, then its own watchdogs' argv."""
        return _lines(self)

    def can_revert(self) -> bool:
        me = os.geteuid()
        return me == 0 or self.uid == me

    def row(self) -> dict:
        dl = self.deadline_ts
        return {
            "fault_id": self.fault_id, "type": self.kind, "uid": self.uid,
            "node": (self.record or {}).get("node"), "target": (self.record or {}).get("target"),
            "remaining_s": round(dl - time.time(), 1) if dl else None,
            "deadline_ts": dl,
            "record": self.lease.folder if self.lease else None,
            "controller_alive": self.controller_alive(),
            "watchdog_alive": bool(self.watchdogs), "watchdog_pids": [w.pid for w in self.watchdogs],
            "watchdog_overdue": self.overdue(),
            "orphan_objects": [o.describe() for o in self.objects] if self.orphan else [],
            "can_revert": self.can_revert(),
        }


#: where faultlab versions before the trusted runtime folders (commit 853100c) kept a
#: non-root user's leases: a predictable name under the shared /tmp
LEGACY_LEASE_DIR = "/tmp/faultlab-{uid}/leases"


def lease_folders() -> list[str]:
    """The lease folders this user looks in: its own, root's, and (non-root, when
    something is there) the folder older versions used, ``/tmp/faultlab-UID/leases``,
    read with the same trust checks as the others (safefs: every component owned by
    root or this user, not group/other-writable but the sticky /tmp, no symlink): a
    folder planted there by someone else is reported, never acted on."""
    out = [str(lease_dir())]
    if ROOT_LEASE_DIR not in out:
        out.append(ROOT_LEASE_DIR)
    uid = os.geteuid()
    legacy = LEGACY_LEASE_DIR.format(uid=uid)
    if uid != 0 and legacy not in out and (os.path.lexists(legacy) or os.path.lexists(os.path.dirname(legacy))):
        out.append(legacy)
    return out


#: where a non-root user's lease folder is by default (``lease_dir``: under
#: ``$XDG_RUNTIME_DIR``, which systemd makes ``/run/user/UID``); root reads these too,
#: and ``HOME/.cache/faultlab/leases`` (the default without it)
USER_LEASE_GLOB = "/run/user/*/faultlab/leases"
#: how many records root reads of another user's lease folders, all of them together (the
#: default ones and every one a look-alike of theirs holds): a user may fill theirs
#: with made-up records, and make any number of folders, each held by a process named
#: like a watchdog, which must not make root's status/recover slow (a real user runs a
#: few faults at a time; the rest is named in one problem line a folder)
MAX_USER_RECORDS = 256
#: how many cgroups named like faultlab's root looks at of another user's (a folder's
#: owner), one problem line each unless a fault of theirs names it: a user whose cgroup
#: subtree is theirs (systemd delegates ``user@UID.service`` on cgroup v2) can make any
#: number of them, each one line of root's status; a real user's faults make a few
#: each (one a hierarchy); the rest is named in one problem line
MAX_USER_CGROUPS = 256
#: how many lease folders root reads of another user's, all of them together (the
#: default ones first, then those their look-alikes hold): each is opened from ``/``
#: one component at a time, a look-alike may hold a folder 2,000 deep and a user may
#: run any number of look-alikes (1,000 of them, each holding a folder of its own
#: 1,900 deep, held root's status for 63 s); a real user's faults share a few folders
MAX_USER_FOLDERS = 16
#: the budget that the folders held by candidates of other PID namespaces share, whatever
#: their uids (``host_view``): a container's root is uid 0 on the host and may run its
#: processes as any uid, so a bound per uid would not bound it, and its look-alikes of a
#: user's uid must not use up that user's allowance
OTHER_NAMESPACES = -1


def host_view(*, objects: bool = True) -> tuple[list[FaultView], list[str]]:
    """(faults, problems): every faultlab fault on the host, oldest record first, and
    the files, folders and look-alike processes that could not be trusted (never acted
    on).

    A fault is keyed by (fault id, owner uid). Its record's owner is the file's uid.
    Root also reads every other user's lease folder (the one each watchdog candidate
    holds, and ``USER_LEASE_GLOB``) read-only, trusting root and that user only, at
    most ``MAX_USER_RECORDS`` records of each user in all (one problem line names a folder
    with more), so no
    user's fault is record-less to root; the folders that candidates of other PID
    namespaces (containers') hold are read last, all of them together under one such
    budget whatever their uids. A watchdog candidate (argv) is the fault's own
    only when its uid is the record's owner and its PID and start time are the ones
    the record names (a record of an older version without them: the lease folder the
    candidate holds); with no record of its uid, a candidate of this user's own or of
    root's (whom every user trusts, as ``safefs`` does) is a fault whose record was
    lost, and one of any other user is a look-alike: reported, never signalled, and
    never given a record, objects, tc handles or a controller."""
    me = os.geteuid()
    _FOREIGN_SUBTREE.clear()  # what a container holds is read anew for each view
    views: dict[tuple[str, int], FaultView] = {}
    problems: list[str] = []
    read: set[tuple[str, int | None]] = set()
    budgets: dict[int, RecordBudget] = {}

    def take(folder: str, owner: int | None = None, held_by: Watchdog | None = None) -> None:
        # keyed by owner too: a candidate of user A naming user B's folder (read with
        # A as its trusted owner, and refused) must not keep it from being read as B's
        key = (os.path.normpath(folder), owner)
        if key in read:
            return
        read.add(key)
        spender = owner if held_by is None or held_by.same_ns else OTHER_NAMESPACES
        budget = None if owner is None else budgets.setdefault(spender, RecordBudget(MAX_USER_RECORDS, MAX_USER_FOLDERS))
        if budget is not None:
            budget.folders -= 1
            if budget.folders < 0:
                if budget.folders == -1 and spender == OTHER_NAMESPACES:
                    problems.append(f"more than {MAX_USER_FOLDERS} lease folders held by processes of other PID namespaces "
                                    f"(containers', whose root may run them as any uid) that look like watchdogs; the rest not read")
                elif budget.folders == -1:
                    problems.append(f"more than {MAX_USER_FOLDERS} lease folders of uid {owner} (held by processes that "
                                    f"look like watchdogs); the rest not read")
                return
        leases, probs = read_records(folder, owner=owner, held_by=None if held_by is None else f"process {held_by.pid} (uid {held_by.uid})",
                                     limit=budget)
        problems.extend(p for p in probs if not (folder == ROOT_LEASE_DIR and "No such file" in p))
        for le in leases:
            try:
                uid = os.stat(le.path, follow_symlinks=False).st_uid
            except OSError:
                continue
            views.setdefault((le.fault_id, uid), FaultView(le.fault_id, uid, le.record, le))

    for folder in lease_folders():
        take(folder)
    if me == 0:  # faultlab's folders of other users first: a problem there comes with its fix
        for folder, owner in _users_default_folders():
            take(folder, owner)
    dogs = find_watchdogs()
    # another lease folder a candidate holds: its user's records; those held in this PID
    # namespace first, then those of other namespaces (a container's root may run its
    # look-alikes as any user, but never ahead of that user's own watchdogs)
    for w in sorted(dogs, key=lambda w: not w.same_ns):
        if w.folder and w.folder.startswith("/") and (w.uid == me and w.same_ns or me == 0 and w.uid != me):
            take(w.folder, None if w.uid == me else w.uid, held_by=None if w.uid == me else w)
    for w in dogs:
        v = views.get((w.fault_id, w.uid))
        if v is not None and v.lease is not None:
            if _names(v.lease, w):
                v.watchdogs.append(w)
                continue
            why = f"its record names another process ({_named(v.lease)})"
        elif w.uid in (me, 0) and w.same_ns:  # this user's or root's: a fault whose record was lost
            views.setdefault((w.fault_id, w.uid), FaultView(w.fault_id, w.uid)).watchdogs.append(w)
            continue
        elif not w.same_ns:
            why = "it runs in another PID namespace (a container's) and no lease record names it"
        else:
            why = f"no lease record of uid {w.uid} names it"
        problems.append(f"process {w.pid} (uid {w.uid}) looks like a watchdog of {w.fault_id} but is a look-alike: "
                        f"{why}; not acted on (end it yourself if it is not wanted)")
    if objects:
        # only a view with revert lines claims an object by its lines; the views made
        # for orphans (any number: a container's root names cgroups) have none; another
        # user's fault claims only a cgroup of theirs, looked up by its name (_attach)
        lined = [v for v in views.values() if v.uid in (0, me) and _lines(v)]
        theirs: dict[int, int] = {}  # another user's cgroups looked at, by their uid
        for o in sorted(find_objects(), key=_attach_order):
            if o.kind == "cgroup" and o.uid not in (0, me):
                theirs[o.uid] = theirs.get(o.uid, 0) + 1
                if theirs[o.uid] > MAX_USER_CGROUPS:
                    if theirs[o.uid] == MAX_USER_CGROUPS + 1:
                        problems.append(f"more than {MAX_USER_CGROUPS} cgroups named like faultlab's, made by uid "
                                        f"{o.uid} in cgroups of theirs; the rest not looked at (theirs: faultlab "
                                        f"status as uid {o.uid} lists them)")
                    continue
            why = _attach(views, o, lined)
            if why:
                problems.append(why)
    return list(views.values()), problems


def _users_default_folders() -> list[tuple[str, int]]:
    """(folder, owner uid) of the default lease folders of this host's other users that
    exist: ``/run/user/UID/faultlab/leases`` and ``HOME/.cache/faultlab/leases`` (see
    ``nodes.base.lease_dir``). Their trust is checked as they are read."""
    out = []
    for folder in sorted(Path("/").glob(USER_LEASE_GLOB.lstrip("/"))):
        uid = folder.parent.parent.name
        if uid.isdigit() and int(uid) != 0:
            out.append((str(folder), int(uid)))
    try:
        users = pwd.getpwall()
    except OSError:
        users = []
    for pw in users:
        folder = os.path.join(pw.pw_dir, ".cache", "faultlab", "leases")
        if pw.pw_uid != 0 and pw.pw_dir.startswith("/") and os.path.lexists(folder):
            out.append((folder, pw.pw_uid))
    return out


def _names(lease: Lease, w: Watchdog) -> bool:
    """Whether ``lease``'s record names watchdog ``w`` (the caller has checked the
    uid): the PID and start time the record notes (``lease._note_watchdog``); a record
    without them (an older version) names the watchdog of faultlab's PID namespace
    holding its lease folder. A folder's path is the one its holder sees in its own
    mount namespace: a container's root (uid 0 here) may hold one named like root's
    lease folder."""
    rec = lease.record
    pid, start = rec.get("watchdog_pid"), rec.get("watchdog_starttime")
    if isinstance(pid, int) and not isinstance(pid, bool):
        return w.pid == pid and isinstance(start, int) and not isinstance(start, bool) and w.starttime == str(start)
    return w.same_ns and w.folder == lease.folder


def _named(lease: Lease) -> str:
    pid = lease.record.get("watchdog_pid")
    return f"PID {pid}" if isinstance(pid, int) and not isinstance(pid, bool) else f"the holder of {lease.folder}"


def _lines(v: FaultView) -> list[str]:
    out = list((v.record or {}).get("revert", []))
    for w in v.watchdogs:
        out += w.lines
    return out


def _may_claim(v: FaultView, o: Orphan) -> bool:
    """Whether fault ``v`` can own object ``o`` at all: a network object a fault of root
    or of this user; a cgroup only a fault of the user who made it (its folder's owner:
    a fault's cgroup is made by its own user). Another user's record or watchdog naming
    a root-made object never makes it theirs (it stays an orphan that ``recover``
    removes), and a cgroup another user made in a subtree of theirs (a delegated one)
    is never root's fault's, whatever its name."""
    if o.kind == "cgroup":
        return v.uid == o.uid
    return v.uid in (0, os.geteuid())


def _claims(v: FaultView, o: Orphan) -> bool:
    """Whether fault ``v``'s revert commands name object ``o`` (tc handles are
    allocated per fault, not derived from its id: the commands are the truth)."""
    if o.kind == "cgroup":  # by name only outside a container's cgroup, where anyone's root may name one
        if o.what in _line_text(v):
            return True
        return v.fault_id == Path(o.what).name[len("faultlab-"):] and not _in_container_cgroup(Path(o.what))
    if o.kind == "qdisc":
        h = o.what.split()[0]
        if _own_dev(o.dev):  # the ifb's (a probe device's) own root qdisc goes with the device
            return any(o.dev in ln and (not o.netns or o.netns in ln) for ln in _lines(v))
        return any(f"handle {h}" in ln and o.dev in ln and (not o.netns or o.netns in ln) for ln in _lines(v))
    ifb = o.what if o.kind in ("ifb", "probe") else o.what.split()[-1]
    return any(ifb in ln and (not o.netns or o.netns in ln) for ln in _lines(v))


def _line_text(v: FaultView) -> str:
    """``v``'s revert lines as one text, a NUL between two (no path holds a NUL, so a
    path is in it exactly when it is in one of the lines), made once a view: another
    user's record holds up to 1 MiB of lines, 350,000 empty ones, and going through
    them line by line for each cgroup named for that fault cost root 365 ms a cgroup
    (64 such cgroups held root's host view for 23 s, on a loaded host)."""
    if v.line_text is None:
        v.line_text = "\0".join(_lines(v))
    return v.line_text


def _own_dev(dev: str) -> str | None:
    """The orphan id of a device faultlab makes (``nic-<hex>`` for ``flifb<hex>``,
    ``probe-<hex>`` for ``flprb<hex>``), None for any other device."""
    m = IFB.match(dev)
    if m:
        return f"nic-{m.group(1)}"
    m = PROBE_DEV.match(dev)
    return f"probe-{m.group(1)}" if m else None


def _in_container_cgroup(path: Path) -> bool:
    """Whether cgroup folder ``path`` lies in a subtree that holds a process of another
    PID namespace than this one: a container's cgroup, which its root may write (a
    private cgroup namespace), and where it can make a folder and empty it. Every
    cgroup above ``path`` below the hierarchy's root is looked at with all of its
    subtree, so an empty folder made beside the container's processes counts too."""
    base = Path("/sys/fs/cgroup")
    try:
        mine = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return False
    tops = [d for d in (path, *path.parents) if d != base and d.parent != base and base in d.parents]
    if not tops:
        return False
    top = tops[-1]  # the highest one's subtree holds every other's: the answer is its alone
    if top not in _FOREIGN_SUBTREE:
        _FOREIGN_SUBTREE[top] = _holds_foreign_pid(top, mine)
    return _FOREIGN_SUBTREE[top]


#: :func:`_in_container_cgroup`'s answer for each highest cgroup looked at, for one
#: host view (``host_view`` empties it): a container's root can make thousands of
#: cgroups named like faultlab's in its subtree, and a scan of that subtree for each
#: one made root's status quadratic (1,000 of them: 137 s)
_FOREIGN_SUBTREE: dict[Path, bool] = {}


def _holds_foreign_pid(top: Path, mine: int) -> bool:
    """Whether a cgroup of ``top``'s subtree holds a process of another PID namespace
    than ``mine`` (the inode of this process's PID namespace)."""
    for folder, _, names in walk(str(top)):  # a cgroup removed meanwhile is passed over; any depth
        if "cgroup.procs" not in names:
            continue
        procs = Path(folder) / "cgroup.procs"
        try:
            pids = procs.read_text().split()
        except OSError:
            continue
        for pid in pids:
            try:
                if os.stat(f"/proc/{pid}/ns/pid").st_ino != mine:
                    return True
            except OSError:
                continue
    return False


def _attach_order(o: Orphan) -> int:
    """Devices first (each names a whole id), then the qdiscs on them, then the ingress
    redirects and root qdiscs elsewhere (tied to a device's id where they can be)."""
    if o.kind in ("ifb", "probe"):
        return 0
    if o.kind == "qdisc" and _own_dev(o.dev):
        return 1
    return {"ingress": 2, "qdisc": 3}.get(o.kind, 4)


def _orphan_id(views: dict[str, FaultView], o: Orphan) -> str:
    """The id of an orphan object no fault claims; each is a ``LEASE_ID``, so
    ``faultlab revert`` takes it: a cgroup's own fault id; a device's or a qdisc on it
    ``nic-<ifb hex>`` / ``probe-<hex>``; an ingress redirect its ifb's; a root qdisc
    elsewhere the orphan whose ifb carries the same handle (one nic-slow fault's two
    qdiscs), else ``nic-f<3 hex>`` (its handle ``fXXX:`` as 4 hex digits)."""
    if o.kind == "cgroup":
        return Path(o.what).name[len("faultlab-"):]
    if o.kind in ("ifb", "probe"):
        return _own_dev(o.what)
    if o.kind == "ingress":
        return f"nic-{o.what.split('flifb')[-1]}"
    own = _own_dev(o.dev)
    if own:
        return own
    h = o.what.split()[0]
    for v in views.values():
        if v.orphan and any(x.kind == "qdisc" and x.netns == o.netns and x.what.split()[0] == h and _own_dev(x.dev)
                            for x in v.objects):
            return v.fault_id
    return f"nic-f{o.hexid}"


def _attach(views: dict[str, FaultView], o: Orphan, lined: list[FaultView]) -> str | None:
    """Put ``o`` under the fault whose commands name it (a new orphan fault when none).
    ``lined``: the views of root and this user that have revert lines, in ``views``'
    order (the others can claim only a cgroup, by its name: looked up by key, so that
    each object costs the same whatever the number of orphans and of other users'
    faults). Returns a problem line instead for what is
    not provably faultlab's: a probe device without faultlab's mark, and the qdiscs on
    it."""
    cands = list(lined)
    if o.kind == "cgroup":
        want = Path(o.what).name[len("faultlab-"):]
        # another user's cgroup is theirs (_may_claim) and a fault's cgroup is named for
        # its id: it is matched against their fault of that name alone, never all their
        # faults' lines (up to MAX_USER_RECORDS records of 1 MiB: each cgroup of theirs
        # cost root a search through all of them)
        cands += [views[k] for k in dict.fromkeys([(want, 0), (want, os.geteuid()), (want, o.uid)]) if k in views]
    hit = next((v for v in cands if _may_claim(v, o) and _claims(v, o)), None)
    if hit is None:
        fid = _orphan_id(views, o)
        if o.kind == "probe" and not o.marked:
            return (f"{o.describe()}: named like a faultlab probe device but without faultlab's mark "
                    f"(an ifb device with alias {PROBE_ALIAS}) and no lease names it: not removed "
                    f"(ip link del {o.what} if it is faultlab's)")
        if o.kind == "qdisc" and fid.startswith("probe-") and fid not in views:
            return None  # on an unmarked probe device (reported with it): never touched
        if o.kind == "cgroup" and _in_container_cgroup(Path(o.what)):
            return (f"{o.describe()}: named like a faultlab cgroup inside a container's cgroup, and no lease "
                    f"names it: not removed (a container's root can make it; if it is faultlab's, move its "
                    f"processes to the parent cgroup and rmdir it)")
        if o.kind == "cgroup" and o.uid not in (0, os.geteuid()):
            return (f"{o.describe()}: named like a faultlab cgroup, made by uid {o.uid} (its folder's owner) in a "
                    f"cgroup of theirs, and no lease of theirs names it: not removed (theirs: faultlab recover as "
                    f"uid {o.uid} removes it)")
        owner = o.uid if o.kind == "cgroup" else 0  # a cgroup is its maker's; network objects are root's
        hit = views.setdefault((fid, owner), FaultView(fid, owner))
    hit.objects.append(o)
    return None
