"""``cpu-nice``: the target processes lose CPU priority (``renice``), a toy fault type.

It shows that a fault type is one module: its parameters, lifecycle, verify sentence,
doctor check and colour are declared here, and ``@register`` lists it; nothing else in
faultlab names it. The target processes are reniced to ``niceness`` (1..19) and back to
the value each had (read at probe) on revert. A CPU-bound target sharing a busy CPU
then gets a smaller share of it (CFS weights by nice level).

Severity: ``niceness``.
"""

from __future__ import annotations

from faultlab import procid
from faultlab.errors import BadInput
from faultlab.injectors import Cmd, Injector, Param, Plan, parse_pids, register


def parse_niceness(text, field: str = "--niceness") -> int:
    """A nice level in 1..19. Raises BadInput naming ``field``."""
    s = str(text).strip()
    if not s.isdigit() or not 1 <= int(s) <= 19:
        raise BadInput(f"{text!r} is not a nice level in 1..19", field=field, fix="give e.g. --niceness 19")
    return int(s)


@register
class CpuNice(Injector):
    """Renice ``pids`` to ``niceness``; revert restores each one's own nice level."""

    type = "cpu-nice"
    PARAMS = (Param("niceness", "nice level of the targets, 1..19", "NICE", parse_niceness, default=19, bounds=(1, 19), kind="integer"),)
    targets = "rank"
    target_help = "PIDs 1,2"
    color = "#3a5a40"

    @classmethod
    def from_options(cls, node, *, target, duration_s, opts, fault_id=None, force=False):
        return cls(node, parse_pids(target), cls.param("niceness").read(opts, cls.type), fault_id=fault_id)

    @classmethod
    def support(cls, node: dict) -> dict[str, tuple[bool, str]]:
        return {cls.type: (bool(node["root"]), "renice: root restores the nice level" if node["root"] else "needs root to restore the nice level")}

    @classmethod
    def verify_sentence(cls, evidence: dict) -> str:
        return f"nice level read back {evidence['nice']} (checked = {evidence['want']})"

    def __init__(self, node, pids: list[int], niceness: int, *, fault_id: str | None = None):
        super().__init__(node, fault_id)
        self.pids, self.niceness = pids, niceness

    @property
    def target(self) -> str:
        return "pid:" + ",".join(map(str, self.pids))

    @property
    def params(self) -> dict:
        return {"pids": self.pids, "niceness": self.niceness}

    @property
    def severity(self) -> float:
        return float(self.niceness)

    def _nice(self, pid: int) -> int | None:
        try:
            fields = procid.stat_fields(self.node.read_file(f"/proc/{pid}/stat"))
        except OSError:
            return None
        return int(fields[16]) if fields else None  # field 19 of /proc/PID/stat

    def probe(self) -> dict:
        before = {str(p): self._nice(p) for p in self.pids}
        gone = [p for p, n in before.items() if n is None]
        if gone:
            raise BadInput(f"no process {gone[0]} on node {self.node.name}", field="--target", fix="give the PID of a running process")
        return {"before": before}

    def plan(self, facts: dict) -> Plan:
        inject = [Cmd(("renice", "-n", str(self.niceness), "-p", p), "host", f"{p} to nice {self.niceness}") for p in facts["before"]]
        revert = [Cmd(("renice", "-n", str(n), "-p", p), "host", f"{p} back to nice {n}") for p, n in facts["before"].items()]
        return Plan(self.fault_id, self.type, self.node.name, self.target, inject, revert, [f"nice level of each target = {self.niceness}"])

    def verify(self, facts: dict) -> dict:
        now = [self._nice(p) for p in self.pids]
        return {"nice": now, "want": self.niceness, "ok": all(n == self.niceness for n in now)}

    def reverted(self, facts: dict) -> list[str]:
        return [f"process {p} at nice {self._nice(int(p))}" for p, n in facts["before"].items() if self._nice(int(p)) not in (None, n)]
