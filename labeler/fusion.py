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
   does not remove). E.g. a slow network link slows every rank's comm_s. A step
   is also flagged job-wide when the straggler-free step time is *sustainedly* up
   (the peer view's sustained rule over a second of steps, :func:`_sustained_job`):
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
   reaches ``temporal_threshold``.

4. **Intermittent straggler** (rank label, views ``"temporal+peer"``): a rank
   stalled now and then (a duty-cycle pause, a GC storm). Stalls that land inside
   the all-reduce stall every rank alike and show only as job flags; those that land
   in the rank's compute make it arrive late. Over an episode of job flags, the late
   arrivals vote for the rank; a clear majority makes the whole episode that rank's
   (see :func:`_intermittent`). An episode of like stalls nobody arrived late for
   is one ``job`` label. A stall that straddles a step boundary (two adjacent
   flagged steps) is one stall; an episode whose votes come in runs of two ranks or
   more (one rank's fault, then another's, chained by the period rule) is one
   episode per run.

Flags become intervals: runs of flagged steps joined across gaps of at most
``gap_steps`` unflagged steps or ``gap_s`` seconds, kept when they span at least
``min_steps`` steps and ``min_duration_s`` seconds. A blip joined to a run only
through the seconds rule is trimmed from its ends (:func:`_trim_blips`).

Edges: a label's start and end grow by hysteresis over steps whose smoothed excess
(a centered 5-step rolling median) is above half the threshold's excess, then its
onset is set to the least-squares change point of the log ratio (:func:`_onset`).
A rank explains the job's slowdown only at steps where its compute excess is at
least a quarter of the job's excess; the rest of a simultaneous job-wide slowdown
is labeled too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from faultlab import schema
from faultlab.labeler.peer import PeerView, peer_view
from faultlab.labeler.temporal import MAD_TO_SIGMA, StepGrid, TemporalView, loo_median, nanmedian, temporal_view
from faultlab.labeler.whatif import simulate_job


def intervals(flags: np.ndarray, gap: int, min_len: int, *, t0: np.ndarray | None = None, t1: np.ndarray | None = None,
              gap_s: float = 0.0, min_s: float = 0.0, pace_s: float = 0.0) -> list[tuple[int, int]]:
    """Contiguous runs of True in a 1-D bool array, as inclusive ``(first, last)`` indices.

    Runs separated by at most ``gap`` False entries, or (when step times ``t0``/``t1``,
    unix s, are given) by at most ``gap_s`` seconds, are joined; a run is kept when
    ``last - first + 1 >= min_len`` and it lasts at least ``min_s`` seconds
    (``t1[last] - t0[first]``). Steps of a few milliseconds make a step count alone a
    poor measure of a fail-slow condition, hence the seconds. With ``pace_s`` (the
    run's normal step time, s) a run also counts as ``min_len`` steps long when it
    lasts ``min_len`` normal steps: a fault slows the steps it spans, so a GC stall
    of seconds spans only two or three steps (at 30 ms a step, 2 steps of 5.6 s are
    180 normal steps); it still needs two steps (one slow step is one event, not a
    condition). Vectorized; returns ``[]`` when nothing is flagged.
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
    p0 = np.concatenate([[0], breaks + 1])  # first / last flag of each run, as positions in idx
    p1 = np.concatenate([breaks, [idx.size - 1]])
    if timed and gap_s > 0:
        _trim_blips(idx, joined, p0, p1, gap, min_len)
    starts, ends = idx[p0], idx[p1]
    keep = (ends - starts + 1) >= min_len
    if timed and pace_s > 0:
        with np.errstate(invalid="ignore"):
            keep |= ((t1[ends] - t0[starts]) >= min_len * pace_s) & (ends > starts)  # one step is one event
    if timed and min_s > 0:
        with np.errstate(invalid="ignore"):
            keep &= (t1[ends] - t0[starts]) >= min_s
    return [(int(a), int(b)) for a, b in zip(starts[keep], ends[keep])]


def _trim_blips(idx: np.ndarray, joined: np.ndarray, p0: np.ndarray, p1: np.ndarray, gap: int, min_len: int) -> None:
    """Trim, in place, a blip at either end of a run that joined the rest only through
    the seconds rule: the first (last) piece of flags (pieces: flags at most ``gap``
    steps apart) is dropped when it is shorter than ``min_len`` steps, the rest spans at
    least ``min_len`` steps, and the gap to the next piece is longer than twice the
    typical (median) gap between the other pieces. A scheduler hiccup a few steps before
    a fault would otherwise set the label's onset (steps of a few ms make ``gap_s`` span
    many steps); the regular stalls of an intermittent fault (similar gaps) are kept.
    ``idx`` are the flagged indices, ``joined`` whether each is joined to the next,
    ``p0``/``p1`` each run's first/last position in ``idx``."""
    d = np.diff(idx) - 1  # unflagged entries between consecutive flags
    loose = np.flatnonzero(joined & (d > gap))  # joins made by seconds only
    if loose.size == 0:
        return
    runs = np.searchsorted(p1, loose)  # the run each loose join is in (p1 sorted)
    for r in np.unique(runs):
        a, b = int(p0[r]), int(p1[r])
        cuts = loose[runs == r]  # piece k ends at position cuts[k]
        gaps = d[cuts]
        # leading piece
        if idx[cuts[0]] - idx[a] + 1 < min_len and idx[b] - idx[cuts[0] + 1] + 1 >= min_len:
            typical = float(np.median(gaps[1:])) if gaps.size > 1 else 0.0
            if gaps[0] > 2.0 * typical:
                a = int(cuts[0] + 1)
                cuts, gaps = cuts[1:], gaps[1:]
        # trailing piece
        if cuts.size and idx[b] - idx[cuts[-1] + 1] + 1 < min_len and idx[cuts[-1]] - idx[a] + 1 >= min_len:
            typical = float(np.median(gaps[:-1])) if gaps.size > 1 else 0.0
            if gaps[-1] > 2.0 * typical:
                b = int(cuts[-1])
        p0[r], p1[r] = a, b


def _extend(flags: np.ndarray, i0: int, i1: int, lo: int, hi: int, limit: int) -> tuple[int, int]:
    """Grow ``[i0, i1]`` backward and forward over consecutive True entries of
    ``flags`` (a lower, hysteresis threshold), at most ``limit`` entries each way and
    never past ``lo``/``hi`` (inclusive bounds)."""
    a = i0
    while a - 1 >= max(lo, i0 - limit) and flags[a - 1]:
        a -= 1
    b = i1
    while b + 1 <= min(hi, i1 + limit) and flags[b + 1]:
        b += 1
    return a, b


def _grow(ivs: list[tuple[int, int]], flags: np.ndarray, n: int, limit: int) -> list[tuple[int, int]]:
    """:func:`_extend` each interval of a sorted, disjoint list without running over
    its neighbours (``n`` entries in all, at most ``limit`` each way); intervals that
    grow until they touch become one."""
    out: list[tuple[int, int]] = []
    for k, (i0, i1) in enumerate(ivs):
        lo = out[-1][1] + 1 if out else 0
        hi = ivs[k + 1][0] - 1 if k + 1 < len(ivs) else n - 1
        a, b = _extend(flags, i0, i1, lo, hi, limit)
        if out and a <= out[-1][1] + 1:  # grown into its neighbour: one interval
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _onset(x: np.ndarray, i0: int, i1: int, lo: int, window: int) -> int:
    """Refine the first row ``i0`` of an interval ``[i0, i1]`` to the least-squares
    change point of a single shift in the mean of ``x`` (a 1-D log-ratio series; NaN
    read as 0, i.e. ratio 1), fitted over ``[max(lo, i0 - window), i1]`` (Hinkley 1971,
    the change-point estimate of a mean shift). The onset may move back to where the
    level really rose (a weak fault first flagged late) or forward past sporadic
    blips that the joining rules tied to the interval (controller start-up noise), but
    not beyond the middle of the interval, and only to a split whose right side is
    higher. Returns ``i0`` when there is no history before it."""
    a = max(lo, i0 - window)
    if a >= i0 or i1 - a < 2:
        return i0
    seg = np.nan_to_num(np.asarray(x[a : i1 + 1], dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    n = seg.size
    cs, cs2 = np.cumsum(seg), np.cumsum(seg * seg)
    k = np.arange(1, n)  # left = seg[:k], right = seg[k:]
    left_sum, right_sum = cs[k - 1], cs[-1] - cs[k - 1]
    sse = (cs2[k - 1] - left_sum**2 / k) + ((cs2[-1] - cs2[k - 1]) - right_sum**2 / (n - k))
    ok = (a + k <= i0 + (i1 - i0) // 2) & (right_sum / (n - k) > left_sum / k)
    if not ok.any():
        return i0
    sse = np.where(ok, sse, np.inf)
    return int(a + k[int(np.argmin(sse))])


def _refine(ivs: list[tuple[int, int]], x: np.ndarray, window: int, blocked: np.ndarray | None = None) -> list[tuple[int, int]]:
    """:func:`_onset` for each interval of a sorted, disjoint list (the history of one
    never reaches back into the one before, nor past a ``blocked`` entry: steps
    another label already explains)."""
    last_blocked = None
    if blocked is not None and blocked.any():
        # index of the last blocked entry at or before each position (-1: none)
        last_blocked = np.maximum.accumulate(np.where(blocked, np.arange(blocked.size), -1))
    out: list[tuple[int, int]] = []
    for i0, i1 in ivs:
        lo = out[-1][1] + 1 if out else 0
        if last_blocked is not None and i0 > 0:
            lo = max(lo, int(last_blocked[i0 - 1]) + 1)
        out.append((_onset(x, i0, i1, lo, window), i1))
    return out


def _log(ratio: np.ndarray) -> np.ndarray:
    """log of a ratio series (float64; NaN where not positive)."""
    r = np.asarray(ratio, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(r > 0, np.log(r), np.nan)


def _smoothed_above(ratio: np.ndarray, low: float, k: int = 5) -> np.ndarray:
    """``(S,)`` bool: the centered rolling median (``k`` steps, NaN skipped) of a 1-D
    ratio series is above ``low``. The hysteresis flag that sets a label's edges: a
    sustained excess too small to flag a single noisy step, but above noise when
    ``k`` steps agree."""
    sm = pd.Series(np.asarray(ratio, dtype=np.float64)).rolling(k, center=True, min_periods=(k + 1) // 2).median()
    return (sm > low).to_numpy()


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
    #: the run's expected job step over its baseline, mean over the unflagged steps
    #: (:func:`expected_over_median`)
    job_expected: float = 1.0

    def job_slowdown(self, i0: int, i1: int, skip: np.ndarray | None = None) -> float:
        """Job time over rows ``i0..i1`` / the time its baseline steps would have taken
        (a time ratio: an intermittent stall counts in full, where a median would hide
        it), the baseline being the trailing median scaled to the expected step
        (``job_expected``). ``skip`` ``(S,)`` bool leaves those rows out (steps whose
        time another label explains); NaN when no row is left."""
        x = self.grid.job_step[i0 : i1 + 1]
        base = self.temporal.job_base[i0 : i1 + 1] * self.job_expected
        if skip is not None:
            keep = ~np.asarray(skip[i0 : i1 + 1], dtype=bool)
            x, base = x[keep], base[keep]
        return _tratio(x, base)

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
    # no compute_s at a step (not recorded): nothing to remove, the step time stands
    sim = np.where(np.isfinite(sim), sim, np.asarray(grid.job_step, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        jw = (
            tv.job_flag
            & (sim > tv.job_base * config.temporal_threshold)
            & ((sim - tv.job_base) > config.mad_k * np.nan_to_num(tv.job_sigma))
        )
    jw |= _sustained_job(grid, tv, sim, config)
    return Analysis(grid=grid, temporal=tv, peer=pv, sim=sim, job_wide_flag=jw, config=config,
                    job_expected=expected_over_median(grid.job_step, tv.job_base, tv.job_flag))


def expected_over_median(x: np.ndarray, base: np.ndarray, flag: np.ndarray) -> float:
    """The expected step over its trailing-median baseline: the mean of ``x / base``
    over the unflagged steps (``x``, ``base`` ``(S,)`` s; ``flag`` ``(S,)`` bool), at
    least 1 (1.0 with no such step). Step times skew right, so their mean, the time
    a step is expected to take, lies above their median (1.01-1.09, median 1.03, over
    the 46 runs of the 801-806 sweeps and the fault-free campaign): a slowdown as a
    time ratio against the median alone reads that much high, and a fault that slowed
    the job 1.15x could read 1.2x, the floor. Flagged steps are left out, so the
    correction is never more than the unflagged steps show."""
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.asarray(x, dtype=np.float64) / np.asarray(base, dtype=np.float64)
    ok = np.isfinite(r) & ~np.asarray(flag, dtype=bool)
    return max(1.0, float(r[ok].mean())) if ok.any() else 1.0


def _sustained_job(grid: StepGrid, tv: TemporalView, sim: np.ndarray, config) -> np.ndarray:
    """``(S,)`` bool: the job's straggler-free step time (the what-if ``sim``, s) is
    *sustainedly* above its trailing baseline: the peer view's sustained rule
    (:func:`faultlab.labeler.peer.sustained`) on ``sim / job_base`` over its median
    over the run when that is under 1 (the what-if takes every step's slowest rank's
    extra compute out, so on a noisy host it sits below the job's baseline at every
    step, not only in a fault), over a centered
    window of ``min_duration_s`` of steps (k), at ``max(min_slowdown, 1 + mad_k x
    sigma)`` with sigma the robust spread of that ratio's centered k-step rolling
    median over the run (not sigma / sqrt(k): step noise on a loaded host is not
    independent): 1.4826 x the median distance below the median of the values below
    it (the lower half only: the slowed stretches this rule is for lie above the
    median, and a run with several faults would widen a two-sided MAD). The level
    is the labeler's floor, not the per-step bar ``temporal_threshold``: a median
    over a second of steps is not one noisy step. A slow link that slows a third of
    the steps by 2x and the rest by 1.2x flags only some steps one by one (the
    unflagged ones feed the baseline); over a second of steps it is plain."""
    from faultlab.labeler.peer import sustained, window_steps

    if grid.S == 0:
        return np.zeros(0, dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.asarray(sim, dtype=np.float64) / np.asarray(tv.job_base, dtype=np.float64)
    # against its own typical level: the what-if takes every step's slowest rank's
    # extra compute out, so on a noisy host it sits below the job's baseline at
    # every step (0.85-0.95 on 4 ranks sharing 2 cores), not only in a fault
    typical = float(np.median(r[np.isfinite(r)])) if np.isfinite(r).any() else 1.0
    if 0 < typical < 1:
        r = r / typical
    k = window_steps(grid, config)
    # the spread of the window median itself over the run: host load wanders, so
    # steps are not independent and sigma / sqrt(k) would understate it
    rm = pd.Series(np.where(np.isfinite(r), r, np.nan)).rolling(k, center=True, min_periods=(k + 1) // 2).median().to_numpy()
    fin = rm[np.isfinite(rm)]
    if fin.size == 0:
        return np.zeros(grid.S, dtype=bool)
    mid = float(np.median(fin))
    # the spread from the lower half only: slowed stretches (the faults this rule is
    # for) lie above the median and would widen a two-sided MAD
    sigma = MAD_TO_SIGMA * float(np.median(mid - fin[fin <= mid]))
    level = max(float(config.min_slowdown), 1.0 + float(config.mad_k) * sigma)
    return sustained(r[:, None], k, np.asarray([level]))[:, 0]


def fuse(an: Analysis) -> pd.DataFrame:
    """Turn the flags of an :class:`Analysis` into labels (see module docstring): the
    steps 1-4 of the module docstring in order (:func:`_peer_stragglers`,
    :func:`_job_wide`, :func:`_rank_temporal`, :func:`_intermittent`), each seeing
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
    rows = _intermittent(an, acc.rows)
    rows = [r for r in rows if r["slowdown"] >= an.config.min_slowdown]
    if not rows:
        return _empty_labels()
    df = pd.DataFrame(rows)
    df = df.sort_values(["start_ts", "component"], kind="mergesort").reset_index(drop=True)
    return _typed(df)


@dataclass
class _Labels:
    """The label rows :func:`fuse` has made so far and the grid steps they hold:
    ``rank_rows`` ``(S, R)`` bool (each rank's labels), ``job_rows`` ``(S,)`` bool (the
    job labels'); ``timed`` the seconds rules of :func:`intervals` for this run."""

    an: Analysis
    rows: list
    rank_rows: np.ndarray
    job_rows: np.ndarray
    timed: dict

    @classmethod
    def start(cls, an: Analysis) -> "_Labels":
        g, cfg = an.grid, an.config
        pace = _nanmed(g.job_step)  # the run's normal step time (s)
        timed = {"t0": g.t0, "t1": g.t1, "gap_s": cfg.gap_s, "min_s": cfg.min_duration_s,
                 "pace_s": pace if np.isfinite(pace) else 0.0}
        return cls(an, [], np.zeros((g.S, g.R), dtype=bool), np.zeros(g.S, dtype=bool), timed)

    def add_rank(self, j: int, i0: int, i1: int, slowdown: float, views: str, conf_ratio: float, threshold: float, ev: dict) -> None:
        """A label of rank column ``j`` over rows ``i0..i1`` (its confidence from
        ``conf_ratio`` against ``threshold``)."""
        g = self.an.grid
        if g.dataloader is not None:  # the loader's part of the local time (compute figures include it)
            ev["median_dataloader_s"] = _nanmed(g.dataloader[i0 : i1 + 1, j])
        self.rows.append(_row(g, g.component(j), "rank", i0, i1, slowdown, views,
                              _confidence(conf_ratio, threshold, i1 - i0 + 1, self.an.config.min_steps, views), ev))
        self.rank_rows[i0 : i1 + 1, j] = True

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
            ivs = _grow(ivs, _smoothed_above(pv.ratio[:, j], low), g.S, cfg.temporal_window_steps)
            ivs = _refine(ivs, _log(pv.ratio[:, j]), cfg.temporal_window_steps)
        for i0, i1 in ivs:
            _peer_label(acc, j, i0, i1)


def _peer_label(acc: _Labels, j: int, i0: int, i1: int) -> None:
    """The rank label of a peer-view interval: its slowdown against the rank's own
    level just before onset (a trailing baseline drifts up inside a long fault), or
    its peers' when it has no clean history."""
    an = acc.an
    cfg, g, tv, pv = an.config, an.grid, an.temporal, an.peer
    sl = slice(i0, i1 + 1)
    rank_t = bool(tv.rank_flag[sl, j].any())
    job_t = bool(tv.job_flag[sl].any())
    peer_ratio = _nanmed(pv.ratio[sl, j])
    peer_med = _nanmed(pv.median[sl, j])
    t_base = _nanmed(tv.rank_base[sl, j])
    comp_med = _nanmed(g.compute[sl, j])
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
    acc.add_rank(j, i0, i1, slowdown, views, peer_ratio, cfg.peer_threshold, ev)


def _explained(acc: _Labels) -> np.ndarray:
    """``(S,)`` bool: steps whose job slowdown a rank label explains. A rank explains
    the job's slowdown while it straggles, but not a step whose excess dwarfs its own
    (its compute excess under a quarter of the job's): a slow link at the same time
    is labeled too."""
    an = acc.an
    g, tv, pv = an.grid, an.temporal, an.peer
    explained = np.zeros(g.S, dtype=bool)
    held = np.flatnonzero(acc.rank_rows.any(axis=1))  # only steps a rank label holds can be explained
    if held.size:
        with np.errstate(invalid="ignore"):
            job_ex = np.asarray(g.job_step[held], dtype=np.float64) - np.asarray(tv.job_base[held], dtype=np.float64)
            rank_ex = np.asarray(g.compute[held], dtype=np.float64) - np.asarray(pv.median[held], dtype=np.float64)
            explained[held] = (acc.rank_rows[held] & ~(rank_ex < 0.25 * job_ex[:, None])).any(axis=1)
    return explained


def _job_wide(acc: _Labels) -> None:
    """Step 2: job-wide slowdowns, the job step time up even with stragglers removed,
    on steps no rank label explains (:func:`_explained`); each interval is labeled by
    :func:`_job_interval`."""
    an = acc.an
    cfg, g, tv = an.config, an.grid, an.temporal
    gap = cfg.gap_steps
    explained = _explained(acc)
    job_ivs = intervals(an.job_wide_flag & ~_dilate(explained, gap), gap, cfg.min_steps, **acc.timed)
    if job_ivs:
        low_job = 1.0 + 0.5 * (cfg.temporal_threshold - 1.0)
        job_ivs = _grow(job_ivs, _smoothed_above(tv.job_ratio, low_job) & ~explained, g.S, cfg.temporal_window_steps)
        job_ivs = _refine(job_ivs, _log(tv.job_ratio), cfg.temporal_window_steps, blocked=_dilate(explained, gap))
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
    acc.add_job(_job_row(an, i0, i1, an.job_slowdown(i0, i1), also_straggler=bool(acc.rank_rows[sl].any())), i0, i1)


def _straggler_of_interval(acc: _Labels, i0: int, i1: int, job_excess: float) -> bool:
    """One rank's compute over the whole interval stands out from its peers' (a stall
    that lands in its compute half the time, the other half in the all-reduce that
    everyone waits in): the rank's label, not the job's (and, by
    :func:`_job_wide_rest`, a job label for the rest). True when it took the interval."""
    an = acc.an
    cfg, g, tv = an.config, an.grid, an.temporal
    sl = slice(i0, i1 + 1)
    culprit = _interval_straggler(g, sl, job_excess)
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
        "job_baseline_s": _nanmed(tv.job_base[sl]),
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
    t_ratio = _tratio(g.compute[sl, j], tv.rank_base[sl, j])
    ev = {
        "baseline_s": _nanmed(tv.rank_base[sl, j]),
        "baseline_kind": "temporal",
        "median_compute_s": _nanmed(g.compute[sl, j]),
        "temporal_ratio": t_ratio,
        "share_of_job_excess": share,
        "job_slowdown": an.job_slowdown(i0, i1),
        "job_baseline_s": _nanmed(tv.job_base[sl]),
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
    rest of the run, and one other rank's GC stall inside that span read 1.43x). When
    most ranks are slow at once, that is one job-wide slowdown, labeled once
    (:func:`_temporal_group`)."""
    an = acc.an
    cfg, tv = an.config, an.temporal
    held = acc.rank_rows.any(axis=1) | acc.job_rows  # job time another label already explains
    cands: list[tuple[int, int, int]] = []
    for j in np.flatnonzero(tv.rank_flag.any(axis=0)):  # only ranks with a temporal flag
        j = int(j)
        free = tv.rank_flag[:, j] & ~_dilate(acc.rank_rows[:, j] | acc.job_rows, cfg.gap_steps)
        for i0, i1 in intervals(free, cfg.gap_steps, cfg.min_steps, **acc.timed):
            if an.job_slowdown(i0, i1, skip=held) >= cfg.temporal_threshold:
                cands.append((i0, i1, j))
    for group in _overlap_groups(cands):
        _temporal_group(acc, group)


def _temporal_group(acc: _Labels, group: list[tuple[int, int, int]]) -> None:
    """Overlapping temporal candidates ``(i0, i1, rank column)``: one ``job`` label
    when at least half the ranks (and two) are in it, else one rank label each. (These
    labels do not mark ``rank_rows``/``job_rows``: no later step reads them.)"""
    an = acc.an
    cfg, g, tv, pv = an.config, an.grid, an.temporal, an.peer
    min_len = cfg.min_steps
    ranks_in = sorted({j for _, _, j in group})
    if len(ranks_in) >= max(2, (g.R + 1) // 2):
        i0, i1 = min(c[0] for c in group), max(c[1] for c in group)
        sl = slice(i0, i1 + 1)
        slowdown = an.job_slowdown(i0, i1)
        ev = {"baseline_s": _nanmed(tv.job_base[sl]), "baseline_kind": "temporal", "job_slowdown": slowdown,
              "ranks_compute_up": [g.component(j) for j in ranks_in], "n_steps": i1 - i0 + 1, "threshold": cfg.temporal_threshold}
        acc.rows.append(_row(g, "job", "job", i0, i1, slowdown, "temporal",
                             _confidence(slowdown, cfg.temporal_threshold, i1 - i0 + 1, min_len, "temporal"), ev))
        return
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
        acc.rows.append(_row(g, g.component(j), "rank", i0, i1, t_ratio, "temporal",
                             _confidence(t_ratio, cfg.temporal_threshold, i1 - i0 + 1, min_len, "temporal"), ev))


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
        "baseline_s": _nanmed(tv.job_base[sl]),
        "baseline_kind": "temporal",
        "median_step_s": _nanmed(g.job_step[sl]),
        "job_slowdown": an.job_slowdown(i0, i1),
        "straggler_free_ratio": _ratio(an.sim[sl], tv.job_base[sl]),
        "compute_ratio": _nanmed(tv.rank_ratio[sl]),
        "ranks_compute_up": [g.component(j) for j in np.flatnonzero(tv.rank_flag[sl].any(axis=0))],
        "also_straggler": also_straggler,
        "n_steps": i1 - i0 + 1,
        "n_flagged": int(an.job_wide_flag[sl].sum()),
        "threshold": cfg.temporal_threshold,
        **(extra or {}),
    }
    return _row(g, "job", "job", i0, i1, slowdown, "temporal",
                _confidence(slowdown, cfg.temporal_threshold, i1 - i0 + 1, cfg.min_steps, "temporal"), ev)


#: the most consecutive job-flagged steps taken as one stall: a pause that straddles
#: a step boundary slows two steps (more in a row is a sustained slowdown)
STRADDLE_STEPS = 2


def _merge_adjacent(rows: np.ndarray, ex: np.ndarray, longest: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs of at most ``longest`` consecutive grid rows (sorted ``rows``, excesses
    ``ex`` in s) as one stall each: a pause that straddles a step boundary slows two
    steps by about half each. A longer run is a sustained slowdown (a slow link), not a
    stall: its rows stay one each. Returns ``(first, last, excess)`` per stall: its
    first and last grid row and the sum of its excesses (s)."""
    if rows.size == 0:
        return rows, rows, np.asarray(ex, dtype=np.float64)
    starts = np.flatnonzero(np.r_[True, np.diff(rows) > 1])
    ends = np.r_[starts[1:], rows.size]
    long_run = (ends - starts) > longest
    if long_run.any():  # split long runs back into single rows
        single = np.zeros(rows.size, dtype=bool)
        for a, b in zip(starts[long_run], ends[long_run]):
            single[a:b] = True
        starts = np.flatnonzero(np.r_[True, np.diff(rows) > 1] | single)  # the row after a run starts anew
        ends = np.r_[starts[1:], rows.size]
    return rows[starts], rows[ends - 1], np.add.reduceat(ex, starts)


def _stall_episodes(an: Analysis, *, stall_jump: float,
                    max_flagged: float) -> list[tuple[np.ndarray, np.ndarray, int, np.ndarray, np.ndarray]]:
    """Episodes of repeated stalls of about one size: ``[(stalls, flagged, n_steps,
    excess, last)]`` (each stall's first grid row; every job-flagged step in their
    span, for the jitter; the number of steps they span; each stall's excess, s;
    each stall's last grid row). A stall is a job-flagged step, or up to
    ``STRADDLE_STEPS`` consecutive ones merged (:func:`_merge_adjacent`). Stalls are
    cut into bands of excess (``job_step`` - baseline, sorted, cut at every jump of
    ``stall_jump`` x), each band into runs at most ``intermittent_period_s`` seconds
    apart; a run of at least two stalls whose steps are at most ``max_flagged`` of
    its span is an episode."""
    g, tv, cfg = an.grid, an.temporal, an.config
    fl = np.flatnonzero(tv.job_flag)
    if fl.size < 2:
        return []
    ex = np.asarray(g.job_step[fl], dtype=np.float64) - np.asarray(tv.job_base[fl], dtype=np.float64)
    ok = np.isfinite(ex) & (ex > 0)
    fl, ex = fl[ok], ex[ok]
    if fl.size < 2:
        return []
    first, last, sex = _merge_adjacent(fl, ex, STRADDLE_STEPS)
    o = np.argsort(sex, kind="stable")
    cut = np.flatnonzero(np.diff(np.log(sex[o])) > np.log(stall_jump))
    out = []
    for band in np.split(o, cut + 1):
        band = band[np.argsort(first[band], kind="stable")]
        if band.size < 2:
            continue
        gaps = g.t0[first[band][1:]] - g.t1[last[band][:-1]]
        for run in np.split(band, np.flatnonzero(gaps > cfg.intermittent_period_s) + 1):
            if run.size < 2:
                continue
            st, st_last = first[run], last[run]
            n_ep = int(st_last[-1] - st[0] + 1)
            if int((st_last - st + 1).sum()) > max_flagged * n_ep:
                continue
            span = fl[(fl >= st[0]) & (fl <= st_last[-1])]
            out.append((st, span, n_ep, sex[run], st_last))
    out.sort(key=lambda e: int(e[0][0]))
    return out


def _intermittent(an: Analysis, rows: list[dict], *, min_share: float = 0.8, max_flagged: float = 0.5,
                  min_late: float = 0.5, max_spread: float = 2.0) -> list[dict]:
    """Labels for an *intermittent* straggler: a rank stalled now and then (a process
    paused in a duty cycle, a GC storm). A stall that lands in the rank's compute (or
    between its steps) makes it arrive late at the all-reduce (attributable per step);
    one that lands inside the all-reduce stalls every rank alike (not attributable per
    step: those steps become job-wide flags). Per step the evidence is split, so the
    labels come out late or as an unexplained ``job`` label; per *episode* it is clear.

    Episodes (:func:`_stall_episodes`): job-flagged steps (``job_step`` up against its
    history; two adjacent ones are one stall, ``STRADDLE_STEPS``) of about the same size (the same stall repeated: a band of step excesses
    with no jump of 1.5x inside), at most ``intermittent_period_s`` seconds apart (the
    longest stall period recognized: a pause every 3 s leaves 3 s between its stalls),
    with at most ``max_flagged`` of the steps they span flagged (a slow link slows every
    step). Their **stalls** are those steps, not the jitter around them nor another
    fault's larger stalls. Each stall votes for the rank that arrived latest at the
    collective (:func:`_stall_votes`). The episode is that rank's when it has at least
    ``min_share`` of the votes and either two votes, or one vote among at least two
    stalls of the same size (``min_share`` of them within ``max_spread`` x of each
    other, :func:`_alike`: the same stall
    repeated, most of them inside the all-reduce). Then one rank label from its first
    to its last voting stall, grown over the stalls that keep the episode's cadence
    (:func:`_grow_by_cadence`), replaces the ``job`` labels inside it and that rank's
    labels overlapping it (:func:`_absorb`); another slowdown's ``job`` label in the
    episode (sustained, as a slow link's, or without a vote for the rank inside,
    :func:`_other_job_labels`) is kept, bounds the growth and cuts the voting stalls
    (:func:`_voted_spans`). ``slowdown`` is what the
    rank cost the job (job time ratio); the evidence carries the votes. An episode
    whose votes come in runs of two ranks or more, with the stalls' cadence broken
    between the runs (one rank's fault, then another's, chained by the period rule),
    is judged per run instead (:func:`_chained_runs`): each run that is a rank
    episode by itself gets its own label, over its stalls only.

    An episode that no rank is named for (nobody late: every stall inside the
    all-reduce; or the late arrivals split between ranks) and that is one stall
    repeated (at least two stalls of sizes within ``max_spread`` x; from three on,
    the times between them too) is still a
    slowdown of the job: it becomes one ``job`` label from its first to its last stall
    (:func:`_unattributed_episode`) unless labels already hold most of its stalls.
    Step timings cannot say whose stalls they were; reconciliation may (see
    :mod:`faultlab.labeler.reconcile`, ``located_by``).
    """
    g = an.grid
    if g.R < 2:
        return rows
    eps = _stall_episodes(an, stall_jump=1.5, max_flagged=max_flagged)
    if not eps:
        return rows
    _, _, cols = g.peer_groups()
    for st, fl, n_ep, job_ex, last in eps:
        votes, ok, k = _stall_votes(an, st, fl, cols, min_late=min_late, last=last)
        chained = _chained_runs(st, ok, k, job_ex, min_share=min_share, max_spread=max_spread)
        if chained:  # several ranks' episodes chained into one by the period rule
            for rank, sub in chained:
                v = np.bincount(k[sub & ok], minlength=g.R)
                fl_sub = fl[(fl >= st[sub][0]) & (fl <= last[sub][-1])]
                rows = _rank_episode(an, rows, rank, st[sub], st[sub & ok & (k == rank)], fl_sub,
                                     int(last[sub][-1] - st[sub][0] + 1), v, job_ex[sub], max_flagged=max_flagged,
                                     last=last[sub])
            continue
        n_att = int(votes.sum())
        j = int(np.argmax(votes))
        alike = _alike(job_ex, max_spread, min_share)
        if n_att < 1 or votes[j] < min_share * n_att or not (votes[j] >= 2 or alike):
            rows = _unattributed_episode(an, rows, st, fl, n_ep, n_att, int(votes[j]), job_ex, max_spread=max_spread,
                                         last=last)
            continue
        rows = _rank_episode(an, rows, j, st, st[ok & (k == j)], fl, n_ep, votes, job_ex, max_flagged=max_flagged,
                             last=last)
    return rows


def _alike(job_ex: np.ndarray, max_spread: float, min_share: float = 0.8) -> bool:
    """The stalls are of one size: some ``min_share`` of their excesses (s, at least
    two) lie within ``max_spread`` x of each other (largest over smallest); one host
    hiccup in the band does not make a pause's stalls unlike."""
    ex = np.sort(np.asarray(job_ex, dtype=np.float64))
    ex = ex[np.isfinite(ex)]
    if ex.size < 2 or not ex[0] > 0:
        return False
    m = max(2, int(np.ceil(min_share * ex.size)))
    return bool(np.min(ex[m - 1 :] / ex[: ex.size - m + 1]) <= max_spread)


def _vote_runs(mine: np.ndarray, voter: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """The voting stalls (grid rows ``mine``, sorted, and the rank each voted for,
    ``voter``) as runs of one rank in time order: ``[(rank, rows)]``. A run of a
    single vote between two runs of one other rank is a stray: it is dropped and
    those two runs are one (left to right, so votes alternating between two ranks
    end as one run of the first rank and a lone vote)."""
    v = np.asarray(voter)
    if v.size == 0:
        return []
    m = np.asarray(mine)
    cuts = np.flatnonzero(np.diff(v) != 0) + 1
    runs = [(int(vv[0]), mm) for mm, vv in zip(np.split(m, cuts), np.split(v, cuts))]
    i = 1
    while i < len(runs) - 1:
        if runs[i][1].size == 1 and runs[i - 1][0] == runs[i + 1][0]:
            runs[i - 1 : i + 2] = [(runs[i - 1][0], np.concatenate([runs[i - 1][1], runs[i + 1][1]]))]
        else:
            i += 1
    return runs


def _chained_runs(st: np.ndarray, ok: np.ndarray, k: np.ndarray, job_ex: np.ndarray, *, min_share: float,
                  max_spread: float) -> list[tuple[int, np.ndarray]]:
    """An episode's stalls split between the ranks whose votes come in runs
    (:func:`_vote_runs`): the stalls of one rank's fault and then another's, less than
    ``intermittent_period_s`` apart, make one episode by the band rule, and one
    majority would hand all of it to one rank. Each run of two votes or more holds the
    stalls up to halfway to the next run's first vote (disjoint), and it counts when
    it is a rank episode by itself: at least ``min_share`` of the votes among its
    stalls, and three votes, or two among stalls alike (:func:`_alike`).
    Only where the stalls' cadence breaks between each two runs
    (:func:`_cadence_breaks`): one pause at one period whose late arrivals happen to
    split is one fault, judged whole. Returns ``[(rank, stalls mask)]`` of the runs
    that count (a run that does not is left unlabeled, as a split vote would be),
    or ``[]`` when the votes do not come in runs of two ranks or more with a break
    between (the episode is judged whole)."""
    runs = [r for r in _vote_runs(st[ok], k[ok]) if r[1].size >= 2]
    if len({rank for rank, _ in runs}) < 2 or not _cadence_breaks(st, runs):
        return []
    cuts = [0.5 * (float(runs[n][1][-1]) + float(runs[n + 1][1][0])) for n in range(len(runs) - 1)]
    lo, hi = [-np.inf, *cuts], [*cuts, np.inf]
    out = []
    for n, (rank, mine) in enumerate(runs):
        sub = (st > lo[n]) & (st <= hi[n])
        n_sub = int((sub & ok).sum())
        n_mine = int((sub & ok & (k == rank)).sum())
        if n_mine >= min_share * n_sub and (n_mine >= 3 or (n_mine >= 2 and _alike(job_ex[sub], max_spread, min_share))):
            out.append((rank, sub))
    return out


def _cadence_breaks(st: np.ndarray, runs: list[tuple[int, np.ndarray]]) -> bool:
    """Between each two consecutive runs of votes (``runs``, rows in ``st``'s grid),
    some gap between stalls (``st``, sorted grid rows) is over 1.5x the episode's
    median gap (the cadence :func:`_grow_by_cadence` keeps): a second fault starts
    out of step with the first."""
    if st.size < 3:
        return False
    cadence = 1.5 * max(float(np.median(np.diff(st))), 1.0)
    for (_, a), (_, b) in zip(runs, runs[1:]):
        between = st[(st >= a[-1]) & (st <= b[0])]
        if between.size < 2 or float(np.diff(between).max()) <= cadence:
            return False
    return True


def _stall_votes(an: Analysis, st: np.ndarray, fl: np.ndarray, cols, *, min_late: float,
                 last: np.ndarray | None = None):
    """Each stall's vote: the rank that arrived latest at the collective (arrival
    ``t_start + compute_s`` against its peers' median arrival, itself left out) when
    that lateness is at least ``min_late`` of the step's excess (s), above ``mad_k``
    robust sigmas of the episode's arrival jitter, and no other rank is more than half
    as late. A stall of two steps (``last``: each stall's last grid row) votes at
    either step, at the one where the latest rank was later when both do. Returns
    ``(votes [R], ok [stalls], k [stalls])``: the votes per rank, which stalls voted,
    for whom."""
    g, tv, cfg = an.grid, an.temporal, an.config
    arr = np.asarray(g.t_start[fl], dtype=np.float64) + np.asarray(g.compute[fl], dtype=np.float64)
    med_arr = np.full_like(arr, np.nan)
    for c in cols:
        med_arr[:, c] = loo_median(arr[:, c])
    late_all = np.where(np.isfinite(arr - med_arr), arr - med_arr, -np.inf)
    # the noise of arrival times: mad_k robust sigmas of all the episode's lateness
    # values (most of which are jitter)
    fin = late_all[np.isfinite(late_all)]
    noise = MAD_TO_SIGMA * float(np.median(np.abs(fin - np.median(fin)))) if fin.size else 0.0

    def vote_at(rows: np.ndarray):
        late = late_all[np.isin(fl, rows)]
        ex = np.asarray(g.job_step[rows], dtype=np.float64) - np.asarray(tv.job_base[rows], dtype=np.float64)
        order = np.argsort(-late, axis=1)
        kk = order[:, 0]
        top = late[np.arange(rows.size), kk]
        second = late[np.arange(rows.size), order[:, 1]] if late.shape[1] > 1 else np.full(rows.size, -np.inf)
        return kk, np.isfinite(top) & (top >= min_late * ex) & (second <= 0.5 * top) & (top > cfg.mad_k * noise), top

    k, ok, top = vote_at(st)
    if last is not None and bool((last != st).any()):
        k2, ok2, top2 = vote_at(last)
        use2 = ok2 & (~ok | (top2 > top))
        k, ok = np.where(use2, k2, k), ok | ok2
    return np.bincount(k[ok], minlength=g.R), ok, k


def _span(steps: np.ndarray, r: dict) -> tuple[int, int]:
    """A label row's first and last grid row."""
    return int(np.searchsorted(steps, r["start_step"])), int(np.searchsorted(steps, r["end_step"]))


def _held(an: Analysis, rows: list[dict], component: str | None) -> np.ndarray:
    """Grid rows that labels of ``component`` (None: any component) hold [S bool]."""
    held = np.zeros(an.grid.S, dtype=bool)
    for r in rows:
        if component is None or r["component"] == component:
            r0, r1 = _span(an.grid.steps, r)
            held[r0 : r1 + 1] = True
    return held


def _sustained(an: Analysis, r0: int, r1: int, max_flagged: float) -> bool:
    """More than ``max_flagged`` of grid rows ``r0..r1`` flagged job-wide: a sustained
    slowdown (a slow link slows every step), not the stalls of an intermittent one."""
    return float(an.job_wide_flag[r0 : r1 + 1].mean()) > max_flagged


def _grow_by_cadence(st: np.ndarray, i0: int, i1: int, stops: list[tuple[int, int]]) -> tuple[int, int]:
    """Grow ``[i0, i1]`` (grid rows) over the stalls ``st`` that keep the episode's
    cadence (within 1.5x the median gap between its stalls): a stall inside the
    all-reduce is the rank's too when it keeps the rhythm; a blip farther out is not,
    nor a stall inside one of ``stops`` (another slowdown's job label)."""
    cadence = 1.5 * max(float(np.median(np.diff(st))), 1.0) if st.size > 1 else 1.0

    def blocked(t: int) -> bool:
        return any(a <= t <= b for a, b in stops)

    for t in st[::-1]:
        if t < i0 and i0 - t <= cadence:
            if blocked(int(t)):
                break
            i0 = int(t)
    for t in st:
        if t > i1 and t - i1 <= cadence:
            if blocked(int(t)):
                break
            i1 = int(t)
    return i0, i1


def _absorb(an: Analysis, rows: list[dict], comp_name: str, i0: int, i1: int,
            stops: list[tuple[int, int]]) -> tuple[list[dict], list[dict], int, int]:
    """Split ``rows`` into kept and absorbed for a rank label over grid rows ``i0..i1``:
    the rank's own labels overlapping it are absorbed (and widen it); a ``job`` label
    inside it is absorbed (the rank's stalls seen job-wide) unless it is one of
    ``stops`` (another slowdown's, :func:`_other_job_labels`). Returns
    ``(keep, absorbed, i0, i1)``."""
    steps, gap = an.grid.steps, an.config.gap_steps
    absorbed = []
    for r in rows:
        r0, r1 = _span(steps, r)
        if r["component"] == comp_name and r0 <= i1 and r1 >= i0:
            absorbed.append(r)
            i0, i1 = min(i0, r0), max(i1, r1)
    keep = []
    for r in rows:
        if any(r is a for a in absorbed):
            continue
        r0, r1 = _span(steps, r)
        if (r["component"] == "job" and (r0, r1) not in stops
                and r0 >= i0 - gap and r1 <= i1 + gap):
            absorbed.append(r)
        else:
            keep.append(r)
    return keep, absorbed, i0, i1


def _other_job_labels(an: Analysis, rows: list[dict], mine: np.ndarray, st: np.ndarray,
                      max_flagged: float) -> list[tuple[int, int]]:
    """Grid-row spans of the ``job`` labels in ``rows`` that are another slowdown's, not
    the voted rank's stalls seen job-wide: sustained (:func:`_sustained`: a slow link
    slows most steps), or without one of the rank's voting stalls ``mine`` inside and
    not made mostly of the episode's stalls ``st`` (:func:`_mostly_stalls`)."""
    g, gap = an.grid, an.config.gap_steps
    out = []
    for r0, r1 in (_span(g.steps, r) for r in rows if r["component"] == "job"):
        has_vote = bool(((mine >= r0 - gap) & (mine <= r1 + gap)).any())
        if _sustained(an, r0, r1, max_flagged) or (not has_vote and not _mostly_stalls(an, r0, r1, st)):
            out.append((r0, r1))
    return out


def _mostly_stalls(an: Analysis, r0: int, r1: int, st: np.ndarray) -> bool:
    """At least half of the job-flagged grid rows ``r0..r1`` are the episode's stalls
    ``st`` (the rank's own stalls inside the all-reduce, dense enough to be one job
    label): that label is the rank's even without a vote inside."""
    fl = np.flatnonzero(an.temporal.job_flag[r0 : r1 + 1]) + r0
    return bool(fl.size) and float(np.isin(fl, st).mean()) >= 0.5


#: votes for one rank further apart than this many times their median spacing (start
#: to start) are two faults of it, not one (a GC storm at 2/s, then another 3.8 s later)
CADENCE_BREAK = 3.0


def _voted_spans(an: Analysis, mine: np.ndarray, stops: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """First and last grid row of the rank's voting stalls ``mine`` (sorted), one span
    per group of votes: votes more than ``CADENCE_BREAK`` x their median spacing apart
    (start to start) are two groups (two faults of one rank seconds apart, an io
    throttle then a pause, are two labels, not one over the clean steps between),
    unless another slowdown's job label (``stops``) covers at least half of the steps
    between them (the slow link's steps, all flagged, hold no vote). A group of one
    vote counts only when no group has two (a lone vote far from the rest is left to
    the labels already there). Inside a group, cut at another slowdown's job label:
    of the pieces, the one with the most votes (ties: the earliest): a stray vote on
    the far side of a slow link does not stretch the rank's label over it."""
    t = np.asarray(an.grid.t0[mine], dtype=np.float64)
    cadence = CADENCE_BREAK * float(np.median(np.diff(t))) if mine.size >= 3 else np.inf
    apart = [k for k in range(1, mine.size) if t[k] - t[k - 1] > cadence
             and not any(min(b, mine[k]) - max(a, mine[k - 1]) >= 0.5 * (mine[k] - mine[k - 1]) for a, b in stops)]
    spans = []
    for grp in np.split(mine, apart):
        cuts = [k for k in range(1, grp.size) if any(grp[k - 1] < a and b < grp[k] for a, b in stops)]
        best = max(np.split(grp, cuts), key=lambda p: p.size)  # max keeps the first of equal sizes
        spans.append((best.size, int(best[0]), int(best[-1])))
    kept = [(a, b) for n, a, b in spans if n >= 2]
    return kept or [max(spans, key=lambda x: x[0])[1:]]


def _rank_episode(an: Analysis, rows: list[dict], j: int, st: np.ndarray, mine: np.ndarray, fl: np.ndarray,
                  n_ep: int, votes: np.ndarray, job_ex: np.ndarray, *, max_flagged: float,
                  last: np.ndarray | None = None) -> list[dict]:
    """``rows`` with the episode made rank ``j``'s (see :func:`_intermittent`):
    ``mine`` are the stalls that voted for it (their first grid rows; ``last``: each
    stall's last row, aligned with ``st``)."""
    held = _held(an, rows, an.grid.component(j))
    stops = _other_job_labels(an, rows, mine, st, max_flagged)
    for v0, v1 in _voted_spans(an, mine, stops):
        rows = _span_label(an, rows, j, st, fl, n_ep, votes, job_ex, v0, v1, stops, held, last)
    return rows


def _span_label(an: Analysis, rows: list[dict], j: int, st: np.ndarray, fl: np.ndarray, n_ep: int,
                votes: np.ndarray, job_ex: np.ndarray, v0: int, v1: int, stops: list[tuple[int, int]],
                held: np.ndarray, last: np.ndarray | None) -> list[dict]:
    """``rows`` with rank ``j``'s label over the voted span ``v0..v1`` (grid rows),
    grown by the episode's cadence, replacing what it absorbs (see
    :func:`_rank_episode`)."""
    g, cfg = an.grid, an.config
    i0, i1 = _grow_by_cadence(st, v0, v1, stops)
    i1 = _stall_end(st, last, i1)
    # nothing to do when the rank's own labels already hold (most of) the stalls of
    # its span (a steady straggler whose job flags are sparse once the job baseline
    # caught up); only the span's: an episode may chain other faults' stalls
    inside = st[(st >= i0) & (st <= i1)]
    if int((~held[inside]).sum()) < 1 or float(held[inside].mean()) >= 0.5:
        return rows
    keep, absorbed, i0, i1 = _absorb(an, rows, g.component(j), i0, i1, stops)
    if _too_short(an, i0, i1):
        return rows
    slowdown, ev = _episode_evidence(an, i0, i1, st, fl, n_ep, int(votes.sum()), int(votes[j]), job_ex)
    ev["job_baseline_s"] = ev["baseline_s"]
    ev["replaces"] = sorted({r["component"] for r in absorbed})
    keep.append(_row(g, g.component(j), "rank", i0, i1, slowdown, "temporal+peer",
                     _confidence(slowdown, cfg.temporal_threshold, i1 - i0 + 1, cfg.min_steps, "temporal+peer"), ev))
    return keep


def _stall_end(st: np.ndarray, last: np.ndarray | None, i1: int) -> int:
    """Grid row ``i1`` moved to the last row of the stall that starts there (a stall
    of two steps, ``last`` aligned with the stalls' first rows ``st``)."""
    if last is None:
        return i1
    n = int(np.searchsorted(st, i1))
    return int(last[n]) if n < st.size and st[n] == i1 else i1


def _too_short(an: Analysis, i0: int, i1: int) -> bool:
    """Grid rows ``i0..i1`` span fewer than ``min_steps`` steps or ``min_duration_s`` s."""
    g, cfg = an.grid, an.config
    return i1 - i0 + 1 < cfg.min_steps or g.t1[i1] - g.t0[i0] < cfg.min_duration_s


def _episode_evidence(an: Analysis, i0: int, i1: int, st: np.ndarray, fl: np.ndarray, n_ep: int, n_att: int,
                      votes: int, job_ex: np.ndarray) -> tuple[float, dict]:
    """The slowdown (job time ratio over grid rows ``i0..i1``) and the evidence an
    intermittent episode's label carries: its stalls, the votes, the flagged fraction
    of its span, the median stall (s), the baseline (s)."""
    cfg = an.config
    slowdown = an.job_slowdown(i0, i1)
    return slowdown, {
        "baseline_s": _nanmed(an.temporal.job_base[i0 : i1 + 1]),
        "baseline_kind": "intermittent-stalls",
        "stalls": int(st.size),
        "stalls_attributed": n_att,
        "votes": votes,
        "flagged_fraction": fl.size / n_ep,
        "median_stall_s": float(np.median(job_ex)),
        "job_slowdown": slowdown,
        "n_steps": i1 - i0 + 1,
        "threshold": cfg.temporal_threshold,
    }


def _repeated(g: StepGrid, st: np.ndarray, job_ex: np.ndarray, max_spread: float, min_stalls: int = 2) -> bool:
    """One stall repeated at one period: at least ``min_stalls`` stalls (grid rows
    ``st``) whose excesses ``job_ex`` (s) and the times between their starts (s) are
    each within ``max_spread`` x of each other (a gap of two periods, where one stall
    fell in another band, still counts; two stalls have one gap, so only their sizes
    are compared). A duty-cycle pause or a GC timer makes such a series; a busy host's
    hiccups vary in size or come at random. Two, not four: a pause of ~0.9 s every 2 s
    in force for 4 s stalls the job twice (1.9x over the fault) and four would leave
    it unlabeled (s803-000 of the severity sweeps). On the 10 fault-free runs this
    adds no label; on the published faultlab-sw-v1 it adds 3 ``observed`` job labels
    of 2.3-3.2x in two runs of uncoordinated GC (stalls whose late arrivals split
    between ranks)."""
    if st.size < min_stalls:
        return False
    gaps = np.diff(np.asarray(g.t0[st], dtype=np.float64))
    ex = np.asarray(job_ex, dtype=np.float64)
    return bool(ex.min() > 0 and ex.max() <= max_spread * ex.min() and gaps.min() > 0
                and gaps.max() <= max_spread * gaps.min())


def _unattributed_episode(an: Analysis, rows: list[dict], st: np.ndarray, fl: np.ndarray, n_ep: int, n_att: int,
                          votes: int, job_ex: np.ndarray, *, max_spread: float,
                          last: np.ndarray | None = None) -> list[dict]:
    """``rows`` plus one ``job`` label from the first to the last stall of an episode
    that no rank is named for, when it is one stall repeated at one period
    (:func:`_repeated`; see :func:`_intermittent`), unless a label already lies in its
    span or it is shorter than ``min_steps`` / ``min_duration_s``. ``votes`` is the
    top rank's votes (0 when nobody arrived late; else a split vote). ``slowdown``
    is the job time ratio over it (the floor ``min_slowdown`` applies as to every
    label)."""
    g, tv, cfg = an.grid, an.temporal, an.config
    i0, i1 = int(st[0]), _stall_end(st, last, int(st[-1]))
    # a label already inside the span is another slowdown's (or this one seen in part):
    # the episode would claim it or double count its time
    if not _repeated(g, st, job_ex, max_spread) or _held(an, rows, None)[i0 : i1 + 1].any():
        return rows
    if _too_short(an, i0, i1):
        return rows
    slowdown, ev = _episode_evidence(an, i0, i1, st, fl, n_ep, n_att, votes, job_ex)
    ev["reason"] = ("stalls alike that no rank arrived late for (inside the collective)" if n_att == 0 else
                    "stalls alike whose late arrivals split between ranks (no clear majority)")
    ev["n_flagged"] = int(an.job_wide_flag[i0 : i1 + 1].sum())
    return [*rows, _row(g, "job", "job", i0, i1, slowdown, "temporal",
                        _confidence(slowdown, cfg.temporal_threshold, i1 - i0 + 1, cfg.min_steps, "temporal"), ev)]


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
    ``(compute_i - median compute) + (median comm - comm_i)`` (medians of its peers,
    itself left out) in seconds over the
    interval, must be at least ``min_share`` of the job's excess time
    ``job_excess_s`` (job time - baseline time). Returns ``(column, share, compute
    ratio to the peer median, peer median compute sum (s), compute share)`` or None: a
    slow link adds queueing to everyone's all-reduce and leaves no rank with such an
    excess. The compute share is the rank's extra compute alone over the job's excess
    (the share counts the straggler's excess twice: its extra compute, and the wait
    its peers have and it does not)."""
    if not (job_excess_s > 0):
        return None
    comp = np.nansum(np.asarray(g.compute[sl], dtype=np.float64), axis=0)  # (R,)
    comm = np.nansum(np.asarray(g.comm[sl], dtype=np.float64), axis=0)
    best = None
    for grp in sorted(set(g.groups.tolist())):
        cols = np.flatnonzero(g.groups == grp)
        if cols.size < 2:
            continue
        # each rank against its peers without itself (leave-one-out medians)
        mc, mw = loo_median(comp[cols][None, :])[0], loo_median(comm[cols][None, :])[0]
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
        r = _nanmed(np.asarray(an.sim[sl], dtype=np.float64) / np.asarray(an.temporal.job_base[sl], dtype=np.float64))
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
    with np.errstate(invalid="ignore"):
        ex = np.nansum(np.asarray(g.compute[sl], dtype=np.float64) - np.asarray(tv.rank_base[sl], dtype=np.float64), axis=0)
    if ex.size == 0:
        return None
    # only ranks without peers: with peers, the peer view and _interval_straggler judge
    _, counts = np.unique(g.groups, return_counts=True)
    alone = np.isin(g.groups, np.unique(g.groups)[counts == 1])
    if not alone.any():
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
    """JSON-safe value (:func:`faultlab.schema.json_safe`: NaN/inf -> None, numpy
    scalars to Python), floats rounded to 9 decimals."""
    x = schema.json_safe(x)
    if isinstance(x, float):
        return round(x, 9)
    if isinstance(x, list):
        return [_f(v) for v in x]
    if isinstance(x, dict):
        return {k: _f(v) for k, v in x.items()}
    return x


def evidence_json(ev: dict) -> str:
    """Deterministic JSON of an evidence dict (sorted keys, NaN -> null)."""
    return json.dumps({k: _f(v) for k, v in ev.items()}, sort_keys=True)


def label_row(run_id: str, component: str, kind: str, start_ts: float, end_ts: float, start_step, end_step,
              slowdown: float, views: str, confidence: float, ev: dict) -> dict:
    """One ``observed`` label (faultlab.schema.LABELS fields) as a dict: times unix s,
    steps int or ``pd.NA``, ``slowdown`` a ratio, ``confidence`` 0..1, ``ev`` the
    evidence (written as deterministic JSON). ``fault_id``/``source``/``cause`` are
    set later by reconciliation. Used by the run labeler and every importer."""
    return {
        "run_id": run_id,
        "component": component,
        "component_kind": kind,
        "start_ts": float(start_ts),
        "end_ts": float(end_ts),
        "start_step": start_step,
        "end_step": end_step,
        "slowdown": float(slowdown),
        "views": views,
        "confidence": float(confidence),
        "fault_id": None,
        "source": "observed",
        "cause": "unknown",
        "evidence": evidence_json(ev),
    }


def _row(g: StepGrid, component, kind, i0, i1, slowdown, views, confidence, ev) -> dict:
    return label_row(g.run_id, component, kind, g.t0[i0], g.t1[i1], int(g.steps[i0]), int(g.steps[i1]),
                     slowdown if np.isfinite(slowdown) else float("nan"), views, confidence, ev)


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
