"""The ``local`` backend: this host."""

from __future__ import annotations

from dataclasses import dataclass

from faultlab.nodes.base import Node


@dataclass
class LocalNode(Node):
    """This host. ``scope`` makes no difference."""

    def __post_init__(self):
        self.kind = "local"
