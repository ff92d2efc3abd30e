"""The host sampler on ssh nodes: start it there, turn its raw samples into host rows.

A docker node needs none of this: its ranks are processes of this host (host PIDs),
so faultlab.telemetry.hostsampler reads their ``/proc`` and runs ``ss`` in their
network namespace like any other. An ssh node's processes are on another machine:

1. :func:`start_node_samplers` starts faultlab.telemetry.nodesampler on each ssh node
   (its source as ``python3 -c``, detached, so it outlives a cut network and ends by
   itself when the ranks are gone), writing ``host-NODE.jsonl`` beside the ranks'
   telemetry on the node;
2. faultlab.telemetry.collect brings that file back with the rest (every 0.5 s);
3. :func:`host_rows` turns the collected raw samples into rows of the ``host`` table
   (same metric names and units as the local sampler's; TCP metrics through
   faultlab.telemetry.tcpstats' ``parse_ss`` / ``TcpTracker`` / ``PeerResolver``).

Everything in a collected file is untrusted: a line that is not a JSON object of the
expected shape is skipped, numbers are checked to be finite and non-negative. A node
(its root, its login user) writes up to ``collect.MAX_FILE_BYTES`` there, so what the
controller holds of it is bounded apart from the file: the file is read a line at a
time and only the sample before the current one is kept (parsed, a sample costs about
13 times its text), at most ``max_samples`` samples make rows (the runner gives the
run's length: the sampler writes one a second), and a sample's TCP rows name at most
:data:`MAX_TCP_PEERS` peers.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pandas as pd

from faultlab.nodes.base import LEASE_ON_NODE
from faultlab.telemetry import tcpstats
from faultlab.telemetry.collect import HOST_PREFIX as PREFIX
from faultlab.telemetry.collect import MAX_LINE_BYTES

#: peers a sample's TCP rows name at most (the known nodes first): a node's ``ss`` text
#: is its own word, and each peer it names adds up to ten rows
MAX_TCP_PEERS = 64
#: seconds between a node sampler's samples (``start_node_samplers``)
INTERVAL_S = 1.0


def _source() -> str:
    return (Path(__file__).parent / "nodesampler.py").read_text()


def sampler_argv(pids: list[int], out: str, *, until: float, interval_s: float = 1.0, python: str = "python3") -> list[str]:
    """The argv that runs the node sampler on a node (``python3 -c SOURCE ...``). Pure
    apart from reading nodesampler.py."""
    return [python, "-c", _source(), "--pids", ",".join(str(int(p)) for p in pids), "--out", out,
            "--interval", f"{interval_s:g}", "--until", f"{until:.0f}"]


def start_node_samplers(ranks, run_id: str, *, until: float, interval_s: float = INTERVAL_S) -> dict[str, str]:
    """Start one node sampler per ssh node of ``ranks`` (faultlab.benchmarks.launch
    RankProcs; nodes that are their own lease host, ``LEASE_ON_NODE``). Returns {node name: error} for nodes where
    it could not start (the run goes on without their host rows)."""
    by_node: dict[str, tuple] = {}
    for r in ranks:
        if r.node.lease_host() == LEASE_ON_NODE:
            by_node.setdefault(r.node.name, (r.node, []))[1].append(r.pid)
    errors = {}
    for name, (node, pids) in by_node.items():
        out = f"{node.workload_out(run_id, Path('.'))}/{PREFIX}{name}.jsonl"
        try:
            if not node.has_program("python3"):
                errors[name] = "python3 not found on the node (the host sampler there needs it)"
                continue
            node.spawn(sampler_argv(pids, out, until=until, interval_s=interval_s), new_session=True)
        except Exception as e:  # noqa: BLE001 - one node's sampler never stops the run
            errors[name] = f"{type(e).__name__}: {e}"
    return errors


def iter_samples(path: Path) -> Iterator[dict]:
    """The well-formed raw samples of a collected ``host-NODE.jsonl``, in file order,
    read a line at a time (a line longer than ``collect.MAX_LINE_BYTES``, which the
    collector never copies, is skipped): the file is never held whole."""
    try:
        f = open(path, "rb")
    except OSError:
        return
    with f:
        while line := f.readline(MAX_LINE_BYTES + 1):
            if len(line) > MAX_LINE_BYTES:
                while line and not line.endswith(b"\n"):  # the rest of that line
                    line = f.readline(MAX_LINE_BYTES + 1)
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if _valid(rec):
                yield rec


def read_samples(path: Path) -> list[dict]:
    """The well-formed raw samples of a collected ``host-NODE.jsonl``, in file order
    (:func:`iter_samples` as a list)."""
    return list(iter_samples(path))


#: the largest integer a sample may hold (a kernel counter is 64 bits; a bigger one
#: is not a reading, and math.isfinite of an int past a float's range raises)
_MAX_INT = 2**64


def _num(v) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return (0 <= v < _MAX_INT) if isinstance(v, int) else (math.isfinite(v) and v >= 0)


def _valid(rec) -> bool:
    if not isinstance(rec, dict) or not all(_num(rec.get(k)) for k in ("ts", "mono", "hz")) or rec["hz"] <= 0:
        return False
    cpu, procs, net = rec.get("cpu"), rec.get("procs"), rec.get("net")
    if not (isinstance(cpu, list) and len(cpu) == 2 and all(map(_num, cpu))):
        return False
    if not isinstance(procs, dict) or not all(isinstance(v, list) and len(v) == 2 and all(map(_num, v)) for v in procs.values()):
        return False
    if net is not None and not (isinstance(net, list) and len(net) == 2 and all(map(_num, net))):
        return False
    delay = rec.get("delay", {})  # absent in a sample of a node sampler before run delay
    if not isinstance(delay, dict) or not all(isinstance(v, int) and _num(v) for v in delay.values()):
        return False
    return isinstance(rec.get("ino", []), list) and isinstance(rec.get("ss"), (str, type(None)))


def rows_of(node: str, samples: Iterable[dict], peers: dict[str, str]) -> list[tuple[str, float, str, float]]:
    """(node, ts, metric, value) rows of one node's raw samples, taken in the order
    given (the sampler appends them in ``mono`` order; a sample whose ``mono`` is not
    past the one before is skipped) and only one held back at a time: from the second
    sample on, each over the interval since the previous one (the local sampler's
    shape). A sample's TCP rows name at most :data:`MAX_TCP_PEERS` peers (the nodes of
    ``peers`` first).

    ``cpu_util_pct`` (node-wide, 0..100), ``proc_cpu_util_pct`` (percent of one CPU;
    a process first seen counts from its start), ``proc_rss_bytes``,
    ``proc_run_delay_s_per_s`` (s/s, summed over the threads; from samples that carry
    ``delay``),
    ``net_rx_bytes_per_s``/``net_tx_bytes_per_s``, and the per-peer ``tcp_*`` metrics
    of the connections whose socket the ranks hold (peers named by ``peers``:
    address -> node name)."""
    rows: list[tuple[str, float, str, float]] = []
    tracker = tcpstats.TcpTracker()
    resolver = tcpstats.PeerResolver(peers)
    prev = None
    for s in samples:
        if prev is not None and s["mono"] <= prev["mono"]:
            continue
        conns = None
        if s.get("ss") is not None:
            ino = {i for i in s.get("ino", []) if isinstance(i, int)}
            conns = _few_peers([c for c in tcpstats.parse_ss(s["ss"]) if c.inode in ino], lambda c: resolver.peer(node, c),
                               set(peers.values()))
            tcp = tracker.update(conns, lambda c: resolver.peer(node, c), s["mono"])
        if prev is None:
            prev = s
            continue
        ts, dt = float(s["ts"]), s["mono"] - prev["mono"]
        d_total = s["cpu"][1] - prev["cpu"][1]
        if d_total > 0:
            rows.append((node, ts, "cpu_util_pct", 100.0 * max(0, s["cpu"][0] - prev["cpu"][0]) / d_total))
        ticks = sum(max(0, v[0] - prev["procs"].get(k, [0, 0])[0]) for k, v in s["procs"].items())
        rows.append((node, ts, "proc_cpu_util_pct", 100.0 * ticks / s["hz"] / dt))
        rows.append((node, ts, "proc_rss_bytes", float(sum(v[1] for v in s["procs"].values()))))
        if "delay" in s and "delay" in prev:
            rows.append((node, ts, "proc_run_delay_s_per_s", _run_delay_gained(prev["delay"], s["delay"]) / 1e9 / dt))
        if s["net"] is not None and prev["net"] is not None:
            rows.append((node, ts, "net_rx_bytes_per_s", max(0, s["net"][0] - prev["net"][0]) / dt))
            rows.append((node, ts, "net_tx_bytes_per_s", max(0, s["net"][1] - prev["net"][1]) / dt))
        if conns is not None:
            rows += [(node, ts, m, float(v)) for m, v in tcp]
        prev = s
    return rows


def _few_peers(conns: list, peer_of, known: set[str]) -> list:
    """``conns`` less those of peers past the first :data:`MAX_TCP_PEERS` (the known
    nodes' connections counted first)."""
    names = [peer_of(c) for c in conns]
    keep = sorted(set(names), key=lambda p: (p not in known, p))[:MAX_TCP_PEERS]
    return [c for c, p in zip(conns, names) if p in set(keep)] if len(keep) < len(set(names)) else conns


def _run_delay_gained(before: dict, now: dict) -> int:
    """ns of run delay gained between two samples, over the threads in both (one that
    ended or started between them is left out of that interval, as in the local
    sampler; a counter that went back counts 0)."""
    return sum(max(0, v - before[k]) for k, v in now.items() if k in before)


def host_rows(telemetry_dir: Path, nodes: list[str], peers: dict[str, str], run_id: str | None = None, *,
              max_samples: int | None = None, skipped: dict[str, int] | None = None) -> pd.DataFrame:
    """Host rows of the collected samples of ``nodes`` in ``telemetry_dir``
    (``NODE/host-NODE.jsonl``: each node's own folder), as HostSampler.frame() shapes them (``run_id`` column when
    given). At most ``max_samples`` samples of a node make rows (:func:`max_samples`
    for a run); a node whose file holds more is put in ``skipped`` with that number
    (the rest is never parsed)."""
    rows = []
    for name in nodes:
        samples = iter_samples(Path(telemetry_dir) / name / f"{PREFIX}{name}.jsonl")
        rows += rows_of(name, itertools.islice(samples, max_samples), peers)
        if max_samples is not None and next(samples, None) is not None and skipped is not None:
            skipped[name] = max_samples
        samples.close()
    df = pd.DataFrame(rows, columns=["node", "ts", "metric", "value"])
    df["ts"] = df["ts"].astype("float64")
    df["value"] = df["value"].astype("float64")
    if run_id is not None:
        df.insert(0, "run_id", run_id)
    return df


def max_samples(started_ts: float, now: float | None = None) -> int:
    """The most samples a node sampler started at ``started_ts`` (unix s) can have
    written by ``now`` (one each :data:`INTERVAL_S`), plus a minute's worth of slack."""
    return int((max(0.0, (time.time() if now is None else now) - started_ts) + 60) / INTERVAL_S)


def until_for(duration_s: float | None) -> float:
    """The latest end of a node sampler: the run's duration plus 10 minutes (6 h for a
    run given in steps); it ends earlier, with the ranks."""
    return time.time() + (duration_s + 600 if duration_s else 6 * 3600)
