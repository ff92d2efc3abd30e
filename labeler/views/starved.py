"""Host peer view: a rank whose threads wait for a CPU far longer than its peers'.

A cgroup CPU quota on one rank of a gloo job can slow the whole job 1.2-1.4x with no
rank standing out in the step timings (gloo reduces on the throttled rank's CPU, so
every rank's all-reduce waits alike) and no difference in the ranks' 1 Hz CPU shares;
the trailing baseline of the temporal view takes the slower level in within a
window. The kernel does record it: a throttled thread is runnable but not running, and
that time is its *run delay* (``/proc/PID/task/*/schedstat``, the host metric
``proc_run_delay_s_per_s`` of :mod:`faultlab.telemetry.hostsampler`).

Per host sample (``ts``, s), each node's run delay per rank (s/s) against the
leave-one-out median of its peer nodes' (without itself): the other nodes whose ranks
are of the same peer groups (:func:`_node_groups`; a node of a kind of its own has no
peer and is never flagged). A sample is
flagged when the ratio exceeds ``peer_threshold`` and the excess exceeds ``mad_k``
robust sigmas of that node's excess over the run (1.4826 x MAD) and
:data:`MIN_EXCESS_S_PER_S`: the peer view's rule, on another signal (the floor: on an
idle host near-zero delays differ 2x by chance). Flagged samples with at most two
samples between them (a missed or noisy sample does not cut a fault in two) form an
interval; one of at least two samples and ``min_duration_s`` is a rank label when

- the job was slowed over it: its mean step over the interval against the job's held
  baseline, the expected step of the 10 s before its start and after its end outside
  other labels (:func:`_held_baseline`: a median of 1 s block means, the campaign
  evaluation's measure of a fault's impact), reaches ``min_slowdown`` (a rank that
  waits while the job does not is not a straggler);
- and no label of that rank already covers any of its steps. The first
  ``temporal_window_steps`` of the run (its warm-up, slow and uneven on every rank) are
  no part of an interval. A ``job`` label inside it
  (at least half of its steps: the temporal view's label of the onset, before the
  trailing baseline took the slower level in) is that slowdown seen in part: the rank
  label spans both and replaces it. A job label mostly outside is another slowdown's:
  then no rank label.

Views ``host+temporal``; evidence ``baseline_kind: held-around`` with the run delay of
the rank and of its peers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from faultlab.labeler.grid import SMALL_GROUP, floored_peers
from faultlab.labeler.labelrows import grid_row, label_confidence, typed_labels
from faultlab.labeler.stats import loo_median, mad_sigma, median, nanmedian

METRIC = "proc_run_delay_s_per_s"
#: the least excess run delay over the peers' (s/s per rank) that flags a sample: a
#: tenth of a core-second waited per second, the least that can delay a rank's steps
#: by a tenth
MIN_EXCESS_S_PER_S = 0.1
#: flagged samples at most this many sampling intervals apart are one interval
MAX_GAP_SAMPLES = 3
#: seconds of job steps on each side of an interval for its held baseline
AROUND_S = 10.0
#: seconds per block of the held baseline, at least
BLOCK_S = 1.0
#: steps per block of the held baseline, at least
BLOCK_STEPS = 20


def starved_labels(an, host: pd.DataFrame | None, labels: pd.DataFrame) -> pd.DataFrame:
    """``labels`` plus the rank labels of the host peer view (see the module
    docstring) for one run's :class:`faultlab.labeler.analysis.Analysis` ``an``. The
    ``host`` table of that run (rows of other runs left out by the caller), or None.
    Unchanged when the host table has no run-delay rows for at least two nodes."""
    delay = _per_rank_delay(an.grid, host)
    if delay is None:
        return labels
    cur = labels.reset_index(drop=True)
    changed = False
    for node, t_lo, t_hi, own, peers in _flagged_intervals(delay, an.config, _node_groups(an.grid, delay.columns)):
        got = _label_of(an, cur, node, t_lo, t_hi, own, peers)
        if got is not None:
            row, absorbed = got
            kept = cur.drop(index=absorbed)
            cur = pd.concat([kept, pd.DataFrame([row])], ignore_index=True) if len(kept) else pd.DataFrame([row])
            changed = True
    return typed_labels(cur) if changed else labels


def _per_rank_delay(g, host: pd.DataFrame | None) -> pd.DataFrame | None:
    """``ts x node`` run delay per rank (s/s): each node's value over its number of
    ranks; None with fewer than two nodes that have one."""
    if host is None or host.empty or "metric" not in host.columns:
        return None
    m = host[host["metric"].astype(str) == METRIC]
    if m.empty:
        return None
    piv = m.pivot_table(index="ts", columns="node", values="value", aggfunc="mean").sort_index()
    nodes, counts = np.unique(np.asarray(g.nodes, dtype=object).astype(str), return_counts=True)
    per = dict(zip(nodes, counts))
    piv = piv[[c for c in piv.columns if str(c) in per]]
    if piv.shape[1] < 2:
        return None
    return piv / np.asarray([per[str(c)] for c in piv.columns], dtype=np.float64)[None, :]


def _node_groups(g, nodes) -> list[str]:
    """Each of ``nodes``' peer kind: the sorted peer groups of its ranks in the grid
    ``g`` (after discovery), joined by ``+``.

    Why: a node whose ranks do more work per step (an older GPU generation, a
    heavier pipeline stage) keeps its threads runnable longer and waits for a CPU
    longer, by design; against the nodes of another kind it reads starved the whole
    run."""
    names = np.asarray(g.nodes, dtype=object).astype(str)
    groups = np.asarray(g.groups, dtype=object).astype(str)
    return ["+".join(sorted(set(groups[names == str(n)].tolist()))) for n in nodes]


def _flagged_intervals(delay: pd.DataFrame, cfg, kinds: list[str] | None = None) -> list[tuple[str, float, float, float, float]]:
    """``[(node, t_lo, t_hi, own, peers)]``: runs of flagged samples of one node
    (``t_lo``: one sampling interval before the first sample, the time it covers;
    ``t_hi`` the last sample's time, unix s; ``own``/``peers`` their median run delays,
    s/s). ``kinds``: each column's peer kind (:func:`_node_groups`); a node's peers
    are the other nodes of its kind (all nodes when None)."""
    x = delay.to_numpy(dtype=np.float64)
    ts = delay.index.to_numpy(dtype=np.float64)
    if ts.size < 3:
        return []
    kinds = np.asarray(kinds if kinds is not None else [""] * x.shape[1], dtype=object)
    peers = np.full_like(x, np.nan)
    for k in sorted(set(kinds.tolist())):
        c = np.flatnonzero(kinds == k)
        # a small kind's peer at no less than its usual delay (its median over the
        # run): one node that got the CPU for a while does not make its peer starved
        usual = nanmedian(x[:, c], axis=0)[0] if c.size <= SMALL_GROUP and np.isfinite(x[:, c]).any() else None
        peers[:, c] = loo_median(floored_peers(x[:, c], np.broadcast_to(usual, x[:, c].shape)) if usual is not None
                                 else x[:, c])
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = x / peers
    excess = x - peers
    dt = median(np.diff(ts))
    out = []
    for j, node in enumerate(delay.columns):
        e = excess[:, j]
        fin = e[np.isfinite(e)]
        if fin.size < 3:
            continue
        sigma = mad_sigma(fin)
        flag = (ratio[:, j] > cfg.peer_threshold) & (e > max(cfg.mad_k * sigma, MIN_EXCESS_S_PER_S))
        for a, b in _runs(flag, ts, (MAX_GAP_SAMPLES + 0.5) * dt):
            if b - a + 1 >= 2 and ts[b] - ts[a] + dt >= cfg.min_duration_s:
                out.append((str(node), ts[a] - dt, ts[b], median(x[a : b + 1, j]),
                            median(peers[a : b + 1, j])))
    return out


def _runs(flag: np.ndarray, ts: np.ndarray, max_gap: float) -> list[tuple[int, int]]:
    """``[(first, last)]`` index runs of True in ``flag`` whose samples lie at most
    ``max_gap`` s apart."""
    idx = np.flatnonzero(flag)
    if idx.size == 0:
        return []
    cut = np.flatnonzero(np.diff(ts[idx]) > max_gap) + 1
    return [(int(r[0]), int(r[-1])) for r in np.split(idx, cut)]


def _label_of(an, labels: pd.DataFrame, node: str, t_lo: float, t_hi: float, own: float,
              peers: float) -> tuple[dict, list] | None:
    """``(row, absorbed)``: the rank label of one flagged interval of ``node`` and the
    index of the ``job`` labels it replaces; None when there is none (not one rank on
    the node, too few steps, the job not slowed against its held baseline, a label of
    the rank already there, or a job label mostly outside)."""
    g, cfg = an.grid, an.config
    cols = np.flatnonzero(np.asarray(g.nodes, dtype=object).astype(str) == node)
    if cols.size != 1:
        return None
    j = int(cols[0])
    rows = np.flatnonzero((g.t0 >= t_lo) & (g.t0 < t_hi))
    # the warm-up (the first window of steps, before any trailing baseline: imports,
    # allocator, the first all-reduces) is slow and uneven on every run, fault or not
    rows = rows[rows >= cfg.temporal_window_steps]
    if rows.size < cfg.min_steps:
        return None
    i0, i1 = int(rows[0]), int(rows[-1])
    component = g.component(j)
    absorbed = _inside_jobs(labels, int(g.steps[i0]), int(g.steps[i1]))
    if absorbed is None:
        return None
    if absorbed:
        s0 = int(pd.to_numeric(labels.loc[absorbed, "start_step"]).min())
        s1 = int(pd.to_numeric(labels.loc[absorbed, "end_step"]).max())
        i0 = min(i0, int(np.searchsorted(g.steps, s0, side="left")))
        i1 = max(i1, int(np.searchsorted(g.steps, s1, side="right")) - 1)
    if _covered(labels, component, int(g.steps[i0]), int(g.steps[i1])):  # over the span it would take
        return None
    base = _held_baseline(an, i0, i1, labels.drop(index=absorbed))
    x = np.asarray(g.job_step[i0 : i1 + 1], dtype=np.float64)
    if not (base > 0) or not np.isfinite(x).any():
        return None
    slowdown = float(np.nanmean(x)) / base
    if slowdown < cfg.min_slowdown:
        return None
    ev = {
        "baseline_s": base,
        "baseline_kind": "held-around",
        "run_delay_s_per_s": own,
        "peer_run_delay_s_per_s": peers,
        "run_delay_ratio": own / peers if peers > 0 else float("inf"),
        "job_slowdown": slowdown,
        "n_steps": i1 - i0 + 1,
        "threshold": cfg.peer_threshold,
        "replaces": [f"job {int(labels.loc[k, 'start_step'])}-{int(labels.loc[k, 'end_step'])}" for k in absorbed],
    }
    return grid_row(g, component, "rank", i0, i1, slowdown, "host+temporal",
                    label_confidence(slowdown, cfg.temporal_threshold, i1 - i0 + 1, cfg.min_steps, "host+temporal"), ev), absorbed


def _covered(labels: pd.DataFrame, component: str, s0: int, s1: int) -> bool:
    """A label of ``component`` overlaps steps ``s0..s1``."""
    if labels is None or labels.empty:
        return False
    mine = labels["component"].astype(str) == component
    a = pd.to_numeric(labels["start_step"], errors="coerce")
    b = pd.to_numeric(labels["end_step"], errors="coerce")
    return bool((mine & (a <= s1) & (b >= s0)).any())


def _inside_jobs(labels: pd.DataFrame, s0: int, s1: int) -> list | None:
    """The index of the ``job`` labels overlapping steps ``s0..s1`` when each has at
    least half of its steps inside them; None when one overlapping has not."""
    if labels is None or labels.empty:
        return []
    a = pd.to_numeric(labels["start_step"], errors="coerce")
    b = pd.to_numeric(labels["end_step"], errors="coerce")
    over = (labels["component"].astype(str) == "job") & (a <= s1) & (b >= s0)
    out = []
    for k in labels.index[over]:
        n = b[k] - a[k] + 1
        inside = min(b[k], s1) - max(a[k], s0) + 1
        if inside < 0.5 * n:
            return None
        out.append(k)
    return out


def _held_baseline(an, i0: int, i1: int, labels: pd.DataFrame | None = None) -> float:
    """The job's expected step around grid rows ``i0..i1`` (s), as a time: the median
    over blocks of each block's mean job step, the blocks (:data:`BLOCK_S` s or
    :data:`BLOCK_STEPS` steps, whichever is longer) cut from the steps within
    :data:`AROUND_S` s (or ``temporal_window_steps`` median steps, whichever is longer:
    a job of slow steps) before ``i0`` and after ``i1`` that no label in ``labels``
    covers, the warm-up (the first ``temporal_window_steps``) left out; a block with
    under half the median block's steps (a side's edge) is left out. Both sides, as the campaign evaluation measures a fault's impact (one side
    alone follows a burst of host load in it). A *mean* per block, because the
    slowdown it divides is a mean: the hiccups of a loaded host belong to the expected
    step (the median of the temporal view's unflagged steps, even scaled by
    ``job_expected``, under-read it 1.1-1.2x on a cpu-contention campaign and made
    1.02-1.07x faults read 1.20-1.28x); the median over blocks, so that one burst of
    load, or a slowdown no label has, does not lift it. NaN with fewer than
    ``temporal_min_valid_steps`` such steps."""
    g, cfg = an.grid, an.config
    x = np.asarray(g.job_step, dtype=np.float64)
    t = np.asarray(g.t0, dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(t) & ~_label_rows(g, labels)
    ok[: cfg.temporal_window_steps] = False  # the warm-up is no baseline
    fin = x[np.isfinite(x)]
    around = max(AROUND_S, cfg.temporal_window_steps * median(fin)) if fin.size else AROUND_S
    near = ((t >= t[i0] - around) & (t < t[i0])) | ((t > t[i1]) & (t <= t[i1] + around))
    sel = np.flatnonzero(ok & near)
    if sel.size < cfg.temporal_min_valid_steps:
        return float("nan")
    ts, xs = t[sel], x[sel]
    step = median(np.diff(ts)) if ts.size > 1 else 0.0
    blocks = np.floor((ts - ts.min()) / max(BLOCK_S, BLOCK_STEPS * step)).astype(np.int64)
    grp = pd.Series(xs).groupby(blocks)
    n, means = grp.size(), grp.mean()
    return float(means[n >= 0.5 * float(n.median())].median())


def _label_rows(g, labels: pd.DataFrame | None) -> np.ndarray:
    """``(S,)`` bool: grid rows inside any label of ``labels`` (any component)."""
    out = np.zeros(g.S, dtype=bool)
    if labels is None or labels.empty:
        return out
    a = pd.to_numeric(labels["start_step"], errors="coerce").to_numpy()
    b = pd.to_numeric(labels["end_step"], errors="coerce").to_numpy()
    for lo, hi in zip(a, b):
        if np.isfinite(lo) and np.isfinite(hi):
            out |= (g.steps >= lo) & (g.steps <= hi)
    return out
