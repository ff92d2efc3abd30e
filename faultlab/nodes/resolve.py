"""CLI node specs (``local``, ``netns:NAME``) to Node objects."""

from __future__ import annotations

from faultlab.errors import BadInput
from faultlab.nodes.base import Node
from faultlab.nodes.local import LocalNode
from faultlab.nodes.netns import NetnsNode, netns_list


def resolve_node(spec: str) -> Node:
    """Turn a CLI node spec into a Node.

    Specs: ``local``; ``netns:NAME`` (or a bare NAME that is an existing network
    namespace). Raises BadInput naming the ``--node`` field for anything else.
    """
    spec = (spec or "").strip()
    if not spec:
        raise BadInput("empty", field="--node", fix="give local or netns:NAME")
    if spec == "local":
        return LocalNode(name="local")
    kind, _, rest = spec.partition(":")
    if not rest:
        kind, rest = "netns", spec
        if spec not in netns_list():
            raise BadInput(f"no node {spec!r}", field="--node", fix="give local or netns:NAME of an existing namespace (ip netns list)")
    if kind == "netns":
        if rest not in netns_list():
            raise BadInput(f"network namespace {rest!r} does not exist", field="--node", fix="see `ip netns list`")
        return NetnsNode(name=rest, netns=rest)
    raise BadInput(f"unknown node kind {kind!r} in {spec!r}", field="--node", fix="give local or netns:NAME")
