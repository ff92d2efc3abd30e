"""``mem-bw``: memory-bandwidth workers pinned beside the target processes.

Each worker copies one half of a buffer larger than the last-level cache (256 MiB, or
4x the LLC size when that is larger) onto the other and back, streaming to and from
DRAM, so the target's memory-bound phases slow down. The workers are started, checked
and stopped by ``faultlab.injectors.stress``; the probe refuses when they would take
more than half of the node's MemAvailable.

Severity: ``workers`` (streams beside the target).
"""

from __future__ import annotations

import time

from faultlab.errors import Refused
from faultlab.injectors.params import parse_pids
from faultlab.injectors.registry import register
from faultlab.injectors.stress import WORKERS, Workers, busy_sentence

MIB = 2**20
MEM_BUFFER_MIN = 256 * MIB


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


@register
class MemBw(Workers):
    """``mem-bw``: ``workers`` memory-streaming processes (default: one per target CPU,
    at most 4) pinned round-robin to the targets' CPUs for ``duration_s`` seconds,
    each copying over a ``buffer_bytes`` buffer (256 MiB, or 4x the last-level cache
    when larger).

    Raises BadInput for no PID, a missing process or a bad worker count; Refused when
    the workers would take more than half of the node's MemAvailable, or mem-bw workers
    of another fault already sit beside a target; NodeError when the node has no
    python3."""

    type = "mem-bw"
    PARAMS = (WORKERS,)
    targets = "rank"
    target_help = "PIDs 1,2"
    color = "#29335c"
    kind = "mem"
    marker = "faultlab-membw"
    mode = None

    @classmethod
    def from_options(cls, node, *, target, duration_s, opts, fault_id=None, force=False):
        return cls(node, parse_pids(target), duration_s, workers=WORKERS.read(opts, cls.type), fault_id=fault_id)

    @classmethod
    def support(cls, node: dict) -> dict[str, tuple[bool, str]]:
        return {cls.type: (True, "memory streaming workers: no privileges needed")}

    @classmethod
    def verify_sentence(cls, evidence: dict) -> str:
        if "memcpy_gbps_during" not in evidence:  # a node of another host: no memcpy benchmark there
            return busy_sentence(evidence)
        return (f"{len(evidence['workers'])} memory-bandwidth worker(s) running; memcpy "
                f"{evidence.get('memcpy_gbps_before')} -> {evidence.get('memcpy_gbps_during')} GB/s")

    def default_workers(self, cpus: list[int]) -> int:
        return min(len(cpus), 4)

    #: what ``severity`` measures, with its unit (the dataset card lists it per fault type)
    severity_unit = "count (memory-bandwidth workers)"

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
