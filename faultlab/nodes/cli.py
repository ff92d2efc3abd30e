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

from faultlab.errors import BadInput, FaultlabError

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
    nodes: int = typer.Option(4, "--nodes", help="number of nodes"),
    name: Optional[str] = typer.Option(None, "--name", help="testbed id: 1-4 hex digits (default: random)"),
):
    """Bring a testbed up and leave it running; prints its id and nodes."""
    from faultlab.nodes.backends import make_testbed

    try:
        tb = make_testbed(backend, nodes, _check_name(name))
        tb.up()
    except FaultlabError as e:
        _fail(e)
    info = {"id": tb.id, "backend": backend, "nodes": [{"name": n.name, "address": n.address, "node": n.describe()} for n in tb.nodes]}
    if backend != "netns":
        info["inventory"] = str(tb.inventory_path)
        info["known_hosts"] = str(tb.known_hosts)
    print(json.dumps(info, indent=1))


@testbed_app.command("down")
def down(name: str = typer.Option(..., "--name", help="testbed id (see `faultlab testbed status`)")):
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
    print(f"testbed {name} removed")


@testbed_app.command("status")
def status(as_json: bool = typer.Option(False, "--json", help="machine-readable output")):
    """Testbeds on this host, with their backend, nodes and controller."""
    from faultlab.nodes.docker_testbed import list_docker_testbeds
    from faultlab.nodes.testbed import _controller_alive, load_states

    rows = [{"id": st.id, "backend": "netns", "nodes": len(st.netns), "controller_alive": _controller_alive(st.pid, st.starttime)}
            for st in load_states()[0]]
    for st in list_docker_testbeds():
        rows.append({"id": st["id"], "backend": "ssh" if st["host_like"] else "docker", "nodes": len(st["containers"]),
                     "controller_alive": _controller_alive(st["pid"], st.get("starttime"))})
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


def inject_fanout(*, type, node, nodes_sel, inventory, accept_new, target, duration_s, grace_s, opts, force, detach, dry_run, as_json, out) -> None:
    """``faultlab inject`` on many nodes (``--node a,b,c`` or ``--nodes rack=3``, with
    ``--inventory``): all or nothing (faultlab.lifecycle.fanout), then in the foreground
    until the end (Ctrl-C / SIGTERM revert every node), or ``--detach``."""
    import signal
    import time

    from faultlab import injectors
    from faultlab.nodes import inventory as inv_mod
    from faultlab.lifecycle.fanout import apply_all, revert_all
    from faultlab.nodes.resolve import resolve_node

    try:
        if inventory:
            inv = inv_mod.load(inventory)
            names = inv.select(node if node != "local" else None, nodes_sel)
            targets = inv_mod.ssh_nodes(inv, names, accept_new=accept_new)
        else:
            if nodes_sel:
                raise BadInput("a label selection needs an inventory", field="--nodes", fix="add --inventory FILE")
            targets = [resolve_node(s.strip()) for s in node.split(",") if s.strip()]
        injs = [injectors.build(type, n, target=target, duration_s=duration_s, opts=opts, force=force) for n in targets]
        if dry_run:
            plans = []
            for inj in injs:
                facts = inj.probe()
                plans.append(inj.plan(facts).render(inj.node))
            print(json.dumps(plans, indent=1) if as_json else "\n".join(
                f"# {p['type']} on {p['node']} target {p['target']}\n" + "\n".join(p["inject"]) + "\n# revert\n" + "\n".join(p["revert"]) for p in plans))
            return
        actives = apply_all(injs, duration_s, grace_s=0.0 if detach else grace_s)
    except FaultlabError as e:
        _fail(e)
    info = [{"fault_id": a.fault_id, "node": a.injector.node.describe(), "target": a.plan.target, "verified": (a.evidence.get("verify") or {}).get("ok")} for a in actives]
    if detach:
        print(json.dumps(info) if as_json else f"injected on {len(actives)} nodes: " + ", ".join(f"{i['fault_id']} ({i['node']})" for i in info))
        return

    class _Stop(BaseException):
        pass

    def _raise(*_):
        raise _Stop()

    old = {s: signal.signal(s, _raise) for s in (signal.SIGTERM, signal.SIGHUP)}
    print(f"injected on {len(actives)} nodes for {duration_s:g}s: " + ", ".join(f"{i['fault_id']} ({i['node']})" for i in info)
          + "; Ctrl-C reverts every node", file=sys.stderr, flush=True)
    try:
        end = time.time() + duration_s
        while time.time() < end:
            time.sleep(min(0.2, max(0.0, end - time.time())))
    except (KeyboardInterrupt, _Stop):
        print("interrupted: reverting every node", file=sys.stderr)
    finally:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        st = revert_all(actives)
        for s, h in old.items():
            signal.signal(s, h)
    for i, s in zip(info, st):
        i["status"] = s
    print(json.dumps(info) if as_json else "\n".join(f"{i['fault_id']} on {i['node']}: {i['status']}" for i in info))
    if any(s == "revert-failed" for s in st):
        raise typer.Exit(1)
