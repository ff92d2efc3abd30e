"""Localization of job-wide slowdowns from the kernel's per-connection TCP statistics.

In synchronous training a slow link slows every rank alike (all wait in the
all-reduce), so step and compute times cannot say where it is. The connections to
and from the node behind it can: their RTT rises (queueing behind the rate cap), as
C4's connection matrix and SlowSight's TCP metrics use. Input is the ``host`` table
with the per-peer metrics of :mod:`faultlab.telemetry.tcpstats` (``tcp_rtt_ms:PEER`` reported by
node N for its connections to PEER).

For each job label, a connection matrix (C4's idea): per ordered pair of nodes
(reporter, peer) the rise of its RTT, ``median RTT during the label / max(median RTT
before it, typical RTT before it)`` (before: a window as long as the label, at least
5 s, at most 30 s; the typical RTT, the median over all pairs, keeps a near-idle
connection's microsecond baseline from inflating its ratio). Every node then gets a
score: the median rise of the pairs that touch it over the median rise of the pairs
that do not. A slow link raises the RTT of its node's connections; an all-reduce paced
by it can raise some others too, but not all of them. The culprit is the node with the
highest score when it is at least ``min_ratio`` (default 2) and at least 1.5x the
runner-up's; else none is named. Connections of a node to itself and to addresses
that are not nodes are left out.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd


def _rtt_frame(host: pd.DataFrame) -> pd.DataFrame:
    m = host[host["metric"].astype(str).str.startswith("tcp_rtt_ms:")]
    if m.empty:
        return pd.DataFrame(columns=["ts", "a", "b", "value"])
    peer = m["metric"].astype(str).str.split(":", n=1).str[1]
    return pd.DataFrame({"ts": m["ts"].to_numpy(float), "a": m["node"].astype(str).to_numpy(), "b": peer.to_numpy(), "value": m["value"].to_numpy(float)})


def node_scores(host: pd.DataFrame, start_ts: float, end_ts: float) -> dict[str, float]:
    """Per node, the median RTT rise of the connections touching it over that of the
    connections not touching it (see module docstring); ``{}`` without TCP metrics
    or with fewer than three nodes. Units: a ratio of ratios of RTT (ms / ms)."""
    r = _rtt_frame(host)
    if r.empty:
        return {}
    nodes = sorted(set(r.a))
    r = r[r.b.isin(nodes) & (r.a != r.b)]
    if len(nodes) < 3 or r.empty:
        return {}
    span = min(max(end_ts - start_ts, 5.0), 30.0)
    during = r[(r.ts >= start_ts) & (r.ts <= end_ts)].groupby(["a", "b"]).value.median()
    before = r[(r.ts >= start_ts - span) & (r.ts < start_ts)].groupby(["a", "b"]).value.median()
    if during.empty or before.empty:
        return {}
    typical = float(before.median())
    if not typical > 0:
        return {}
    pairs = during.index.intersection(before.index)
    rise = {(a, b): float(during[(a, b)] / max(float(before[(a, b)]), typical)) for a, b in pairs}
    out = {}
    for n in nodes:
        touch = [v for (a, b), v in rise.items() if n in (a, b)]
        other = [v for (a, b), v in rise.items() if n not in (a, b)]
        if touch and other and np.median(other) > 0:
            out[n] = float(np.median(touch) / np.median(other))
    return out


def localize(labels: pd.DataFrame, host: pd.DataFrame | None, *, min_ratio: float = 2.0) -> pd.DataFrame:
    """Name the culprit node of each ``job`` label in its evidence (``culprit``:
    ``"node:NAME"``, ``culprit_rtt_ratio``, ``rtt_ratio_by_node``). Returns a new frame;
    labels other than job, or without TCP metrics, are unchanged."""
    if host is None or host.empty or labels.empty or not (labels["component"] == "job").any():
        return labels
    out = labels.copy()
    for i in np.flatnonzero((out["component"] == "job").to_numpy()):
        row = out.iloc[i]
        sc = node_scores(host, float(row.start_ts), float(row.end_ts))
        if not sc:
            continue
        ev = json.loads(row.evidence or "{}")
        ev.pop("culprit", None)  # localized again: only what this host table says
        ev.pop("culprit_rtt_ratio", None)
        ranked = sorted(sc.items(), key=lambda kv: (-kv[1], kv[0]))
        ev["rtt_ratio_by_node"] = {k: round(v, 3) for k, v in ranked}
        top, second = ranked[0], (ranked[1] if len(ranked) > 1 else (None, 1.0))
        if top[1] >= min_ratio and top[1] >= 1.5 * max(second[1], 1e-9):
            ev["culprit"] = f"node:{top[0]}"
            ev["culprit_rtt_ratio"] = round(top[1], 3)
        out.iat[i, out.columns.get_loc("evidence")] = json.dumps(ev, sort_keys=True, default=float)
    return out
