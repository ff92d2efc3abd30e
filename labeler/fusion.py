"""Fusion: from per-step flags of the two views to labeled slow intervals.

The SlowSight idea of combining a temporal view (a component against its own history)
and a peer view (a component against its peers) decides *what* was slow:

1. **Localized straggler** (rank label): a run of peer-view flags on a rank (its
   compute_s well above its peer group's median). ``views`` is ``"temporal+peer"``
   when the temporal view agrees in the interval (the job step time or the rank's own
   compute_s is up against its history), else ``"peer"`` (e.g. a fault present from
   the first step, invisible to a temporal view). The rank is the cause: no separate
   ``job`` label is made for the slowdown it explains. The job must have felt it, as
   every other rank label's rule asks: the what-if slowdown of the interval's
   stragglers (the job's time / its time with the ranks peer-flagged in it made ideal
   together, :func:`faultlab.labeler.whatif.ranks_cost`; for one rank ``S_w``; as a
   set, since ranks slowed together each hold the step for the others) reaches
   ``min_slowdown``. A rank that computes
   longer than its group while the job keeps its pace (a pipeline's last stage,
   slower by design and lifted over the peer bar by noise; ranks sharing a busy
   host's CPUs, whose compute times trade places while the job's total does not
   change) cost the job nothing and is no straggler.
2. **Job-wide slowdown** (``job`` label, views ``"temporal"``): the job step time is up
   against its history even after the stragglers are removed (the OSDI'25 what-if
   step time, see :mod:`faultlab.labeler.whatif`, is still above threshold x baseline)
   and no straggler explains it (steps covered by a rank label are left out: a
   throttled rank also slows its share of the all-reduce, which the what-if step
   does not remove). E.g. a slow network link slows every rank's comm_s. A step
   is also flagged job-wide when the straggler-free step time is *sustainedly* up
   (the peer view's sustained rule over a second of steps, :func:`faultlab.labeler.analysis._sustained_job`):
   a rate cap slows its steps in bursts, whose single steps clear the per-step bar
   only now and then. A job-wide interval that one rank's compute explains (it
   computes longer and waits less than its peers, :func:`_interval_straggler`) is
   that rank's label; when the rank's extra compute is under half of the job's
   excess time (``MAJORITY``) and the median straggler-free step is still slowed by
   ``min_slowdown`` (:func:`_job_wide_rest`), the rest is a ``job`` label over the
   same steps too, and each label's ``slowdown`` is 1 + its share x the job's
   excess (a host's noise on one rank during a slow link does not take the link's
   label; a rank label under the floor is dropped).
3. **Rank temporal only** (rank label, views ``"temporal"``): a rank's compute_s is up
   against its own history, but not against its peers (most of its group is slowed)
   and no job label covers it, while the job's time over the steps that no label holds
   (``min_steps`` of them at least) reaches ``temporal_threshold``; half the ranks,
   or every rank of a peer group, up at once is one ``job`` label.

4. **Intermittent straggler** (rank label, views ``"temporal+peer"``): a rank
   stalled now and then (a duty-cycle pause, a GC storm). Stalls that land inside
   the all-reduce stall every rank alike and show only as job flags; those that land
   in the rank's compute make it arrive late. Over an episode of job flags, the late
   arrivals vote for the rank; a clear majority makes the whole episode that rank's
   (:mod:`faultlab.labeler.intermittent`). An episode of like stalls nobody arrived late for
   is one ``job`` label. A stall that straddles a step boundary (two adjacent
   flagged steps) is one stall; an episode whose votes come in runs of two ranks or
   more (one rank's fault, then another's, chained by the period rule) is one
   episode per run.

Flags become intervals (:mod:`faultlab.labeler.intervals`): runs of flagged steps
joined across gaps of at most ``gap_steps`` unflagged steps or ``gap_s`` seconds, kept
when they span at least ``min_steps`` steps and ``min_duration_s`` seconds. A blip
joined to a run only through the seconds rule is trimmed from its ends.

Edges: a label's start and end grow by hysteresis over steps whose smoothed excess
(a centered 5-step rolling median) is above half the threshold's excess, then its
onset is set to the least-squares change point of the log ratio.
A rank explains the job's slowdown only at steps where its compute excess is at
least a quarter of the job's excess; the rest of a simultaneous job-wide slowdown
is labeled too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from faultlab.labeler.analysis import Analysis
from faultlab.labeler.grid import SMALL_GROUP, StepGrid, floored_peers
from faultlab.labeler.intermittent import intermittent
from faultlab.labeler.intervals import dilate, grow, intervals, log_ratio, refine, smoothed_above
from faultlab.labeler.labelrows import empty_labels, grid_row, label_confidence, typed_labels
from faultlab.labeler.stats import column_nansum, loo_median, mean, median, median_of_rows, median_ratio, nanmedian, time_ratio
from faultlab.labeler.views.temporal import TemporalView
from faultlab.labeler.whatif import ranks_cost


def fuse(an: Analysis) -> pd.DataFrame:
    """Turn the flags of an :class:`Analysis` into labels (see module docstring): the
    steps 1-4 of the module docstring in order (:func:`_peer_stragglers`,
    :func:`_job_wide`, :func:`_rank_temporal`, :func:`intermittent`), each seeing
    the labels of the steps before it, then the floor ``min_slowdown``.

    Returns:
        a labels frame (faultlab.schema.LABELS columns) with ``source="observed"``,
        ``cause="unknown"``, ``fault_id=None``, sorted by ``start_ts``, component.
        Times: ``start_ts`` = earliest t_start of the first step, ``end_ts`` = latest
        ``t_start + step_s`` of the last step (unix s). ``slowdown`` is a ratio.
    """
    acc = _Labels.start(an)
    _peer_stragglers(acc)
    _job_wide(acc)
    _rank_temporal(acc)
    rows = intermittent(an, acc.rows)
    rows = [r for r in rows if r["slowdown"] >= an.config.min_slowdown]
    if not rows:
        return empty_labels()
    df = pd.DataFrame(rows)
    df = df.sort_values(["start_ts", "component"], kind="mergesort").reset_index(drop=True)
    return typed_labels(df)


@dataclass
class _Labels:
    """The label rows :func:`fuse` has made so far and the grid steps they hold:
    ``rank_spans`` each rank label's ``(rank column, first row, last row)``,
    ``job_rows`` ``(S,)`` bool (the job labels'); ``timed`` the seconds rules of
    :func:`intervals` for this run. (Spans, not an ``(S, R)`` mask: a few labels
    hold few cells of a run of any size.)"""

    an: Analysis
    rows: list
    rank_spans: list
    job_rows: np.ndarray
    timed: dict

    @classmethod
    def start(cls, an: Analysis) -> "_Labels":
        g, cfg = an.grid, an.config
        pace = median(g.job_step)  # the run's normal step time (s)
        timed = {"t0": g.t0, "t1": g.t1, "gap_s": cfg.gap_s, "min_s": cfg.min_duration_s,
                 "pace_s": pace if np.isfinite(pace) else 0.0}
        return cls(an, [], [], np.zeros(g.S, dtype=bool), timed)

    def rank_held(self, j: int | None = None) -> np.ndarray:
        """``(S,)`` bool: the rows rank column ``j``'s labels hold (None: any rank's)."""
        held = np.zeros(self.an.grid.S, dtype=bool)
        for k, i0, i1 in self.rank_spans:
            if j is None or k == j:
                held[i0 : i1 + 1] = True
        return held

    def add_rank(self, j: int, i0: int, i1: int, slowdown: float, views: str, conf_ratio: float, threshold: float, ev: dict) -> None:
        """A label of rank column ``j`` over rows ``i0..i1`` (its confidence from
        ``conf_ratio`` against ``threshold``)."""
        g = self.an.grid
        if g.dataloader is not None:  # the loader's part of the local time (compute figures include it)
            ev["median_dataloader_s"] = median(g.dataloader[i0 : i1 + 1, j])
        alone_note(g, j, ev)
        self.rows.append(grid_row(g, g.component(j), "rank", i0, i1, slowdown, views,
                                  label_confidence(conf_ratio, threshold, i1 - i0 + 1, self.an.config.min_steps, views), ev))
        self.rank_spans.append((j, i0, i1))

    def add_job(self, row: dict, i0: int, i1: int) -> None:
        """A job label row over rows ``i0..i1``."""
        self.rows.append(row)
        self.job_rows[i0 : i1 + 1] = True


def _peer_stragglers(acc: _Labels) -> None:
    """Step 1: localized stragglers from the peer view: each run of a rank's peer
    flags, its edges grown by hysteresis and its onset refined, is a rank label."""
    an = acc.an
    cfg, g, pv = an.config, an.grid, an.peer
    for j in np.flatnonzero(pv.flag.any(axis=0)):  # only ranks with a peer flag
        j = int(j)
        ivs = intervals(pv.flag[:, j], cfg.gap_steps, cfg.min_steps, **acc.timed)
        if ivs:  # edges by hysteresis: out to where the smoothed excess ends
            low = 1.0 + max(0.5 * (cfg.peer_threshold - 1.0), 0.5 * cfg.mad_k * float(pv.sigma[j]) / np.sqrt(5.0))
            ivs = grow(ivs, smoothed_above(pv.ratio[:, j], low), g.S, cfg.temporal_window_steps)
            ivs = refine(ivs, log_ratio(pv.ratio[:, j]), cfg.temporal_window_steps)
        for i0, i1 in ivs:
            _peer_label(acc, j, i0, i1)


def _peer_label(acc: _Labels, j: int, i0: int, i1: int) -> None:
    """The rank label of a peer-view interval: its slowdown against the rank's own
    level just before onset (a trailing baseline drifts up inside a long fault), or
    its peers' when it has no clean history. No label when the what-if slowdown of
    the interval's stragglers (the ranks with a peer flag in it, this one among them,
    made ideal together: :func:`faultlab.labeler.whatif.ranks_cost`, in the evidence
    as ``whatif_slowdown`` over ``whatif_n_ranks``) is under ``min_slowdown``: the job
    did not feel them."""
    an = acc.an
    cfg, g, tv, pv = an.config, an.grid, an.temporal, an.peer
    sl = slice(i0, i1 + 1)
    rank_t = bool(tv.rank_flag[sl, j].any())
    job_t = bool(tv.job_flag[sl].any())
    peer_ratio = median(pv.ratio[sl, j])
    peer_med = median(pv.median[sl, j])
    t_base = median(tv.rank_base[sl, j])
    comp_med = median(g.compute[sl, j])
    w0 = max(0, i0 - cfg.temporal_window_steps)
    pre = median(g.compute[w0:i0, j]) if i0 - w0 >= cfg.temporal_min_valid_steps else float("nan")
    if np.isfinite(pre) and pre > 0 and (not (np.isfinite(peer_med) and peer_med < pre)
                                         or _own_history_clean(an, j, w0, i0, pre)):
        baseline, kind = pre, "temporal-pre-onset"
    else:  # no history, or the history was already slowed: the peers' level
        baseline, kind = peer_med, "peer"
    n_ok = int(np.isfinite(g.compute[sl, j]).sum())
    slowdown = float(np.nansum(g.compute[sl, j]) / (n_ok * baseline)) if baseline and np.isfinite(baseline) and n_ok else peer_ratio
    views = "temporal+peer" if (rank_t or job_t) else "peer"
    with_peers = np.union1d(np.flatnonzero(pv.flag[sl].any(axis=0)), [j])  # the stragglers of the interval
    ev = {
        "baseline_s": baseline,
        "baseline_kind": kind,
        "temporal_baseline_s": t_base,
        "pre_onset_baseline_s": pre,
        "peer_median_s": peer_med,
        "median_compute_s": comp_med,
        "peer_ratio": peer_ratio,
        "mean_peer_ratio": mean(pv.ratio[sl, j]),
        "temporal_ratio": median_ratio(g.compute[sl, j], tv.rank_base[sl, j]),
        "job_slowdown": an.job_slowdown(i0, i1),
        "whatif_slowdown": ranks_cost(g, with_peers, i0, i1),
        "whatif_n_ranks": int(with_peers.size),
        "job_baseline_s": median(tv.job_base[sl]),
        "n_steps": i1 - i0 + 1,
        "n_flagged": int(pv.flag[sl, j].sum()),
        "threshold": cfg.peer_threshold,
    }
    if ev["whatif_slowdown"] < cfg.min_slowdown:  # NaN (no job step time): not judged
        return
    if kind == "temporal-pre-onset" and _others_slowed_alike(an, j, w0, i0, i1, slowdown):
        return
    acc.add_rank(j, i0, i1, slowdown, views, peer_ratio, cfg.peer_threshold, ev)


def _others_slowed_alike(an: Analysis, j: int, w0: int, i0: int, i1: int, slowdown: float) -> bool:
    """Whether rank column ``j`` of a small peer group (at most
    :data:`faultlab.labeler.grid.SMALL_GROUP` ranks) slowed by less than
    ``peer_threshold`` x what the ranks outside its group did over grid rows
    ``i0..i1``, each against its own level over rows ``w0..i0 - 1`` (``slowdown``
    its own; theirs the median over them of mean local time / that level). False for
    a larger group or a job of one group.

    Why: one or two peers cannot vouch that the job's other ranks kept their pace;
    the other kinds can, each against its own history (their levels differ by
    design): a rank that did not slow ``peer_threshold`` x more than the rest of the
    job (a busy host slowing every rank while its one peer got the CPU) is no
    straggler of its group, by the peer view's own bar."""
    g = an.grid
    mine = g.groups == g.groups[j]
    if int(np.count_nonzero(mine)) > SMALL_GROUP or mine.all() or i0 - w0 < an.config.temporal_min_valid_steps:
        return False
    others = np.flatnonzero(~mine)
    with np.errstate(invalid="ignore", divide="ignore"):
        pre, _ = nanmedian(np.asarray(g.compute[w0:i0, others], dtype=np.float64), axis=0)
        now = np.nanmean(np.asarray(g.compute[i0 : i1 + 1, others], dtype=np.float64), axis=0) / pre
    r = median(now[np.isfinite(now)])
    return bool(np.isfinite(r) and slowdown < an.config.peer_threshold * r)


def _own_history_clean(an: Analysis, j: int, w0: int, i0: int, pre: float) -> bool:
    """Whether rank column ``j`` of a small peer group (at most
    :data:`faultlab.labeler.grid.SMALL_GROUP` ranks) has a clean history before a
    peer-view interval starting at grid row ``i0``: its median local time ``pre`` (s)
    over rows ``w0..i0 - 1`` is under ``peer_threshold`` x its peers' median there
    (it was no straggler then). False for a rank of a larger group.

    Why: in a small group the peers' level during the interval is one or two
    ranks' time, and on a shared host a peer runs fast for tens of steps while the
    rank keeps its own level (the CPU one loses, another gains); the rank's own
    level before the onset is the steadier baseline of its slowdown. A rank already
    slower than its peers before (a straggler from the start) keeps the peers'
    level."""
    g = an.grid
    if int(np.count_nonzero(g.groups == g.groups[j])) > SMALL_GROUP:
        return False
    peers_pre = median(an.peer.median[w0:i0, j])
    return bool(np.isfinite(peers_pre) and peers_pre > 0 and pre < an.config.peer_threshold * peers_pre)


def _explained(acc: _Labels) -> np.ndarray:
    """``(S,)`` bool: steps whose job slowdown a rank label explains. A rank explains
    the job's slowdown while it straggles, but not a step whose excess dwarfs its own
    (its compute excess under a quarter of the job's): a slow link at the same time
    is labeled too."""
    an = acc.an
    g, tv, pv = an.grid, an.temporal, an.peer
    explained = np.zeros(g.S, dtype=bool)
    for j, i0, i1 in acc.rank_spans:  # only steps a rank label holds can be explained, by that rank
        sl = slice(i0, i1 + 1)
        with np.errstate(invalid="ignore"):
            job_ex = np.asarray(g.job_step[sl], dtype=np.float64) - np.asarray(tv.job_base[sl], dtype=np.float64)
            rank_ex = np.asarray(g.compute[sl, j], dtype=np.float64) - np.asarray(pv.median[sl, j], dtype=np.float64)
            explained[sl] |= ~(rank_ex < 0.25 * job_ex)
    return explained


def _job_wide(acc: _Labels) -> None:
    """Step 2: job-wide slowdowns, the job step time up even with stragglers removed,
    on steps no rank label explains (:func:`_explained`); each interval is labeled by
    :func:`_job_interval`."""
    an = acc.an
    cfg, g, tv = an.config, an.grid, an.temporal
    gap = cfg.gap_steps
    explained = _explained(acc)
    job_ivs = intervals(an.job_wide_flag & ~dilate(explained, gap), gap, cfg.min_steps, **acc.timed)
    if job_ivs:
        low_job = 1.0 + 0.5 * (cfg.temporal_threshold - 1.0)
        job_ivs = grow(job_ivs, smoothed_above(tv.job_ratio, low_job) & ~explained, g.S, cfg.temporal_window_steps)
        job_ivs = refine(job_ivs, log_ratio(tv.job_ratio), cfg.temporal_window_steps, blocked=dilate(explained, gap))
    for i0, i1 in job_ivs:
        _job_interval(acc, i0, i1)


def _job_interval(acc: _Labels, i0: int, i1: int) -> None:
    """One job-wide interval: one rank's label when its compute over the interval
    explains it (:func:`_straggler_of_interval`), or the one peerless rank whose
    compute rose (:func:`_solo_of_interval`), else a ``job`` label."""
    an = acc.an
    g, tv = an.grid, an.temporal
    sl = slice(i0, i1 + 1)
    job_excess = float(np.nansum(np.asarray(g.job_step[sl], dtype=np.float64) - np.asarray(tv.job_base[sl], dtype=np.float64)))
    if _straggler_of_interval(acc, i0, i1, job_excess) or _solo_of_interval(acc, i0, i1, job_excess):
        return
    acc.add_job(_job_row(an, i0, i1, an.job_slowdown(i0, i1), also_straggler=bool(acc.rank_held()[sl].any())), i0, i1)


def _straggler_of_interval(acc: _Labels, i0: int, i1: int, job_excess: float) -> bool:
    """One rank's compute over the whole interval stands out from its peers' (a stall
    that lands in its compute half the time, the other half in the all-reduce that
    everyone waits in): the rank's label, not the job's (and, by
    :func:`_job_wide_rest`, a job label for the rest). True when it took the interval."""
    an = acc.an
    cfg, g, tv = an.config, an.grid, an.temporal
    sl = slice(i0, i1 + 1)
    culprit = _interval_straggler(g, sl, job_excess, base=tv.rank_base)
    if culprit is None:
        return False
    j, share, ratio, med_total, own = culprit
    n_ok = int(np.isfinite(g.compute[sl, j]).sum())
    slowdown = an.job_slowdown(i0, i1)  # what the rank cost the job
    ev = {
        "baseline_s": med_total / max(n_ok, 1),
        "baseline_kind": "peer-interval",
        "peer_compute_ratio": ratio,
        "share_of_job_excess": share,
        "compute_share_of_job_excess": own,
        "job_slowdown": slowdown,
        "job_baseline_s": median(tv.job_base[sl]),
        "n_steps": i1 - i0 + 1,
        "threshold": cfg.peer_threshold,
    }
    if _job_wide_rest(an, i0, i1, own):
        # the rank's compute explains under half of the job's excess and the median
        # step, stragglers removed, is still slowed: both are labeled, each with its
        # share of the excess (a host's noise on one rank during a slow link does not
        # take the link's label)
        rest = 1.0 + (1.0 - own) * (slowdown - 1.0)
        if rest >= cfg.min_slowdown:
            acc.add_job(_job_row(an, i0, i1, rest, also_straggler=True,
                                 extra={"straggler": g.component(j), "unexplained_share": 1.0 - own}), i0, i1)
        slowdown = 1.0 + own * (slowdown - 1.0)
        if slowdown < cfg.min_slowdown:
            return True
    acc.add_rank(j, i0, i1, slowdown, "temporal+peer", slowdown, cfg.temporal_threshold, ev)
    return True


def _solo_of_interval(acc: _Labels, i0: int, i1: int, job_excess: float) -> bool:
    """No peer to compare with (a pipeline stage of one rank, a one-rank run): the one
    rank whose compute rose against its own history, enough to explain the job's
    excess, takes the interval. True when one did."""
    an = acc.an
    cfg, g, tv = an.config, an.grid, an.temporal
    sl = slice(i0, i1 + 1)
    solo = _temporal_culprit(g, tv, sl, job_excess)
    if solo is None:
        return False
    j, share = solo
    t_ratio = time_ratio(g.compute[sl, j], tv.rank_base[sl, j])
    ev = {
        "baseline_s": median(tv.rank_base[sl, j]),
        "baseline_kind": "temporal",
        "median_compute_s": median(g.compute[sl, j]),
        "temporal_ratio": t_ratio,
        "share_of_job_excess": share,
        "job_slowdown": an.job_slowdown(i0, i1),
        "job_baseline_s": median(tv.job_base[sl]),
        "n_steps": i1 - i0 + 1,
        "threshold": cfg.temporal_threshold,
    }
    acc.add_rank(j, i0, i1, t_ratio, "temporal", t_ratio, cfg.temporal_threshold, ev)
    return True


def _rank_temporal(acc: _Labels) -> None:
    """Step 3: a rank slow against its own history only (most of its group slowed
    too), on steps no label holds, and only when the job felt it: a rank's compute
    rising back to normal after a period in which it was unusually fast is not a
    slowdown of anything. "The job felt it" is judged on the steps no label holds yet
    (of any rank, or the job): a stall another rank's label explains is not this
    rank's (a rank whose baseline was left low by a fast spell stays flagged for the
    rest of the run, and one other rank's GC stall inside that span read 1.43x),
    over ``min_steps`` of those steps at least (a step or two beside another rank's
    labeled fault, whose contention slowed every rank, is no measure). When most
    ranks are slow at once, that is one job-wide slowdown, labeled once
    (:func:`_temporal_group`)."""
    an = acc.an
    cfg, tv = an.config, an.temporal
    held = acc.rank_held() | acc.job_rows  # job time another label already explains
    cands: list[tuple[int, int, int]] = []
    for j in np.flatnonzero(tv.rank_flag.any(axis=0)):  # only ranks with a temporal flag
        j = int(j)
        free = tv.rank_flag[:, j] & ~dilate(acc.rank_held(j) | acc.job_rows, cfg.gap_steps)
        for i0, i1 in intervals(free, cfg.gap_steps, cfg.min_steps, **acc.timed):
            # judged on a label's length of steps at least: one free step beside
            # another rank's fault says nothing of the job
            if (int((~held[i0 : i1 + 1]).sum()) >= cfg.min_steps
                    and an.job_slowdown(i0, i1, skip=held) >= cfg.temporal_threshold):
                cands.append((i0, i1, j))
    for group in _overlap_groups(cands):
        _temporal_group(acc, group)


def _temporal_group(acc: _Labels, group: list[tuple[int, int, int]]) -> None:
    """Overlapping temporal candidates ``(i0, i1, rank column)``: one ``job`` label
    when at least half the ranks (and two) are in it, or every rank of a candidate's
    peer group (two or more) is (:func:`_group_up`: a slowdown of the whole group is
    common to its kind, a host or a stage, not one rank's), else one rank label each.
    (These labels do not mark ``rank_spans``/``job_rows``: no later step reads them.)"""
    an = acc.an
    cfg, g, tv, pv = an.config, an.grid, an.temporal, an.peer
    min_len = cfg.min_steps
    ranks_in = sorted({j for _, _, j in group} | _group_up(an, group))
    whole = any(int(np.count_nonzero(g.groups == g.groups[j])) >= 2
                and set(np.flatnonzero(g.groups == g.groups[j]).tolist()) <= set(ranks_in) for _, _, j in group)
    if len(ranks_in) >= max(2, (g.R + 1) // 2) or whole:
        i0, i1 = min(c[0] for c in group), max(c[1] for c in group)
        sl = slice(i0, i1 + 1)
        slowdown = an.job_slowdown(i0, i1)
        ev = {"baseline_s": median(tv.job_base[sl]), "baseline_kind": "temporal", "job_slowdown": slowdown,
              "ranks_compute_up": [g.component(j) for j in ranks_in], "n_steps": i1 - i0 + 1, "threshold": cfg.temporal_threshold}
        acc.rows.append(grid_row(g, "job", "job", i0, i1, slowdown, "temporal",
                                 label_confidence(slowdown, cfg.temporal_threshold, i1 - i0 + 1, min_len, "temporal"), ev))
        return
    for i0, i1, j in group:
        sl = slice(i0, i1 + 1)
        t_ratio = time_ratio(g.compute[sl, j], tv.rank_base[sl, j])
        ev = {
            "baseline_s": median(tv.rank_base[sl, j]),
            "baseline_kind": "temporal",
            "peer_median_s": median(pv.median[sl, j]),
            "median_compute_s": median(g.compute[sl, j]),
            "peer_ratio": median(pv.ratio[sl, j]),
            "temporal_ratio": t_ratio,
            "job_slowdown": an.job_slowdown(i0, i1),
            "n_steps": i1 - i0 + 1,
            "n_flagged": int(tv.rank_flag[sl, j].sum()),
            "threshold": cfg.temporal_threshold,
        }
        alone_note(g, j, ev)
        acc.rows.append(grid_row(g, g.component(j), "rank", i0, i1, t_ratio, "temporal",
                                 label_confidence(t_ratio, cfg.temporal_threshold, i1 - i0 + 1, min_len, "temporal"), ev))


def _group_up(an: Analysis, group: list[tuple[int, int, int]]) -> set[int]:
    """The rank columns of the candidates' peer groups whose local time over a
    candidate's span is up against their own history by ``temporal_threshold`` (a
    time ratio over the trailing baseline) though no candidate of theirs made it
    (their flags too sparse, or a gap cut them short): slowed with the candidate."""
    g, tv, cfg = an.grid, an.temporal, an.config
    out: set[int] = set()
    for i0, i1, j in group:
        sl = slice(i0, i1 + 1)
        for k in np.flatnonzero(g.groups == g.groups[j]):
            if int(k) != j and time_ratio(g.compute[sl, k], tv.rank_base[sl, k]) >= cfg.temporal_threshold:
                out.add(int(k))
    return out


#: a straggler whose extra compute is less than this share of a job-wide interval's
#: excess time leaves the rest to a job label of its own (:func:`_job_wide_rest`)
MAJORITY = 0.5


def _job_row(an: Analysis, i0: int, i1: int, slowdown: float, *, also_straggler: bool, extra: dict | None = None) -> dict:
    """A ``job`` label row over grid rows ``i0..i1`` (views ``"temporal"``) with
    ``slowdown`` (a ratio) and the job's evidence: baseline and median step time (s),
    the straggler-free (what-if) ratio, the ranks whose compute rose, whether a rank
    label holds some of it (``also_straggler``), and ``extra``."""
    g, tv, cfg = an.grid, an.temporal, an.config
    sl = slice(i0, i1 + 1)
    ev = {
        "baseline_s": median(tv.job_base[sl]),
        "baseline_kind": "temporal",
        "median_step_s": median(g.job_step[sl]),
        "job_slowdown": an.job_slowdown(i0, i1),
        "straggler_free_ratio": median_ratio(an.sim[sl], tv.job_base[sl]),
        "compute_ratio": median_of_rows(tv.rank_ratio[sl]),
        "ranks_compute_up": [g.component(j) for j in np.flatnonzero(tv.rank_flag[sl].any(axis=0))],
        "also_straggler": also_straggler,
        "n_steps": i1 - i0 + 1,
        "n_flagged": int(an.job_wide_flag[sl].sum()),
        "threshold": cfg.temporal_threshold,
        **(extra or {}),
    }
    return grid_row(g, "job", "job", i0, i1, slowdown, "temporal",
                    label_confidence(slowdown, cfg.temporal_threshold, i1 - i0 + 1, cfg.min_steps, "temporal"), ev)


# -- helpers ------------------------------------------------------------------------


def alone_note(g: StepGrid, j: int, ev: dict) -> None:
    """A rank alone in its peer group, in a job of several groups, has no peer: the
    label's evidence says so (``peers``) and that only its own history (the temporal
    view) judged it. In place on ``ev``; nothing for a rank with peers or a job of
    one group."""
    grp = g.groups[j]
    if int(np.count_nonzero(g.groups == grp)) == 1 and len(set(g.groups.tolist())) > 1:
        ev["peer_group"] = str(grp)
        ev["peers"] = "none: alone in its peer group, judged by the temporal view only"


def _interval_straggler(g: StepGrid, sl: slice, job_excess_s: float, min_share: float = 0.3, *,
                        base: np.ndarray | None = None):
    """The rank that explains a job-wide slowdown over ``sl``, from per-rank sums:
    the straggler computes longer than its peers *and* waits less than they do in the
    all-reduce (it arrives last, DESIGN: "the straggler waits least"). Its excess,
    ``(compute_i - median compute) + (median comm - comm_i)`` (medians of its peers,
    itself left out) in seconds over the
    interval, must be at least ``min_share`` of the job's excess time
    ``job_excess_s`` (job time - baseline time). Returns ``(column, share, compute
    ratio to the peer median, peer median compute sum (s), compute share)`` or None: a
    slow link adds queueing to everyone's all-reduce and leaves no rank with such an
    excess. The compute share is the rank's extra compute alone over the job's excess
    (the share counts the straggler's excess twice: its extra compute, and the wait
    its peers have and it does not). ``base`` ``(S, R)``: each rank's trailing
    baseline (s); in a group of at most :data:`faultlab.labeler.grid.SMALL_GROUP`
    ranks the peers' compute counts at no less than it (as in the peer view: one
    peer's fast spell is no rank's excess)."""
    if not (job_excess_s > 0):
        return None
    comp = column_nansum(g.compute[sl])  # (R,)
    floored = column_nansum(floored_peers(g.compute[sl], base[sl])) if base is not None else comp
    comm = column_nansum(g.comm[sl])
    best = None
    for grp in sorted(set(g.groups.tolist())):
        cols = np.flatnonzero(g.groups == grp)
        if cols.size < 2:
            continue
        # each rank against its peers without itself (leave-one-out medians)
        ref = floored if cols.size <= SMALL_GROUP else comp
        mc, mw = loo_median(ref[cols][None, :])[0], loo_median(comm[cols][None, :])[0]
        excess = (comp[cols] - mc) + (mw - comm[cols])
        k = int(np.nanargmax(excess)) if np.isfinite(excess).any() else 0
        share = float(excess[k] / job_excess_s)
        if share >= min_share and comp[cols][k] > mc[k] and (best is None or share > best[1]):
            best = (int(cols[k]), share, float(comp[cols][k] / mc[k]) if mc[k] > 0 else float("nan"), float(mc[k]),
                    float((comp[cols][k] - mc[k]) / job_excess_s))
    return best


def _job_wide_rest(an: Analysis, i0: int, i1: int, own: float) -> bool:
    """Whether a job-wide interval (grid rows ``i0..i1``) that a straggler's compute
    explains only in part (``own``: its extra compute over the job's excess time, a
    fraction) holds a job-wide slowdown of its own: ``own`` is under ``MAJORITY``
    and the *median* straggler-free step (the what-if ``sim`` over the job's
    baseline) is at least ``min_slowdown``: a slow link slows most steps, a rank's
    stalls inside the all-reduce (a pause that lands in its compute one time in
    five) only a few, which a median leaves out."""
    sl = slice(i0, i1 + 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = median(np.asarray(an.sim[sl], dtype=np.float64) / np.asarray(an.temporal.job_base[sl], dtype=np.float64))
    return own < MAJORITY and np.isfinite(r) and r >= an.config.min_slowdown


def _temporal_culprit(g: StepGrid, tv: TemporalView, sl: slice, job_excess_s: float, min_share: float = 0.3):
    """The one rank whose compute rose against its *own* history enough to explain a
    job-wide slowdown over ``sl``: its excess ``sum(compute_s - temporal baseline)``
    (seconds) is at least ``min_share`` of the job's excess time and more than twice
    any other rank's. Only for a rank without peers (alone in its peer group: a
    pipeline stage of one rank, a one-rank run), where the peer view cannot speak.
    Returns ``(column, share)`` or None."""
    if not (job_excess_s > 0):
        return None
    # only ranks without peers: with peers, the peer view and _interval_straggler judge
    _, counts = np.unique(g.groups, return_counts=True)
    alone = np.isin(g.groups, np.unique(g.groups)[counts == 1])
    if not alone.any():
        return None
    with np.errstate(invalid="ignore"):
        ex = column_nansum(g.compute[sl], tv.rank_base[sl])
    if ex.size == 0:
        return None
    order = np.argsort(-ex, kind="stable")
    j = int(order[0])
    second = float(ex[order[1]]) if ex.size > 1 else 0.0
    share = float(ex[j] / job_excess_s)
    if alone[j] and share >= min_share and ex[j] > 2.0 * max(second, 0.0) and bool(tv.rank_flag[sl, j].any()):
        return j, share
    return None


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


