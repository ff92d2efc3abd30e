"""Peer groups: which ranks (components) of a job should be equally fast.

The peer view judges a rank against the leave-one-out median of its peer group, so the
groups must hold ranks that do the same work on the same kind of hardware. Real jobs
hold several kinds: pipeline stages, two GPU generations, RL actors and learners
(TSLoc names role-aware peer groups as an open problem). A group that is slower by
design would otherwise read as a straggler for the whole run.

Where the groups come from (:func:`assign_groups`), first that applies:

1. a mapping given by the user (``faultlab label --peer-groups FILE``): component ->
   group; components it does not name keep their declared group;
2. the declared groups, when they are more than one: the trace's ``peer_group``
   column (a stage or dp index), a scenario's node labels;
3. otherwise discovered (:func:`discover`): within the one declared group, from each
   rank's typical local time over the run's calmest stretch.

Discovery (:func:`split_levels`): each rank's *level* is its
typical local time (``compute_s + dataloader_s``; a long input's value) over the
run's calm stretch (:func:`calm_rows`: the block of ``temporal_window_steps`` steps in
which the ranks, each against its own median over the run (from a few thousand
evenly spaced steps), are fastest together, and every block as calm as it within
the noise of a block's score: a rank's temporary slowness, a fault, lies outside
it), the median over those blocks of its median in each (:func:`block_levels`). On the log of the levels
(hardware differences are ratios), the sorted levels are cut at each gap between
neighbours that

- is *large enough to matter*: a ratio of at least ``group_min_gap`` (1.05); with
  very long runs the levels of identical ranks are so precise that a 1% difference
  of two hosts would pass the next test alone;
- is *far beyond the spread within the sides*: at least ``group_gap_sigmas`` (6)
  x ``sigma``, the pooled MAD-sigma of the log levels about their own side's median
  (1.4826 x the median of the absolute deviations of all sides together), and at
  least the noise of one level: how far a rank's level wanders against the job's
  over the run (:func:`level_wander`); or, for a ratio of at least
  ``peer_threshold`` (1.3: a difference the peer view would flag as a straggler),
  ``mad_k`` (4) x ``sigma``, the labeler's noise multiple for one flag: with 2 + 2
  ranks on a busy host two ranks of one kind can differ by 20%, and four levels
  give a poor ``sigma``;
- leaves *at least two ranks on each side*: one rank unlike all the others is the
  persistent straggler the peer view is there to see, never a group of its own.

``sigma`` is pooled over the sides of all the cuts kept, and a cut that fails is
dropped until every cut left passes. A job of identical ranks stays one group, and
its labels are those of the labeler without this module.

The same rule then runs on the dataloader part of the local time within each group
(as a fraction of the group's typical local time, the steps ``group_min_gap - 1``
and ``peer_threshold - 1``): two roles with the same step time, one waiting on its loader and one
computing, are different kinds of peers. ``comm_s`` is not used: in synchronous
training it is the wait for the slowest, the mirror of local time, not a property of
the rank.

Names: a discovered group is ``NAME/k`` (``k`` = 0 for the fastest) after the
declared group ``NAME``; one group keeps its declared name.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from faultlab import inputfile, safefs
from faultlab.errors import BadInput
from faultlab.labeler.stats import MAD_TO_SIGMA, median, nanmedian


def group_columns(groups) -> list[tuple[object, np.ndarray]]:
    """``(group, its column indices)`` for each distinct value of ``groups`` ((C,),
    each column's group), groups in name order and each one's columns ascending, found
    by one sort: never a pass over every column for each group, which costs C x groups
    (a long-format input whose every component names its own peer group held its import
    for minutes at 100,000 components)."""
    keys = list(groups.tolist() if isinstance(groups, np.ndarray) else groups)
    order = sorted(range(len(keys)), key=keys.__getitem__)  # stable: columns ascending within a group
    out, i = [], 0
    while i < len(order):
        g, j = keys[order[i]], i + 1
        while j < len(order) and keys[order[j]] == g:
            j += 1
        out.append((g, np.array(order[i:j], dtype=np.int64)))
        i = j
    return out


@dataclass
class PeerGroups:
    """The peer groups of one job (:func:`assign_groups`).

    Attributes:
        groups: (C,) object, each column's group name.
        source: ``"declared"`` | ``"discovered"`` | ``"mapping"`` (a ``--peer-groups``
            file) | ``"one"`` (one group, nothing to discover).
        level: (C,) float64, each column's level over the calm stretch
            (:func:`block_levels`: s; a long input's unit), NaN without data there.
        calm: ``[(i0, i1), ...]`` the calm stretch's blocks, each its first and last
            row (inclusive), the calmest first (:func:`calm_rows`).
        declared: (C,) object, each column's declared group.
    """

    groups: np.ndarray
    source: str
    level: np.ndarray
    calm: list[tuple[int, int]]
    declared: np.ndarray = field(repr=False)

    @property
    def n_groups(self) -> int:
        return len(set(self.groups.tolist()))

    def summary(self, names) -> list[dict]:
        """One dict per group, fastest first: ``group``, ``members`` (list of
        ``names[j]``), ``size``, ``median_level`` (the median of its members'
        levels), ``vs_fastest`` (that over the fastest group's: the persistent
        difference between groups, a ratio >= 1), ``source``."""
        names = [str(n) for n in names]
        rows = []
        for g, cols in group_columns(self.groups):
            rows.append({"group": str(g), "members": [names[j] for j in cols], "size": int(cols.size),
                         "median_level": median(self.level[cols]), "source": self.source})
        lv = [r["median_level"] for r in rows if np.isfinite(r["median_level"]) and r["median_level"] > 0]
        fastest = min(lv) if lv else float("nan")
        for r in rows:
            r["vs_fastest"] = r["median_level"] / fastest if np.isfinite(fastest) else float("nan")
        rows.sort(key=lambda r: (not np.isfinite(r["median_level"]), r["median_level"], r["group"]))
        return rows


#: about how many evenly spaced steps a rank's median over the run is taken from in
#: :func:`calm_rows` (every ``S // RUN_SAMPLE_STEPS``-th step: all of a run of fewer
#: than twice as many)
RUN_SAMPLE_STEPS = 4096


def sample_rows(S: int) -> np.ndarray:
    """The rows :func:`calm_rows` takes each rank's median over the run from: every
    ``S // RUN_SAMPLE_STEPS``-th of ``S`` (int64; all rows below ``2 x`` that)."""
    return np.arange(0, S, max(1, S // RUN_SAMPLE_STEPS), dtype=np.int64)


def calm_rows(X: np.ndarray, window: int, *, k: float = 4.0, scores=None,
              sample: np.ndarray | None = None, medians: dict | None = None) -> list[tuple[int, int]]:
    """``[(i0, i1), ...]``: the blocks of the run's calm stretch of ``X`` ``(S, C)``
    (time x rank, NaN = no value), each its first and last row (inclusive), the
    reference block first, the rest in row order. The whole run as one block when it
    holds fewer than two blocks of ``window`` rows; a run of fewer than
    :data:`MIN_NOISE_BLOCKS` such blocks is cut into that many shorter ones (on a
    busy host a short run's one calmest block is as often as not a block in which
    one rank ran fast, and the noise of a score needs that many blocks).

    A block's score (:func:`calm_scores`) is how fast the ranks are together in it:
    the mean over ranks of the log ratio of a rank's block median to its median over
    the run. With at least :data:`MIN_NOISE_BLOCKS` blocks, sigma is the noise of a
    score from one block to the next (:func:`score_noise`); the *reference* is the
    lowest-scoring block that another block matches within ``k`` sigmas (a calm state
    that holds over two blocks at least; the lowest one of all when none does), and
    the stretch is it and every block scoring at most ``k`` sigmas above it. With
    fewer blocks: the lowest-scoring block alone. Ties go to the earliest block.

    Why more than the lowest block: the lowest of many noisy scores is a block in
    which noise ran fast, often one rank's alone (a rank 20% under its usual level
    for 50 steps on a busy host), and one block's levels carry that; the blocks as
    calm as the reference within their noise give each rank's level from many blocks
    (:func:`block_levels`), and a fast spell of one block, matched by no other, is
    no reference. A fault or a temporary slowness lifts its blocks' scores by far
    more than that noise and stays out.

    The run median is taken over :func:`sample_rows` (a few thousand evenly spaced
    steps: an hour-long or a month-long run alike, and a streaming labeler reads
    only those rows). ``scores(run_median, block_rows)`` gives the ``[(row, score)]``
    of all the blocks (e.g. computed block by block elsewhere); :func:`calm_scores`
    over ``X`` when None (storing each scored block's medians in ``medians``, when
    given, for :func:`block_levels`). ``sample``: ``X``'s :func:`sample_rows`, when
    read already.

    Why the mean, not the largest ratio: two ranks slowed over most of the run have
    that slowed level as their run median, so in the slowed blocks no ratio stands
    out; the blocks before the fault show them *below* their median, and the mean
    picks those."""
    S = X.shape[0]
    if S < 2 * window or window < 1:
        return [(0, max(S - 1, 0))]
    window = window if S >= MIN_NOISE_BLOCKS * window else S // MIN_NOISE_BLOCKS
    run_med, _ = nanmedian(X[sample_rows(S)] if sample is None else sample, axis=0)
    found = sorted(scores(run_med, window) if scores is not None else calm_scores(X, 0, S, run_med, window, medians))
    if not found:
        return [(0, window - 1)]
    ranked = sorted(found, key=lambda x: (x[1], x[0]))
    if len(found) < MIN_NOISE_BLOCKS:
        return [(ranked[0][0], ranked[0][0] + window - 1)]
    tol = k * score_noise([sc for _, sc in found])
    ref_i, ref = next(((i, sc) for i, sc in ranked if any(j != i and abs(o - sc) <= tol for j, o in found)), ranked[0])
    rest = [i for i, sc in found if i != ref_i and sc <= ref + tol]
    return [(i, i + window - 1) for i in [ref_i, *rest]]


#: fewest blocks on which :func:`calm_rows` measures the noise of a block's score:
#: one fault gives two large differences (its onset and its end), and the median
#: of five or more differences leaves both out
MIN_NOISE_BLOCKS = 6


def score_noise(scores) -> float:
    """The noise of a block score, from one block to the next: the MAD-sigma of the
    differences of consecutive scores over sqrt(2) (``scores`` in row order; 1.4826
    x the median absolute difference / sqrt(2), the differences of a steady noise
    having a median of 0).

    Why differences: a fault or a slow spell shifts the scores of a run of
    consecutive blocks, so the spread of the scores themselves holds it (with two
    ranks slowed over half the run, half the scores sit high); their differences
    hold it only at its two edges, which the median leaves out."""
    d = np.abs(np.diff(np.asarray(scores, dtype=np.float64)))
    return MAD_TO_SIGMA * median(d) / np.sqrt(2.0) if d.size else 0.0


def block_levels(X: np.ndarray, blocks, *, slack: float = np.inf, of: np.ndarray | None = None,
                 medians: dict | None = None) -> np.ndarray:
    """(C,) float64: each column's level over ``blocks`` (``[(i0, i1), ...]`` rows of
    ``X`` ``(S, C)``, inclusive, the reference block first): the median over the
    blocks of the column's median in each block (NaN ignored; NaN for a column
    without a value in any), leaving out for each column the blocks in which its
    median over the block's median across columns is more than ``slack`` (log) above
    its own in the reference block (that column was slowed there, though the block's
    mean score was calm: one of ten drives slowed over most of the run). One block:
    its median. ``of``: take the medians of this array (same shape; the dataloader
    part) over the same blocks. Read block by block (``X`` may be a memory map);
    ``medians``: ``{(i0, i1): (C,) median}`` of blocks of ``X`` measured already
    (:func:`calm_scores`), not read again."""
    C = X.shape[1]
    if not X.shape[0] or not blocks:
        return np.full(C, np.nan)
    known = medians if medians is not None else {}

    def of_x(i0: int, i1: int) -> np.ndarray:
        got = known.get((i0, i1))
        return got if got is not None else nanmedian(X[i0 : i1 + 1], axis=0)[0]

    if len(blocks) == 1:
        i0, i1 = blocks[0]
        return of_x(i0, i1) if of is None else nanmedian(of[i0 : i1 + 1], axis=0)[0]
    B = np.stack([of_x(i0, i1) for i0, i1 in blocks])
    V = B if of is None else np.stack([nanmedian(of[i0 : i1 + 1], axis=0)[0] for i0, i1 in blocks])
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.log(B / nanmedian(B, axis=1)[0][:, None])
        V = np.where(rel - rel[0][None, :] > slack, np.nan, V)
    return nanmedian(V, axis=0)[0]


def calm_scores(X: np.ndarray, a: int, b: int, run_med: np.ndarray, window: int,
                medians: dict | None = None) -> list[tuple[int, float]]:
    """``[(i, score)]`` of :func:`calm_rows`'s blocks whose first row ``i`` (a multiple
    of ``window``, the block whole inside ``X``) is in ``a..b-1``: the mean over ranks
    of ``log(block median / run_med)`` (``run_med`` ``(C,)``), over the ranks with a
    positive finite ratio and values in at least half the block; a block without such
    a rank is left out. Reads rows ``a .. b + window - 1`` of ``X``. ``medians``, when
    given, gets each scored block's ``(C,)`` median per column at key ``(i, i + window
    - 1)``: :func:`block_levels` of the calm blocks then reads none of them again."""
    S = X.shape[0]
    out = []
    for i in range(-(-int(a) // window) * window, min(int(b), S - window + 1), window):
        bm, n = nanmedian(X[i : i + window], axis=0)
        sc = block_score(bm, n, run_med, window)
        if sc is not None:
            out.append((i, sc))
            if medians is not None:
                medians[(i, i + window - 1)] = bm
    return out


def block_score(bm: np.ndarray, n: np.ndarray, run_med: np.ndarray, window: int) -> float | None:
    """One block's :func:`calm_scores` score from its ``(C,)`` medians ``bm`` and value
    counts ``n``: the mean over columns of ``log(bm / run_med)``, over the columns with a
    positive finite ratio and values in at least half the block (None without one)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        r = bm / run_med
    ok = np.isfinite(r) & (r > 0) & (n >= (window + 1) // 2)
    return float(np.mean(np.log(r[ok]))) if ok.any() else None


def level_wander(X: np.ndarray, window: int) -> float:
    """How far a rank's level wanders over the run, as a fraction of it: the median
    over ranks of the MAD-sigma, over blocks of ``min(window, S // 4)`` rows (at least
    ``MIN_BLOCK``), of the rank's block median over the block's median across ranks
    (a job-wide change moves every rank alike and is left out; a fault in a minority
    of blocks is left out by the MAD). NaN with fewer than three blocks.

    Why: with few ranks (2 + 2 on the two sides of a cut) the spread of the levels
    across ranks is a poor estimate of the spread within a group; how much each
    level moves over time is measured on many blocks."""
    S = X.shape[0]
    w = max(min(int(window), S // 4), MIN_BLOCK)
    nb = S // w
    if nb < 3:
        return float("nan")
    B = np.stack([nanmedian(X[k * w : (k + 1) * w], axis=0)[0] for k in range(nb)])  # (nb, C)
    mid, _ = nanmedian(B, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = B / mid[:, None]
    rel[~np.isfinite(rel)] = np.nan
    m, n = nanmedian(rel, axis=0)
    mad, _ = nanmedian(np.abs(rel - m[None, :]), axis=0)
    return MAD_TO_SIGMA * median(mad[n >= 3])


#: fewest rows of a block of :func:`level_wander`
MIN_BLOCK = 5


def split_levels(values: np.ndarray, *, sigmas: float, min_step: float, floor: float = 0.0,
                 wide: tuple[float, float] | None = None) -> np.ndarray:
    """(n,) int group index (0 = lowest values) of ``values`` (n,) by the rule of the
    module docstring, in relative units (the log of a level; a part of the local time
    as a fraction of it).

    Candidate cuts are the gaps between sorted neighbours of at least ``min_step``.
    Then, until nothing changes: a side of one value loses the smaller of its cuts (no
    group of one); ``sigma`` is the pooled MAD-sigma of the values about their own
    side's median, at least ``floor``; a cut stays when its gap is at least
    ``sigmas`` x ``sigma``, or, with ``wide = (step, k)``, at least ``step`` and
    ``k`` x ``sigma``. Dropping a cut only merges sides, so ``sigma`` never shrinks
    and the loop ends. Pooling over the finest sides (not two halves) keeps equally
    spaced groups (four pipeline stages) from inflating each other's spread. NaN
    values join group 0 (the caller places them)."""
    values = np.asarray(values, dtype=np.float64)
    out = np.zeros(values.size, dtype=np.int64)
    ok = np.flatnonzero(np.isfinite(values))
    order = ok[np.argsort(values[ok], kind="stable")]
    v = values[order]
    n = v.size
    floor = float(floor) if np.isfinite(floor) else 0.0
    cuts = [c for c in range(1, n) if v[c] - v[c - 1] >= min_step]
    while True:
        cuts = _no_group_of_one(v, cuts)
        edges = [0, *cuts, n]
        dev = np.concatenate([np.abs(v[a:b] - median(v[a:b])) for a, b in zip(edges[:-1], edges[1:])]) if n else v
        sigma = max(MAD_TO_SIGMA * median(dev) if dev.size else 0.0, floor)

        def passes(gap: float) -> bool:
            if sigma <= 0:
                return True
            return gap >= sigmas * sigma or (wide is not None and gap >= wide[0] and gap >= wide[1] * sigma)

        keep = [c for c in cuts if passes(v[c] - v[c - 1])]
        if keep == cuts:
            break
        cuts = keep
    for k, (a, b) in enumerate(zip([0, *cuts], [*cuts, n])):
        out[order[a:b]] = k
    return out


def _no_group_of_one(v: np.ndarray, cuts: list[int]) -> list[int]:
    """``cuts`` (sorted positions in the sorted values ``v``) without the cuts that
    leave a side of one value: of its two cuts the one with the smaller gap goes, one
    side at a time from the smallest gap (a lone value joins its nearer neighbour)."""
    cuts = list(cuts)
    while True:
        edges = [0, *cuts, v.size]
        lone = [k for k in range(len(edges) - 1) if edges[k + 1] - edges[k] == 1]
        if not lone or not cuts:
            return cuts
        drop = []
        for k in lone:  # the side's own cuts: at edges[k] (left) and edges[k + 1] (right)
            mine = [c for c in (edges[k], edges[k + 1]) if c in cuts]
            drop.append(min(mine, key=lambda c: v[c] - v[c - 1]))
        c = min(drop, key=lambda c: v[c] - v[c - 1])
        cuts.remove(c)


def discover(X: np.ndarray, declared: np.ndarray, config, *, part: np.ndarray | None = None,
             calm: list[tuple[int, int]] | None = None,
             medians: dict | None = None) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """Discovered groups within each declared group: ``(groups, level, calm)``.

    Args:
        X: ``(S, C)`` local time per step (row) and rank (column), NaN = no value.
        declared: (C,) the declared group of each column.
        config: a :class:`faultlab.labeler.LabelerConfig`: ``temporal_window_steps``
            (a calm block's length), ``group_gap_sigmas`` and ``group_min_gap``
            (a cut), ``peer_threshold`` and ``mad_k`` (a wide cut; see
            :func:`split_levels` and the module docstring).
        part: ``(S, C)`` the dataloader part of ``X``, or None.
        calm: the calm stretch's blocks when known (:func:`calm_rows` of ``X``).
        medians: blocks' medians measured already (:func:`block_levels`).

    Returns:
        (C,) object group names (``NAME/k``, ``k`` = 0 the fastest, where a declared
        group ``NAME`` is cut; ``NAME`` where not), (C,) levels, the calm blocks.
    """
    declared = np.asarray([str(g) for g in declared], dtype=object)
    window = int(config.temporal_window_steps)
    medians = {} if medians is None else medians
    calm = calm if calm is not None else calm_rows(X, window, k=float(config.mad_k), medians=medians)
    slack = float(config.mad_k) * level_wander(X, window)  # a rank slowed in a calm block: left out
    slack = slack if np.isfinite(slack) else np.inf
    level = block_levels(X, calm, slack=slack, medians=medians)
    run_level, _ = nanmedian(X, axis=0) if X.shape[0] else (np.full(X.shape[1], np.nan), None)
    part_level = block_levels(X, calm, slack=slack, of=part) if part is not None and X.shape[0] else None
    groups = declared.copy()
    for name, cols in group_columns(declared):
        wander = level_wander(X[:, cols], window)  # the noise of a level, relative
        with np.errstate(invalid="ignore", divide="ignore"):
            logs = np.where(level[cols] > 0, np.log(level[cols]), np.nan)
        idx = split_levels(logs, sigmas=float(config.group_gap_sigmas), min_step=float(np.log(config.group_min_gap)),
                           floor=wander, wide=(float(np.log(config.peer_threshold)), float(config.mad_k)))
        if part_level is not None:  # the same rule on the loader's part, within each group
            sub = np.zeros_like(idx)
            nxt = 0
            for k in range(int(idx.max()) + 1 if idx.size else 0):
                m = idx == k
                scale = median(level[cols[m]])
                frac = part_level[cols[m]] / scale if scale > 0 else np.full(int(m.sum()), np.nan)
                s = split_levels(frac, sigmas=float(config.group_gap_sigmas), min_step=float(config.group_min_gap) - 1.0,
                                 floor=wander, wide=(float(config.peer_threshold) - 1.0, float(config.mad_k)))
                sub[m] = nxt + s
                nxt += int(s.max()) + 1 if s.size else 0
            idx = sub
        idx = _place_missing(idx, level[cols], run_level[cols])
        idx = _by_speed(idx, level[cols])
        if idx.size and idx.max() > 0:
            groups[cols] = [f"{name}/{k}" for k in idx.tolist()]
    return groups, level, calm


def _place_missing(idx: np.ndarray, level: np.ndarray, run_level: np.ndarray) -> np.ndarray:
    """A column without a level (no value in the calm stretch) joins the group whose
    median level is nearest its median over the run (group 0 without one)."""
    miss = ~np.isfinite(level)
    if not miss.any() or idx.max(initial=0) == 0:
        return idx
    meds = {k: median(level[(idx == k) & ~miss]) for k in range(int(idx.max()) + 1)}
    out = idx.copy()
    for j in np.flatnonzero(miss):
        if np.isfinite(run_level[j]):
            out[j] = min(meds, key=lambda k: abs(meds[k] - run_level[j]) if np.isfinite(meds[k]) else np.inf)
    return out


def _by_speed(idx: np.ndarray, level: np.ndarray) -> np.ndarray:
    """Group indices renumbered by their median level (0 = fastest)."""
    ks = sorted(set(idx.tolist()), key=lambda k: (median(level[idx == k]) if np.isfinite(level[idx == k]).any() else np.inf, k))
    lut = {k: i for i, k in enumerate(ks)}
    return np.asarray([lut[k] for k in idx.tolist()], dtype=np.int64)


def assign_groups(X: np.ndarray, names, declared, config, *, mapping: dict | None = None,
                  part: np.ndarray | None = None, calm: list[tuple[int, int]] | None = None,
                  medians: dict | None = None) -> PeerGroups:
    """The peer groups of one job (see the module docstring for the order: a mapping,
    the declared groups when more than one, else discovered).

    Args:
        X: ``(S, C)`` local time (or a long input's value), NaN = no value.
        names: (C,) component names (``rank:N``, ``worker:N``; a mapping may also
            name a rank by its number).
        declared: (C,) declared group of each column.
        config: a :class:`faultlab.labeler.LabelerConfig` (``temporal_window_steps``,
            ``group_gap_sigmas``, ``group_min_gap``).
        mapping: ``{component: group}`` or None.
        part: ``(S, C)`` the dataloader part of ``X``, or None.
        calm: the calm stretch's blocks when known (:func:`calm_rows` of ``X``,
            e.g. computed block by block out of core).
        medians: ``{(i0, i1): (C,) median}`` of blocks of ``X`` measured already
            (:func:`calm_scores`): the calm blocks' levels are taken from them.

    Raises:
        BadInput (field ``--peer-groups``) when a mapping names none of the components.
    """
    declared = np.asarray([str(g) for g in declared], dtype=object)
    names = [str(n) for n in names]
    window = int(config.temporal_window_steps)
    medians = {} if medians is None else medians  # filled by calm_rows, read by block_levels
    if mapping:
        groups = declared.copy()
        hit = 0
        for j, n in enumerate(names):
            key = n if n in mapping else n.split(":", 1)[-1] if n.split(":", 1)[-1] in mapping else n.rsplit("/", 1)[-1]
            if key in mapping:
                groups[j] = str(mapping[key])
                hit += 1
        if not hit:
            raise BadInput(f"the mapping names none of the {len(names)} components (e.g. {names[0] if names else '-'})",
                           field="--peer-groups", fix="map component names (rank:N, worker:N) or rank numbers to group names")
        calm = calm if calm is not None else calm_rows(X, window, k=float(config.mad_k), medians=medians)
        level = block_levels(X, calm, medians=medians)
        return PeerGroups(groups, "mapping", level, calm, declared)
    if len(set(declared.tolist())) > 1:
        calm = calm if calm is not None else calm_rows(X, window, k=float(config.mad_k), medians=medians)
        level = block_levels(X, calm, medians=medians)
        return PeerGroups(declared, "declared", level, calm, declared)
    groups, level, calm = discover(X, declared, config, part=part, calm=calm, medians=medians)
    src = "discovered" if len(set(groups.tolist())) > 1 else "one"
    return PeerGroups(groups, src, level, calm, declared)


def read_mapping(path) -> dict:
    """``{component: group}`` from a ``--peer-groups`` file: a JSON object (component
    or rank number -> group name), or a CSV/TSV of two columns ``component,group``
    with a header.

    Raises:
        BadInput (field ``--peer-groups``) naming the file for one that cannot be read,
        is not a regular file or is over :data:`faultlab.inputfile.JSON_BYTES` (nothing
        of it read), or has another shape."""
    p = Path(path)
    fix = 'a JSON object {"rank:0": "a100", ...} or a CSV with columns component,group'
    text = inputfile.read_text(p, "--peer-groups", limit=inputfile.JSON_BYTES, fix=fix)
    try:
        if p.suffix.lower() == ".json":
            d = safefs.parse_json(text, str(p))
            if not isinstance(d, dict) or not d:
                raise ValueError("not a non-empty JSON object")
            return {str(k): str(v) for k, v in d.items()}
        df = pd.read_csv(io.StringIO(text), sep=None, engine="python", dtype=str)
    except (OSError, ValueError) as e:
        raise BadInput(f"{p} could not be read ({type(e).__name__}: {e})", field="--peer-groups", fix=fix) from None
    if not {"component", "group"} <= set(df.columns) or not len(df):
        raise BadInput(f"{p} has no rows with columns component, group", field="--peer-groups", fix=fix)
    return dict(zip(df["component"].astype(str), df["group"].astype(str)))
