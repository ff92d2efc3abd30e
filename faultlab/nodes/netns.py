"""The ``netns`` backend: a network namespace on this host."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from faultlab.nodes.base import Node


@dataclass
class NetnsNode(Node):
    """A network namespace on this host (created by faultlab.nodes.testbed or by the user).

    ``scope="net"`` commands run through ``ip netns exec NETNS``; ``scope="host"``
    commands run on this host, where the node's processes and cgroups are visible
    (``ip netns exec`` remounts /sys, hiding /sys/fs/cgroup, so cgroup work must not
    go through it).
    """

    netns: str = ""

    def __post_init__(self):
        self.kind = "netns"
        if not self.netns:
            self.netns = self.name

    def argv(self, argv: list[str], scope: str = "host") -> list[str]:
        if scope == "net":
            return ["ip", "netns", "exec", self.netns, *argv]
        return list(argv)

    def describe(self) -> str:
        return f"netns:{self.netns}"



def netns_list() -> list[str]:
    """Names of the network namespaces on this host (``ip netns list``)."""
    try:
        cp = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    except FileNotFoundError:
        return []
    return [line.split()[0] for line in cp.stdout.splitlines() if line.strip()]
