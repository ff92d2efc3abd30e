"""What a fault's ``verified`` flag means, in words: which measurement was compared
with which bound (the evidence dict an injector's ``verify()`` returns).

``verify_text(evidence, fault)`` -> ``"verified: ..."`` or ``"NOT verified: ..."``, one
line: the fault type's own sentence (``Injector.verify_sentence``, declared in its
module) naming the measured quantity, its value and the bound it was checked against.
"""

from __future__ import annotations

from faultlab.injectors import FAULT_TYPES, Injector


def _sentence_class(fault) -> type[Injector] | None:
    """The class whose ``verify_sentence`` reads ``fault``'s evidence: an injector
    (its own class: ``cpu-contention --mode stress`` is CpuStress), an Injector class,
    or a registered type name; None for an unknown one."""
    if isinstance(fault, Injector):
        return type(fault)
    if isinstance(fault, type) and issubclass(fault, Injector):
        return fault
    return FAULT_TYPES.get(fault)


def _any_sentence(v: dict) -> str | None:
    """For a caller that holds the evidence without its fault type: the sentence of
    the last registered type whose ``verify_sentence`` reads ``v`` (a sentence raises
    KeyError for evidence without the measurement it names)."""
    for cls in reversed(FAULT_TYPES.values()):
        try:
            return cls.verify_sentence(v)
        except (KeyError, NotImplementedError):
            continue
    return None


def verify_text(v: dict | None, fault: str | Injector | type | None = None) -> str:
    """One line: ``verified: WHAT WAS MEASURED AGAINST WHAT`` (or ``NOT verified:``),
    in the words of ``fault``'s type (a type name, an injector or its class)."""
    v = v or {}
    head = "verified" if v.get("ok") else "NOT verified"
    measured = {k for k in v if k != "ok"}
    if not measured:
        return f"{head}: no measurement recorded"
    cls = _sentence_class(fault) if fault is not None else None
    try:
        text = cls.verify_sentence(v) if cls is not None else None
    except KeyError:  # evidence of a verify that failed before it measured
        text = None
    return f"{head}: {text or _any_sentence(v) or 'no measurement recorded'}"
