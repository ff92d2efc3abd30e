"""The fault commands of the CLI: ``inject`` (run one fault in the foreground or
detached), ``status``, ``revert`` and ``recover``, and the signal handling that makes a
revert uninterruptible.

Signals (SIGINT, SIGTERM, SIGHUP) during ``inject``:

- before and while the fault is applied and verified, a signal is recorded and obeyed
  at the next step boundary (never half-way through a command): what was applied is
  reverted;
- once a revert has started (at the end, on an error, on a signal) signals are
  recorded, not obeyed: the second says ``still reverting, N command(s) left``; the
  third, while revert commands are still running, hands the fault to its lease: the
  watchdog is told to revert it now, and faultlab says so and exits 1.

Exit codes: 0 when the fault ran and nothing faultlab made is left (or nothing was
applied), 1 when something is left (the message names it and when its lease ends it)
or the fault was handed to its lease, 2 bad input, 3 refused (including a fault whose
verify did not confirm it: reverted, unless ``--allow-unverified``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from faultlab.errors import FaultlabError, Refused
from faultlab.injectors.base import HandOver, Hooks, Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def when(ts: float | None) -> str:
    """``HH:MM:SS UTC (in Ns)`` for a unix time ``ts`` (s), wall clock in UTC and
    seconds from now; ``an unknown time`` without one."""
    if not ts:
        return "an unknown time"
    return f"{time.strftime('%H:%M:%S UTC', time.gmtime(ts))} (in {max(0.0, ts - time.time()):.0f}s)"


def commands_left(active, done: int | None) -> str:
    """The revert commands of ``active`` not yet run when ``done`` of them had run
    (None: unknown, all), as ``K of M revert command(s) not run: ARGV; ...`` (the
    first three shown)."""
    import shlex

    cmds = active.plan.revert
    rest = cmds[done:] if isinstance(done, int) else cmds
    shown = "; ".join(shlex.join(c.argv) for c in rest[:3]) + ("; ..." if len(rest) > 3 else "")
    return f"{len(rest)} of {len(cmds)} revert command(s) not run{': ' + shown if rest else ''}"


class SignalGuard(Hooks):
    """The lifecycle hooks of a foreground inject: records signals, says what it does
    with them (written with ``os.write``, safe inside a handler), raises HandOver on the
    third signal only while revert commands run. A context manager installing and
    restoring the handlers."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.count = 0
        self.stop = False
        self.now = "setup"
        self.done = self.total = 0
        self.handover_ok = False
        self.handed = False
        self._old: dict = {}

    def __enter__(self) -> "SignalGuard":
        self._old = {s: signal.signal(s, self._on_signal) for s in SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        # the process is about to exit with a code that tells the truth: a late signal
        # must not replace it with "killed by SIGTERM"
        self.now = "done"
        for s in self._old:
            signal.signal(s, signal.SIG_IGN)

    def say(self, msg: str) -> None:
        if not self.quiet:
            try:
                os.write(2, f"faultlab: {msg}\n".encode())
            except OSError:
                pass

    def _on_signal(self, signum, frame) -> None:
        self.count += 1
        name = signal.Signals(signum).name
        if self.now in ("revert", "check", "done"):
            if self.count >= 3 and self.handover_ok and not self.handed:
                self.handed = True
                raise HandOver()
            left = max(0, self.total - self.done)
            nxt = "once more hands the fault to its lease" if self.count >= 2 else "twice more hands the fault to its lease"
            if not self.handover_ok:
                nxt = "checking that nothing is left" if self.total and left == 0 else "starting"
            self.say(f"{name}: still reverting, {left} command(s) left ({nxt})")
            return
        if not self.stop:
            self.stop = True
            self.say(f"{name}: stopping: the fault is reverted once the current step ({self.now}) ends")
        else:
            self.say(f"{name}: still stopping; the revert starts once the current step ({self.now}) ends")

    def stop_requested(self) -> bool:
        return self.stop

    def phase(self, name: str) -> None:
        self.now = name

    def revert_progress(self, done: int, total: int, handover_ok: bool) -> None:
        self.done, self.total, self.handover_ok = done, total, handover_ok


def _verified(active) -> bool:
    return bool((active.evidence.get("verify") or {}).get("ok"))


def _vtext(active) -> str:
    from faultlab.evidence import verify_text

    return verify_text(active.evidence.get("verify"))


def _measured(active) -> str:
    from faultlab.evidence import verify_text

    return verify_text(active.evidence.get("verify")).split(": ", 1)[-1]


def outcome(active) -> tuple[int, str | None]:
    """(exit code, error line or None) for a fault after its revert."""
    st = active.status
    fid = active.fault_id
    lease = active.lease
    if st in ("reverted", "expired"):
        return 0, None
    if st == "handed-to-lease":
        pid = active.evidence.get("watchdog_pid")
        left = commands_left(active, active.evidence.get("revert_done"))
        dl = (lease.record or {}).get("deadline_ts") if lease else None
        if pid:
            return 1, (f"revert: {fid} handed to its lease on the third signal: its watchdog (PID {pid}) reverts it now, "
                       f"at the latest at the lease deadline {when(dl)}; left to it: {left}; `faultlab status` shows it until it is gone")
        return 1, f"revert: {fid} handed to its lease but no watchdog is alive: left {left} (run faultlab recover now)"
    left = "; ".join(active.evidence.get("left_behind") or ["unknown"])
    pid = lease.watchdog_pid() if lease else None
    dl = (lease.record or {}).get("deadline_ts") if lease else None
    ends = (f"its lease's watchdog (PID {pid}) reverts it again at {when(dl)}" if pid
            else "no watchdog is left to end it")
    return 1, f"revert: {fid} not fully reverted: left {left}; {ends} (`faultlab recover` retries now)"


def run_inject(inj, n, plan, *, duration_s: float, grace_s: float, detach: bool, as_json: bool,
               allow_unverified: bool, out, console) -> int:
    """Apply ``inj`` on node ``n`` and hold it (see the module docstring); returns the
    exit code. Errors are printed as one line on stderr."""
    from faultlab import injectors

    with SignalGuard(quiet=as_json) as guard:
        try:
            active = injectors.apply(inj, duration_s, grace_s=0.0 if detach else grace_s, hooks=guard)
        except Interrupted as e:
            act = getattr(e, "active", None)
            if act is None:
                guard.say("interrupted before anything was applied")
                return 0
            return _finish(act, None, guard, out, as_json, interrupted=True)
        except FaultlabError as e:
            act = getattr(e, "active", None)
            code, msg = outcome(act) if act is not None else (0, None)
            if act is not None and code == 0:
                msg = f"what was applied of {act.fault_id} is reverted: nothing is left"
            print(f"faultlab: error: {e}" + (f"; {msg}" if msg else ""), file=sys.stderr)
            return code or getattr(e, "exit_code", 1)
        info = _info(active, inj, n, plan)
        if not _verified(active) and not allow_unverified:
            active.revert(guard)
            code, msg = outcome(active)
            info["status"] = active.status
            if as_json:
                out.print_json(json.dumps(info, default=str))
            err = Refused(f"{active.fault_id} was not in force on {n.describe()} ({plan.target}): measured {_measured(active)}; "
                          f"{'it was reverted' if code == 0 else msg}", field="verify",
                          fix="check the target and privileges; --allow-unverified keeps a fault verify cannot confirm")
            print(f"faultlab: error: {err}", file=sys.stderr)
            return 3 if code == 0 else code
        if detach:
            info["status"] = "active"
            if as_json:
                out.print_json(json.dumps(info, default=str))
            else:
                out.print(f"injected {active.fault_id} ({inj.type} on {n.describe()}, {plan.target}); {_vtext(active)}; "
                          f"the lease reverts it at {when(info['deadline_ts'])}; `faultlab revert {active.fault_id}` ends it sooner", markup=False)
            return 0
        if not as_json:
            console.print(f"injected {active.fault_id} ({inj.type} on {n.describe()} {plan.target}) for {duration_s:g}s; "
                          f"{_vtext(active)}; Ctrl-C reverts", markup=False)
        end = active.start_ts + duration_s
        next_check = time.time() + 1.0
        while time.time() < end and not guard.stop and not active.lease.expired():
            time.sleep(min(0.2, max(0.0, end - time.time())))
            if time.time() < next_check:
                continue
            next_check = time.time() + 1.0  # once a second (a remote node's /proc is a command away)
            try:
                gone = inj.target_gone(active.facts)
            except Exception:  # a check must never end the hold by itself
                gone = None
            if gone:  # nothing left to slow: end it now, and say so (H10 probe G)
                active.evidence["target_gone"] = {"why": gone, "ts": time.time(), "after_s": round(time.time() - active.start_ts, 1)}
                if not as_json:
                    console.print(f"{active.fault_id}: {gone} {active.evidence['target_gone']['after_s']:g}s into the fault; ending it", markup=False)
                break
        return _finish(active, info, guard, out, as_json, interrupted=guard.stop)


def _info(active, inj, n, plan) -> dict:
    return {"fault_id": active.fault_id, "type": inj.type, "node": n.describe(), "target": plan.target, "params": inj.params,
            "verify": active.evidence.get("verify"), "deadline_ts": active.lease.record["deadline_ts"]}


def _finish(active, info, guard: SignalGuard, out, as_json: bool, *, interrupted: bool) -> int:
    if interrupted:
        guard.say(f"reverting {active.fault_id} ({len(active.plan.revert)} command(s))")
    status = active.revert(guard)
    if status == "handed-to-lease":
        active.evidence["revert_done"] = guard.done
    code, msg = outcome(active)
    info = dict(info or {"fault_id": active.fault_id, "type": active.injector.type})
    info.update(status=status, end_ts=active.end_ts, evidence=active.evidence)
    if as_json:
        out.print_json(json.dumps(info, default=str))
    else:
        out.print(f"{active.fault_id}: {status}", markup=False)
    if msg:
        print(f"faultlab: error: {msg}", file=sys.stderr)
    return code


# -- status / revert / recover over the whole host -------------------------------------

def status_rows() -> tuple[list[dict], list[str]]:
    from faultlab.lifecycle.hostview import host_view

    views, problems = host_view()
    return [v.row() for v in views], problems


def print_status(rows: list[dict], problems: list[str], out) -> None:
    for p in problems:
        print(f"faultlab: warning: {p} (never acted on)", file=sys.stderr)
    if not rows:
        out.print("no faults in force", markup=False)
    from faultlab.lifecycle.hostview import lease_folders

    folders = set(lease_folders())
    for r in rows:
        who = "" if r["uid"] in (None, os.geteuid()) else f"  (uid {r['uid']}{'' if r['can_revert'] else ': not yours to revert'})"
        if r["orphan_objects"]:
            out.print(f"{r['fault_id']}  {r['type']}  NO LEASE: {', '.join(r['orphan_objects'])}  (faultlab recover removes it){who}", markup=False)
            continue
        held = "held by its controller" if r["controller_alive"] else "left to its lease"
        wd = f"watchdog reverts it at the latest in {r['remaining_s']}s" if r["watchdog_alive"] else "WATCHDOG GONE: run faultlab recover"
        rec = "" if r["record"] else "  (lease record lost: the watchdog still ends it)"
        if r["record"] and r["record"] not in folders:  # another FAULTLAB_LEASE_DIR's
            rec = f"  (record in {r['record']})"
        out.print(f"{r['fault_id']}  {r['type']}  {r['node'] or '-'}  {r['target'] or '-'}  {wd}  {held}{rec}{who}", markup=False)


def _testbed_controller_alive(tb_id: str) -> bool:
    """Whether the controller of testbed ``tb_id`` still runs, by its state file (the
    PID and start time it recorded: a netns or a docker/ssh testbed); False when no
    trusted state file names it."""
    from faultlab.nodes.docker_testbed import list_docker_testbeds
    from faultlab.nodes.testbed import _controller_alive, load_states

    for st in load_states()[0]:
        if st.id == tb_id:
            return _controller_alive(st.pid, st.starttime)
    for st in list_docker_testbeds():
        if st["id"] == tb_id:
            return _controller_alive(st["pid"], st.get("starttime"))
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
    from faultlab.lifecycle.hostview import host_view, revert_view
    from faultlab.lifecycle.lease import open_lease_dir
    from faultlab.nodes import LocalNode

    try:  # this user's lease folder must be trusted before anything is run from it
        open_lease_dir(LocalNode("local"), create=False).close()
    except FileNotFoundError:
        pass
    views, _ = host_view()
    done, refused, held = [], [], []
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
        else:
            row["left"] = revert_view(v)
            done.append(row)
    return done, refused, held


def report_held(held: list[dict]) -> None:
    """One stderr line naming the faults left alone because a live controller holds
    them (not an error)."""
    if held:
        who = ", ".join(f"{h['fault_id']} (controller PID {h['controller_pid'] or '?'})" for h in held)
        print(f"faultlab: note: left {len(held)} fault(s) alone that a running faultlab still holds: {who} "
              f"(give the id to faultlab revert to end one now)", file=sys.stderr)


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
    return f"no lease is left to retry it: fix the cause and run faultlab recover (or remove what is listed by hand)"


def report_reverts(done: list[dict], refused: list[dict], fault_id: str | None, out, as_json: bool, *, quiet_empty: bool = False) -> int:
    """Print the outcome of ``revert_faults``; returns the exit code (1 something left,
    3 a fault of another user, 0 otherwise)."""
    if as_json:
        out.print_json(json.dumps(done + [{**r, "refused": "owned by another user"} for r in refused]))
    else:
        if not done and not refused and not quiet_empty:
            out.print(f"no fault {fault_id + ' ' if fault_id else ''}in force on this host (already reverted, expired, or never injected: see faultlab status)", markup=False)
        for d in done:
            out.print(f"{d['fault_id']}: {'reverted' if not d['left'] else 'NOT reverted: left ' + '; '.join(d['left'])}", markup=False)
    code = 0
    for d in done:
        if d["left"]:
            print(f"faultlab: error: revert: {d['fault_id']} not fully reverted (see above); {_what_next(d)}", file=sys.stderr)
            code = 1
    if refused:
        who = ", ".join(f"{r['fault_id']} (uid {r['uid']})" for r in refused)
        print(f"faultlab: error: revert: cannot revert {len(refused)} fault(s) of another user: {who} "
              f"(run faultlab as root or as that user)", file=sys.stderr)
        code = 3
    return code
