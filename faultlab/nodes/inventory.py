"""Inventories: the nodes of a cluster, in YAML (pydantic models, JSON Schema).

::

    known_hosts: ~/.ssh/known_hosts     # pinned host keys (an unknown or changed key is refused)
    defaults: {user: root, port: 22, key: ~/.ssh/id_ed25519, connect_timeout_s: 10}
    peer_group_labels: [gpu]            # the label keys that say what kind a node is
    nodes:
      gpu-07: {address: 10.0.3.7, interface: eth0, gpus: 8, labels: {rack: "3", gpu: a100}}
      gpu-08: {address: 10.0.3.8, labels: {rack: "3", gpu: h100}}

``select`` takes ``--node a,b,c`` names or ``--select 'rack=3'`` label selections
(``k=v`` joined by ``,``: every pair must match). Unknown names and empty selections
are BadInput naming the field.

A node's labels also declare the peer group of the rank a run starts on it
(``gpu=a100``; :func:`faultlab.scenario.peer_group_of`), so the labeler judges it only
against ranks of its kind: those of ``peer_group_labels`` (all of them when it is not
given: leave out keys that say where a node is, such as ``rack``, or ranks of one kind
in two racks are judged apart).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from faultlab import inputfile
from faultlab.errors import BadInput, pydantic_fix
from faultlab.nodes import extras
from faultlab.nodes.ssh import SshNode
from faultlab.yamlsafe import DuplicateKey, load as load_yaml


class InventoryNode(BaseModel):
    """One node. ``address``: host name or IP; ``key``: private key file."""

    model_config = ConfigDict(extra="forbid")
    address: str
    port: int | None = Field(None, ge=1, le=65535)
    user: str | None = None
    key: str | None = None
    interface: str | None = None
    gpus: int = Field(0, ge=0)
    sudo: bool | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class Defaults(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user: str = "root"
    port: int = Field(22, ge=1, le=65535)
    key: str | None = None
    sudo: bool = False
    connect_timeout_s: float = Field(10.0, gt=0)
    command_timeout_s: float = Field(60.0, gt=0)
    max_parallel: int = Field(10, ge=1, le=256)


class Inventory(BaseModel):
    """A cluster's nodes. ``known_hosts``: the file of pinned host keys;
    ``peer_group_labels``: the label keys that declare a node's peer group (None:
    all of its labels)."""

    model_config = ConfigDict(extra="forbid")
    known_hosts: str = "~/.ssh/known_hosts"
    defaults: Defaults = Field(default_factory=Defaults)
    peer_group_labels: list[str] | None = None
    nodes: dict[str, InventoryNode]

    def group_labels(self, name: str) -> dict[str, str]:
        """The labels of node ``name`` that declare its peer group
        (``peer_group_labels`` of them; all without it)."""
        labels = self.nodes[name].labels
        keys = self.peer_group_labels
        return {k: v for k, v in labels.items() if keys is None or k in keys}

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", exclude_none=True), sort_keys=False)

    def select(self, names: str | None = None, selector: str | None = None) -> list[str]:
        """Node names by ``names`` (``a,b,c``) or ``selector`` (``rack=3,role=gpu``).
        Raises BadInput naming ``--node``/``--select``."""
        if names:
            out = [n.strip() for n in names.split(",") if n.strip()]
            unknown = [n for n in out if n not in self.nodes]
            if unknown:
                raise BadInput(f"no node {unknown[0]!r} in the inventory", field="--node", fix=f"give one of {', '.join(sorted(self.nodes))}")
            return out
        if selector:
            want = {}
            for pair in selector.split(","):
                k, eq, v = pair.partition("=")
                if not eq or not k.strip():
                    raise BadInput(f"{pair!r} is not KEY=VALUE", field="--select", fix="give e.g. rack=3 or rack=3,role=gpu")
                want[k.strip()] = v.strip()
            out = [n for n, spec in self.nodes.items() if all(spec.labels.get(k) == v for k, v in want.items())]
            if not out:
                raise BadInput(f"no inventory node has labels {selector}", field="--select", fix="see the labels in the inventory file")
            return out
        return list(self.nodes)


def load(path: str | Path) -> Inventory:
    """Read and validate an inventory file. Raises BadInput naming file and field
    (also for a file that is not a regular file or is over
    :data:`faultlab.inputfile.YAML_BYTES`: nothing of it read)."""
    p = Path(path)
    text = inputfile.read_text(p, "--inventory", limit=inputfile.YAML_BYTES, fix="give an inventory YAML file")
    try:
        data = load_yaml(text)
    except DuplicateKey as e:
        raise BadInput(f"{p}:{e.line}: duplicated key {e.key!r} (also at line {e.first_line})", field="--inventory",
                       fix="keep one of them: YAML would silently take the last") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark else str(p)
        raise BadInput(f"{where}: not valid YAML: {getattr(e, 'problem', None) or e}", field="--inventory", fix="fix the YAML syntax") from None
    try:
        return Inventory.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        schema_fix = "see `faultlab testbed inventory-schema`"
        fix = pydantic_fix(err, schema_fix)
        raise BadInput(f"{p}: {loc}: {err['msg']}", field="--inventory",
                       fix=schema_fix if fix is None and "(" not in err["msg"] else fix) from None


def schema() -> dict:
    return Inventory.model_json_schema()


def ssh_nodes(inv: Inventory, names: list[str], *, accept_new: bool = False) -> list:
    """SshNodes of the named inventory nodes (defaults filled in; ``group_labels``
    from :meth:`Inventory.group_labels`). Raises BadInput
    naming ``--inventory`` when paramiko (faultlab[ssh]) is not installed."""
    extras.require("inventory", field="--inventory")
    d = inv.defaults
    out = []
    for name in names:
        spec = inv.nodes[name]
        out.append(SshNode(name=name, address=spec.address, iface=spec.interface, port=spec.port or d.port, user=spec.user or d.user,
                           key=spec.key or d.key, known_hosts=inv.known_hosts, accept_new=accept_new,
                           sudo=d.sudo if spec.sudo is None else spec.sudo, connect_timeout_s=d.connect_timeout_s,
                           command_timeout_s=d.command_timeout_s, group_labels=inv.group_labels(name)))
    return out


def run_nodes(path: str | Path, selector: str | None = None, *, accept_new: bool = False) -> list:
    """The SshNodes a run or campaign uses from inventory ``path``: every node, or those
    whose labels match ``selector`` (``rack=3``), in file order, one rank each.
    Raises BadInput naming ``--inventory``/``--select``; a run needs two at least."""
    inv = load(path)
    names = inv.select(None, selector)
    if len(names) < 2:
        raise BadInput(f"{len(names)} inventory node(s) selected", field="--select", fix="a run needs at least 2 nodes (a straggler needs peers)")
    return ssh_nodes(inv, names, accept_new=accept_new)
