"""``process-pause``: a SIGSTOP/SIGCONT duty cycle on a target process.

Intermittent stalls of one rank, as JIT-compile stalls or page-cache thrashing show
them. A detached ``sh`` loop on the node (``kill``, ``sleep``, ``date``: sh and
coreutils only) stops the target for ``pause_s`` seconds out of every ``period_s``,
until its own deadline; it always ends with SIGCONT (on its deadline, on SIGTERM or
SIGINT). The revert stops the loop by the PID it wrote in its pidfile and sends
SIGCONT to the target, so even a loop killed with SIGKILL leaves no stopped process.

Identity: every process is named by PID *and* start time (field 22 of
``/proc/PID/stat``), rechecked right before each signal: the loop checks the target's
before each SIGSTOP and SIGCONT, the pidfile holds ``LOOP_PID LOOP_STARTTIME`` (digits
only, anything else is ignored) and the revert signals the loop only when that PID
still has that start time and the loop's cmdline (``faultlab-pause PIDFILE``), so a
stale pidfile never signals a process that reused the PID, even one started in the
same clock tick (start times count 10 ms ticks). Every ``/proc/PID/stat`` is read by
``faultlab.procid`` (``stat_fields`` here, ``STAT_SH`` in the loop and the revert
lines), after the *last* ``)``: the target names itself (``prctl(PR_SET_NAME)``), and
a name such as ``x) T 1 (`` must not shift the fields. The loop runs in its own
session (``setsid``): a SIGKILL of faultlab's process group (a terminal's, a CI
runner's) cannot kill it half-way through a stop and leave the target stopped; it
still ends itself at the deadline with a SIGCONT.

Resume: every SIGCONT that ends a stop (the loop's after each pause, at its deadline
and on SIGTERM; the revert's, which the lease watchdog runs too) is
``procid.STAT_SH``'s ``proc_resume``: repeated (at most ``procid.RESUME_TRIES``, 50 ms
apart) until the target is seen in a state other than ``T``. A target that stays
stopped ends the loop and fails the revert line with one line saying so, so the
revert reports ``revert-failed`` and the lease is kept, never "reverted".

Limits: ``pause_s >= 10 ms`` and ``period_s >= 100 ms`` (MIN_PAUSE_S, MIN_PERIOD_S).
Each period the loop starts a few short processes (``date``, two ``sleep``), so a
shorter period is not kept as asked, and ``verify`` samples the target's state
every 10 ms at most, so a shorter stop may never be seen.

Severity: the paused fraction ``pause_s / period_s``. No root needed for one's own
processes.
"""

from __future__ import annotations

import time

from faultlab import procid
from faultlab.errors import BadInput, Refused
from faultlab.nodes import Node
from faultlab.units import parse_duration
from faultlab.injectors.base import Cmd, Injector, Plan
from faultlab.injectors.params import Param, parse_pids
from faultlab.injectors.registry import register

#: the shortest stop and period the loop can keep (see the module's docstring)
MIN_PAUSE_S = 0.01
MIN_PERIOD_S = 0.1

# $1 pidfile, $2 target pid, $3 pause s, $4 run s, $5 deadline (unix s), $6 the
# target's start time (field 22 of /proc/PID/stat, read by procid.STAT_SH's proc_stat):
# the loop stops at once if the PID now belongs to another process (the target exited
# and the PID was reused). Every SIGCONT that ends a stop is proc_resume's: repeated
# until the target is seen running; a target it cannot resume ends the loop (no
# further SIGSTOP), and the revert's CONT_SH then says so. The trap names the pidfile,
# the target and its start time by variables set once: a trap runs where the signal
# finds the shell, and inside proc_stat or proc_resume "$1" "$2" "$6" are that
# function's (the target's PID, a state letter): the revert's SIGTERM landing there
# would have root run `rm -f PID` in the folder faultlab was started in.
LOOP_SH = procid.STAT_SH + r"""
lp_file=$1 lp_pid=$2 lp_start=$6
proc_stat $$; echo "$$ $ps_start" > "$1"
sp=""
trap '[ -n "$sp" ] && kill "$sp" 2>/dev/null; proc_resume "$lp_pid" "$lp_start"; rm -f "$lp_file"; exit 0' TERM INT HUP
while [ "$(date +%s)" -lt "$5" ]; do
  proc_stat "$2" && [ "$ps_start" = "$6" ] || break
  kill -STOP "$2" 2>/dev/null || break
  sleep "$3" & sp=$!; wait "$sp"
  proc_resume "$2" "$6" || break
  sleep "$4" & sp=$!; wait "$sp"
done
proc_resume "$2" "$6"
rm -f "$1"
"""
# resume the target only if the PID still belongs to it ($1 pid, $2 start time); a
# target still stopped after procid.RESUME_TRIES SIGCONTs fails the line with one line
# on stderr (the revert then reports it and keeps the lease)
CONT_SH = procid.STAT_SH + (
    'proc_resume "$1" "$2" && exit 0; '
    'echo "process $1 is still stopped (state $ps_state) after $_ps_n SIGCONTs; resume it: kill -CONT $1" >&2; exit 1')
# the loop in a session of its own (util-linux setsid -f: fork, new session); then wait
# (<= 2 s) until its pidfile is written: setsid -f returns before the loop runs, and a
# revert in that window (a SIGTERM during inject) found no pidfile, stopped nothing,
# and the loop went on stopping the target until its deadline
START_SH = ('setsid -f sh -c "$1" faultlab-pause "$2" "$3" "$4" "$5" "$6" "$7" </dev/null >/dev/null 2>&1 || exit 1; '
            'i=0; while [ ! -s "$2" ] && [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); done; exit 0')
# stop the loop named in its pidfile ("PID STARTTIME", digits only) only while that PID
# has that start time *and* its cmdline is this loop's (``... faultlab-pause PIDFILE
# ...``: start times are clock ticks, 10 ms, so two processes started in one tick share
# one), and wait (<= 2 s) until it is gone (a zombie or a PID that is no longer the loop
# counts as gone: an init that reaps slowly must not stall the revert)
STOP_SH = procid.STAT_SH + (
    '[ -f "$1" ] || exit 0; p=; s=; read -r p s _ < "$1"; '
    'case "$p" in ""|*[!0-9]*) rm -f "$1"; exit 0;; esac; case "$s" in ""|*[!0-9]*) rm -f "$1"; exit 0;; esac; '
    'loop() { c=$(tr "\\0" " " 2>/dev/null < "/proc/$p/cmdline") || return 1; '
    'case "$c" in *" faultlab-pause $1 "*) proc_stat "$p" && [ "$ps_start" = "$s" ];; *) return 1;; esac; }; '
    'loop "$1" && kill "$p" 2>/dev/null; i=0; '
    'while [ $i -lt 40 ]; do loop "$1" || break; '
    '[ "$ps_state" = Z ] && break; '
    'sleep 0.05; i=$((i+1)); done; rm -f "$1"; exit 0'
)


@register
class ProcessPause(Injector):
    """Stop ``pid`` for ``pause_s`` out of every ``period_s`` seconds until the fault's
    deadline (``duration_s`` from inject). Raises BadInput for a missing PID or
    pause_s >= period_s; Refused when a faultlab pause already targets the PID."""

    type = "process-pause"
    PARAMS = (
        Param("pause", "stop time per period, e.g. 200ms (at least 10ms)", "DURATION", parse_duration, bounds=(MIN_PAUSE_S, None), required=True),
        Param("period", "period, e.g. 1s (at least 100ms)", "DURATION", parse_duration, bounds=(MIN_PERIOD_S, None), required=True),
    )
    targets = "rank"
    target_help = "PID"
    color = "#a8c686"

    @classmethod
    def from_options(cls, node, *, target, duration_s, opts, fault_id=None, force=False):
        pause = cls.param("pause").read(opts, cls.type)
        period = cls.param("period").read(opts, cls.type)
        pids = parse_pids(target)
        if len(pids) != 1:
            raise BadInput("process-pause takes one PID", field="--target", fix="give one PID")
        return cls(node, pids[0], pause, period, duration_s, fault_id=fault_id)

    def __init__(self, node: Node, pid: int, pause_s: float, period_s: float, duration_s: float, *, fault_id: str | None = None, label: str | None = None):
        super().__init__(node, fault_id)
        if not (0 < pause_s < period_s):
            raise BadInput(f"pause {pause_s}s in a {period_s}s period", field="--pause", fix="give a pause shorter than --period, e.g. --pause 200ms --period 1s")
        if pause_s < MIN_PAUSE_S:
            raise BadInput(f"pause {pause_s * 1e3:g}ms is below {MIN_PAUSE_S * 1e3:g}ms", field="--pause",
                           fix=f"give at least {MIN_PAUSE_S * 1e3:g}ms, e.g. --pause 50ms: verify cannot see a shorter stop")
        if period_s < MIN_PERIOD_S:
            raise BadInput(f"period {period_s * 1e3:g}ms is below {MIN_PERIOD_S * 1e3:g}ms", field="--period",
                           fix=f"give at least {MIN_PERIOD_S * 1e3:g}ms, e.g. --period 300ms: the loop starts ~8 processes a period")
        self.pid, self.pause_s, self.period_s, self.duration_s = int(pid), float(pause_s), float(period_s), float(duration_s)
        self.label = label

    @classmethod
    def support(cls, node: dict) -> dict[str, tuple[bool, str]]:
        return {cls.type: (True, "SIGSTOP/SIGCONT: root, or the target's own user")}

    @classmethod
    def verify_sentence(cls, evidence: dict) -> str:
        return (f"target seen stopped (state T) {'within' if evidence['stopped_seen'] else 'NOT within'} "
                f"{evidence.get('samples', 0)} samples of /proc/PID/stat")

    @property
    def target(self) -> str:
        return self.label or f"pid:{self.pid}"

    @property
    def params(self) -> dict:
        return {"pid": self.pid, "pause_s": self.pause_s, "period_s": self.period_s}

    #: what ``severity`` measures, with its unit (the dataset card lists it per fault type)
    severity_unit = "fraction (0..1) of each period the target is stopped"

    @property
    def severity(self) -> float:
        return self.pause_s / self.period_s

    def _pidfile(self) -> str:
        return str(self.node.lease_dir() / f"{self.fault_id}.pause.pid")

    def probe(self) -> dict:
        if not self.node.exists(f"/proc/{self.pid}"):
            raise BadInput(f"no process {self.pid} on node {self.node.name}", field="--target", fix="give the PID of a running process")
        fields = self._stat()
        if fields is None:
            raise BadInput(f"no process {self.pid} on node {self.node.name}", field="--target", fix="give the PID of a running process")
        if fields[0] in ("T", "t"):
            raise Refused(f"process {self.pid} is already stopped (state {fields[0]}); the pause cycle would resume it",
                          field="--target", fix="continue it first (kill -CONT) or pick another process")
        starttime = fields[19]
        for f in self.node.lease_dir().glob("*.pause.pid") if self.node.lease_dir().exists() else []:
            # a loop of another fault stopping the same process
            lease = f.with_name(f.name.replace(".pause.pid", ".json"))
            if lease.exists() and f'"pid": {self.pid}' in lease.read_text():
                raise Refused(f"process {self.pid} already has a faultlab pause ({lease.stem})", field="--target", fix="revert it first")
        return {"pidfile": self._pidfile(), "deadline_ts": int(time.time() + self.duration_s), "starttime": starttime}

    def plan(self, facts: dict) -> Plan:
        pidfile = facts["pidfile"]
        run_s = self.period_s - self.pause_s
        inject = [Cmd(("sh", "-c", START_SH, "sh", LOOP_SH, pidfile, str(self.pid), f"{self.pause_s:g}", f"{run_s:g}", str(facts["deadline_ts"]), facts["starttime"]), "host", "duty-cycle loop")]
        revert = [
            Cmd(("sh", "-c", STOP_SH, "sh", pidfile), "host", "stop the loop"),
            Cmd(("sh", "-c", CONT_SH, "sh", str(self.pid), facts["starttime"]), "host", "never leave it stopped"),
        ]
        return Plan(self.fault_id, self.type, self.node.name, self.target, inject, revert, ["target is seen in state T (stopped) within a period"])

    def _stat(self) -> list[str] | None:
        """The target's ``/proc/PID/stat`` fields from field 3 on (``procid.stat_fields``),
        read on the node; None when it is gone."""
        try:
            return procid.stat_fields(self.node.read_file(f"/proc/{self.pid}/stat"))
        except OSError:
            return None

    def _state(self) -> str | None:
        fields = self._stat()
        return fields[0] if fields else None

    def verify(self, facts: dict) -> dict:
        deadline = time.time() + 2 * self.period_s + 1
        seen = []
        while time.time() < deadline:
            st = self._state()
            seen.append(st)
            if st == "T":
                break
            time.sleep(min(0.01, self.pause_s / 4))
        return {"stopped_seen": "T" in seen, "samples": len(seen), "ok": "T" in seen}

    def target_gone(self, facts: dict) -> str | None:
        """The target exited (or its PID now names another process): the loop has
        stopped itself (it checks the start time before every signal)."""
        now = self._stat()
        if now is None or now[19] != facts["starttime"] or now[0] in ("Z", "X"):
            return f"process {self.pid} exited"
        return None

    def reverted(self, facts: dict) -> list[str]:
        left = []
        if self.node.exists(facts["pidfile"]):
            left.append(f"pause loop pidfile {facts['pidfile']}")
        if self._state() == "T":
            left.append(f"process {self.pid} stopped")
        return left
