"""A command as plans and leases hold it: an argv and the scope it runs in on its node,
rendered as the shell line its lease's watchdog runs (``shlex.join`` of the argv as
the node runs it from its lease host); ``write_cmd`` writes a value into a file with
no string concatenated into shell code."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from faultlab.nodes import Node


@dataclass(frozen=True)
class Cmd:
    """One command of a plan: an argv run on the node in ``scope`` ("net" or "host")."""

    argv: tuple[str, ...]
    scope: str = "host"
    why: str = ""

    def render(self, node: Node) -> str:
        """The shell line that runs this command from the node's lease host."""
        return shlex.join(node.argv(list(self.argv), self.scope))


#: the shell body of ``write_cmd`` (``revertcheck`` recognizes it)
WRITE_SH = 'printf "%s\\n" "$1" > "$2"'


def write_cmd(path: str, value: str, why: str = "") -> Cmd:
    """A command writing ``value`` to ``path`` (sysfs/cgroupfs files); no string is
    concatenated into shell code: value and path are positional arguments."""
    return Cmd(("sh", "-c", WRITE_SH, "sh", value, path), "host", why)
