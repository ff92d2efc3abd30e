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
- ``likely_cause``: ``"other processes' CPU"`` when the host was saturated (>= 95%
  busy) while the ranks got no more CPU than usual, or when the host was at least as
  busy as usual while the ranks got at least 25% less CPU than usual (host CPU = the
  ranks' + everyone else's, so everyone else's rose by at least what the ranks lost,
  whatever the number of CPUs): someone else used it (another process, the
  controller's own work); ``"the ranks' own CPU work"`` when the ranks
  used at least 25% more CPU than usual (a Python GC, a data-loader burst), else None
  (the host metrics show no cause).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd


def _series(host: pd.DataFrame, metric: str) -> pd.Series:
    m = host[host["metric"].astype(str) == metric]
    if metric == "cpu_util_pct":  # host-wide: every node reports the same value
        return m.groupby("ts")["value"].first()
    return m.groupby("ts")["value"].sum()


def _typical(x: pd.Series, lo: float, hi: float, span: tuple[float, float] | None) -> float:
    """Median of ``x`` (indexed by unix s) inside ``span`` and outside ``[lo, hi]``;
    falls back to all of ``span``, then to all of ``x``, when that leaves nothing."""
    t = x.index.to_numpy(dtype=np.float64)
    inside = (t >= span[0]) & (t <= span[1]) if span is not None else np.ones(t.size, dtype=bool)
    for m in (inside & ((t < lo) | (t > hi)), inside, np.ones(t.size, dtype=bool)):
        if m.any():
            return float(np.median(x.to_numpy(dtype=np.float64)[m]))
    return float("nan")


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
    out = labels.copy()
    for i in np.flatnonzero((out["source"] == "observed").to_numpy()):
        row = out.iloc[i]
        lo, hi = float(row.start_ts) - 1.0, float(row.end_ts) + 1.0
        b = busy[(busy.index >= lo) & (busy.index <= hi)]
        r = ranks[(ranks.index >= lo) & (ranks.index <= hi)] if len(ranks) else ranks
        if b.empty:
            continue
        b_typ = _typical(busy, lo, hi, span)
        r_typ = _typical(ranks, lo, hi, span) if len(ranks) else float("nan")
        b_now = float(b.mean())
        r_now = float(r.mean()) if len(r) else float("nan")
        cause = None
        starved = np.isfinite(r_now) and np.isfinite(r_typ) and r_now * ranks_up <= r_typ
        if (b_now >= busy_pct and not (r_now > r_typ)) or (b_now >= b_typ and starved):
            cause = "other processes' CPU"
        elif np.isfinite(r_now) and np.isfinite(r_typ) and r_typ > 0 and r_now >= ranks_up * r_typ:
            cause = "the ranks' own CPU work"
        ev = json.loads(row.evidence or "{}")
        ev["host"] = {"host_cpu_busy_pct": round(b_now, 1), "host_cpu_busy_pct_typical": round(b_typ, 1),
                      "ranks_cpu_pct": None if not np.isfinite(r_now) else round(r_now, 1),
                      "ranks_cpu_pct_typical": None if not np.isfinite(r_typ) else round(r_typ, 1),
                      "likely_cause": cause}
        out.iat[i, out.columns.get_loc("evidence")] = json.dumps(ev, sort_keys=True, default=float)
    return out


__all__ = ["attach_host_evidence"]
