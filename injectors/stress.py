"""Workers beside a target, the shared machinery of the stressor fault types:
``cpu-contention --mode stress`` (``faultlab.injectors.cpu_stress``) and ``mem-bw``
(``faultlab.injectors.mem_bw``).

Both start ``workers`` processes on the node, next to the target processes rather than
inside them, each pinned to one of the CPUs the targets may run on (the union of their
``Cpus_allowed_list`` in /proc/PID/status; worker *i* takes CPU ``cpus[i % len]``).
The worker program has two kinds: ``cpu`` (a busy loop) and ``mem`` (copies one half of
a buffer onto the other and back, streaming to and from DRAM).

Workers are ``python3 -c`` programs (python3 is the only requirement on the node
besides ``sh``): each pins itself with ``os.sched_setaffinity`` (and exits at once if
it cannot be pinned) and **exits by itself at its deadline** (``duration_s`` after the
probe), so workers end even when the controller is SIGKILLed and the lease watchdog
fails too. A detached ``sh`` starts them (``nohup``) and writes each worker's PID to
the pidfile ``<lease dir>/<fault_id>.<kind>.pid`` as it starts it.

Revert kills exactly those PIDs: a PID is signalled (SIGKILL) only while it runs as
the user who started the workers (``procowner.MINE_SH``) and its
``/proc/PID/cmdline`` still holds the worker marker followed by this fault's pidfile
path, so a PID reused by another process is never touched; then the pidfile is
removed. ``reverted()`` scans /proc for any process of that user still carrying the
marker and pidfile (another user's process with that argv is a look-alike, not a
worker left behind).
"""

from __future__ import annotations

import json
import os
import time

from faultlab import procid
from faultlab.errors import BadInput, NodeError, Refused
from faultlab.nodes import Node
from faultlab.injectors.base import Cmd, Injector, Plan
from faultlab.injectors.params import Param
from faultlab.lifecycle.procowner import MINE_SH


# argv: -c MARK PIDFILE CPU DEADLINE KIND BUFFER_BYTES
WORKER_PY = r"""
import os, sys, time
mark, pidfile, cpu, deadline, kind, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], int(sys.argv[6])
try:
    os.sched_setaffinity(0, {cpu})
except (AttributeError, OSError):
    sys.exit(3)
if kind == "mem":
    half = size // 2
    buf = memoryview(bytearray(2 * half))
    while time.time() < deadline:
        buf[half:] = buf[:half]
        buf[:half] = buf[half:]
else:
    while time.time() < deadline:
        for _ in range(100000):
            pass
"""

# $1 worker code, $2 pidfile, $3 marker, $4 deadline, $5 kind, $6 buffer bytes, $7... one
# CPU a worker. (Pidfile before marker here, so this short-lived starter never matches
# the "MARK PIDFILE" pattern that identifies a worker.)
START_SH = r"""
code=$1; pf=$2; mark=$3; dl=$4; kind=$5; size=$6
shift 6
: > "$pf" || exit 1
for cpu in "$@"; do
  nohup python3 -I -c "$code" "$mark" "$pf" "$cpu" "$dl" "$kind" "$size" </dev/null >/dev/null 2>&1 &
  echo $! >> "$pf"
done
exit 0
"""

# $1 pidfile, $2 marker: kill each recorded PID that runs as this user and whose cmdline
# still holds "MARK PIDFILE", wait (<= 3 s) until none does, remove the pidfile.
STOP_SH = MINE_SH + r"""
pf=$1; mark=$2
[ -f "$pf" ] || exit 0
ours() { mine "$1" || return 1; c=$(tr '\0' ' ' 2>/dev/null < "/proc/$1/cmdline") || return 1; case "$c" in *" $mark $pf "*) return 0;; esac; return 1; }
for p in $(cat "$pf"); do ours "$p" && kill -KILL "$p" 2>/dev/null; done
i=0
while [ $i -lt 60 ]; do
  left=0
  for p in $(cat "$pf"); do ours "$p" && left=1; done
  [ $left = 0 ] && break
  sleep 0.05; i=$((i+1))
done
rm -f "$pf"
exit 0
"""

# $1 pidfile, $2 marker: print the PID of every process of this user whose cmdline
# holds "MARK PIDFILE" (another user's process with that argv is not a worker: the
# workers run as the user who started them).
SCAN_SH = MINE_SH + r"""
pf=$1; mark=$2
for d in /proc/[0-9]*; do
  c=$(tr '\0' ' ' 2>/dev/null < "$d/cmdline") || continue
  case "$c" in *" $mark $pf "*) mine "${d#/proc/}" && echo "${d#/proc/}";; esac
done
exit 0
"""


def parse_cpu_list(text: str) -> list[int]:
    """``"0-3,8,10-11"`` (the kernel's list format) -> [0, 1, 2, 3, 8, 10, 11]."""
    out: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return sorted(out)


def parse_workers(text, field: str = "--workers") -> int:
    """A positive whole number of worker processes (at most 1024). Raises BadInput."""
    s = str(text).strip()
    if not s.isdigit() or int(s) < 1:
        raise BadInput(f"{text!r} is not a positive whole number", field=field, fix="give a number of worker processes, e.g. --workers 2")
    if int(s) > 1024:
        raise BadInput(f"{text!r} workers is too many", field=field, fix="give at most 1024")
    return int(s)


#: the worker count, a parameter of both stressors
WORKERS = Param("workers", "number of busy workers (cpu-contention: with --mode stress)", "N", parse_workers,
                bounds=(1, 1024), kind="integer")


def _proc_cpu_s(node: Node, pid: int) -> float | None:
    """utime + stime of ``pid`` in seconds (None when gone)."""
    try:
        f = procid.stat_fields(node.read_file(f"/proc/{pid}/stat"))
    except OSError:
        return None
    return None if f is None else (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def busy_sentence(evidence: dict) -> str:
    """The workers' verify evidence in words: how many were seen busy."""
    busy = sum(1 for r in (evidence.get("worker_cpu_rate") or {}).values() if (r or 0) > 0.05)
    return f"{busy} of {len(evidence['workers'])} pinned stress worker(s) seen busy (> 5% of a CPU)"


class Workers(Injector):
    """Shared machinery of the stressors: pinned, self-ending, PID-recorded worker
    processes beside the targets (a subclass sets ``kind``, ``marker``, ``mode``)."""

    kind: str = "cpu"  # "cpu" or "mem"; worker program mode and pidfile suffix
    marker: str = "faultlab-stress"
    mode: str | None = None  # params["mode"] when the fault type has modes

    def __init__(self, node: Node, pids: list[int], duration_s: float, *, workers: int | None = None,
                 fault_id: str | None = None, label: str | None = None):
        super().__init__(node, fault_id)
        if not pids:
            raise BadInput("no target process", field="--target", fix="give PIDs, e.g. --target 1234,5678")
        if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
            raise BadInput(f"{workers!r} is not a positive whole number", field="--workers", fix="give e.g. --workers 2")
        if not duration_s or duration_s <= 0:
            raise BadInput(f"{duration_s!r} is not positive", field="--duration", fix="give e.g. --duration 30s")
        self.pids = [int(p) for p in pids]
        self.duration_s = float(duration_s)
        self.workers_asked = workers
        self.label = label
        self.cpus: list[int] = []  # known after probe
        self.buffer_bytes = 0

    # -- what subclasses choose ------------------------------------------------------
    def default_workers(self, cpus: list[int]) -> int:
        return len(cpus)

    @property
    def workers(self) -> int:
        return self.workers_asked if self.workers_asked is not None else self.default_workers(self.cpus or [0])

    @property
    def target(self) -> str:
        return self.label or "pid:" + ",".join(map(str, self.pids))

    @property
    def params(self) -> dict:
        p = {"pids": self.pids, "workers": self.workers, "cpus": self.cpus}
        if self.mode:
            p["mode"] = self.mode
        if self.kind == "mem":
            p["buffer_bytes"] = self.buffer_bytes
        return p

    def _pidfile(self) -> str:
        return str(self.node.lease_dir() / f"{self.fault_id}.{self.kind}.pid")

    def _check_conflicts(self) -> None:
        d = self.node.lease_dir()
        if not d.exists():
            return
        for f in d.glob(f"*.{self.kind}.pid"):
            lease = f.with_name(f.name[: -len(f".{self.kind}.pid")] + ".json")
            try:
                rec = json.loads(lease.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            params = rec.get("params") or {}
            if rec.get("fault_type") == self.type and params.get("mode") == self.mode:
                both = sorted(set(params.get("pids") or []) & set(self.pids))
                if both:
                    raise Refused(f"process {both[0]} already has faultlab {self.type} workers beside it ({rec.get('fault_id')})", field="--target", fix="revert that fault first: faultlab status")

    def probe(self) -> dict:
        if not self.node.has_program("python3"):
            raise NodeError(f"python3 not found on node {self.node.name}", field="node", fix="install python3 there (the workers are python3 programs)")
        cpus: set[int] = set()
        for pid in self.pids:
            try:
                status = self.node.read_file(f"/proc/{pid}/status")
            except OSError:
                raise BadInput(f"no process {pid} on node {self.node.name}", field="--target", fix="give the PID of a running process") from None
            for line in status.splitlines():
                if line.startswith("Cpus_allowed_list:"):
                    cpus.update(parse_cpu_list(line.split(":", 1)[1]))
        if not cpus:
            raise NodeError(f"no Cpus_allowed_list for {self.pids} on node {self.node.name}", field="--target")
        self._check_conflicts()
        self.cpus = sorted(cpus)
        facts = {
            "cpus": self.cpus,
            "worker_cpus": [self.cpus[i % len(self.cpus)] for i in range(self.workers)],
            "pidfile": self._pidfile(),
            "deadline_ts": int(time.time() + self.duration_s + 0.999),
            "target_cpu_rate_before": self._rates(self.pids, 0.5),
        }
        facts.update(self._probe_more(facts))
        return facts

    def _probe_more(self, facts: dict) -> dict:
        return {}

    def plan(self, facts: dict) -> Plan:
        pf = facts["pidfile"]
        start = Cmd(
            ("sh", "-c", START_SH, "faultlab-start", WORKER_PY, pf, self.marker, str(facts["deadline_ts"]), self.kind,
             str(facts.get("buffer_bytes", 0)), *map(str, facts["worker_cpus"])),
            "host", f"{len(facts['worker_cpus'])} {self.kind} workers pinned to CPUs {facts['worker_cpus']}, ending by themselves at {facts['deadline_ts']}",
        )
        stop = Cmd(("sh", "-c", STOP_SH, "sh", pf, self.marker), "host", "kill the recorded workers (cmdline checked)")
        return Plan(self.fault_id, self.type, self.node.name, self.target, [start], [stop], self._verify_lines(facts))

    def _verify_lines(self, facts: dict) -> list[str]:
        return [f"each worker in {facts['pidfile']} is alive, its cmdline ours, pinned to its CPU"]

    # -- evidence ------------------------------------------------------------------
    def _recorded(self, facts: dict) -> list[int]:
        try:
            return [int(x) for x in self.node.read_file(facts["pidfile"]).split()]
        except (OSError, ValueError):
            return []

    def _ours(self, facts: dict, pid: int) -> bool:
        try:
            args = self.node.read_file(f"/proc/{pid}/cmdline").split("\0")
        except OSError:
            return False
        return any(a == self.marker and i + 1 < len(args) and args[i + 1] == facts["pidfile"] for i, a in enumerate(args))

    def _workers_state(self, facts: dict) -> list[dict]:
        out = []
        for i, pid in enumerate(self._recorded(facts)):
            want = facts["worker_cpus"][i] if i < len(facts["worker_cpus"]) else None
            st = {"pid": pid, "cpu": want, "alive": self._ours(facts, pid), "pinned": False, "rss_bytes": 0}
            if st["alive"]:
                try:
                    for line in self.node.read_file(f"/proc/{pid}/status").splitlines():
                        if line.startswith("Cpus_allowed_list:"):
                            st["pinned"] = parse_cpu_list(line.split(":", 1)[1]) == [want]
                        elif line.startswith("VmRSS:"):
                            st["rss_bytes"] = int(line.split()[1]) * 1024
                except OSError:
                    st["alive"] = False
            out.append(st)
        return out

    def _ready(self, st: dict, facts: dict) -> bool:
        return st["alive"] and st["pinned"]

    def _wait_ready(self, facts: dict, wait_s: float) -> list[dict]:
        deadline = time.time() + wait_s
        while True:
            states = self._workers_state(facts)
            if len(states) == len(facts["worker_cpus"]) and all(self._ready(s, facts) for s in states):
                return states
            if time.time() >= deadline:
                return states
            time.sleep(0.05)

    def _rates(self, pids: list[int], window_s: float) -> dict[str, float | None]:
        """CPU-seconds per second of each PID over ``window_s``."""
        c0 = {p: _proc_cpu_s(self.node, p) for p in pids}
        t0 = time.time()
        time.sleep(window_s)
        dt = time.time() - t0
        out = {}
        for p in pids:
            c1 = _proc_cpu_s(self.node, p)
            out[str(p)] = None if c0[p] is None or c1 is None else round((c1 - c0[p]) / dt, 3)
        return out

    def verify(self, facts: dict, wait_s: float = 8.0, window_s: float = 1.0) -> dict:
        states = self._wait_ready(facts, wait_s)
        alive = [s["pid"] for s in states if s["alive"]]
        rates = self._rates(alive + self.pids, window_s)
        busy = [p for p in alive if (rates.get(str(p)) or 0) > 0.05]
        ok = len(states) == len(facts["worker_cpus"]) and all(self._ready(s, facts) for s in states) and len(busy) == len(states)
        return {
            "workers": states,
            "worker_cpu_rate": {str(p): rates[str(p)] for p in alive},
            "target_cpu_rate_before": facts.get("target_cpu_rate_before"),
            "target_cpu_rate_during": {str(p): rates[str(p)] for p in self.pids},
            "ok": ok,
        }

    def final_evidence(self, facts: dict) -> dict:
        return {"workers": self._workers_state(facts)}

    def reverted(self, facts: dict) -> list[str]:
        left = []
        if self.node.exists(facts["pidfile"]):
            left.append(f"pidfile {facts['pidfile']}")
        cp = self.node.run(["sh", "-c", SCAN_SH, "sh", facts["pidfile"], self.marker], timeout=30)
        left += [f"worker process {p}" for p in cp.stdout.split()]
        return left
