"""Fault injectors, one module per fault type, and the fault lifecycle.

Every module of this package is imported here, so each fault type module registers
itself (``@register``, ``faultlab.injectors.registry``) without being listed: adding a
fault type is adding its module. ``FAULT_TYPES`` maps the CLI ``--type`` name to its
injector class; ``build`` turns CLI style options (strings with units) into an
injector, raising BadInput naming the field.
"""

from __future__ import annotations

import importlib
import pkgutil

from faultlab.errors import BadInput
from faultlab.nodes import Node
from faultlab.injectors.base import ActiveFault, Cmd, HandOver, Hooks, Injector, Interrupted, Plan, apply
from faultlab.injectors.params import Param, parse_pids
from faultlab.injectors.registry import FAULT_TYPES, register

# the built-in types by name, for importers (this order is FAULT_TYPES' order); any
# other module of the package registers when _import_all loads it
from faultlab.injectors.nic import NicSlow
from faultlab.injectors.cpu import CpuContention
from faultlab.injectors.pause import ProcessPause
from faultlab.injectors.io import IoSlow
from faultlab.injectors.mem_bw import MemBw
from faultlab.injectors.gc import GcStorm
from faultlab.injectors.gpu_clock import GpuClockCap
from faultlab.injectors.gpu_power import GpuPowerCap
from faultlab.injectors.cpu_stress import CpuStress

# Fault types the project design names but faultlab does not build yet: refused with a clear message, never silently ignored.
PLANNED_TYPES: tuple[str, ...] = ()


def _import_all() -> None:
    """Import every module of this package (sorted by name): fault type modules
    register themselves as they load."""
    for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        importlib.import_module(f"{__name__}.{m.name}")


_import_all()


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


__all__ = ["ActiveFault", "Cmd", "HandOver", "Hooks", "Interrupted", "Injector", "Param", "Plan", "apply", "build", "check_type",
           "parse_pids", "register", "FAULT_TYPES", "PLANNED_TYPES", "NicSlow", "CpuContention", "ProcessPause", "IoSlow",
           "CpuStress", "MemBw", "GcStorm", "GpuClockCap", "GpuPowerCap"]
