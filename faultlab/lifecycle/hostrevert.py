"""Ending the faults of the host view (``hostview``): a recorded fault by its revert
lines under its lease folder's node lock, one seen by its watchdogs alone by telling
them to revert now, and orphan objects removed one by one; then what is still there."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from faultlab.errors import NodeError
from faultlab.injectors import cgroups
from faultlab.injectors.nic import DEL_INGRESS_SH
from faultlab.lifecycle.hostview import FaultView, Orphan, host_view, run_quietly
from faultlab.lifecycle.lease import node_lock, read_records
from faultlab.nodes import LEASE_HERE


def orphan_argv(o: Orphan) -> list[list[str]]:
    """The commands that remove orphan object ``o`` (touching only this faultlab object)."""
    ns = ["ip", "netns", "exec", o.netns] if o.netns else []
    if o.kind == "qdisc":
        return [[*ns, "tc", "qdisc", "del", "dev", o.dev, "root", "handle", o.what.split()[0]]]
    if o.kind == "ingress":
        ifb = o.what.split()[-1]
        return [[*ns, "sh", "-c", DEL_INGRESS_SH, "sh", o.dev, ifb]]
    if o.kind == "ifb" or (o.kind == "probe" and o.marked):
        return [[*ns, "ip", "link", "del", o.what]]
    if o.kind == "cgroup":
        # v2: the controller its fault enabled in the parent goes off again first;
        # then back to the cgroup that holds it, never to the root (the targets'
        # own limits must keep applying: a faultlab cgroup is made inside theirs)
        prefix = Path(o.what).name[len("faultlab-"):].split("-")[0]
        return cgroups.orphan_revert_argv(o.what, cgroups.ORPHAN_CONTROLLER.get(prefix))
    return []


#: how long root waits for another user's watchdog told to revert: any user can run a
#: process that looks like a watchdog and ignores the signal, and must not stall root
OTHER_USER_WAIT_S = 10.0


def revert_view(v: FaultView, timeout_s: float = 60.0) -> list[str]:
    """End one fault of the host view; returns what is still there (empty: gone): the
    commands that failed for real (``start_revert``) and then ``still_there``."""
    return left_after([(v, start_revert(v, timeout_s))])[0]


def start_revert(v: FaultView, timeout_s: float = 60.0) -> list[str]:
    """Run what ends fault ``v``; returns the commands that failed for real (what else
    is left is ``left_after``'s to say, once for a whole sweep).

    A recorded fault of our own: its revert lines; only when none failed for real
    (``Lease.revert_left``) are its watchdog stopped and its files removed, otherwise
    both are kept (the watchdog retries at the deadline). A fault with a watchdog but
    no (readable) record, or another user's (as root): its watchdog is told to revert
    now and awaited. Orphan objects: removed one by one. Raises nothing."""
    if v.uid != os.geteuid():  # another user's watchdog that does not end is theirs to end
        timeout_s = min(timeout_s, OTHER_USER_WAIT_S)
    if v.lease is None and v.watchdogs:
        return _revert_unrecorded(v, timeout_s)
    if v.lease is not None and v.uid == os.geteuid():
        try:
            with node_lock(_LeaseFolderNode(v.lease.folder)):
                failed = v.lease.revert_left(timeout_s)
                if not failed:
                    v.lease.release()
        except Exception as e:  # a folder gone bad since it was read: the watchdog still ends it
            return [f"{v.fault_id}: {e}"]
        if failed:
            _stop_past_deadline(v)
            return failed
    elif v.watchdogs:
        for w in [w for w in v.watchdogs if w.fire()]:
            w.wait_gone(timeout_s)
    if v.orphan:  # the ingress redirect first (it is told by its ifb), the ifb last
        order = {"ingress": 0, "qdisc": 1, "ifb": 2, "probe": 2, "cgroup": 3}
        for o in sorted(v.objects, key=lambda o: order.get(o.kind, 9)):
            for argv in orphan_argv(o):
                run_quietly(argv, timeout=30)
    return []


def left_after(started: list[tuple[FaultView, list[str]]]) -> list[list[str]]:
    """What is left of each fault of ``started`` ((view, the commands of it that failed,
    as ``start_revert`` returned them)): those failures, then what of it is still on
    the host, from one ``host_view`` for them all (a sweep costs two host views, not
    one a fault)."""
    if not started:
        return []
    by_id: dict[str, list[FaultView]] = {}
    for now in host_view()[0]:
        by_id.setdefault(now.fault_id, []).append(now)
    return [failed + still_there(v.fault_id, v.uid, by_id.get(v.fault_id, [])) for v, failed in started]
def _revert_unrecorded(v: FaultView, timeout_s: float) -> list[str]:
    """End a fault seen by its watchdogs alone (``start_revert``), under the node lock of
    the lease folder our watchdog of it holds: its creator holds that lock from the
    watchdog's start to its last inject command, so a record written meanwhile is read
    here and the whole fault is reverted by its lines; otherwise the watchdogs are
    told to revert now and awaited before the lock is let go. A folder that cannot be
    locked (gone, not trusted) leaves the signal alone (a creator then finds its lease
    ended under it and undoes what it applied)."""
    me = os.geteuid()
    folder = next((w.folder for w in v.watchdogs if w.uid == me and w.folder and w.folder.startswith("/")), None)
    with contextlib.ExitStack() as held:
        le = None
        if folder:
            try:
                held.enter_context(node_lock(_LeaseFolderNode(folder), create=False))
                le = next((x for x in read_records(folder)[0] if x.fault_id == v.fault_id
                           and os.stat(x.path, follow_symlinks=False).st_uid == me), None)
            except (NodeError, OSError):
                pass
        if le is not None:  # its creator wrote it while we waited for the lock
            failed = le.revert_left(timeout_s)
            if failed:
                _stop_past_deadline(v)
                return failed
            le.release()
        else:
            for w in [w for w in v.watchdogs if w.fire()]:  # one not signalled is not awaited
                w.wait_gone(timeout_s)
    return []


def _stop_past_deadline(v: FaultView) -> None:
    """Stop the watchdogs of ``v`` (ours, its record kept) that are past its deadline,
    with the revert line each runs: such a watchdog never retries; it runs its lines
    once and ends, and one still there while ours failed is running a line that hangs
    (a line running as another user, who stopped it). Its record stays, so what failed
    is reported and ``faultlab revert ID`` retries it."""
    dl = v.deadline_ts
    if dl is None or dl > time.time():
        return
    for w in v.watchdogs:
        if w.uid == os.geteuid() and w.stop():
            w.wait_gone(5.0)


def still_there(fault_id: str, uid: int | None = None, views: list[FaultView] | None = None) -> list[str]:
    """What of ``fault_id`` is still on the host: a record, a watchdog, objects. With
    ``uid`` (the fault's owner), only that user's fault of this id counts, and the
    objects of this id that no fault accounts for (orphans, whoever's revert left
    them); a look-alike is no fault (``host_view`` reports it). ``views``: the host
    view to look in (default: a new one)."""
    if views is None:
        views, _ = host_view()
    left = []
    for v in views:
        if v.fault_id != fault_id or not (uid is None or v.uid == uid or v.orphan):
            continue
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

    def lease_host(self) -> str:
        return LEASE_HERE
