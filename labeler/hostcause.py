"""Host evidence of an observed label's cause: what the host metrics show while it lasted.

An *observed* label (no injection explains it) is noise to a detector benchmark, but it
is still a real slowdown, and the host table often shows why. For each observed label
this adds ``host`` to its evidence, measured over ``[start_ts - 1 s, end_ts + 1 s]``
against their typical values: the medians over the training time (``span``) outside
the label's window, so neither start-up (ranks importing, before the first step) nor
the label's own slow time sets what is typical (``host`` table metrics of :mod:`faultlab.telemetry.hostsampler`):

- ``host_cpu_busy_pct`` / ``host_cpu_busy_pct_typical``: host-wide CPU use (0..100 over
  all CPUs) during the label and over the run;
- ``ranks_cpu_pct`` / ``ranks_cpu_pct_typical``: the CPU of the job's processes (all
  nodes, percent of one CPU) during the label and over the run;
- ``tcp_rtt_ms`` / ``tcp_rtt_ms_typical``: the worst smoothed TCP round-trip time
  between the job's nodes (the largest ``tcp_rtt_ms:P`` of any node at a sample, ms);
- ``net_tx_bytes_per_s`` / ``net_tx_bytes_per_s_typical``: the nodes' transmit rate
  summed (bytes/s);
- ``likely_cause``, the first of these steps that names one (``CAUSES``), else None
  (the host metrics show no cause):

  1. ``"other processes' CPU"``: the host was saturated (>= 95% busy) while the ranks
     got no more CPU than usual, or the host was at least as busy as usual while the
     ranks got at least 25% less CPU than usual (host CPU = the ranks' + everyone
     else's, so everyone else's rose by at least what the ranks lost, whatever the
     number of CPUs): another process, the controller's own work;
  2. ``"the ranks' own CPU work"``: the ranks used at least 25% more CPU than usual (a
     Python GC, a data-loader burst);
  3. ``"the network (TCP round trip up)"``: the worst round-trip time was at least 3x
     its typical value and 2 ms above it (packets queue behind a rate cap, a delay or
     retransmissions);
  4. ``"the ranks waited (their CPU halved)"``: the ranks used at most half their usual
     CPU while the host was no busier than usual: they were blocked (storage, the
     network without a queue that TCP shows, a stopped process).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd


def _series(host: pd.DataFrame, metric: str) -> pd.Series:
    m = host[host["metric"].astype(str) == metric]
    if metric == "cpu_util_pct":  # host-wide: every node reports the same value
        return m.groupby("ts")["value"].first()
    return m.groupby("ts")["value"].sum()


def _worst_rtt(host: pd.DataFrame) -> pd.Series:
    """The largest ``tcp_rtt_ms:P`` of any node at each sample time (ms)."""
    m = host[host["metric"].astype(str).str.startswith("tcp_rtt_ms:")]
    return m.groupby("ts")["value"].max()


def _typical(x: pd.Series, lo: float, hi: float, span: tuple[float, float] | None) -> float:
    """Median of ``x`` (indexed by unix s) inside ``span`` and outside ``[lo, hi]``;
    falls back to all of ``span``, then to all of ``x``, when that leaves nothing."""
    if x.empty:
        return float("nan")
    t = x.index.to_numpy(dtype=np.float64)
    inside = (t >= span[0]) & (t <= span[1]) if span is not None else np.ones(t.size, dtype=bool)
    for m in (inside & ((t < lo) | (t > hi)), inside, np.ones(t.size, dtype=bool)):
        if m.any():
            return float(np.median(x.to_numpy(dtype=np.float64)[m]))
    return float("nan")


def _during(x: pd.Series, lo: float, hi: float) -> float:
    """Mean of ``x`` over samples in ``[lo, hi]`` (NaN when none)."""
    w = x[(x.index >= lo) & (x.index <= hi)] if len(x) else x
    return float(w.mean()) if len(w) else float("nan")


@dataclass
class Reading:
    """What the host table shows over one label's window (``*_now``, means) against
    the run's typical values (``*_typ``, medians): host CPU busy % (0..100), the
    ranks' CPU (% of one CPU), the worst TCP round trip (ms), transmit rate (bytes/s).
    NaN where the table has no such metric."""

    busy_now: float
    busy_typ: float
    ranks_now: float
    ranks_typ: float
    rtt_now: float = float("nan")
    rtt_typ: float = float("nan")
    tx_now: float = float("nan")
    tx_typ: float = float("nan")


def _known(*xs: float) -> bool:
    return all(np.isfinite(x) for x in xs)


def _other_processes(r: Reading, busy_pct: float, ranks_up: float) -> str | None:
    starved = _known(r.ranks_now, r.ranks_typ) and r.ranks_now * ranks_up <= r.ranks_typ
    if (r.busy_now >= busy_pct and not (r.ranks_now > r.ranks_typ)) or (r.busy_now >= r.busy_typ and starved):
        return "other processes' CPU"
    return None


def _own_work(r: Reading, busy_pct: float, ranks_up: float) -> str | None:
    if _known(r.ranks_now, r.ranks_typ) and r.ranks_typ > 0 and r.ranks_now >= ranks_up * r.ranks_typ:
        return "the ranks' own CPU work"
    return None


#: the round trip must be this many times its typical value, and RTT_UP_MS above it
RTT_UP, RTT_UP_MS = 3.0, 2.0


def _network(r: Reading, busy_pct: float, ranks_up: float) -> str | None:
    if _known(r.rtt_now, r.rtt_typ) and r.rtt_now >= RTT_UP * r.rtt_typ and r.rtt_now - r.rtt_typ >= RTT_UP_MS:
        return "the network (TCP round trip up)"
    return None


def _waited(r: Reading, busy_pct: float, ranks_up: float) -> str | None:
    if _known(r.ranks_now, r.ranks_typ, r.busy_now, r.busy_typ) and r.ranks_typ > 0 \
            and r.ranks_now <= 0.5 * r.ranks_typ and r.busy_now <= r.busy_typ:
        return "the ranks waited (their CPU halved)"
    return None


#: the cause steps, in order; the first that names a cause wins
CAUSES = (_other_processes, _own_work, _network, _waited)


def likely_cause(r: Reading, *, busy_pct: float = 95.0, ranks_up: float = 1.25) -> str | None:
    """The first of :data:`CAUSES` that names a cause for ``r`` (see the module
    docstring), else None."""
    for step in CAUSES:
        cause = step(r, busy_pct, ranks_up)
        if cause is not None:
            return cause
    return None


def _round(x: float, nd: int = 1):
    return None if not np.isfinite(x) else round(x, nd)


def attach_host_evidence(labels: pd.DataFrame, host: pd.DataFrame | None, *, busy_pct: float = 95.0,
                         ranks_up: float = 1.25, span: tuple[float, float] | None = None) -> pd.DataFrame:
    """A new labels frame whose ``observed`` labels carry ``host`` in their evidence
    (see the module docstring). ``span``: the training time ``(first step start, last
    step end)``, unix s (None: all of the host table). Labels of another source, and
    every label when the host table has no CPU metrics, are unchanged."""
    if host is None or host.empty or labels.empty or not (labels["source"] == "observed").any():
        return labels
    busy, ranks = _series(host, "cpu_util_pct"), _series(host, "proc_cpu_util_pct")
    if busy.empty:
        return labels
    rtt, tx = _worst_rtt(host), _series(host, "net_tx_bytes_per_s")
    out = labels.copy()
    for i in np.flatnonzero((out["source"] == "observed").to_numpy()):
        row = out.iloc[i]
        lo, hi = float(row.start_ts) - 1.0, float(row.end_ts) + 1.0
        if not ((busy.index >= lo) & (busy.index <= hi)).any():
            continue
        r = Reading(_during(busy, lo, hi), _typical(busy, lo, hi, span), _during(ranks, lo, hi), _typical(ranks, lo, hi, span),
                    _during(rtt, lo, hi), _typical(rtt, lo, hi, span), _during(tx, lo, hi), _typical(tx, lo, hi, span))
        ev = json.loads(row.evidence or "{}")
        ev["host"] = {"host_cpu_busy_pct": _round(r.busy_now), "host_cpu_busy_pct_typical": _round(r.busy_typ),
                      "ranks_cpu_pct": _round(r.ranks_now), "ranks_cpu_pct_typical": _round(r.ranks_typ),
                      "tcp_rtt_ms": _round(r.rtt_now, 2), "tcp_rtt_ms_typical": _round(r.rtt_typ, 2),
                      "net_tx_bytes_per_s": _round(r.tx_now, 0), "net_tx_bytes_per_s_typical": _round(r.tx_typ, 0),
                      "likely_cause": likely_cause(r, busy_pct=busy_pct, ranks_up=ranks_up)}
        out.iat[i, out.columns.get_loc("evidence")] = json.dumps(ev, sort_keys=True, default=float)
    return out


__all__ = ["CAUSES", "Reading", "attach_host_evidence", "likely_cause"]
