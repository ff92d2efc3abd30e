"""Errors with a one-line message that names the field and the fix."""

from __future__ import annotations


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
        super().__init__("".join(parts))


class BadInput(FaultlabError):
    """Malformed user input: a scenario, a flag, a unit. Exit code 2; nothing applied."""

    exit_code = 2


class NodeError(FaultlabError):
    """A node could not run a command (unreachable, missing tool, no privilege)."""


class Refused(FaultlabError):
    """The node holds state faultlab did not create, or a conflicting fault: inject refuses."""

    exit_code = 3
