"""A fault type's parameters, each written once as a ``Param``.

A ``Param`` holds everything faultlab says about one parameter: its scenario name (the
CLI option is derived from it: ``cpu_fraction`` -> ``--cpu-fraction``), the parser that
turns the text into a value with its unit (``faultlab.units`` or the fault module's
own, each naming the option in its errors), the default, the bounds, the help line and
the metavar. A fault type lists its ``PARAMS`` on its Injector class; the CLI's
``inject`` options, the scenario file's parameter names and the ``params`` part of the
scenario JSON Schema are generated from the registered types' lists
(``faultlab.injectors.registry``).

``parse_pids`` is the parser of ``--target`` for the fault types that hit processes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from faultlab.errors import BadInput

#: JSON Schema types of a parameter's value in a scenario file, by ``Param.kind``
#: (numbers may be written bare or as text, e.g. ``0.25`` or ``"0.25"``)
_JSON_TYPES = {"text": "string", "number": ["number", "string"], "integer": ["integer", "string"]}


@dataclass(frozen=True)
class Param:
    """One parameter of a fault type.

    Fields: ``name`` (scenario key, ``snake_case``), ``help`` (one line, without the
    type's name), ``metavar`` (the CLI's), ``parse`` (``(text, option) -> value``,
    raising BadInput naming ``option``; None keeps the text), ``default`` (the parsed
    value when not given), ``bounds`` (``(low, high)`` of the parsed value, either None
    for open; ``open_low``: low itself is outside), ``kind`` (``text``, ``number`` or
    ``integer``: how a scenario file may write it) and ``required``."""

    name: str
    help: str
    metavar: str = "VALUE"
    parse: Callable[[str, str], Any] | None = None
    default: Any = None
    bounds: tuple[float | None, float | None] = (None, None)
    open_low: bool = False
    kind: str = "text"
    required: bool = False

    @property
    def option(self) -> str:
        """The CLI option: ``--`` and the name with dashes (``--cpu-fraction``)."""
        return "--" + self.name.replace("_", "-")

    def read(self, opts: dict, fault_type: str) -> Any:
        """The parsed value of this parameter in ``opts`` (option -> text, as
        ``faultlab.injectors.build`` gets them), or ``default`` when absent. Raises
        BadInput naming the option when it is missing but required, or malformed."""
        text = opts.get(self.option)
        if text is None:
            if self.required:
                raise BadInput(f"missing for {fault_type}", field=self.option, fix="see faultlab inject --help")
            return self.default
        return self.parse(text, self.option) if self.parse else text

    def json_schema(self) -> dict:
        """The JSON Schema of this parameter's value in a scenario file."""
        out: dict = {"type": _JSON_TYPES[self.kind], "description": self.help}
        low, high = self.bounds if self.kind != "text" else (None, None)  # a text's bounds hold for its parsed value
        if low is not None:
            out["exclusiveMinimum" if self.open_low else "minimum"] = low
        if high is not None:
            out["maximum"] = high
        if self.default is not None:
            out["default"] = self.default
        return out


def parse_pids(text: str | None, field: str = "--target") -> list[int]:
    """``"123,456"`` -> [123, 456]. Raises BadInput naming ``field``."""
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
