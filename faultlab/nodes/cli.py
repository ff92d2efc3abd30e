"""``faultlab testbed up|down|status``: testbeds of every backend, by hand.

``up`` leaves the testbed running (its state file lets ``down`` and ``faultlab
recover`` remove it, also after an ``up`` killed half-way) and prints, for docker and
ssh testbeds, the inventory file that reaches its nodes over SSH.
"""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from faultlab import procid
from faultlab.errors import BadInput, FaultlabError

# Lazy imports: the CLI imports this module to register ``faultlab testbed``; the backends
# are imported inside each command, so ``faultlab --help`` stays fast.

testbed_app = typer.Typer(no_args_is_help=True, help="Bring testbeds of netns, docker or ssh nodes up and down.")


def _fail(err: Exception) -> None:
    print(f"faultlab: error: {err}", file=sys.stderr)
    raise typer.Exit(getattr(err, "exit_code", 1))


def _check_name(name: str | None) -> str | None:
    if name is not None and not (1 <= len(name) <= 4 and all(c in "0123456789abcdef" for c in name)):
        raise BadInput(f"{name!r} is not 1-4 lowercase hex digits", field="--name", fix="give e.g. a1b2; it goes into interface names")
    return name


@testbed_app.command("up")
def up(
    backend: str = typer.Option("netns", "--backend", help="netns | docker | ssh"),
    nodes: int = typer.Option(4, "--nodes", metavar="N", help="number of nodes"),
    name: Optional[str] = typer.Option(None, "--name", help="testbed id: 1-4 hex digits (default: random)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object on stdout: id, backend, nodes (name, address) and, for docker and ssh, the inventory and known_hosts files"),
):
    """Bring a testbed up and leave it running; prints its id, nodes and (docker, ssh)
    the inventory file that reaches them."""
    from faultlab.nodes.backends import make_testbed

    try:
        tb = make_testbed(backend, nodes, _check_name(name))
        tb.up()
    except FaultlabError as e:
        _fail(e)
    if getattr(tb, "started_dockerd", False):
        from faultlab.nodes.dockerd import left_running

        print(left_running(), file=sys.stderr)
    info = {"id": tb.id, "backend": backend, "nodes": [{"name": n.name, "address": n.address, "node": n.describe()} for n in tb.nodes]}
    if backend != "netns":
        info["inventory"] = str(tb.inventory_path)
        info["known_hosts"] = str(tb.known_hosts)
    if as_json:
        print(json.dumps(info, indent=1))
        return
    print(f"testbed {tb.id} up: {len(tb.nodes)} {backend} node(s); remove it with faultlab testbed down --name {tb.id}")
    for n in info["nodes"]:
        print(f"  {n['name']}  {n['address']}  {n['node']}")
    if "inventory" in info:
        print(f"inventory: {info['inventory']} (known hosts: {info['known_hosts']})")


@testbed_app.command("down")
def down(name: str = typer.Option(..., "--name", help="testbed id (see `faultlab testbed status`)"),
         as_json: bool = typer.Option(False, "--json", help="one JSON object on stdout: the testbed id and removed: true")):
    """Remove a testbed: every namespace, link, container, network and iptables rule
    it made (the cached docker node image stays)."""
    from faultlab.nodes.testbed import NetnsTestbed

    try:
        _check_name(name)
        from faultlab.nodes.docker_testbed import DockerTestbed, list_docker_testbeds
        from faultlab.nodes.testbed import load_states

        dk = next((st for st in list_docker_testbeds() if st["id"] == name), None)
        nn = next((st for st in load_states()[0] if st.id == name), None)
        if dk is not None:
            errs = DockerTestbed.from_state(dk).down()
        elif nn is not None:
            errs = NetnsTestbed.from_state(nn).down()
        else:
            raise BadInput(f"no testbed {name!r}", field="--name", fix="see `faultlab testbed status`")
    except FaultlabError as e:
        _fail(e)
    if errs:
        print(f"faultlab: error: testbed {name}: {'; '.join(errs)}", file=sys.stderr)
        raise typer.Exit(1)
    print(json.dumps({"id": name, "removed": True}) if as_json else f"testbed {name} removed")


@testbed_app.command("status")
def status(as_json: bool = typer.Option(False, "--json", help="a JSON list on stdout: id, backend, nodes and whether the controller is alive, per testbed")):
    """Testbeds on this host, with their backend, nodes and controller."""
    from faultlab.nodes.docker_testbed import list_docker_testbeds
    from faultlab.nodes.testbed import load_states

    rows = [{"id": st.id, "backend": "netns", "nodes": len(st.netns), "controller_alive": procid.alive(st.pid, st.starttime)}
            for st in load_states()[0]]
    for st in list_docker_testbeds():
        rows.append({"id": st["id"], "backend": "ssh" if st["host_like"] else "docker", "nodes": len(st["containers"]),
                     "controller_alive": procid.alive(st["pid"], st.get("starttime"))})
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    if not rows:
        print("no testbeds")
    for r in rows:
        print(f"{r['id']}  {r['backend']:6}  {r['nodes']} node(s)  controller {'alive' if r['controller_alive'] else 'gone'}")


@testbed_app.command("inventory-schema")
def inventory_schema():
    """JSON Schema of inventory files."""
    from faultlab.nodes.inventory import schema

    print(json.dumps(schema(), indent=1))
