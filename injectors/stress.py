"""Stressors beside a target: ``cpu-contention --mode stress`` and ``mem-bw``.

Both start ``workers`` processes on the node, next to the target processes rather than
inside them, each pinned to one of the CPUs the targets may run on (the union of their
``Cpus_allowed_list`` in /proc/PID/status; worker *i* takes CPU ``cpus[i % len]``):

- ``CpuStress`` (``cpu-contention --mode stress``): each worker is a busy loop, so a
  CPU-bound target sharing a CPU with one worker gets about half of it (Linux CFS
  shares a CPU fairly between runnable tasks of equal weight).
- ``MemBw`` (``mem-bw``): each worker copies one half of a buffer larger than the
  last-level cache (256 MiB, or 4x the LLC size when that is larger) onto the other
  and back, streaming to and from DRAM, so the target's memory-bound phases slow down.

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

Severity: ``CpuStress``: ``workers / len(cpus)`` (busy workers per target CPU);
``MemBw``: ``workers`` (streams beside the target).
"""

from __future__ import annotations

import json
import time

from faultlab import procid
from faultlab.errors import BadInput, NodeError, Refused
from faultlab.nodes import Node
from faultlab.injectors.base import Cmd, Injector, Plan
from faultlab.lifecycle.procowner import MINE_SH

MIB = 2**20
MEM_BUFFER_MIN = 256 * MIB

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


def _proc_cpu_s(node: Node, pid: int) -> float | None:
    """utime + stime of ``pid`` in seconds (None when gone)."""
    import os

    try:
        f = procid.stat_fields(node.read_file(f"/proc/{pid}/stat"))
    except OSError:
        return None
    return None if f is None else (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def memcpy_gbps(size: int = 64 * MIB, repeat: int = 3) -> float:
    """Copy bandwidth of this process in GB/s (bytes copied / s, best of ``repeat``
    copies of ``size`` bytes): cheap evidence, taken in the controller's process."""
    src = bytearray(size)
    dst = bytearray(size)
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        dst[:] = src
        best = min(best, time.perf_counter() - t)
    return size / best / 1e9


class _Workers(Injector):
    """Shared machinery: pinned, self-ending, PID-recorded worker processes."""

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


class CpuStress(_Workers):
    """``cpu-contention --mode stress``: ``workers`` busy-loop processes (default: one
    per CPU the targets may run on) pinned round-robin to the targets' CPUs for
    ``duration_s`` seconds. Raises BadInput for no PID, a missing process or a bad
    worker count; Refused when stress workers of another fault already sit beside a
    target; NodeError when the node has no python3."""

    type = "cpu-contention"
    options = frozenset({"--mode", "--workers"})
    kind = "cpu"
    marker = "faultlab-stress"
    mode = "stress"

    @classmethod
    def from_options(cls, node, *, target, duration_s, opts, fault_id=None, force=False):
        from faultlab.injectors import parse_pids

        if opts.get("--cpu-fraction") is not None:
            raise BadInput("does not apply to --mode stress", field="--cpu-fraction", fix="drop it, or use --mode quota")
        workers = parse_workers(opts["--workers"]) if opts.get("--workers") is not None else None
        return cls(node, parse_pids(target), duration_s, workers=workers, fault_id=fault_id)

    @property
    def severity(self) -> float:
        return self.workers / max(1, len(self.cpus) or self.workers)

    def _verify_lines(self, facts):
        return super()._verify_lines(facts) + ["workers burn CPU; the targets' CPU-s/s during the fault is recorded"]


class MemBw(_Workers):
    """``mem-bw``: ``workers`` memory-streaming processes (default: one per target CPU,
    at most 4) pinned round-robin to the targets' CPUs for ``duration_s`` seconds,
    each copying over a ``buffer_bytes`` buffer (256 MiB, or 4x the last-level cache
    when larger). Raises BadInput for no PID, a missing process or a bad worker
    count; Refused when the workers would take more than half of the node's
    MemAvailable, or mem-bw workers of another fault already sit beside a target;
    NodeError when the node has no python3."""

    type = "mem-bw"
    options = frozenset({"--workers"})
    kind = "mem"
    marker = "faultlab-membw"
    mode = None

    @classmethod
    def from_options(cls, node, *, target, duration_s, opts, fault_id=None, force=False):
        from faultlab.injectors import parse_pids

        workers = parse_workers(opts["--workers"]) if opts.get("--workers") is not None else None
        return cls(node, parse_pids(target), duration_s, workers=workers, fault_id=fault_id)

    def default_workers(self, cpus: list[int]) -> int:
        return min(len(cpus), 4)

    @property
    def severity(self) -> float:
        return float(self.workers)

    def _llc_bytes(self) -> int:
        best = 0
        for idx in range(6):
            base = f"/sys/devices/system/cpu/cpu{self.cpus[0] if self.cpus else 0}/cache/index{idx}"
            try:
                level = int(self.node.read_file(f"{base}/level").strip())
                size = self.node.read_file(f"{base}/size").strip()
            except (OSError, ValueError):
                continue
            mult = {"K": 1024, "M": MIB, "G": 2**30}.get(size[-1:], 1)
            try:
                n = int(size.rstrip("KMG")) * mult
            except ValueError:
                continue
            if level >= 2:
                best = max(best, n)
        return best

    def _probe_more(self, facts: dict) -> dict:
        llc = self._llc_bytes()
        self.buffer_bytes = max(MEM_BUFFER_MIN, 4 * llc)
        need = self.workers * self.buffer_bytes
        try:
            avail = next(int(line.split()[1]) * 1024 for line in self.node.read_file("/proc/meminfo").splitlines() if line.startswith("MemAvailable:"))
        except (OSError, StopIteration, ValueError):
            avail = None
        if avail is not None and need > avail / 2:
            raise Refused(
                f"{self.workers} workers x {self.buffer_bytes // MIB} MiB would take more than half of the {avail // MIB} MiB available on node {self.node.name}",
                field="--workers", fix="give fewer --workers",
            )
        ev = {"buffer_bytes": self.buffer_bytes, "llc_bytes": llc, "mem_available_bytes": avail}
        if self.node.kind in ("local", "netns"):  # same host as the controller: cheap in-process benchmark
            ev["memcpy_gbps_before"] = round(memcpy_gbps(), 2)
        return ev

    def _ready(self, st: dict, facts: dict) -> bool:
        return st["alive"] and st["pinned"] and st["rss_bytes"] >= 0.9 * facts["buffer_bytes"]

    def _verify_lines(self, facts):
        return super()._verify_lines(facts) + [f"each worker holds its {facts['buffer_bytes'] // MIB} MiB buffer (VmRSS); controller memcpy GB/s before/during"]

    def verify(self, facts: dict, wait_s: float = 10.0, window_s: float = 1.0) -> dict:
        ev = super().verify(facts, wait_s, window_s)
        if "memcpy_gbps_before" in facts:
            ev["memcpy_gbps_before"] = facts["memcpy_gbps_before"]
            ev["memcpy_gbps_during"] = round(memcpy_gbps(), 2)
        return ev
