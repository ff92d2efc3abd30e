"""``cpu-contention --mode stress``: busy workers pinned beside the target processes.

Each worker is a busy loop on one of the CPUs the targets may run on
(``faultlab.injectors.stress`` starts, checks and stops them), so a CPU-bound target
sharing a CPU with one worker gets about half of it (Linux CFS shares a CPU fairly
between runnable tasks of equal weight). It is a mode of the ``cpu-contention`` type
(``faultlab.injectors.cpu`` builds it for ``--mode stress``), so it is not registered
on its own; it declares its own doctor row and verify sentence.

Severity: ``workers / len(cpus)`` (busy workers per target CPU).
"""

from __future__ import annotations

from faultlab.errors import BadInput
from faultlab.injectors.params import parse_pids
from faultlab.injectors.stress import WORKERS, Workers, busy_sentence


class CpuStress(Workers):
    """``cpu-contention --mode stress``: ``workers`` busy-loop processes (default: one
    per CPU the targets may run on) pinned round-robin to the targets' CPUs for
    ``duration_s`` seconds. Raises BadInput for no PID, a missing process or a bad
    worker count; Refused when stress workers of another fault already sit beside a
    target; NodeError when the node has no python3."""

    type = "cpu-contention"
    kind = "cpu"
    marker = "faultlab-stress"
    mode = "stress"

    @classmethod
    def from_options(cls, node, *, target, duration_s, opts, fault_id=None, force=False):
        if opts.get("--cpu-fraction") is not None:
            raise BadInput("does not apply to --mode stress", field="--cpu-fraction", fix="drop it, or use --mode quota")
        return cls(node, parse_pids(target), duration_s, workers=WORKERS.read(opts, cls.type), fault_id=fault_id)

    @classmethod
    def support(cls, node: dict) -> dict[str, tuple[bool, str]]:
        return {"cpu-contention --mode stress": (True, "busy workers pinned with sched_setaffinity: no privileges needed")}

    @classmethod
    def verify_sentence(cls, evidence: dict) -> str:
        return busy_sentence(evidence)

    #: what ``severity`` measures, with its unit (the dataset card lists it per fault type)
    severity_unit = "ratio (stress workers per CPU of the target)"

    @property
    def severity(self) -> float:
        return self.workers / max(1, len(self.cpus) or self.workers)

    def _verify_lines(self, facts):
        return super()._verify_lines(facts) + ["workers burn CPU; the targets' CPU-s/s during the fault is recorded"]
