"""Errors with a one-line message that names the field and the fix, and
:func:`printable`, the one way text another party wrote reaches a terminal."""

from __future__ import annotations

import re


#: characters of one field another party wrote (a lease record's fault type, node or
#: target, a revert line) that a status or revert line shows: a record holds up to
#: 1 MiB, and a line of a million characters kept rich's wrapping busy for hours
FIELD_CHARS = 160


def printable(text, limit: int | None = None) -> str:
    """``text`` (made a ``str``) safe inside one terminal line: every character that is
    not printable (a newline, ESC and the other control characters, a bidirectional
    override) becomes ``?``; longer than ``limit`` characters, it is cut there and ends
    in ``...``.

    For what other users, processes or files chose (a file name, a record's field, an
    agent's error), so they cannot forge lines or send escape sequences to the terminal
    of whoever runs faultlab."""
    text = str(text)
    cut = limit is not None and len(text) > limit
    if cut:
        text = text[:limit]
    return "".join(c if c.isprintable() else "?" for c in text) + ("..." if cut else "")


class FaultlabError(Exception):
    """Base of faultlab's errors. ``str(err)`` is one line fit for a terminal.

    Attributes: ``field`` (the input field at fault, or None) and ``fix`` (what to do).
    ``exit_code`` is 2 for bad input (usage) and 1 for runtime failures.
    """

    exit_code = 1

    def __init__(self, message: str, *, field: str | None = None, fix: str | None = None):
        self.field = field
        self.fix = fix
        parts = []
        if field:
            parts.append(f"{field}: ")
        parts.append(message)
        if fix:
            parts.append(f" ({fix})")
        # one line, whatever the message quotes (a YAML parser's caret diagram, a
        # reader's multi-line text, a value another user wrote)
        super().__init__(printable(re.sub(r"\s*\n\s*", " ", "".join(parts)).strip()))


class BadInput(FaultlabError):
    """Malformed user input: a scenario, a flag, a unit. Exit code 2; nothing applied."""

    exit_code = 2


class NodeError(FaultlabError):
    """A node could not run a command (unreachable, missing tool, no privilege)."""


class Refused(FaultlabError):
    """The node holds state faultlab did not create, or a conflicting fault: inject refuses."""

    exit_code = 3


def pydantic_fix(err: dict, default: str | None = None) -> str | None:
    """The fix for one pydantic error (an item of ``ValidationError.errors()``): what
    to give instead, from the error's type and its bounds (``rank: -1``, "Input should
    be greater than or equal to 0" -> "give a value >= 0"); ``default`` (e.g. where
    the schema is) for other types. None for a validator's own message (``value_error``),
    which carries its fix."""
    t, ctx = err.get("type", ""), err.get("ctx") or {}
    bound = {"greater_than_equal": ("ge", "give a value >= {}"), "greater_than": ("gt", "give a value > {}"),
             "less_than_equal": ("le", "give a value <= {}"), "less_than": ("lt", "give a value < {}")}
    if t in bound and bound[t][0] in ctx:
        return bound[t][1].format(ctx[bound[t][0]])
    if t == "literal_error" and "expected" in ctx:
        return f"use one of {ctx['expected']}"
    if t in ("value_error", "assertion_error"):
        return None
    simple = {"int_parsing": "give a whole number, e.g. 4", "int_type": "give a whole number, e.g. 4",
              "int_from_float": "give a whole number, e.g. 4", "float_parsing": "give a number, e.g. 0.5",
              "float_type": "give a number, e.g. 0.5", "bool_parsing": "give true or false", "bool_type": "give true or false",
              "string_type": "give a string (quote it)", "list_type": "give a list, e.g. [a, b]"}
    return simple.get(t, default)
