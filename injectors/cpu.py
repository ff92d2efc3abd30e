"""``cpu-contention``: CPU quota on target processes through a faultlab cgroup.

Mode ``quota``: the target PIDs move into a new cgroup ``faultlab-<fault_id>``
whose CFS bandwidth limit leaves them ``cpu_fraction`` of one CPU. On cgroup v1 and
v2 alike it is created *inside* the targets' own cgroup (``faultlab.injectors.cgroups.
placement``), so the limits they already had still apply (a fault only ever slows)
and that cgroup cannot vanish under the fault; all targets must share one cgroup. On
v2 they must be all the processes of that cgroup (the no-internal-process rule): they
move into the child, then ``+cpu`` is written to their cgroup's
``cgroup.subtree_control`` (``-cpu`` again on revert, before they move back). cgroup
v1 ``cpu.cfs_quota_us = cpu_fraction * cpu.cfs_period_us``; cgroup v2
``cpu.max = "QUOTA PERIOD"``. The period is short (10 ms by default) because with the
default 100 ms a 30% quota throttles in bursts: steps alternate fast and stalled and a
median hides the slowdown (Linux CFS bandwidth control, Documentation/scheduler/
sched-bwc.rst).

Revert moves every process in the faultlab cgroup (the targets, and children they
forked meanwhile) back to the cgroup the targets were found in (never to the root: that
cgroup cannot be removed while it holds faultlab's), and removes the faultlab cgroup.
Nothing else is written.

Severity: ``1 / cpu_fraction`` (the expected slowdown of a CPU-bound target).
"""

from __future__ import annotations

import math
import time

from faultlab.errors import BadInput, Refused
from faultlab.nodes import Node
from faultlab.units import parse_fraction
from faultlab.injectors import cgroups
from faultlab.injectors.base import Cmd, Injector, Plan, write_cmd
from faultlab.injectors.cgroups import RMDIR_SH, SWEEP_SH
from faultlab.injectors.cpu_stress import CpuStress
from faultlab.injectors.params import Param, parse_pids
from faultlab.injectors.registry import register
from faultlab.injectors.stress import WORKERS

MODES = ("quota", "stress")


def parse_mode(text: str, field: str = "--mode") -> str:
    """``quota`` or ``stress`` (any case, spaces around ignored). Raises BadInput."""
    mode = str(text).strip().lower()
    if mode not in MODES:
        raise BadInput(f"unknown mode {text!r}", field=field, fix="use quota (a CPU quota on the targets) or stress (busy workers beside them)")
    return mode


@register
class CpuContention(Injector):
    """Leave ``pids`` only ``cpu_fraction`` (0 < f <= 1) of one CPU, over a CFS period
    of ``period_s`` seconds. Raises BadInput for a missing PID or a bad fraction,
    Refused when a target is already under a faultlab cgroup or no cpu controller is
    usable."""

    type = "cpu-contention"
    PARAMS = (
        Param("cpu_fraction", "fraction of one CPU left, in (0, 1]", "FRACTION", parse_fraction, bounds=(0, 1), open_low=True, kind="number"),
        Param("mode", "quota (default: a CPU quota on the targets) or stress (busy workers beside them)", "MODE", parse_mode, default="quota"),
        WORKERS,
    )
    targets = "rank"
    target_help = "PIDs 1,2"
    color = "#f3a712"

    @classmethod
    def from_options(cls, node, *, target, duration_s, opts, fault_id=None, force=False):
        """``--mode quota`` (default): this class; ``--mode stress``: busy workers
        beside the targets (faultlab.injectors.cpu_stress.CpuStress)."""
        mode = cls.param("mode").read(opts, cls.type)
        if mode == "stress":
            return CpuStress.from_options(node, target=target, duration_s=duration_s, opts=opts, fault_id=fault_id, force=force)
        if opts.get("--workers") is not None:
            raise BadInput("applies to --mode stress only", field="--workers", fix="add --mode stress, or drop --workers")
        frac = cls.param("cpu_fraction").read(opts, cls.type)
        if frac is None:  # required in quota mode only
            raise BadInput(f"missing for {cls.type}", field="--cpu-fraction", fix="see faultlab inject --help")
        return cls(node, parse_pids(target), frac, fault_id=fault_id)

    @classmethod
    def support(cls, node: dict) -> dict[str, tuple[bool, str]]:
        ok = bool(node["cgroup_cpu"]) and node["cgroup_cpu_writable"]
        why = f"cpu controller {node['cgroup_cpu']}" if ok else (
            "no usable cpu cgroup controller" if not node["cgroup_cpu"] else
            f"cannot write {node['cgroup_cpu_at'] or 'the cpu cgroup'}: needs root (or sudo) and a writable cgroup")
        return {cls.type: (ok, why), **CpuStress.support(node)}

    @classmethod
    def verify_sentence(cls, evidence: dict) -> str:
        if "cpu_stat" not in evidence:  # --mode stress: its workers' evidence
            return CpuStress.verify_sentence(evidence)
        st = evidence["cpu_stat"] or {}
        return (f"{len(evidence.get('pids_in_cgroup') or [])} PID(s) in the fault's cgroup; its CPU quota throttled them in "
                f"{st.get('nr_throttled', 0)} of {st.get('nr_periods', 0)} CFS periods (checked > 0)")

    def __init__(self, node: Node, pids: list[int], cpu_fraction: float, *, period_s: float = 0.01, fault_id: str | None = None, label: str | None = None):
        super().__init__(node, fault_id)
        if not pids:
            raise BadInput("no target process", field="--target", fix="give PIDs, e.g. --target 1234,5678")
        if not (0 < cpu_fraction <= 1):
            raise BadInput(f"{cpu_fraction} is outside (0, 1]", field="--cpu-fraction", fix="give e.g. 0.3")
        self.pids = [int(p) for p in pids]
        self.cpu_fraction = float(cpu_fraction)
        period_us = int(period_s * 1e6)
        # the kernel's minimum quota is 1000 us: lengthen the period for tiny fractions
        self.period_us = max(period_us, math.ceil(1000 / self.cpu_fraction))
        self.quota_us = max(1000, int(self.cpu_fraction * self.period_us))
        self.label = label

    @property
    def target(self) -> str:
        return self.label or "pid:" + ",".join(map(str, self.pids))

    @property
    def params(self) -> dict:
        return {"mode": "quota", "cpu_fraction": self.cpu_fraction, "cfs_period_us": self.period_us, "cfs_quota_us": self.quota_us, "pids": self.pids}

    #: what ``severity`` measures, with its unit (the dataset card lists it per fault type)
    severity_unit = "ratio (1 / the CPU fraction left to the target)"

    @property
    def severity(self) -> float:
        return 1.0 / self.cpu_fraction

    def probe(self) -> dict:
        h = cgroups.find_hierarchy(self.node, "cpu")
        if h is None:
            raise Refused(f"no usable cpu cgroup controller on node {self.node.name}", field="--type", fix="mount the v1 cpu controller or enable +cpu in the v2 root's cgroup.subtree_control; see faultlab doctor")
        if not self.node.writable(h.mount):
            raise Refused(f"cannot write cgroups under {h.mount} on node {self.node.name} (EPERM)", field="--node", fix="run faultlab as root")
        where = cgroups.placement(self.node, h, self.pids, self.fault_id, "cpu")
        home = where["home"]
        # v1 refuses a child quota above its ancestors' (Documentation/scheduler/
        # sched-bwc.rst): a target already limited tighter than asked stays at its limit
        limit = self._ancestor_limit(h, home) if h.version == 1 else None
        return {"hierarchy": {"version": h.version, "mount": h.mount, "controller": h.controller}, "orig": where["orig"],
                "starts": where["starts"], "home": home, "cgroup": where["cgroup"], "enable_subtree": where["enable"], "ancestor_cpu_fraction": limit}

    def _ancestor_limit(self, h: cgroups.Hierarchy, home: str) -> float | None:
        """The tightest CPU fraction set on ``home`` or its ancestors (v1), or None."""
        best = None
        parts = [x for x in home.strip("/").split("/") if x]
        for i in range(len(parts), -1, -1):
            d = h.path("/" + "/".join(parts[:i]))
            try:
                q = int(self.node.read_file(f"{d}/cpu.cfs_quota_us"))
                per = int(self.node.read_file(f"{d}/cpu.cfs_period_us"))
            except (OSError, ValueError):
                continue
            if q > 0 and per > 0:
                best = q / per if best is None else min(best, q / per)
        return best

    @staticmethod
    def _h(facts: dict) -> cgroups.Hierarchy:
        return cgroups.Hierarchy(**facts["hierarchy"])

    def plan(self, facts: dict) -> Plan:
        h, d = self._h(facts), facts["cgroup"]
        home = facts.get("home") or next(iter(facts["orig"].values()))
        enable, disable = cgroups.subtree_cmds(h, home, bool(facts.get("enable_subtree")))
        inject = [Cmd(("mkdir", d), "host", "faultlab cgroup")]
        if h.version == 1:
            quota = self.quota_us
            lim = facts.get("ancestor_cpu_fraction")
            if lim is not None:
                quota = max(1000, min(quota, int(lim * self.period_us)))
            inject += [
                write_cmd(f"{d}/cpu.cfs_period_us", str(self.period_us)),
                write_cmd(f"{d}/cpu.cfs_quota_us", str(quota)),
            ]
            inject += [cgroups.move_cmd(d, pid, start) for pid, start in zip(self.pids, facts["starts"])]
        else:
            limit = [write_cmd(f"{d}/cpu.max", f"{self.quota_us} {self.period_us}")]
            moves = [cgroups.move_cmd(d, pid, start) for pid, start in zip(self.pids, facts["starts"])]
            # the controller can be enabled only once the targets left their cgroup
            inject += (moves + enable + limit) if enable else (limit + moves)
        back = h.path(home).rstrip("/") + "/cgroup.procs"
        revert = disable + [
            Cmd(("sh", "-c", SWEEP_SH, "sh", f"{d}/cgroup.procs", back, back), "host", "every process in the faultlab cgroup back home"),
            Cmd(("sh", "-c", RMDIR_SH, "sh", d), "host", "remove the faultlab cgroup"),
        ]
        return Plan(
            self.fault_id, self.type, self.node.name, self.target, inject, revert,
            [f"targets in {d}; cpu.stat nr_throttled rises"],
        )

    def _stat(self, facts: dict) -> dict:
        return cgroups.read_stat(self.node, f"{facts['cgroup']}/cpu.stat")

    def verify(self, facts: dict, wait_s: float = 2.0) -> dict:
        d = facts["cgroup"]
        inside = set(cgroups.procs(self.node, d))
        moved = [p for p in self.pids if p in inside]
        stat = self._stat(facts)
        deadline = time.time() + wait_s
        while stat.get("nr_throttled", 0) == 0 and time.time() < deadline:
            time.sleep(0.05)
            stat = self._stat(facts)
        ev = {"pids_in_cgroup": moved, "cpu_stat": stat, "ok": len(moved) == len(self.pids) and stat.get("nr_throttled", 0) > 0}
        return ev

    def final_evidence(self, facts: dict) -> dict:
        return {"cpu_stat": self._stat(facts)}

    def reverted(self, facts: dict) -> list[str]:
        d = facts["cgroup"]
        return [f"cgroup {d}"] if self.node.exists(d) else []
