"""Interval primitives of the labeler: per-step flags to intervals, and their edges.

:func:`intervals` joins runs of flagged steps across gaps of at most ``gap`` unflagged
steps or ``gap_s`` seconds and keeps those that span ``min_len`` steps and
``min_s`` seconds (a blip joined on only through the seconds rule is trimmed,
:func:`_trim_blips`). :func:`grow` extends an interval by hysteresis over steps whose
smoothed excess is still up (:func:`smoothed_above`), and :func:`refine` sets its onset
at the least-squares change point of the log ratio (:func:`log_ratio`). Shared by the
run labeler's fusion and intermittent episodes and the ``long`` importer.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


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


def grow(ivs: list[tuple[int, int]], flags: np.ndarray, n: int, limit: int) -> list[tuple[int, int]]:
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


def refine(ivs: list[tuple[int, int]], x: np.ndarray, window: int, blocked: np.ndarray | None = None) -> list[tuple[int, int]]:
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


def log_ratio(ratio: np.ndarray) -> np.ndarray:
    """log of a ratio series (float64; NaN where not positive)."""
    r = np.asarray(ratio, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(r > 0, np.log(r), np.nan)


def smoothed_above(ratio: np.ndarray, low: float, k: int = 5) -> np.ndarray:
    """``(S,)`` bool: the centered rolling median (``k`` steps, NaN skipped) of a 1-D
    ratio series is above ``low``. The hysteresis flag that sets a label's edges: a
    sustained excess too small to flag a single noisy step, but above noise when
    ``k`` steps agree."""
    sm = pd.Series(np.asarray(ratio, dtype=np.float64)).rolling(k, center=True, min_periods=(k + 1) // 2).median()
    return (sm > low).to_numpy()


def dilate(mask: np.ndarray, k: int) -> np.ndarray:
    """Grow each True run of a 1-D mask by ``k`` entries on both sides."""
    if k <= 0 or not mask.any():
        return mask.copy()
    out = mask.copy()
    for s in range(1, k + 1):
        out[s:] |= mask[:-s]
        out[:-s] |= mask[s:]
    return out


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals ``[starts[i], ends[i])`` as sorted disjoint intervals."""
    s = np.asarray(starts, dtype=np.float64).ravel()
    e = np.asarray(ends, dtype=np.float64).ravel()
    if s.size == 0:
        return s, e
    o = np.lexsort((e, s))
    s, e = s[o], e[o]
    reach = np.maximum.accumulate(e)
    new = np.concatenate([[True], s[1:] > reach[:-1]])
    first = np.flatnonzero(new)
    last = np.concatenate([first[1:] - 1, [s.size - 1]])
    return s[first], reach[last]


def total_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Seconds covered by the union of intervals ``[starts[i], ends[i])``."""
    s, e = union(starts, ends)
    return float(np.sum(e - s)) if s.size else 0.0
