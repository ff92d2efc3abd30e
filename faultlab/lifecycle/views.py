"""What is in force where a node's leases live, through one interface for this host
and ssh nodes: ``in_force(node)`` gives the faults (each with ``fault_id`` and
``row()``) and the problem lines met finding them, ``end(fault)`` reverts one and
returns what is still there.

This host's view is host-wide (``hostview``: every user's faults and faultlab's objects
no lease accounts for); an ssh node's is the node's own (``remoteview``: its records and
watchdogs)."""

from __future__ import annotations

from faultlab.lifecycle.hostrevert import revert_view
from faultlab.lifecycle.hostview import host_view
from faultlab.lifecycle.remoteview import RemoteFault, remote_view, revert_remote
from faultlab.nodes import LEASE_ON_NODE


def in_force(node=None) -> tuple[list, list[str]]:
    """(faults, problems) where ``node``'s leases live: the node itself when it is its
    own lease host (``LEASE_ON_NODE``), else this host (also for ``node=None``)."""
    if node is not None and node.lease_host() == LEASE_ON_NODE:
        return remote_view(node)
    return host_view()


def end(fault, timeout_s: float = 60.0) -> list[str]:
    """Revert ``fault`` (of ``in_force``) now; returns what of it is still there
    (empty: gone)."""
    if isinstance(fault, RemoteFault):
        return revert_remote(fault, timeout_s)
    return revert_view(fault, timeout_s)
