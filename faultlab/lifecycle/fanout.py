"""Fan-out: one fault on many nodes, all or nothing.

``apply_all(injectors, duration_s)`` applies each injector (its own node) on a thread
pool of at most ``max_parallel`` nodes at once (sshd's default ``MaxStartups 10``
drops unauthenticated connections beyond 10 per server; one controller connecting to
many servers is bounded the same way, Ansible's ``forks``). When any node fails, the
faults already applied are reverted and ``FanoutError`` names the failing node(s); no
node is left with the fault. ``revert_all`` reverts in parallel. ``inject_fanout`` is
``faultlab inject`` on many nodes.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import typer

from faultlab import injectors
from faultlab.errors import BadInput, FaultlabError
from faultlab.injectors.base import apply
from faultlab.nodes import inventory as inv_mod
from faultlab.nodes.resolve import resolve_node


class FanoutError(FaultlabError):
    """Some node of a fan-out failed; every node applied was reverted."""


def apply_all(injs: list, duration_s: float, *, grace_s: float = 10.0, verify: bool = True, max_parallel: int = 10) -> list:
    """Apply every injector; returns their ActiveFaults in order. Raises FanoutError
    (the first failing node named, with its one-line error) after reverting the others."""
    def one(inj):
        try:
            return apply(inj, duration_s, grace_s=grace_s, verify=verify), None
        except Exception as e:
            return None, e

    with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(injs)))) as pool:
        results = list(pool.map(one, injs))
    failed = [(inj, e) for inj, (_, e) in zip(injs, results) if e is not None]
    if failed:
        revert_all([a for a, _ in results if a is not None], max_parallel=max_parallel)
        inj, e = failed[0]
        others = f" (and {len(failed) - 1} more node(s))" if len(failed) > 1 else ""
        msg = str(e)
        if isinstance(e, FaultlabError) and e.fix and msg.endswith(f" ({e.fix})"):
            msg = msg[: -len(f" ({e.fix})")]
        raise FanoutError(f"node {inj.node.name} failed{others}: {msg}; the {len(injs) - len(failed)} node(s) applied were reverted",
                          field="--node", fix=getattr(e, "fix", None) or "fix that node, or leave it out of --node") from e
    return [a for a, _ in results]


def revert_all(actives: list, *, max_parallel: int = 10) -> list[str]:
    """Revert every ActiveFault in parallel; returns their statuses."""
    if not actives:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(actives)))) as pool:
        return list(pool.map(lambda a: a.revert(), actives))


def inject_fanout(*, type, node, nodes_sel, inventory, accept_new, target, duration_s, grace_s, opts, force, detach, dry_run, as_json, out) -> None:
    """``faultlab inject`` on many nodes (``--node a,b,c`` or ``--select rack=3``, with
    ``--inventory``): all or nothing (``apply_all``), then in the foreground
    until the end (Ctrl-C / SIGTERM revert every node), or ``--detach``."""
    try:
        if inventory:
            inv = inv_mod.load(inventory)
            names = inv.select(node if node != "local" else None, nodes_sel)
            targets = inv_mod.ssh_nodes(inv, names, accept_new=accept_new)
        else:
            if nodes_sel:
                raise BadInput("a label selection needs an inventory", field="--select", fix="add --inventory FILE")
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
        print(f"faultlab: error: {e}", file=sys.stderr)
        raise typer.Exit(getattr(e, "exit_code", 1)) from None
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
