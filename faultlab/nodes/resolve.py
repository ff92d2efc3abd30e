"""CLI node specs (``local``, ``netns:NAME``) to Node objects."""

from __future__ import annotations

from faultlab.errors import BadInput
from faultlab.nodes.base import Node
from faultlab.nodes.docker import resolve_docker
from faultlab.nodes.local import LocalNode
from faultlab.nodes.netns import NetnsNode, netns_list


#: the node specs the CLI takes, one per backend (named in every --node error)
BACKENDS = ("local", "netns:NAME", "docker:CONTAINER")


def resolve_node(spec: str) -> Node:
    """Turn a CLI node spec into a Node.

    Specs: ``local``; ``netns:NAME``; ``docker:CONTAINER`` (a running container of faultlab's dockerd;
    ssh nodes are named through an inventory, faultlab.nodes.inventory). A bare NAME is refused, even when a namespace
    of that name exists: the backend is always explicit. Raises BadInput naming the
    ``--node`` field and the backends for anything else.
    """
    spec = (spec or "").strip()
    backends = ", ".join(BACKENDS)
    if not spec:
        raise BadInput("empty", field="--node", fix=f"give one of: {backends}")
    if spec == "local":
        return LocalNode(name="local")
    kind, _, rest = spec.partition(":")
    if not rest:
        hint = f" (a network namespace {spec!r} exists: netns:{spec})" if spec in netns_list() else ""
        raise BadInput(f"{spec!r} names no backend{hint}", field="--node", fix=f"give BACKEND:NAME; backends: {backends}")
    if kind == "docker":
        return resolve_docker(rest)
    if kind == "netns":
        if rest not in netns_list():
            raise BadInput(f"network namespace {rest!r} does not exist", field="--node", fix="see `ip netns list`")
        return NetnsNode(name=rest, netns=rest)
    if kind == "ssh":
        raise BadInput(f"ssh nodes are not named on the command line ({spec!r})", field="--node",
                       fix="name them in an inventory file: --inventory cluster.yaml --node NAME (faultlab testbed inventory-schema)")
    raise BadInput(f"unknown backend {kind!r} in {spec!r}", field="--node", fix=f"give one of: {backends}")
