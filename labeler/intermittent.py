"""Intermittent episodes: a rank stalled now and then (a duty-cycle pause, a GC
storm), step 4 of fusion (:func:`intermittent`).

Stalls that land inside the all-reduce stall every rank alike and show only as job
flags; those that land in the rank's compute make it arrive late. Over an episode of
job flags (up to ``intermittent_period_s`` apart), the late arrivals vote for the
rank; a clear majority makes the whole episode that rank's. An episode of like stalls
nobody arrived late for is one ``job`` label. A stall that straddles a step boundary
(two adjacent flagged steps) is one stall; an episode whose votes come in runs of two
ranks or more (one rank's fault, then another's, chained by the period rule) is one
episode per run; where the stalls of other ranks' hiccups outvote a rank's
repeated stall, the part of the episode where its votes are, among the stalls of
their size, is that rank's.
"""

from __future__ import annotations

import json
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from faultlab.labeler.analysis import Analysis
from faultlab.labeler.grid import StepGrid
from faultlab.labeler.labelrows import evidence_json, grid_row, label_confidence
from faultlab.labeler.stats import MAD_TO_SIGMA, SUM_BLOCK_CELLS, loo_median, median, median_of_blocks


#: cells of an episode's lateness (float64) held in memory; a larger one is spilled
#: to a temporary file (256 MiB)
LATENESS_MEMORY_CELLS = 1 << 25

#: the most consecutive job-flagged steps taken as one stall: a pause that straddles
#: a step boundary slows two steps (more in a row is a sustained slowdown)
STRADDLE_STEPS = 2

#: stalls of one size: sorted by size, no neighbour this many times the one before
#: (:func:`_stall_episodes`; the size window of a rank's votes, :func:`_local_parts`)
STALL_JUMP = 1.5

#: the fewest votes for one rank that make a part of an episode its own when the
#: episode as a whole has no majority (:func:`_local_parts`)
LOCAL_MIN_VOTES = 3

#: threads that take the episodes' votes (:func:`intermittent`; each holds one episode's
#: lateness, up to LATENESS_MEMORY_CELLS)
VOTE_THREADS = 2


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
    cut into bands of excess (``job_step`` - baseline) and each band into runs in
    time (:func:`_bands_and_runs`); a run of at least two stalls whose steps are at
    most ``max_flagged`` of its span is an episode."""
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
    out = []
    for run in _bands_and_runs(sex, g.t0[first], g.t1[last], stall_jump, cfg.intermittent_period_s):
        st, st_last = first[run], last[run]
        n_ep = int(st_last[-1] - st[0] + 1)
        if int((st_last - st + 1).sum()) > max_flagged * n_ep:
            continue
        span = fl[(fl >= st[0]) & (fl <= st_last[-1])]
        out.append((st, span, n_ep, sex[run], st_last))
    out.sort(key=lambda e: int(e[0][0]))
    return out


def _bands_and_runs(ex: np.ndarray, t0, t1, stall_jump: float, period_s: float) -> list[np.ndarray]:
    """Stalls of one size that follow each other: the stalls (``ex`` ``(n,)`` each
    one's excess, s, > 0; ``t0``/``t1`` ``(n,)`` its start and end, unix s; in time
    order) cut into bands of size (sorted, cut at every jump of ``stall_jump`` x),
    each band into runs (cut where its next stall starts more than ``period_s``
    seconds after the last one ends). Returns the runs of at least two stalls (index
    arrays, ascending)."""
    o = np.argsort(ex, kind="stable")
    cut = np.flatnonzero(np.diff(np.log(ex[o])) > np.log(stall_jump))
    out = []
    for band in np.split(o, cut + 1):
        if band.size < 2:
            continue
        band = np.sort(band)
        gaps = np.asarray(t0[band[1:]], dtype=np.float64) - np.asarray(t1[band[:-1]], dtype=np.float64)
        out.extend(r for r in np.split(band, np.flatnonzero(gaps > period_s) + 1) if r.size >= 2)
    return out


def intermittent(an: Analysis, rows: list[dict], *, min_share: float = 0.8, max_flagged: float = 0.5,
                 min_late: float = 0.5, max_spread: float = 2.0) -> list[dict]:
    """Labels for an *intermittent* straggler: a rank stalled now and then (a process
    paused in a duty cycle, a GC storm).

    A stall that lands in the rank's compute (or between its steps) makes it arrive late
    at the all-reduce (attributable per step); one that lands inside the all-reduce
    stalls every rank alike (not attributable per step: those steps become job-wide
    flags). Per step the evidence is split, so the labels come out late or as an
    unexplained ``job`` label; per *episode* it is clear.

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
    episode by itself gets its own label, over its stalls only. An episode that no
    rank holds a majority of may hold parts that one rank's votes do
    (:func:`_local_parts`: on a job of many ranks, the other ranks' hiccups chain a
    rank's repeated pause into an episode of the whole run); each such part is judged
    as a rank episode of its own, over its stalls only.

    An episode that no rank is named for and with no such part (nobody late: every stall inside the
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
    eps = _stall_episodes(an, stall_jump=STALL_JUMP, max_flagged=max_flagged)
    if not eps:
        return rows
    _, _, cols = g.peer_groups()
    # the votes read only the analysis (the labels come after): the episodes' votes on
    # threads (their reads and medians release the GIL), then the episodes in order
    with ThreadPoolExecutor(max_workers=max(1, min(VOTE_THREADS, os.cpu_count() or 1))) as pool:
        voted = list(pool.map(lambda ep: _stall_votes(an, ep[0], ep[1], cols, min_late=min_late, last=ep[4]), eps))
    for (st, fl, n_ep, job_ex, last), (_, ok, k, late) in zip(eps, voted):
        ok = ok & ~_held_by_another(an, rows, st, k)
        votes = np.bincount(k[ok], minlength=g.R)
        chained = _chained_runs(st, ok, k, job_ex, min_share=min_share, max_spread=max_spread)
        if chained:  # several ranks' episodes chained into one by the period rule
            for rank, sub in chained:
                rows = _part_episode(an, rows, rank, sub, st, last, fl, ok, k, job_ex, max_flagged=max_flagged)
            continue
        n_att = int(votes.sum())
        j = int(np.argmax(votes))
        alike = _alike(job_ex, max_spread, min_share)
        if n_att < 1 or votes[j] < min_share * n_att or not (votes[j] >= 2 or alike):
            parts = _local_parts(an, st, last, ok & (late >= min_late * job_ex), k, job_ex, min_share=min_share,
                                 max_spread=max_spread)
            for rank, sub in parts:  # ranks' stalls among many other stalls of the episode
                rows = _part_episode(an, rows, rank, sub, st, last, fl, ok, k, job_ex, max_flagged=max_flagged)
            if parts:
                continue
            rows = _unattributed_episode(an, rows, st, fl, n_ep, n_att, int(votes[j]), job_ex, max_spread=max_spread,
                                         last=last)
            continue
        rows = _rank_episode(an, rows, j, st, st[ok & (k == j)], fl, n_ep, votes, job_ex, max_flagged=max_flagged,
                             last=last)
    return rows


def _part_episode(an: Analysis, rows: list[dict], rank: int, sub: np.ndarray, st: np.ndarray, last: np.ndarray,
                  fl: np.ndarray, ok: np.ndarray, k: np.ndarray, job_ex: np.ndarray, *, max_flagged: float) -> list[dict]:
    """``rows`` with the part ``sub`` (a mask of the episode's stalls ``st``/``last``;
    ``fl`` its flagged rows, ``ok``/``k`` its votes, ``job_ex`` its stalls' excess, s)
    judged as a rank episode of ``rank``'s own, over its stalls only
    (:func:`_rank_episode`; :func:`_chained_runs`, :func:`_local_parts`)."""
    fl_sub = fl[(fl >= st[sub][0]) & (fl <= last[sub][-1])]
    return _rank_episode(an, rows, rank, st[sub], st[sub & ok & (k == rank)], fl_sub, int(last[sub][-1] - st[sub][0] + 1),
                         np.bincount(k[sub & ok], minlength=an.grid.R), job_ex[sub], max_flagged=max_flagged,
                         last=last[sub])


def _local_parts(an: Analysis, st: np.ndarray, last: np.ndarray, ok: np.ndarray, k: np.ndarray,
                 job_ex: np.ndarray, *, min_share: float, max_spread: float) -> list[tuple[int, np.ndarray]]:
    """The parts of an episode that one rank's votes hold, when the episode as a whole
    has no majority: ``[(rank, stalls mask)]``, the ranks by votes, most first.

    A rank's voting stalls (``ok``/``k`` the votes, :func:`_stall_votes`, of the late
    arrivals that explain ``min_late`` of their whole stall: a hiccup in the step
    beside a stall inside the collective votes for its rank at that step, but it is
    no cause of the stall; ``st``/``last`` the stalls' first and last grid rows,
    ``job_ex`` their excess, s) are cut into bands of size and runs in time
    (:func:`_bands_and_runs`: one rank's repeated stall, apart from its own one-off
    hiccups). A run of at least ``LOCAL_MIN_VOTES`` votes of stalls alike
    (:func:`_alike`: ``min_share`` of them within ``max_spread`` x) makes a part: the
    episode's stalls from its first to its last vote whose sizes lie in the run's
    window of sizes widened by ``STALL_JUMP`` at each end; the part is the rank's
    when it holds ``min_share`` of the part's votes.

    Why: on a job of thousands of ranks some rank hiccups every few steps (one
    rank-step in 20,000 makes one every 10-20 steps at 1,000-2,000 ranks); those
    one-step stalls of every size chain a rank's repeated pause, and other faults'
    stalls, into an episode of thousands of steps by the period rule, and each
    hiccup votes for another rank, so the pause's rank, with nine of the episode's
    seventy votes, held no majority (a planted 0.25 s pause every 5 steps went
    unlabeled at 9e6 rank-steps and more). Where its votes are, among the stalls of
    their size, it holds all of them. A rank whose votes vary in size, or fall among
    other ranks' votes of their size, holds no part (random hiccups on a few ranks)."""
    g = an.grid
    if not ok.any():
        return []
    votes = np.bincount(k[ok])
    out = []
    for j in np.argsort(-votes, kind="stable"):
        if votes[j] < LOCAL_MIN_VOTES:
            break
        at = np.flatnonzero(ok & (k == j))
        for run in _bands_and_runs(job_ex[at], g.t0[st[at]], g.t1[last[at]], STALL_JUMP, an.config.intermittent_period_s):
            if run.size < LOCAL_MIN_VOTES or not _alike(job_ex[at[run]], max_spread, min_share):
                continue
            mine = at[run]
            lo, hi = float(job_ex[mine].min()) / STALL_JUMP, float(job_ex[mine].max()) * STALL_JUMP
            sub = np.zeros(st.size, dtype=bool)
            sub[mine[0] : mine[-1] + 1] = True
            sub &= (job_ex >= lo) & (job_ex <= hi)
            if mine.size >= min_share * int((sub & ok).sum()):
                out.append((int(j), sub))
    return out


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
    cadence = 1.5 * max(median(np.diff(st)), 1.0)
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
    ``(votes [R], ok [stalls], k [stalls], late [stalls])``: the votes per rank, which
    stalls voted, for whom, and how late that rank was (s)."""
    g = an.grid
    step = max(1, SUM_BLOCK_CELLS // max(1, g.R))
    late_fl = _episode_lateness(an, fl, cols, step)

    def finite_lateness():  # the episode's lateness values, a block of its steps at a time
        for i in range(0, fl.size, step):
            late = np.asarray(late_fl[i : i + step])
            yield late[np.isfinite(late)]

    # the noise of arrival times: mad_k robust sigmas of all the episode's lateness
    # values (most of which are jitter)
    m = median_of_blocks(finite_lateness)
    noise = MAD_TO_SIGMA * median_of_blocks(lambda: (np.abs(v - m) for v in finite_lateness())) if np.isfinite(m) else 0.0

    def vote_at(rows: np.ndarray):
        at = np.flatnonzero(np.isin(fl, rows))
        parts = [_votes(an, fl[at[i : i + step]], np.asarray(late_fl[at[i : i + step]]), noise, min_late)
                 for i in range(0, at.size, step)]
        return tuple(np.concatenate([p[q] for p in parts]) if parts else np.zeros(0, dtype=dt)
                     for q, dt in enumerate((np.int64, bool, np.float64)))

    k, ok, top = vote_at(st)
    if last is not None and bool((last != st).any()):
        k2, ok2, top2 = vote_at(last)
        use2 = ok2 & (~ok | (top2 > top))
        k, ok, top = np.where(use2, k2, k), ok | ok2, np.where(use2, top2, top)
    return np.bincount(k[ok], minlength=g.R), ok, k, top


def _episode_lateness(an: Analysis, fl: np.ndarray, cols, step: int):
    """:func:`_lateness` at the episode's grid rows ``fl`` (``(fl.size, R)`` float64),
    computed once, ``step`` rows at a time, for the several passes of the vote's noise
    estimate (:func:`~faultlab.labeler.stats.median_of_blocks`) and the vote: an array
    up to :data:`LATENESS_MEMORY_CELLS` cells, past that (a long episode of a
    many-rank job, labeled out of core) a :class:`_SpilledRows`."""
    shape = (fl.size, an.grid.R)
    out = np.empty(shape, dtype=np.float64) if shape[0] * shape[1] <= LATENESS_MEMORY_CELLS else _SpilledRows(*shape)
    for i in range(0, fl.size, step):
        out[i : i + step] = _lateness(an, fl[i : i + step], cols)
    return out


class _SpilledRows:
    """``(n, R)`` float64 rows on an unnamed temporary file (removed by the system when
    it is closed, so no name anyone could swap), written and read with plain file I/O:
    no memory map, whose pages would stay counted in this process's resident memory.
    Rows are written as slices; read as a slice or an ascending index array."""

    def __init__(self, n: int, R: int):
        self._f = tempfile.TemporaryFile()
        self._n, self._R, self._row = n, R, R * 8

    def __setitem__(self, key: slice, value: np.ndarray) -> None:
        os.pwrite(self._f.fileno(), np.ascontiguousarray(value, dtype=np.float64).tobytes(), key.start * self._row)

    def __getitem__(self, key) -> np.ndarray:
        idx = np.arange(*key.indices(self._n)) if isinstance(key, slice) else np.asarray(key, dtype=np.int64)
        out = np.empty((idx.size, self._R), dtype=np.float64)
        if idx.size == 0:
            return out
        cut = np.flatnonzero(np.diff(idx) != 1) + 1  # runs of consecutive rows, one read each
        for a, b in zip(np.r_[0, cut], np.r_[cut, idx.size]):
            buf = memoryview(out[a:b]).cast("B")
            got = os.preadv(self._f.fileno(), [buf], int(idx[a]) * self._row)
            if got != len(buf):
                raise OSError(f"short read of the episode's lateness ({got} of {len(buf)} bytes)")
        return out


def _lateness(an: Analysis, rows: np.ndarray, cols) -> np.ndarray:
    """``(rows, R)`` float64 s: each rank's arrival at the collective (``t_start +
    compute_s``) at grid rows ``rows`` less its peers' median arrival, itself left out
    (``cols`` the peer groups' columns); -inf where either is unknown."""
    g = an.grid
    arr = np.asarray(g.t_start[rows], dtype=np.float64) + np.asarray(g.compute[rows], dtype=np.float64)
    med_arr = np.full_like(arr, np.nan)
    for c in cols:
        med_arr[:, c] = loo_median(arr[:, c])
    return np.where(np.isfinite(arr - med_arr), arr - med_arr, -np.inf)


def _votes(an: Analysis, rows: np.ndarray, late: np.ndarray, noise: float, min_late: float) -> tuple:
    """At grid rows ``rows`` (``late`` their ``(rows, R)`` :func:`_lateness`):
    ``(latest rank, whether it votes, its lateness s)`` of :func:`_stall_votes`' rule
    (``noise`` the episode's robust sigma of lateness)."""
    g, tv, cfg = an.grid, an.temporal, an.config
    ex = np.asarray(g.job_step[rows], dtype=np.float64) - np.asarray(tv.job_base[rows], dtype=np.float64)
    kk = np.argmax(late, axis=1)  # the latest rank (the lowest of equally late ones)
    top = late[np.arange(rows.size), kk]
    # the second-latest arrival's lateness: a partition, linear in the ranks
    second = np.partition(late, late.shape[1] - 2, axis=1)[:, -2] if late.shape[1] > 1 else np.full(rows.size, -np.inf)
    return kk, np.isfinite(top) & (top >= min_late * ex) & (second <= 0.5 * top) & (top > cfg.mad_k * noise), top


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


def _held_by_another(an: Analysis, rows: list[dict], st: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``(stalls,)`` bool: the stall at grid row ``st[n]`` lies inside a label of a
    rank other than ``k[n]``, the rank it would vote for, while that rank's local
    time is up ``temporal_threshold`` against its own trailing baseline (a change in
    force then; not a steady straggler such as a slower pipeline stage, labeled by
    its peers over the whole run).

    Why: that label's slowdown is in force there (a CPU quota's rank, whose share
    of the reduction runs late and whose lost CPU goes to the others), and every
    rank's arrival moves with it; a rank that arrives late then is no evidence of a
    stall of its own (one such vote tied a host hiccup during another rank's quota
    to a GC storm 70 steps later)."""
    g = an.grid
    col = {g.component(j): j for j in range(g.R)}
    out = np.zeros(st.size, dtype=bool)
    for r in rows:
        j = col.get(str(r["component"]))
        if j is not None:
            r0, r1 = _span(g.steps, r)
            with np.errstate(invalid="ignore"):
                up = np.asarray(an.temporal.rank_ratio[st, j], dtype=np.float64) >= an.config.temporal_threshold
            out |= (st >= r0) & (st <= r1) & (k != j) & up
    return out


def _sustained(an: Analysis, r0: int, r1: int, max_flagged: float) -> bool:
    """More than ``max_flagged`` of grid rows ``r0..r1`` flagged job-wide: a sustained
    slowdown (a slow link slows every step), not the stalls of an intermittent one."""
    return float(an.job_wide_flag[r0 : r1 + 1].mean()) > max_flagged


def _grow_by_cadence(st: np.ndarray, i0: int, i1: int, stops: list[tuple[int, int]]) -> tuple[int, int]:
    """Grow ``[i0, i1]`` (grid rows) over the stalls ``st`` that keep the episode's
    cadence (within 1.5x the median gap between its stalls): a stall inside the
    all-reduce is the rank's too when it keeps the rhythm; a blip farther out is not,
    nor a stall inside one of ``stops`` (another slowdown's job label)."""
    cadence = 1.5 * max(median(np.diff(st)), 1.0) if st.size > 1 else 1.0

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


def _slowing_growth(an: Analysis, st: np.ndarray, i0: int, v0: int, v1: int, i1: int) -> tuple[int, int]:
    """``(i0, i1)`` with the growth by cadence beyond the voted span ``v0..v1`` (grid
    rows) kept only as far as it slows the job: the earliest stall ``t`` in ``i0..v0``
    whose stretch ``t..v0 - 1`` reaches ``min_slowdown`` (job time ratio), and the
    latest in ``v1..i1`` whose stretch ``v1 + 1..t`` does (``v0``/``v1`` when none).

    Why: stalls that keep a rhythm are the rank's fault only when they slow the job
    like one; small stalls of the host at its own rhythm (a 1 Hz sampler's 20 ms on
    50 ms steps) kept a one-vote GC storm's cadence and moved its onset 60 steps
    early."""
    floor = an.config.min_slowdown
    start = v0
    for t in st[(st >= i0) & (st < v0)]:
        r = an.job_slowdown(int(t), v0 - 1)
        if np.isfinite(r) and r >= floor:
            start = int(t)
            break
    end = v1
    for t in st[(st > v1) & (st <= i1)][::-1]:
        r = an.job_slowdown(v1 + 1, int(t))
        if np.isfinite(r) and r >= floor:
            end = int(t)
            break
    return start, end


def _rank_episode(an: Analysis, rows: list[dict], j: int, st: np.ndarray, mine: np.ndarray, fl: np.ndarray,
                  n_ep: int, votes: np.ndarray, job_ex: np.ndarray, *, max_flagged: float,
                  last: np.ndarray | None = None) -> list[dict]:
    """``rows`` with the episode made rank ``j``'s (see :func:`intermittent`):
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
    i0, i1 = _slowing_growth(an, st, i0, v0, v1, i1)
    i1 = _stall_end(st, last, i1)
    # nothing to do when the rank's own labels already hold (most of) the stalls of
    # its span (a steady straggler whose job flags are sparse once the job baseline
    # caught up); only the span's: an episode may chain other faults' stalls
    inside = st[(st >= i0) & (st <= i1)]
    if int((~held[inside]).sum()) < 1 or float(held[inside].mean()) >= 0.5:
        return _onset_from_episode(an, rows, j, i0, i1, st, stops)
    keep, absorbed, i0, i1 = _absorb(an, rows, g.component(j), i0, i1, stops)
    if _too_short(an, i0, i1):
        return rows
    slowdown, ev = _episode_evidence(an, i0, i1, st, fl, n_ep, int(votes.sum()), int(votes[j]), job_ex)
    ev["job_baseline_s"] = ev["baseline_s"]
    ev["replaces"] = sorted({r["component"] for r in absorbed})
    keep.append(grid_row(g, g.component(j), "rank", i0, i1, slowdown, "temporal+peer",
                         label_confidence(slowdown, cfg.temporal_threshold, i1 - i0 + 1, cfg.min_steps, "temporal+peer"), ev))
    return keep


def _onset_from_episode(an: Analysis, rows: list[dict], j: int, i0: int, i1: int, st: np.ndarray,
                        stops: list[tuple[int, int]]) -> list[dict]:
    """``rows`` with the earliest label of rank ``j`` that overlaps its episode's span
    ``i0..i1`` (grid rows; ``i0`` the first stall that keeps the episode's cadence)
    starting at ``i0`` when it starts later; its evidence says so (``onset``). A
    ``job`` label that ends inside the span and is made mostly of the episode's stalls
    ``st`` (:func:`_mostly_stalls`; not one of ``stops``, another slowdown's) is the
    rank's stalls seen job-wide: it goes, and its edges with it.

    Why: the rank's labels hold most of the episode's stalls already (their flags
    came from the stalls that landed in its compute), but the fault's first stalls
    landed inside the collective, where every rank waits alike and no flag names a
    rank; they keep the cadence of the rank's own stalls, so they are its fault's
    onset, not a slowdown of their own. A job label of those first stalls grew its
    edges over the host's noise before them (its hysteresis), which is no onset."""
    g = an.grid
    gap = an.config.gap_steps
    comp = g.component(j)
    over = [(k, _span(g.steps, r)[0]) for k, r in enumerate(rows)
            if r["component"] == comp and _span(g.steps, r)[0] <= i1 and _span(g.steps, r)[1] >= i0]
    if not over:
        return rows
    k, r0 = min(over, key=lambda x: (x[1], x[0]))
    if i0 >= r0:
        return rows
    row = dict(rows[k])
    rows = [r if n == k else None if (r["component"] == "job" and _span(g.steps, r) not in stops
                                      and i0 <= _span(g.steps, r)[1] <= i1 + gap
                                      and _mostly_stalls(an, *_span(g.steps, r), st)) else r
            for n, r in enumerate(rows)]
    ev = json.loads(row["evidence"] or "{}")
    ev["onset"] = (f"the first stall of the rank's intermittent episode (step {int(g.steps[i0])}, before its first "
                   f"flagged step {int(g.steps[r0])}: stalls inside the collective at the cadence of its own)")
    ev["n_steps"] = int(_span(g.steps, row)[1] - i0 + 1)
    row.update(start_step=int(g.steps[i0]), start_ts=float(g.t0[i0]), evidence=evidence_json(ev))
    return [row if n == k else r for n, r in enumerate(rows) if r is not None]


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
        "baseline_s": median(an.temporal.job_base[i0 : i1 + 1]),
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
    (:func:`_repeated`; see :func:`intermittent`), unless a label already lies in its
    span or it is shorter than ``min_steps`` / ``min_duration_s``. ``votes`` is the
    top rank's votes (0 when nobody arrived late; else a split vote). ``slowdown``
    is the job time ratio over it (the floor ``min_slowdown`` applies as to every
    label)."""
    g, cfg = an.grid, an.config
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
    return [*rows, grid_row(g, "job", "job", i0, i1, slowdown, "temporal",
                            label_confidence(slowdown, cfg.temporal_threshold, i1 - i0 + 1, cfg.min_steps, "temporal"), ev)]
