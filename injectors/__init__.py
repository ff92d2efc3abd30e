"""Fault injectors, one module per fault family, and the fault lifecycle.

``FAULT_TYPES`` maps the CLI ``--type`` name to its injector class; ``build`` turns CLI
style options (strings with units) into an injector, raising BadInput naming the field.
"""

from __future__ import annotations

from faultlab.errors import BadInput
from faultlab.nodes import Node
from faultlab.units import parse_duration, parse_fraction, parse_rate
from faultlab.injectors.base import ActiveFault, Cmd, Injector, Plan, apply
from faultlab.injectors.cpu import CpuContention
from faultlab.injectors.nic import NicSlow
from faultlab.injectors.pause import ProcessPause

FAULT_TYPES: dict[str, type[Injector]] = {
    NicSlow.type: NicSlow,
    CpuContention.type: CpuContention,
    ProcessPause.type: ProcessPause,
}

# Types of DESIGN.md not built yet: refused with a clear message, never silently ignored.
PLANNED_TYPES = ("gpu-clock-cap", "gpu-power-cap", "gc-storm", "io-slow", "mem-bw")


def parse_pids(text: str | None, field: str = "--target") -> list[int]:
    """``"123,456"`` -> [123, 456]. Raises BadInput."""
    if not text:
        raise BadInput("missing", field=field, fix="give the target PIDs, e.g. --target 1234,5678")
    out = []
    for tok in str(text).replace("pid:", "").split(","):
        tok = tok.strip()
        if not tok.isdigit() or int(tok) <= 0:
            raise BadInput(f"{tok!r} is not a PID", field=field, fix="give positive integers, e.g. --target 1234,5678")
        out.append(int(tok))
    return out


def build(fault_type: str, node: Node, *, target: str | None, duration_s: float, rate: str | None = None,
          cpu_fraction: str | float | None = None, pause: str | None = None, period: str | None = None,
          fault_id: str | None = None) -> Injector:
    """An injector of ``fault_type`` from CLI-style options. Raises BadInput for an
    unknown type, a missing or malformed parameter, or a parameter of another type."""
    given = {"--rate": rate, "--cpu-fraction": cpu_fraction, "--pause": pause, "--period": period}
    wanted = {
        "nic-slow": {"--rate"},
        "cpu-contention": {"--cpu-fraction"},
        "process-pause": {"--pause", "--period"},
    }
    if fault_type not in FAULT_TYPES:
        if fault_type in PLANNED_TYPES:
            raise BadInput(f"{fault_type!r} is not built yet", field="--type", fix=f"use one of {', '.join(FAULT_TYPES)}")
        raise BadInput(f"unknown fault type {fault_type!r}", field="--type", fix=f"use one of {', '.join(FAULT_TYPES)}")
    extra = [k for k, v in given.items() if v is not None and k not in wanted[fault_type]]
    if extra:
        raise BadInput(f"does not apply to {fault_type}", field=extra[0], fix=f"{fault_type} takes {', '.join(sorted(wanted[fault_type]))}")
    for k in wanted[fault_type]:
        if given[k] is None:
            raise BadInput(f"missing for {fault_type}", field=k, fix="see faultlab inject --help")
    if fault_type == "nic-slow":
        return NicSlow(node, parse_rate(rate, "--rate"), iface=target, fault_id=fault_id)
    if fault_type == "cpu-contention":
        return CpuContention(node, parse_pids(target), parse_fraction(cpu_fraction, "--cpu-fraction"), fault_id=fault_id)
    pids = parse_pids(target)
    if len(pids) != 1:
        raise BadInput("process-pause takes one PID", field="--target", fix="give one PID")
    return ProcessPause(node, pids[0], parse_duration(pause, "--pause"), parse_duration(period, "--period"), duration_s, fault_id=fault_id)


__all__ = ["ActiveFault", "Cmd", "Injector", "Plan", "apply", "build", "FAULT_TYPES", "NicSlow", "CpuContention", "ProcessPause"]
