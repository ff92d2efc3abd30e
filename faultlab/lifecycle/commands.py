"""``faultlab status``, ``revert`` and ``recover`` on this host, over the host view
(``views.in_force``: ``faultlab.lifecycle.hostview``): what is in force, whoever
started it; a revert of one fault or all; ``recover`` only what no live controller
holds (PID and start time), and ``revert --all`` never a running run's testbed."""

from __future__ import annotations

import json
import os
import sys
import time

from faultlab import procid
from faultlab.errors import FIELD_CHARS, printable
from faultlab.lifecycle.hostrevert import OTHER_USER_WAIT_S, left_after, start_revert
from faultlab.lifecycle.hostview import lease_folders
from faultlab.lifecycle.views import in_force
from faultlab.lifecycle.lease import open_lease_dir
from faultlab.nodes import LocalNode
from faultlab.nodes.docker_testbed import list_docker_testbeds
from faultlab.nodes.testbed import load_states
from faultlab.timefmt import when


def status_rows() -> tuple[list[dict], list[str]]:
    """The faults in force on this host as rows, and the problems met finding them."""
    views, problems = in_force()
    return [v.row() for v in views], [printable(p) for p in problems]


def print_status(rows: list[dict], problems: list[str], out) -> None:
    """Print ``status_rows`` one fault a line (problems as warnings on stderr), every
    line through ``printable``: file names, folders and record fields are other
    users' text."""
    for p in problems:
        print(printable(f"faultlab: warning: {p} (never acted on)"), file=sys.stderr)
    if not rows:
        out.print("no faults in force", markup=False)
    folders = set(lease_folders())
    for r in rows:
        who = "" if r["uid"] in (None, os.geteuid()) else f"  (uid {r['uid']}{'' if r['can_revert'] else ': not yours to revert'})"
        if r["orphan_objects"]:
            out.print(printable(f"{r['fault_id']}  {_field(r['type'])}  NO LEASE: {', '.join(map(_field, r['orphan_objects']))}  (faultlab recover removes it){who}"),
                      markup=False)
            continue
        held = "held by its controller" if r["controller_alive"] else "left to its lease"
        wd = _watchdog_says(r) if r["watchdog_alive"] else _gone(r)
        rec = "" if r["record"] else "  (lease record lost: the watchdog still ends it)"
        if r["record"] and r["record"] not in folders:  # another FAULTLAB_LEASE_DIR's
            rec = f"  (record in {_field(r['record'])})"
        # each field another user wrote, cut: a record holds up to 1 MiB
        out.print(printable(f"{r['fault_id']}  {_field(r['type'])}  {_field(r['node'])}  {_field(r['target'])}  {wd}  {held}{rec}{who}"),
                  markup=False)


def _field(text) -> str:
    """``text`` (a record's field, another user's words) as a status line shows it:
    printable, at most :data:`faultlab.errors.FIELD_CHARS` characters, ``-`` when empty."""
    return printable(text, FIELD_CHARS) if text else "-"


def _watchdog_says(r: dict) -> str:
    """What the live watchdog of a fault of ``status_rows`` does: revert it at its
    deadline; past it, run its revert lines (each bounded by
    ``watchdog.LINE_TIMEOUT_S``); past that (``watchdog_overdue``), nothing more by
    itself: its lines hang or it was stopped."""
    dl = r["deadline_ts"]
    if dl is None or dl > time.time():
        return f"watchdog reverts it at the latest at {when(dl)}"
    if not r["watchdog_overdue"]:
        return f"watchdog is reverting it now (its deadline {when(dl)} has passed)"
    mine = r["uid"] in (None, os.geteuid())
    return (f"WATCHDOG STUCK past its deadline {when(dl)} (a revert line hangs or it was stopped): "
            + ("run faultlab recover" if mine else f"theirs to end (faultlab recover as uid {r['uid']})"))


def _gone(r: dict) -> str:
    """What to do about a fault of ``status_rows`` whose watchdog is gone: root never
    runs another user's revert lines, so another user's record is theirs to end."""
    if r["uid"] in (None, os.geteuid()):
        return "WATCHDOG GONE: run faultlab recover"
    return f"WATCHDOG GONE: theirs to end (faultlab recover as uid {r['uid']})"


def _testbed_controller_alive(tb_id: str) -> bool:
    """Whether the controller of testbed ``tb_id`` still runs, by its state file (the
    PID and start time it recorded: a netns or a docker/ssh testbed); False when no
    trusted state file names it."""
    for st in load_states()[0]:
        if st.id == tb_id:
            return procid.alive(st.pid, st.starttime)
    for st in list_docker_testbeds():
        if st["id"] == tb_id:
            return procid.alive(st["pid"], st.get("starttime"))
    return False


def controller_alive(v) -> bool:
    """Whether a live controller (``faultlab inject``/``run``/``demo``/``campaign``)
    still holds fault view ``v``: its record's controller (PID and, where recorded,
    start time); for a testbed lease whose record is lost, the testbed's state file;
    for another fault whose record is lost, the controller its watchdog's environment
    names (a watchdog of the fault's own user). An orphan object has none."""
    if v.lease is None and v.kind == "testbed":
        return _testbed_controller_alive(v.fault_id.split("-", 1)[1])
    return v.controller_alive()


def _held_by(v) -> int | None:
    """The PID of the controller holding ``v``: its record's, or its watchdog's."""
    pid = (v.record or {}).get("controller_pid")
    if pid is None:
        pid = next((w.controller[0] for w in v.watchdogs if w.controller and w.controller_alive()), None)
    return pid


def _pick(v, fault_id: str | None, mode: str) -> str:
    """What ``revert_faults`` does with view ``v``: "revert", "skip" (not asked for) or
    "held" (a live controller holds it and this mode leaves it alone)."""
    if fault_id is not None:
        return "revert" if v.fault_id == fault_id else "skip"
    if mode == "recover" and controller_alive(v):
        return "held"
    if mode == "all" and v.kind == "testbed" and controller_alive(v):
        return "held"
    return "revert"


def revert_faults(fault_id: str | None, *, mode: str = "all") -> tuple[list[dict], list[dict], list[dict]]:
    """Revert ``fault_id``, or (None) every fault on the host this user may revert:
    ``mode="all"`` (``revert --all``) every fault, also ones a live controller holds
    (it finds them ended), but never the testbed of a live run; ``mode="recover"``
    only what no live controller holds (PID + start time, see ``controller_alive``).

    Returns (done: one dict a fault with ``left`` empty when gone, refused: faults of
    other users, held: faults left alone because a live controller holds them)."""
    try:  # this user's lease folder must be trusted before anything is run from it
        open_lease_dir(LocalNode("local"), create=False).close()
    except FileNotFoundError:
        pass
    views, _ = in_force()
    me = os.geteuid()
    if fault_id is not None and any(v.fault_id == fault_id and v.uid == me for v in views):
        # the id names this user's own fault: another user's record of the same id (any
        # user can copy a world-readable id) is reported, never acted on
        others = sorted({v.uid for v in views if v.fault_id == fault_id and v.uid != me})
        if others:
            print(f"faultlab: note: uid {', '.join(map(str, others))} also has a fault {fault_id}: not touched "
                  f"(run faultlab revert {fault_id} as that user)", file=sys.stderr)
        views = [v for v in views if not (v.fault_id == fault_id and v.uid != me)]
    done, refused, held = [], [], []
    started = []  # (view, commands of it that failed): what is left is read once, after the sweep
    others_wait_s = OTHER_USER_WAIT_S
    for v in views:
        what = _pick(v, fault_id, mode)
        if what == "skip":
            continue
        row = {"fault_id": v.fault_id, "type": v.kind, "node": (v.record or {}).get("node"), "uid": v.uid,
               "deadline_ts": v.deadline_ts}
        if what == "held":
            held.append({**row, "controller_pid": _held_by(v)})
        elif not v.can_revert():
            refused.append(row)
        elif v.uid != me:  # one wait for all other users' watchdogs: look-alikes must not add up
            t0 = time.monotonic()
            started.append((v, start_revert(v, timeout_s=others_wait_s)))
            others_wait_s = max(0.0, others_wait_s - (time.monotonic() - t0))
            done.append(row)
        else:
            started.append((v, start_revert(v)))
            done.append(row)
    for row, left in zip(done, left_after(started)):
        row["left"] = left
    return done, refused, held


def report_held(held: list[dict]) -> None:
    """One stderr line naming the faults left alone because a live controller holds
    them (not an error)."""
    if held:
        who = ", ".join(f"{h['fault_id']} (controller PID {h['controller_pid'] or '?'})" for h in held)
        print(printable(f"faultlab: note: left {len(held)} fault(s) alone that a running faultlab still holds: {who} "
                        f"(give the id to faultlab revert to end one now)"), file=sys.stderr)


def _what_next(d: dict) -> str:
    """What happens to a fault ``revert_faults`` could not fully revert, from what is
    left of it (``d["left"]``: its watchdog, its record)."""
    fid = d["fault_id"]
    if any(x.startswith("watchdog PID") for x in d["left"]):
        return (f"its lease is kept: its watchdog retries at {when(d.get('deadline_ts'))}; "
                f"fix the cause and run faultlab revert {fid} to retry now")
    if any(x.startswith("lease record") for x in d["left"]):
        if d.get("uid") not in (None, os.geteuid()):  # root never runs another user's lines as root
            return (f"its lease record (uid {d['uid']}'s) is kept but no watchdog is left to retry, and its lines are "
                    f"run only as that user: run faultlab recover as uid {d['uid']}")
        return f"its lease record is kept but no watchdog is left to retry: fix the cause and run faultlab revert {fid}"
    return "no lease is left to retry it: fix the cause and run faultlab recover (or remove what is listed by hand)"


def report_reverts(done: list[dict], refused: list[dict], fault_id: str | None, out, as_json: bool, *, quiet_empty: bool = False) -> int:
    """Print the outcome of ``revert_faults``; returns the exit code (1 something of
    this user's faults left, 3 a fault of another user refused, 0 otherwise). In a
    sweep (``revert --all``, ``recover``: no ``fault_id``), another user's fault that
    root could not end (its watchdog did not go within the bounded wait: a look-alike,
    or a user's own) is a note line, never this command's failure nor retry advice; a
    fault named by its id that is not reverted is an error (exit 1) saying who can end
    it."""
    if as_json:
        out.print_json(json.dumps(done + [{**r, "refused": "owned by another user"} for r in refused]))
    else:
        if not done and not refused and not quiet_empty:
            out.print(f"no fault {fault_id + ' ' if fault_id else ''}in force on this host (already reverted, expired, or never injected: see faultlab status)", markup=False)
        for d in done:
            out.print(printable(f"{d['fault_id']}: {'reverted' if not d['left'] else 'NOT reverted: left ' + '; '.join(map(_field, d['left']))}"),
                      markup=False)
    code = 0
    me = os.geteuid()
    for d in done:
        if not d["left"]:
            continue
        if fault_id is None and d.get("uid") not in (None, me):  # in a sweep, another user's (or a look-alike's): theirs to end
            print(printable(f"faultlab: note: revert: {d['fault_id']} of uid {d['uid']} did not end within the wait (see above): "
                            f"its watchdog and record are that user's (it may be a look-alike); faultlab recover as uid {d['uid']} ends a real one"),
                  file=sys.stderr)
            continue
        print(printable(f"faultlab: error: revert: {d['fault_id']} not fully reverted (see above); {_what_next(d)}"), file=sys.stderr)
        code = 1
    if refused:
        who = ", ".join(f"{r['fault_id']} (uid {r['uid']})" for r in refused)
        print(printable(f"faultlab: error: revert: cannot revert {len(refused)} fault(s) of another user: {who} "
                        f"(run faultlab as root or as that user)"), file=sys.stderr)
        code = 3
    return code
