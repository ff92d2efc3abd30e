"""``faultlab status|revert|recover --inventory FILE (--node a,b | --all-nodes)``: the
faults on ssh nodes, seen, reverted and recovered on the nodes themselves
(``views.in_force``: ``faultlab.lifecycle.remoteview``).

Exit codes as on this host: 0 nothing left, 1 something left (named), 2 bad input; an
unreachable node or a refused host key is a one-line error naming the node (exit 1),
with nothing done on it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from faultlab.errors import FIELD_CHARS, BadInput, FaultlabError, printable
from faultlab.lifecycle.views import end, in_force
from faultlab.nodes import inventory as inv_mod
from faultlab.timefmt import when

#: how long one ``revert``/``recover --inventory`` waits for the faults of one node in
#: all (s): each fault's watchdog is waited for up to a minute, and the node's root may
#: list ``lease_remote.MAX_ON_NODE`` look-alikes that no signal ends (each cost root's
#: ``revert --all --inventory`` its minute: 256 of them some 4 hours); a node holds a
#: few faults at a time, whose watchdogs revert in seconds
REVERT_S = 300.0


def inventory_targets(inventory: Path | None, node: str | None, all_nodes: bool) -> list:
    """The ssh nodes named by ``--node a,b`` or ``--all-nodes`` in ``inventory``.
    Raises BadInput naming the field."""
    if inventory is None:
        raise BadInput("--node NAME / --all-nodes name inventory nodes", field="--inventory", fix="add --inventory FILE")
    if bool(node) == bool(all_nodes):
        raise BadInput("give --node NAME[,NAME] or --all-nodes (one of them)", field="--node", fix="e.g. --node gpu-07 or --all-nodes")
    inv = inv_mod.load(inventory)
    return inv_mod.ssh_nodes(inv, inv.select(node or None))


def _faults(nodes, fault_id: str | None = None):
    """The faults on ``nodes`` (``fault_id``: only that one); each file of a node's
    lease folder that is no valid record is a warning line on stderr (never acted on)."""
    out = []
    for n in nodes:
        faults, problems = in_force(n)
        for p in problems:
            print(printable(f"faultlab: warning: {p} (never acted on)"), file=sys.stderr)
        out += [f for f in faults if fault_id is None or f.fault_id == fault_id]
    return out


def _field(text) -> str:
    """A field of a node's record as a line shows it: printable, at most
    :data:`faultlab.errors.FIELD_CHARS` characters, ``-`` when empty."""
    return printable(text, FIELD_CHARS) if text else "-"


def status(nodes, out, as_json: bool) -> int:
    """Print the faults in force on ``nodes``; returns the exit code."""
    rows = [f.row() for f in _faults(nodes)]
    if as_json:
        out.print_json(json.dumps(rows))
        return 0
    if not rows:
        out.print(f"no faults in force on {', '.join(n.describe() for n in nodes)}", markup=False)
    for r in rows:
        wd = f"watchdog reverts it at the latest at {when(r['deadline_ts'])}" if r["watchdog_alive"] else "WATCHDOG GONE: run faultlab recover"
        held = "held by its controller" if r["controller_alive"] else f"left to its lease (controller {_field(r['controller']) if r['controller'] else 'unknown'})"
        rec = "" if r["record"] else "  (lease record lost: the watchdog still ends it)"
        # the record is the node's word (its root may write it, up to 1 MiB): printable and cut
        out.print(printable(f"{r['fault_id']}  {_field(r['type'])}  {_field(r['node'])}  {_field(r['target'])}  {wd}  {held}{rec}"),
                  markup=False, highlight=False)
    return 0


def revert(nodes, fault_id: str | None, out, as_json: bool, *, verb: str = "revert") -> int:
    """Revert ``fault_id`` (None: every fault) on ``nodes``; returns the exit code."""
    done = [d for n in nodes for d in _ended(n, fault_id)]
    if as_json:
        out.print_json(json.dumps(done))
    elif not done:
        out.print(f"no fault {fault_id + ' ' if fault_id else ''}in force on {', '.join(n.describe() for n in nodes)}", markup=False)
    for d in done if not as_json else []:
        out.print(printable(f"{d['fault_id']} on {_field(d['node'])}: {'reverted' if not d['left'] else 'NOT reverted: left ' + '; '.join(map(_field, d['left']))}"),
                  markup=False, highlight=False)
    bad = [d for d in done if d["left"]]
    if bad:
        print(f"faultlab: error: {verb}: {', '.join(d['fault_id'] + ' on ' + d['node'] for d in bad)} not fully reverted", file=sys.stderr)
    return 1 if bad else 0


def _ended(node, fault_id: str | None) -> list[dict]:
    """Revert the faults of ``node`` (``fault_id``: only that one), each waited for at
    most a minute and all of them together ``REVERT_S``: a fault not tried by then is
    left, saying why. One dict a fault: ``fault_id``, ``node``, ``left``."""
    deadline = time.monotonic() + REVERT_S
    done = []
    for f in _faults([node], fault_id):
        left = deadline - time.monotonic()
        if left > 0:
            gone = end(f, timeout_s=min(60.0, left))
        else:
            gone = [f"not tried: {node.describe()} took {REVERT_S:g}s over the faults before it (run this again)"]
        done.append({"fault_id": f.fault_id, "node": f.node.describe(), "left": gone})
    return done


def run(cmd: str, inventory, node, all_nodes, fault_id, out, as_json: bool) -> int:
    """The ``--inventory`` form of ``status``/``revert``/``recover``; one-line errors."""
    try:
        nodes = inventory_targets(inventory, node, all_nodes)
        if cmd == "status":
            return status(nodes, out, as_json)
        return revert(nodes, fault_id, out, as_json, verb=cmd)
    except FaultlabError as e:
        print(f"faultlab: error: {e}", file=sys.stderr)
        return getattr(e, "exit_code", 1)
