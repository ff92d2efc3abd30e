"""Fault injectors, one module per fault family, and the fault lifecycle.

``FAULT_TYPES`` maps the CLI ``--type`` name to its injector class; ``build`` turns CLI
style options (strings with units) into an injector, raising BadInput naming the field.
"""

from __future__ import annotations

import os

from faultlab.errors import BadInput
from faultlab.nodes import Node
from faultlab.injectors.base import ActiveFault, Cmd, HandOver, Hooks, Injector, Interrupted, Plan, apply
from faultlab.injectors.cpu import CpuContention
from faultlab.injectors.gc import GcStorm
from faultlab.injectors.gpu import GpuClockCap, GpuPowerCap
from faultlab.injectors.nic import NicSlow
from faultlab.injectors.pause import ProcessPause
from faultlab.injectors.io import IoSlow
from faultlab.injectors.stress import CpuStress, MemBw

FAULT_TYPES: dict[str, type[Injector]] = {
    NicSlow.type: NicSlow,
    CpuContention.type: CpuContention,
    ProcessPause.type: ProcessPause,
    IoSlow.type: IoSlow,
    MemBw.type: MemBw,
    GcStorm.type: GcStorm,
    GpuClockCap.type: GpuClockCap,
    GpuPowerCap.type: GpuPowerCap,
}

# Types of DESIGN.md not built yet: refused with a clear message, never silently ignored.
PLANNED_TYPES: tuple[str, ...] = ()


def parse_pids(text: str | None, field: str = "--target") -> list[int]:
    """``"123,456"`` -> [123, 456]. Raises BadInput."""
    if not text:
        raise BadInput("missing", field=field, fix="give the target PIDs, e.g. --target 1234,5678")
    out = []
    for tok in str(text).replace("pid:", "").split(","):
        tok = tok.strip()
        if not (tok.isascii() and tok.isdigit()) or int(tok) <= 0 or len(tok) > 10:
            raise BadInput(f"{tok!r} is not a PID", field=field, fix="give positive integers, e.g. --target 1234,5678")
        pid = int(tok)
        if pid == 1:
            raise BadInput("PID 1 is the init process: slowing it slows the whole machine", field=field, fix="give the PID of a rank or workload process")
        if pid == os.getpid():
            raise BadInput(f"{pid} is faultlab itself", field=field, fix="give the PID of a rank or workload process")
        out.append(pid)
    return out


def build(fault_type: str, node: Node, *, target: str | None, duration_s: float, opts: dict | None = None,
          fault_id: str | None = None, force: bool = False) -> Injector:
    """An injector of ``fault_type`` from CLI-style options.

    ``opts`` maps option names as typed (``"--rate"``) to their string values; options
    left unset are absent or None. Raises BadInput for an unknown type, an option of
    another type, or a missing or malformed parameter (each naming its field)."""
    given = {k: v for k, v in (opts or {}).items() if v is not None and v is not False}
    cls = check_type(fault_type)
    extra = sorted(k for k in given if k not in cls.options)
    if extra:
        raise BadInput(f"does not apply to {fault_type}", field=extra[0], fix=f"{fault_type} takes {', '.join(sorted(cls.options)) or 'no options'}")
    return cls.from_options(node, target=target, duration_s=duration_s, opts=given, fault_id=fault_id, force=force)


def check_type(fault_type: str) -> type:
    """The injector class of ``fault_type``; BadInput naming ``--type`` (with the known
    types) for an unknown or not yet built one. The CLI calls it before it touches the
    node, so a typo in ``--type`` is the error named, not the node."""
    if fault_type not in FAULT_TYPES:
        if fault_type in PLANNED_TYPES:
            raise BadInput(f"{fault_type!r} is not built yet", field="--type", fix=f"use one of {', '.join(FAULT_TYPES)}")
        raise BadInput(f"unknown fault type {fault_type!r}", field="--type", fix=f"use one of {', '.join(FAULT_TYPES)}")
    return FAULT_TYPES[fault_type]


def require(opts: dict, name: str, fault_type: str) -> str:
    """The value of option ``name`` or BadInput naming it."""
    if opts.get(name) is None:
        raise BadInput(f"missing for {fault_type}", field=name, fix="see faultlab inject --help")
    return opts[name]


__all__ = ["ActiveFault", "Cmd", "HandOver", "Hooks", "Interrupted", "Injector", "Plan", "apply", "build", "FAULT_TYPES", "NicSlow", "CpuContention", "ProcessPause", "IoSlow", "CpuStress", "MemBw", "GcStorm", "GpuClockCap", "GpuPowerCap"]
