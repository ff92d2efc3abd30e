"""Fusion: from per-step flags of the two views to labeled slow intervals.

The SlowSight idea of combining a temporal view (a component against its own history)
and a peer view (a component against its peers) decides *what* was slow:

1. **Localized straggler** (rank label): a run of peer-view flags on a rank (its
   compute_s well above its peer group's median). ``views`` is ``"temporal+peer"``
   when the temporal view agrees in the interval (the job step time or the rank's own
   compute_s is up against its history), else ``"peer"`` (e.g. a fault present from
   the first step, invisible to a temporal view). The rank is the cause: no separate
   ``job`` label is made for the slowdown it explains.
2. **Job-wide slowdown** (``job`` label, views ``"temporal"``): the job step time is up
   against its history even after the stragglers are removed (the OSDI'25 what-if
   step time, see :mod:`faultlab.labeler.whatif`, is still above threshold x baseline)
   and no straggler explains it (steps covered by a rank label are left out: a
   throttled rank also slows its share of the all-reduce, which the what-if step
   does not remove). E.g. a slow network link slows every rank's comm_s.
3. **Rank temporal only** (rank label, views ``"temporal"``): a rank's compute_s is up
   against its own history, but not against its peers (most of its group is slowed)
   and no job label covers it.

Flags become intervals: runs of flagged steps joined across gaps of at most
``gap_steps`` unflagged steps or ``gap_s`` seconds, kept when they span at least
``min_steps`` steps and ``min_duration_s`` seconds.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from faultlab import schema
from faultlab.labeler.peer import PeerView, peer_view
from faultlab.labeler.temporal import StepGrid, TemporalView, nanmedian, temporal_view
from faultlab.labeler.whatif import simulate_job


def intervals(flags: np.ndarray, gap: int, min_len: int, *, t0: np.ndarray | None = None, t1: np.ndarray | None = None,
              gap_s: float = 0.0, min_s: float = 0.0) -> list[tuple[int, int]]:
    """Contiguous runs of True in a 1-D bool array, as inclusive ``(first, last)`` indices.

    Runs separated by at most ``gap`` False entries, or (when step times ``t0``/``t1``,
    unix s, are given) by at most ``gap_s`` seconds, are joined; a run is kept when
    ``last - first + 1 >= min_len`` and it lasts at least ``min_s`` seconds
    (``t1[last] - t0[first]``). Steps of a few milliseconds make a step count alone a
    poor measure of a fail-slow condition, hence the seconds. Vectorized; returns
    ``[]`` when nothing is flagged.
    """
    idx = np.flatnonzero(np.asarray(flags, dtype=bool))
    if idx.size == 0:
        return []
    joined = np.diff(idx) <= gap + 1
    timed = t0 is not None and t1 is not None
    if timed and gap_s > 0:
        with np.errstate(invalid="ignore"):
            joined |= (t0[idx[1:]] - t1[idx[:-1]]) <= gap_s
    breaks = np.flatnonzero(~joined)
    starts = idx[np.concatenate([[0], breaks + 1])]
    ends = idx[np.concatenate([breaks, [idx.size - 1]])]
    keep = (ends - starts + 1) >= min_len
    if timed and min_s > 0:
        with np.errstate(invalid="ignore"):
            keep &= (t1[ends] - t0[starts]) >= min_s
    return [(int(a), int(b)) for a, b in zip(starts[keep], ends[keep])]


@dataclass
class Analysis:
    """Everything the views computed for one run: the grid, both views and the what-if
    step times (``sim`` ``(S,)`` seconds, stragglers removed)."""

    grid: StepGrid
    temporal: TemporalView
    peer: PeerView
    sim: np.ndarray
    job_wide_flag: np.ndarray  # (S,) job step up even with stragglers removed
    config: object

    def job_slowdown(self, i0: int, i1: int) -> float:
        """Job time over rows ``i0..i1`` / the time its baseline steps would have taken
        (a time ratio: an intermittent stall counts in full, where a median would hide
        it)."""
        return _tratio(self.grid.job_step[i0 : i1 + 1], self.temporal.job_base[i0 : i1 + 1])

    def measure(self, component: str, rows: np.ndarray) -> dict:
        """The measured slowdown of ``component`` over grid rows ``rows`` (for an
        injection that got no label): rank -> median compute_s / its temporal baseline;
        job or node -> job slowdown. Returns ``{"ratio": float, "n_steps": int, ...}``;
        ratio 1.0 when there is no data."""
        rows = np.asarray(rows, dtype=np.int64)
        out: dict = {"n_steps": int(rows.size)}
        if rows.size == 0:
            out["ratio"] = 1.0
            return out
        j = self.rank_col(component)
        if j is not None:
            vals, base = self.grid.compute[rows, j], self.temporal.rank_base[rows, j]
            out["peer_ratio"] = _f(_nanmed(self.peer.ratio[rows, j]))
            out["n_flagged"] = int((self.peer.flag[rows, j] | self.temporal.rank_flag[rows, j]).sum())
        else:
            vals, base = self.grid.job_step[rows], self.temporal.job_base[rows]
            out["n_flagged"] = int(self.temporal.job_flag[rows].sum())
        r = _ratio(vals, base)
        # the mean shows an intermittent fault (few very slow steps) that a median hides
        with np.errstate(invalid="ignore", divide="ignore"):
            out["mean_ratio"] = _f(_nanmean(vals / base))
        out["job_slowdown"] = _f(_ratio(self.grid.job_step[rows], self.temporal.job_base[rows]))
        out["ratio"] = r if np.isfinite(r) else 1.0
        return out

    def rank_col(self, component: str) -> int | None:
        """Column of ``"rank:N"`` in the grid, or None."""
        if not component.startswith("rank:"):
            return None
        try:
            rank = int(component.split(":", 1)[1])
        except ValueError:
            return None
        hit = np.flatnonzero(self.grid.ranks == rank)
        return int(hit[0]) if hit.size else None


def analyze(grid: StepGrid, config=None) -> Analysis:
    """Run the temporal view, the peer view and the what-if simulation on one run."""
    if config is None:
        from faultlab.labeler import LabelerConfig

        config = LabelerConfig()
    tv = temporal_view(grid, config)
    pv = peer_view(grid, config)
    sim = simulate_job(grid)
    with np.errstate(invalid="ignore"):
        jw = (
            tv.job_flag
            & (sim > tv.job_base * config.temporal_threshold)
            & ((sim - tv.job_base) > config.mad_k * np.nan_to_num(tv.job_sigma))
        )
    return Analysis(grid=grid, temporal=tv, peer=pv, sim=sim, job_wide_flag=jw, config=config)


def fuse(an: Analysis) -> pd.DataFrame:
    """Turn the flags of an :class:`Analysis` into labels (see module docstring).

    Returns:
        a labels frame (faultlab.schema.LABELS columns) with ``source="observed"``,
        ``cause="unknown"``, ``fault_id=None``, sorted by ``start_ts``, component.
        Times: ``start_ts`` = earliest t_start of the first step, ``end_ts`` = latest
        ``t_start + step_s`` of the last step (unix s). ``slowdown`` is a ratio.
    """
    cfg = an.config
    g, tv, pv = an.grid, an.temporal, an.peer
    gap, min_len = cfg.gap_steps, cfg.min_steps
    timed = {"t0": g.t0, "t1": g.t1, "gap_s": cfg.gap_s, "min_s": cfg.min_duration_s}
    rows: list[dict] = []
    covered = np.zeros(g.S, dtype=bool)  # steps explained by a localized straggler

    # 1. localized stragglers from the peer view
    rank_label_rows = np.zeros((g.S, g.R), dtype=bool)
    for j in np.flatnonzero(pv.flag.any(axis=0)):  # only ranks with a peer flag
        j = int(j)
        for i0, i1 in intervals(pv.flag[:, j], gap, min_len, **timed):
            sl = slice(i0, i1 + 1)
            rank_t = bool(tv.rank_flag[sl, j].any())
            job_t = bool(tv.job_flag[sl].any())
            peer_ratio = _nanmed(pv.ratio[sl, j])
            peer_med = _nanmed(pv.median[sl, j])
            t_base = _nanmed(tv.rank_base[sl, j])
            comp_med = _nanmed(g.compute[sl, j])
            # the rank's own level just before onset (a trailing baseline drifts up
            # inside a long fault); the peer median when there is no history
            w0 = max(0, i0 - cfg.temporal_window_steps)
            pre = _nanmed(g.compute[w0:i0, j]) if i0 - w0 >= cfg.temporal_min_valid_steps else float("nan")
            if np.isfinite(pre) and pre > 0 and not (np.isfinite(peer_med) and peer_med < pre):
                baseline, kind = pre, "temporal-pre-onset"
            else:  # no history, or the history was already slowed: the peers' level
                baseline, kind = peer_med, "peer"
            n_ok = int(np.isfinite(g.compute[sl, j]).sum())
            slowdown = float(np.nansum(g.compute[sl, j]) / (n_ok * baseline)) if baseline and np.isfinite(baseline) and n_ok else peer_ratio
            views = "temporal+peer" if (rank_t or job_t) else "peer"
            ev = {
                "baseline_s": baseline,
                "baseline_kind": kind,
                "temporal_baseline_s": t_base,
                "pre_onset_baseline_s": pre,
                "peer_median_s": peer_med,
                "median_compute_s": comp_med,
                "peer_ratio": peer_ratio,
                "mean_peer_ratio": _nanmean(pv.ratio[sl, j]),
                "temporal_ratio": _ratio(g.compute[sl, j], tv.rank_base[sl, j]),
                "job_slowdown": an.job_slowdown(i0, i1),
                "job_baseline_s": _nanmed(tv.job_base[sl]),
                "n_steps": i1 - i0 + 1,
                "n_flagged": int(pv.flag[sl, j].sum()),
                "threshold": cfg.peer_threshold,
            }
            rows.append(
                _row(g, g.component(j), "rank", i0, i1, slowdown, views,
                     _confidence(peer_ratio, cfg.peer_threshold, i1 - i0 + 1, min_len, views), ev)
            )
            covered[sl] = True
            rank_label_rows[sl, j] = True

    # 2. job-wide slowdowns: job step time up even with stragglers removed
    job_rows = np.zeros(g.S, dtype=bool)
    # the rank explains the job's slowdown while it straggles: no job label for those steps
    for i0, i1 in intervals(an.job_wide_flag & ~_dilate(covered, gap), gap, min_len, **timed):
        sl = slice(i0, i1 + 1)
        job_excess = float(np.nansum(np.asarray(g.job_step[sl], dtype=np.float64) - np.asarray(tv.job_base[sl], dtype=np.float64)))
        culprit = _interval_straggler(g, sl, job_excess)
        if culprit is not None:
            # one rank's compute over the whole interval stands out from its peers'
            # (a stall that lands in its compute half the time, the other half in the
            # all-reduce that everyone waits in): the rank, not the job
            j, share, ratio, med_total = culprit
            n_ok = int(np.isfinite(g.compute[sl, j]).sum())
            slowdown = an.job_slowdown(i0, i1)  # what the rank cost the job
            ev = {
                "baseline_s": med_total / max(n_ok, 1),
                "baseline_kind": "peer-interval",
                "peer_compute_ratio": ratio,
                "share_of_job_excess": share,
                "job_slowdown": an.job_slowdown(i0, i1),
                "job_baseline_s": _nanmed(tv.job_base[sl]),
                "n_steps": i1 - i0 + 1,
                "threshold": cfg.peer_threshold,
            }
            rows.append(_row(g, g.component(j), "rank", i0, i1, slowdown, "temporal+peer",
                             _confidence(slowdown, cfg.temporal_threshold, i1 - i0 + 1, min_len, "temporal+peer"), ev))
            covered[sl] = True
            rank_label_rows[sl, j] = True
            continue
        slowdown = an.job_slowdown(i0, i1)
        up = [g.component(j) for j in np.flatnonzero(tv.rank_flag[sl].any(axis=0))]
        ev = {
            "baseline_s": _nanmed(tv.job_base[sl]),
            "baseline_kind": "temporal",
            "median_step_s": _nanmed(g.job_step[sl]),
            "job_slowdown": slowdown,
            "straggler_free_ratio": _ratio(an.sim[sl], tv.job_base[sl]),
            "compute_ratio": _nanmed(tv.rank_ratio[sl]),
            "ranks_compute_up": up,
            "also_straggler": bool(covered[sl].any()),
            "n_steps": i1 - i0 + 1,
            "n_flagged": int(an.job_wide_flag[sl].sum()),
            "threshold": cfg.temporal_threshold,
        }
        rows.append(
            _row(g, "job", "job", i0, i1, slowdown, "temporal",
                 _confidence(slowdown, cfg.temporal_threshold, i1 - i0 + 1, min_len, "temporal"), ev)
        )
        job_rows[sl] = True

    # 3. a rank slow against its own history only (most of its group slowed too);
    # only when the job felt it: a rank's compute rising back to normal after a
    # period in which it was unusually fast is not a slowdown of anything. When most
    # ranks are slow at once, that is one job-wide slowdown, labeled once.
    cands: list[tuple[int, int, int]] = []
    for j in np.flatnonzero(tv.rank_flag.any(axis=0)):  # only ranks with a temporal flag
        j = int(j)
        free = tv.rank_flag[:, j] & ~_dilate(rank_label_rows[:, j] | job_rows, gap)
        for i0, i1 in intervals(free, gap, min_len, **timed):
            if an.job_slowdown(i0, i1) >= cfg.temporal_threshold:
                cands.append((i0, i1, j))
    for group in _overlap_groups(cands):
        ranks_in = sorted({j for _, _, j in group})
        if len(ranks_in) >= max(2, (g.R + 1) // 2):
            i0, i1 = min(c[0] for c in group), max(c[1] for c in group)
            sl = slice(i0, i1 + 1)
            slowdown = an.job_slowdown(i0, i1)
            ev = {"baseline_s": _nanmed(tv.job_base[sl]), "baseline_kind": "temporal", "job_slowdown": slowdown,
                  "ranks_compute_up": [g.component(j) for j in ranks_in], "n_steps": i1 - i0 + 1, "threshold": cfg.temporal_threshold}
            rows.append(_row(g, "job", "job", i0, i1, slowdown, "temporal",
                             _confidence(slowdown, cfg.temporal_threshold, i1 - i0 + 1, min_len, "temporal"), ev))
            continue
        for i0, i1, j in group:
            sl = slice(i0, i1 + 1)
            t_ratio = _tratio(g.compute[sl, j], tv.rank_base[sl, j])
            ev = {
                "baseline_s": _nanmed(tv.rank_base[sl, j]),
                "baseline_kind": "temporal",
                "peer_median_s": _nanmed(pv.median[sl, j]),
                "median_compute_s": _nanmed(g.compute[sl, j]),
                "peer_ratio": _nanmed(pv.ratio[sl, j]),
                "temporal_ratio": t_ratio,
                "job_slowdown": an.job_slowdown(i0, i1),
                "n_steps": i1 - i0 + 1,
                "n_flagged": int(tv.rank_flag[sl, j].sum()),
                "threshold": cfg.temporal_threshold,
            }
            rows.append(
                _row(g, g.component(j), "rank", i0, i1, t_ratio, "temporal",
                     _confidence(t_ratio, cfg.temporal_threshold, i1 - i0 + 1, min_len, "temporal"), ev)
            )

    rows = [r for r in rows if r["slowdown"] >= cfg.min_slowdown]
    if not rows:
        return _empty_labels()
    df = pd.DataFrame(rows)
    df = df.sort_values(["start_ts", "component"], kind="mergesort").reset_index(drop=True)
    return _typed(df)


# -- helpers ------------------------------------------------------------------------


def _dilate(mask: np.ndarray, k: int) -> np.ndarray:
    """Grow each True run of a 1-D mask by ``k`` entries on both sides."""
    if k <= 0 or not mask.any():
        return mask.copy()
    out = mask.copy()
    for s in range(1, k + 1):
        out[s:] |= mask[:-s]
        out[:-s] |= mask[s:]
    return out


def _nanmed(a) -> float:
    a = np.asarray(a, dtype=np.float64).ravel()
    m, n = nanmedian(a, axis=0)
    return float(m) if n else float("nan")


def _nanmean(a) -> float:
    a = np.asarray(a, dtype=np.float64).ravel()
    a = a[~np.isnan(a)]
    return float(a.mean()) if a.size else float("nan")


def _ratio(values, base) -> float:
    """Median of ``values`` / median of ``base`` (NaN when either is missing or 0)."""
    v, b = _nanmed(values), _nanmed(base)
    if not (np.isfinite(v) and np.isfinite(b)) or b <= 0:
        return float("nan")
    return v / b


def _tratio(values, base) -> float:
    """Time ratio: sum of ``values`` / sum of ``base`` over the steps where both are
    known (NaN when none). The slowdown of time, which a median would understate for
    intermittent stalls."""
    v = np.asarray(values, dtype=np.float64).ravel()
    b = np.asarray(base, dtype=np.float64).ravel()
    ok = np.isfinite(v) & np.isfinite(b)
    tb = float(b[ok].sum())
    return float(v[ok].sum()) / tb if ok.any() and tb > 0 else float("nan")


def _interval_straggler(g: StepGrid, sl: slice, job_excess_s: float, min_share: float = 0.3):
    """The rank that explains a job-wide slowdown over ``sl``, from per-rank sums:
    the straggler computes longer than its peers *and* waits less than they do in the
    all-reduce (it arrives last, DESIGN: "the straggler waits least"). Its excess,
    ``(compute_i - median compute) + (median comm - comm_i)`` in seconds over the
    interval, must be at least ``min_share`` of the job's excess time
    ``job_excess_s`` (job time - baseline time). Returns ``(column, share, compute
    ratio to the peer median, peer median compute sum)`` or None: a slow link adds
    queueing to everyone's all-reduce and leaves no rank with such an excess."""
    if not (job_excess_s > 0):
        return None
    comp = np.nansum(np.asarray(g.compute[sl], dtype=np.float64), axis=0)  # (R,)
    comm = np.nansum(np.asarray(g.comm[sl], dtype=np.float64), axis=0)
    best = None
    for grp in sorted(set(g.groups.tolist())):
        cols = np.flatnonzero(g.groups == grp)
        if cols.size < 2:
            continue
        mc, mw = float(np.median(comp[cols])), float(np.median(comm[cols]))
        excess = (comp[cols] - mc) + (mw - comm[cols])
        k = int(np.argmax(excess))
        share = float(excess[k] / job_excess_s)
        if share >= min_share and comp[cols][k] > mc and (best is None or share > best[1]):
            best = (int(cols[k]), share, float(comp[cols][k] / mc) if mc > 0 else float("nan"), mc)
    return best


def _overlap_groups(cands: list[tuple[int, int, int]]) -> list[list[tuple[int, int, int]]]:
    """Group (first, last, rank) intervals that overlap in time (transitively)."""
    out: list[list] = []
    end = -1
    for c in sorted(cands):
        if out and c[0] <= end:
            out[-1].append(c)
            end = max(end, c[1])
        else:
            out.append([c])
            end = c[1]
    return out


def _confidence(ratio: float, threshold: float, n: int, min_len: int, views: str) -> float:
    """Confidence in 0..1: margin x duration x view agreement.

    margin = clip((ratio - 1) / (2 (threshold - 1)), 0, 1): 0.5 at the threshold, 1 at
    twice the excess; duration = n / (n + min_len): 0.5 at the minimum duration;
    agreement = 1.0 for "temporal+peer", 0.8 for a single view.
    """
    if not np.isfinite(ratio):
        return 0.0
    margin = float(np.clip((ratio - 1.0) / (2.0 * max(threshold - 1.0, 1e-9)), 0.0, 1.0))
    duration = n / (n + min_len)
    agree = 1.0 if "+" in views else 0.8
    return round(margin * duration * agree, 6)


def _f(x):
    """JSON-safe value: NaN/inf -> None, floats rounded to 9 decimals, numpy scalars to Python."""
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return round(x, 9) if math.isfinite(x) else None
    if isinstance(x, (list, tuple)):
        return [_f(v) for v in x]
    return x


def evidence_json(ev: dict) -> str:
    """Deterministic JSON of an evidence dict (sorted keys, NaN -> null)."""
    return json.dumps({k: _f(v) for k, v in ev.items()}, sort_keys=True)


def _row(g: StepGrid, component, kind, i0, i1, slowdown, views, confidence, ev) -> dict:
    return {
        "run_id": g.run_id,
        "component": component,
        "component_kind": kind,
        "start_ts": float(g.t0[i0]),
        "end_ts": float(g.t1[i1]),
        "start_step": int(g.steps[i0]),
        "end_step": int(g.steps[i1]),
        "slowdown": float(slowdown) if np.isfinite(slowdown) else float("nan"),
        "views": views,
        "confidence": float(confidence),
        "fault_id": None,
        "source": "observed",
        "cause": "unknown",
        "evidence": evidence_json(ev),
    }


def _empty_labels() -> pd.DataFrame:
    return _typed(schema.empty("labels"))


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    """Column order and dtypes of faultlab.schema.LABELS (steps as nullable Int64)."""
    cols = [f.name for f in schema.LABELS]
    df = df.reindex(columns=cols)
    for c in ("start_step", "end_step"):
        df[c] = df[c].astype("Int64")
    for c in ("start_ts", "end_ts", "slowdown", "confidence"):
        df[c] = df[c].astype("float64")
    for c in ("run_id", "component", "component_kind", "views", "fault_id", "source", "cause", "evidence"):
        df[c] = df[c].astype(object)
    df["fault_id"] = df["fault_id"].where(df["fault_id"].notna(), None)
    return df
