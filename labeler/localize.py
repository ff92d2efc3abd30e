"""Localization of job-wide slowdowns from the kernel's per-connection TCP statistics.

In synchronous training a slow link slows every rank alike (all wait in the
all-reduce), so step and compute times cannot say where it is. The connections to
and from the node behind it can: their RTT rises (queueing behind the rate cap), as
C4's connection matrix and SlowSight's TCP metrics use. Input is the ``host`` table
with the per-peer metrics of :mod:`faultlab.tcpstats` (``tcp_rtt_ms:PEER`` reported by
node N for its connections to PEER).

For each job label, every node gets a score: the median RTT of the connections that
touch it (its own, and the other nodes' connections to it) during the label's
interval, over the same before the interval (a window as long as the label, at most
30 s). The culprit is the node with the highest score when that score is at least
``min_ratio`` (default 2) and at least 1.5x the runner-up's; else none is named.
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
    """RTT ratio (during / before) of the connections touching each node; ``{}``
    without TCP metrics. Units: a ratio of medians of RTT in ms."""
    r = _rtt_frame(host)
    if r.empty:
        return {}
    span = min(max(end_ts - start_ts, 5.0), 30.0)
    during = r[(r.ts >= start_ts) & (r.ts <= end_ts)]
    before = r[(r.ts >= start_ts - span) & (r.ts < start_ts)]
    out = {}
    for n in sorted(set(r.a) | set(r.b)):
        d = during[(during.a == n) | (during.b == n)].value
        b = before[(before.a == n) | (before.b == n)].value
        if len(d) and len(b) and np.median(b) > 0:
            out[n] = float(np.median(d) / np.median(b))
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
        ranked = sorted(sc.items(), key=lambda kv: (-kv[1], kv[0]))
        ev["rtt_ratio_by_node"] = {k: round(v, 3) for k, v in ranked}
        top, second = ranked[0], (ranked[1] if len(ranked) > 1 else (None, 1.0))
        if top[1] >= min_ratio and top[1] >= 1.5 * max(second[1], 1e-9):
            ev["culprit"] = f"node:{top[0]}"
            ev["culprit_rtt_ratio"] = round(top[1], 3)
        out.iat[i, out.columns.get_loc("evidence")] = json.dumps(ev, sort_keys=True, default=float)
    return out
