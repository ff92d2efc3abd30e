"""The registry of fault types: ``FAULT_TYPES`` maps a ``--type`` name to its Injector
class, filled by ``register`` as each fault module is imported.

A fault type is one module of ``faultlab.injectors`` whose Injector class is decorated
with ``@register``; the package imports every one of its modules
(``faultlab.injectors.__init__``), so a new module is registered without being listed
anywhere. The CLI's ``inject`` options, the scenario schema, ``faultlab doctor``'s
rows, the report's colours and the verify sentence are read from here.
"""

from __future__ import annotations

from typing import Any

from faultlab.injectors.base import Injector

#: what a registered type must declare itself (Injector's own raise NotImplementedError)
DECLARED = ("from_options", "support", "verify_sentence")
#: --type name -> Injector class, in registration order
FAULT_TYPES: dict[str, Any] = {}


def register(cls):
    """Class decorator: add the Injector class ``cls`` to ``FAULT_TYPES`` under
    ``cls.type``. Raises ValueError when another class holds that name already, or
    when ``cls`` leaves one of ``DECLARED`` to Injector (its doctor row, its verify
    sentence or its parsing would fail only when first used)."""
    missing = [m for m in DECLARED if getattr(cls, m).__func__ is getattr(Injector, m).__func__]
    if missing:
        raise ValueError(f"fault type {cls.type!r} ({cls.__module__}) does not declare {', '.join(missing)}")
    held = FAULT_TYPES.get(cls.type)
    if held is not None and held is not cls:
        raise ValueError(f"fault type {cls.type!r} is registered twice ({held.__module__} and {cls.__module__})")
    FAULT_TYPES[cls.type] = cls
    return cls


def unregister(name: str) -> None:
    """Remove fault type ``name`` (tests that register a toy type clean up with it)."""
    FAULT_TYPES.pop(name, None)


def job_wide_types() -> tuple[str, ...]:
    """The registered fault types whose effect is job-wide (``Injector.job_wide``), in
    registration order."""
    return tuple(name for name, cls in FAULT_TYPES.items() if cls.job_wide)


def params_by_option() -> dict[str, list[tuple[str, Any]]]:
    """Every parameter option of the registered types: option -> [(type, Param)], in
    registration order (one option may be shared, e.g. ``--workers``)."""
    out: dict[str, list[tuple[str, Any]]] = {}
    for name, cls in FAULT_TYPES.items():
        for p in cls.PARAMS:
            out.setdefault(p.option, []).append((name, p))
    return out


def option_help(entries: list[tuple[str, Any]]) -> str:
    """The help line of one option shared by the types of ``entries`` ([(type,
    Param)]): ``"TYPE, TYPE: help"``, one group per distinct help text, ``; ``
    between groups."""
    groups: dict[str, list[str]] = {}
    for name, p in entries:
        groups.setdefault(p.help, []).append(name)
    return "; ".join(f"{', '.join(names)}: {text}" for text, names in groups.items())
