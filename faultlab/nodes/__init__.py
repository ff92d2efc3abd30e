"""Nodes: the hosts that run ranks and receive faults, one module per backend.

``base`` is the interface injectors speak to (``Node``: ``argv``, ``run``, ``spawn``,
``write_file``, ``read_file``, ``exists``, ``lease_host``, ``lease_dir``); ``local`` and ``netns`` are
backends; ``testbed`` makes netns testbeds; ``resolve`` turns CLI specs into nodes.
The public names are re-exported here, so ``from faultlab.nodes import X`` works.
"""

from faultlab.nodes.base import LEASE_HERE, LEASE_ON_NODE, Node, lease_dir
from faultlab.nodes.local import LocalNode
from faultlab.nodes.netns import NetnsNode, netns_list
from faultlab.nodes.resolve import resolve_node
from faultlab.nodes.testbed import NetnsTestbed

__all__ = ["Node", "LEASE_HERE", "LEASE_ON_NODE", "LocalNode", "NetnsNode", "lease_dir", "netns_list", "resolve_node", "NetnsTestbed"]
