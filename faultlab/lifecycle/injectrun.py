"""The CLI's ``inject`` run: one fault in the foreground or detached, and the signal
handling that makes a revert uninterruptible.

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
import shlex
import signal
import sys
import time

from faultlab import injectors
from faultlab.errors import FaultlabError, Refused, printable
from faultlab.evidence import verify_text
from faultlab.injectors.base import HandOver, Hooks, Interrupted
from faultlab.timefmt import when

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def commands_left(active, done: int | None) -> str:
    """The revert commands of ``active`` not yet run when ``done`` of them had run
    (None: unknown, all), as ``K of M revert command(s) not run: ARGV; ...`` (the
    first three shown)."""
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
    return verify_text(active.evidence.get("verify"))


def _measured(active) -> str:
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
            print(printable(f"faultlab: error: {e}" + (f"; {msg}" if msg else "")), file=sys.stderr)
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
            print(f"faultlab: error: {err}", file=sys.stderr)  # a FaultlabError: printable
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
            if gone:  # nothing left to slow: end it now, and say so
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
        print(printable(f"faultlab: error: {msg}"), file=sys.stderr)
    return code
