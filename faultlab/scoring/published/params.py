"""Parameters of the published detectors, declared once per detector.

A detector lists its parameters as :class:`Param` rows (name, default, unit, where
the default comes from, what it does); :class:`PublishedDetector` turns the table
into the constructor's signature (so ``faultlab score --param KEY=VALUE`` and
:func:`faultlab.scoring.lookup.load_detector` check names against it), checks each
value, and :func:`params_doc` renders the same table into the module's docstring.
A ``preset`` (a named set of defaults, e.g. a paper's and its artifact's) is applied
before explicit values, which override it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

from faultlab.errors import BadInput
from faultlab.scoring.detectors import Detector


@dataclass(frozen=True)
class Param:
    """One detector parameter: ``name``, ``default``, ``unit`` (``"s"``, ``"ratio"``,
    ``"steps"``, ...), ``source`` (where the default comes from: the paper's section,
    the tool's code, or ``"ours"``), ``help`` (one sentence) and ``ok`` (a check of the
    value; False refuses it)."""

    name: str
    default: Any
    unit: str
    source: str
    help: str
    ok: Callable[[Any], bool] = lambda v: True


def params_doc(params: tuple[Param, ...], presets: dict[str, dict] | None = None) -> str:
    """The parameter table as docstring text: one line per parameter (name, default
    and unit, where the default comes from, what it does), then the presets."""
    lines = ["", "Parameters (``--param NAME=VALUE``; default, unit, source):", ""]
    if presets:
        first = next(iter(presets))
        lines.append(f"- ``preset`` = {first!r} [name] (ours): a named set of defaults, one of {', '.join(presets)}")
    for p in params:
        lines.append(f"- ``{p.name}`` = {p.default!r} [{p.unit}] ({p.source}): {p.help}")
    for name, values in (presets or {}).items():
        shown = ", ".join(f"{k}={v!r}" for k, v in values.items()) or "the defaults above"
        lines.append(f"- preset ``{name}``: {shown}")
    return "\n".join(lines) + "\n"


def _cast(p: Param, value: Any) -> Any:
    """``value`` as the type of ``p``'s default (bool, int, float, str)."""
    kind = type(p.default)
    if kind is bool:
        if isinstance(value, str):
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"{p.name} must be true or false, got {value!r}")
            return value.lower() in ("true", "1")
        return bool(value)
    if kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"{p.name} must be an integer, got {value!r}")
        return int(value)
    if kind is float:
        return float(value)
    return str(value)


class PublishedDetector(Detector):
    """Base of a published detector: subclasses set ``name``, ``PARAMS`` (a tuple of
    :class:`Param`) and optionally ``PRESETS`` (name -> {param: value}; a ``preset``
    parameter then picks one). Each parameter becomes an attribute of the instance.
    Raises BadInput (field ``--param``) for a value of the wrong type, one its check
    refuses, or an unknown preset."""

    PARAMS: tuple[Param, ...] = ()
    PRESETS: dict[str, dict] = {}

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        args = [inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=p.default) for p in cls._all_params()]
        cls.__signature__ = inspect.Signature(args)

    @classmethod
    def _all_params(cls) -> tuple[Param, ...]:
        if not cls.PRESETS:
            return cls.PARAMS
        first = next(iter(cls.PRESETS))
        return (Param("preset", first, "name", "ours", "a named set of defaults: " + ", ".join(cls.PRESETS),
                      lambda v: v in cls.PRESETS),) + cls.PARAMS

    def __init__(self, **values):
        params = {p.name: p for p in self._all_params()}
        unknown = sorted(set(values) - set(params))
        if unknown:
            raise BadInput(f"{self.name!r} does not take {', '.join(unknown)}", field="--param",
                           fix="known: " + ", ".join(params))
        chosen = {p.name: p.default for p in params.values()}
        if self.PRESETS:
            preset = str(values.get("preset", chosen["preset"]))
            if preset not in self.PRESETS:
                raise BadInput(f"{self.name!r} has no preset {preset!r}", field="--param preset",
                               fix="known: " + ", ".join(self.PRESETS))
            chosen.update(self.PRESETS[preset])
        chosen.update(values)
        for name, value in chosen.items():
            p = params[name]
            try:
                v = _cast(p, value)
            except (TypeError, ValueError) as e:
                raise BadInput(f"{self.name!r}: {e}", field=f"--param {name}", fix=f"{p.help} ({p.unit})") from None
            if not p.ok(v):
                raise BadInput(f"{self.name!r} refused {name}={value!r}", field=f"--param {name}", fix=f"{p.help} ({p.unit})")
            setattr(self, name, v)

    def settings(self) -> dict:
        """The value of every parameter of this instance."""
        return {p.name: getattr(self, p.name) for p in self._all_params()}
