"""One view of the host: every faultlab fault in force, whoever started it, with or
without its lease record.

Three sources, joined by fault id:

1. lease records in the trusted lease folders: this user's (``FAULTLAB_LEASE_DIR`` or
   the default) and root's ``/run/faultlab/leases`` (mode 0755, records 0644: every
   user's ``status`` sees root's faults);
2. watchdog processes (``/proc/*/cmdline``: ``sh -c ... faultlab-watchdog ID
   DEADLINE FD LINES...``), of any user: a fault whose record was deleted is still
   seen, with its deadline and owner;
3. faultlab-owned objects (root only, where they are visible): root qdiscs with
   faultlab's reserved handles ``fXXX:``, ``flifb*`` devices, ingress qdiscs whose
   redirect points at one, probe devices ``flprb*`` (``injectors/probedev.py``) and
   ``faultlab-<fault_id>`` cgroups, in this namespace and every named network
   namespace. Each is put under the fault whose revert commands name it; those no
   record and no watchdog names are *orphans* that ``recover`` removes, under an id
   ``faultlab revert`` takes (``nic-<ifb hex>``, ``nic-f<qdisc handle>``,
   ``probe-<hex>``). A ``flprb*`` device without faultlab's mark (an ifb with alias
   ``faultlab-probe``) that no lease names is reported as a problem, never removed.

A fault can be reverted by its owner (the record's or watchdog's uid) and by root
(root ends another user's fault by telling its watchdog to revert now, so the revert
runs with that user's own privileges). Anyone else is told so, never "nothing in
force".
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from faultlab import procid
from faultlab.injectors.lease import CONTROLLER_ENV, LEASE_ID, ROOT_LEASE_DIR, WATCHDOG_NAME, Lease, read_records
from faultlab.injectors.probedev import PROBE_ALIAS, PROBE_DEV

FAULT_HANDLE = re.compile(r"^f([0-9a-f]{3}):$")
IFB = re.compile(r"^flifb([0-9a-f]{6})$")
CGROUP = re.compile(r"^faultlab-([a-z]+-[0-9a-f]{6})$")
_DIGITS = re.compile(r"^[1-9][0-9]{0,11}$")


@dataclass
class Watchdog:
    """A live lease watchdog found in /proc."""

    pid: int
    uid: int
    fault_id: str
    deadline_ts: int
    lines: list[str]
    starttime: str
    folder: str | None = None  # its lease folder (readable only for its owner and root)
    controller: tuple[int, int] | None = None  # (PID, start time) of the faultlab that started it

    def controller_alive(self) -> bool:
        """Whether the controller its environment names (``lease.CONTROLLER_ENV``) still
        runs (PID and start time; a start time of 0, unknown, checks the PID only).
        Untrusted: a process that merely looks like a watchdog can name any PID, which
        only makes ``recover`` leave that process alone."""
        if self.controller is None:
            return False
        pid, start = self.controller
        return procid.alive(pid, start or None)

    def _same(self) -> bool:
        w = _watchdog(self.pid)
        return w is not None and w.starttime == self.starttime and w.fault_id == self.fault_id

    def fire(self) -> bool:
        """SIGUSR1: revert now. False when it is gone or not ours to signal."""
        return self._signal(signal.SIGUSR1, group=False)

    def stop(self) -> bool:
        """SIGTERM to its process group (it started its own session)."""
        return self._signal(signal.SIGTERM, group=True)

    def _signal(self, sig: int, *, group: bool) -> bool:
        try:
            fd = os.pidfd_open(self.pid)
        except OSError:
            return False
        try:
            if not self._same():  # the PID was reused since it was found
                return False
            if group:
                os.killpg(self.pid, sig)
            else:
                signal.pidfd_send_signal(fd, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False
        finally:
            os.close(fd)

    def wait_gone(self, timeout_s: float) -> bool:
        end = time.time() + timeout_s
        while time.time() < end:
            if not self._same():
                return True
            time.sleep(0.1)
        return not self._same()


def _watchdog(pid: int) -> Watchdog | None:
    p = Path(f"/proc/{pid}")
    try:
        argv = (p / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if len(argv) < 7 or argv[1] != b"-c" or argv[3] != WATCHDOG_NAME.encode():
        return None
    try:
        fid, dl, fdn = argv[4].decode(), argv[5].decode(), argv[6].decode()
        lines = [a.decode() for a in argv[7:-1]] if argv[-1] == b"" else [a.decode() for a in argv[7:]]
        stat = (p / "stat").read_text().rpartition(")")[2].split()
        status = (p / "status").read_text()
    except (OSError, UnicodeDecodeError):
        return None
    if not LEASE_ID.match(fid) or not _DIGITS.match(dl) or not fdn.isdigit():
        return None
    if int(stat[3]) != pid:  # not the session leader: a subshell of the watchdog
        return None
    uid = next((int(ln.split()[2]) for ln in status.splitlines() if ln.startswith("Uid:")), -1)
    folder = None
    try:
        folder = os.readlink(p / "fd" / fdn)
    except OSError:
        pass
    return Watchdog(pid, uid, fid, int(dl), lines, stat[19], folder, _controller_of(p))


def _controller_of(p: Path) -> tuple[int, int] | None:
    """(PID, start time) named by ``CONTROLLER_ENV`` in ``/proc/PID/environ`` (readable by
    its owner and root), digits only; None when absent, unreadable or malformed."""
    try:
        env = (p / "environ").read_bytes().split(b"\0")
    except OSError:
        return None
    key = CONTROLLER_ENV.encode() + b"="
    value = next((e[len(key):] for e in env if e.startswith(key)), b"")
    parts = value.split(b" ")
    if len(parts) != 2 or not all(x.isdigit() and len(x) <= 20 for x in parts) or int(parts[0]) <= 0:
        return None
    return int(parts[0]), int(parts[1])


def find_watchdogs() -> list[Watchdog]:
    """Every live lease watchdog on this host, of any user."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            w = _watchdog(int(p.name))
            if w is not None:
                out.append(w)
    return out


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

    def describe(self) -> str:
        where = f"netns {self.netns}" if self.netns else "host"
        return f"{self.kind} {self.what} ({where})"

    def revert_argv(self) -> list[list[str]]:
        """The commands that remove it (touching only this faultlab object)."""
        ns = ["ip", "netns", "exec", self.netns] if self.netns else []
        if self.kind == "qdisc":
            return [[*ns, "tc", "qdisc", "del", "dev", self.dev, "root", "handle", self.what.split()[0]]]
        if self.kind == "ingress":
            ifb = self.what.split()[-1]
            from faultlab.injectors.nic import DEL_INGRESS_SH

            return [[*ns, "sh", "-c", DEL_INGRESS_SH, "sh", self.dev, ifb]]
        if self.kind == "ifb" or (self.kind == "probe" and self.marked):
            return [[*ns, "ip", "link", "del", self.what]]
        if self.kind == "cgroup":
            from faultlab.injectors.cgroups import ORPHAN_CONTROLLER, orphan_revert_argv

            # v2: the controller its fault enabled in the parent goes off again first;
            # then back to the cgroup that holds it, never to the root (the targets'
            # own limits must keep applying: a faultlab cgroup is made inside theirs)
            prefix = Path(self.what).name[len("faultlab-"):].split("-")[0]
            return orphan_revert_argv(self.what, ORPHAN_CONTROLLER.get(prefix))
        return []


def _run(argv: list[str], timeout: float = 15) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _netns_names() -> list[str]:
    return [ln.split()[0] for ln in _run(["ip", "netns", "list"]).splitlines() if ln.strip()]


def find_objects() -> list[Orphan]:
    """faultlab-made network and cgroup objects on this host (root sees all network
    namespaces; without root only this namespace and the cgroups)."""
    out: list[Orphan] = []
    spaces = [""] + (_netns_names() if os.geteuid() == 0 else [])
    for ns in spaces:
        pre = ["ip", "netns", "exec", ns] if ns else []
        try:
            links = json.loads(_run([*pre, "ip", "-d", "-j", "link", "show"]) or "[]")
            qds = json.loads(_run([*pre, "tc", "-j", "qdisc", "show"]) or "[]")
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
                flt = _run([*pre, "tc", "filter", "show", "dev", dev, "parent", "ffff:"])
                for ifb in set(re.findall(r"device (flifb[0-9a-f]{6})\)", flt)):
                    out.append(Orphan("ingress", ns, f"ffff: on {dev} -> {ifb}", IFB.match(ifb).group(1), dev))
    for base in ("/sys/fs/cgroup",):
        for p in Path(base).glob("**/faultlab-*"):
            m = CGROUP.match(p.name)
            if m and p.is_dir():
                out.append(Orphan("cgroup", "", str(p), m.group(1).split("-")[1]))
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

    @property
    def deadline_ts(self) -> float | None:
        if self.watchdogs:
            return float(max(w.deadline_ts for w in self.watchdogs))
        return float(self.record["deadline_ts"]) if self.record else None

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
    from faultlab.nodes import lease_dir

    out = [str(lease_dir())]
    if ROOT_LEASE_DIR not in out:
        out.append(ROOT_LEASE_DIR)
    uid = os.geteuid()
    legacy = LEGACY_LEASE_DIR.format(uid=uid)
    if uid != 0 and legacy not in out and (os.path.lexists(legacy) or os.path.lexists(os.path.dirname(legacy))):
        out.append(legacy)
    return out


def host_view(*, objects: bool = True) -> tuple[list[FaultView], list[str]]:
    """(faults, problems): every faultlab fault on the host, oldest record first, and
    the files or folders that could not be trusted (never acted on)."""
    views: dict[str, FaultView] = {}
    problems: list[str] = []
    for folder in lease_folders():
        leases, probs = read_records(folder)
        problems += [p for p in probs if not (folder == ROOT_LEASE_DIR and "No such file" in p)]
        for le in leases:
            if le.fault_id in views:
                continue
            try:
                uid = os.stat(le.path, follow_symlinks=False).st_uid
            except OSError:
                continue
            views[le.fault_id] = FaultView(le.fault_id, uid, le.record, le)
    for w in find_watchdogs():
        views.setdefault(w.fault_id, FaultView(w.fault_id)).watchdogs.append(w)
    for v in views.values():
        problems += _keep_owners_watchdogs(v)
    _records_of_other_folders(views)
    if objects:
        for o in sorted(find_objects(), key=_attach_order):
            why = _attach(views, o)
            if why:
                problems.append(why)
    return list(views.values()), problems


def _keep_owners_watchdogs(v: "FaultView") -> list[str]:
    """Settle who owns ``v`` and keep only that user's watchdogs in it. The owner is
    the record's (the file's uid); with no record, this user when one of the
    watchdogs is its own, else root when one is root's, else the lowest uid. A process
    of another user that merely looks like a watchdog of the fault (any user can start
    ``sh -c x faultlab-watchdog ID ...``) is reported, never signalled. Returns the
    problem lines."""
    if not v.watchdogs:
        return []
    if v.uid is None:
        uids = {w.uid for w in v.watchdogs}
        me = os.geteuid()
        v.uid = me if me in uids else 0 if 0 in uids else min(uids)
    others = [w for w in v.watchdogs if w.uid != v.uid]
    v.watchdogs = [w for w in v.watchdogs if w.uid == v.uid]
    return [f"process {w.pid} (uid {w.uid}) looks like a watchdog of {v.fault_id}, a fault of uid {v.uid}: "
            f"not acted on (end it yourself if it is not wanted)" for w in others]


def _records_of_other_folders(views: dict[str, "FaultView"]) -> None:
    """A fault whose watchdog holds a lease folder we do not look in (its controller
    ran with another ``FAULTLAB_LEASE_DIR``) has its record there: read it (through the
    same trust checks as our own folders: a folder of another user is never read) so
    ``status`` shows its type, node and target, and ``revert`` runs its lines, instead
    of calling the record lost (found by H10's probe F)."""
    known = set(lease_folders())
    for v in views.values():
        if v.record is not None:
            continue
        for w in v.watchdogs:
            if not w.folder or not w.folder.startswith("/") or w.folder in known:
                continue
            leases, _ = read_records(w.folder)
            le = next((x for x in leases if x.fault_id == v.fault_id), None)
            if le is None:
                continue
            try:
                uid = os.stat(le.path, follow_symlinks=False).st_uid
            except OSError:
                continue
            v.record, v.lease, v.uid = le.record, le, uid
            break


def _lines(v: FaultView) -> list[str]:
    out = list((v.record or {}).get("revert", []))
    for w in v.watchdogs:
        out += w.lines
    return out


def _claims(v: FaultView, o: Orphan) -> bool:
    """Whether fault ``v``'s revert commands name object ``o`` (tc handles are
    allocated per fault, not derived from its id: the commands are the truth)."""
    if o.kind == "cgroup":
        return v.fault_id == Path(o.what).name[len("faultlab-"):] or any(o.what in ln for ln in _lines(v))
    if o.kind == "qdisc":
        h = o.what.split()[0]
        if _own_dev(o.dev):  # the ifb's (a probe device's) own root qdisc goes with the device
            return any(o.dev in ln and (not o.netns or o.netns in ln) for ln in _lines(v))
        return any(f"handle {h}" in ln and o.dev in ln and (not o.netns or o.netns in ln) for ln in _lines(v))
    ifb = o.what if o.kind in ("ifb", "probe") else o.what.split()[-1]
    return any(ifb in ln and (not o.netns or o.netns in ln) for ln in _lines(v))


def _own_dev(dev: str) -> str | None:
    """The orphan id of a device faultlab makes (``nic-<hex>`` for ``flifb<hex>``,
    ``probe-<hex>`` for ``flprb<hex>``), None for any other device."""
    m = IFB.match(dev)
    if m:
        return f"nic-{m.group(1)}"
    m = PROBE_DEV.match(dev)
    return f"probe-{m.group(1)}" if m else None


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


def _attach(views: dict[str, FaultView], o: Orphan) -> str | None:
    """Put ``o`` under the fault whose commands name it (a new orphan fault when none).
    Returns a problem line instead for what is not provably faultlab's: a probe
    device without faultlab's mark, and the qdiscs on it."""
    hit = next((v for v in views.values() if _claims(v, o)), None)
    if hit is None:
        fid = _orphan_id(views, o)
        if o.kind == "probe" and not o.marked:
            return (f"{o.describe()}: named like a faultlab probe device but without faultlab's mark "
                    f"(an ifb device with alias {PROBE_ALIAS}) and no lease names it: not removed "
                    f"(ip link del {o.what} if it is faultlab's)")
        if o.kind == "qdisc" and fid.startswith("probe-") and fid not in views:
            return None  # on an unmarked probe device (reported with it): never touched
        hit = views.setdefault(fid, FaultView(fid, 0))
    hit.objects.append(o)
    return None


def revert_view(v: FaultView, timeout_s: float = 60.0) -> list[str]:
    """End one fault of the host view; returns what is still there (empty: gone).

    A recorded fault of our own: its revert lines; only when none failed for real
    (``Lease.revert_left``) are its watchdog stopped and its files removed, otherwise
    both are kept (the watchdog retries at the deadline) and the failed commands come
    first in the list returned. A fault with a watchdog but no (readable) record, or
    another user's (as root): its watchdog is told to revert now and awaited. Orphan
    objects: removed one by one. Raises nothing."""
    if v.lease is not None and v.uid == os.geteuid():
        from faultlab.injectors.lease import node_lock

        try:
            with node_lock(_LeaseFolderNode(v.lease.folder)):
                failed = v.lease.revert_left(timeout_s)
                if not failed:
                    v.lease.release()
        except Exception as e:  # a folder gone bad since it was read: the watchdog still ends it
            return [f"{v.fault_id}: {e}"]
        if failed:
            return failed + still_there(v.fault_id, v.uid)
    elif v.watchdogs:
        for w in v.watchdogs:
            w.fire()
        for w in v.watchdogs:
            w.wait_gone(timeout_s)
    if v.orphan:  # the ingress redirect first (it is told by its ifb), the ifb last
        order = {"ingress": 0, "qdisc": 1, "ifb": 2, "probe": 2, "cgroup": 3}
        for o in sorted(v.objects, key=lambda o: order.get(o.kind, 9)):
            for argv in o.revert_argv():
                _run(argv, timeout=30)
    return still_there(v.fault_id, v.uid)


def still_there(fault_id: str, uid: int | None = None) -> list[str]:
    """What of ``fault_id`` is still on the host: a record, a watchdog, objects. With
    ``uid`` (the fault's owner), a look-alike of another user left under that id is
    not the fault (``_keep_owners_watchdogs`` reports it)."""
    views, _ = host_view()
    v = next((x for x in views if x.fault_id == fault_id), None)
    if v is None or (uid is not None and v.uid is not None and v.uid != uid):
        return []
    left = []
    if v.record:
        left.append(f"lease record {v.lease.path if v.lease else ''}")
    left += [f"watchdog PID {w.pid}" for w in v.watchdogs]
    left += [o.describe() for o in v.objects]
    return left


class _LeaseFolderNode:
    """A stand-in node whose lease folder is ``folder`` (for node_lock)."""

    def __init__(self, folder: str):
        self._folder = folder

    def lease_dir(self) -> Path:
        return Path(self._folder)
