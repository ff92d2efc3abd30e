"""Score detector alarms against labels, one run at a time. Every metric is reported;
none hides another (docs/evaluation.md).

Inputs: ``alarms`` (faultlab.schema.ALARMS: component, start_ts, end_ts [unix s],
score; in replay mode also ``raised_ts``, the replay clock when the alarm was first
raised) and ``labels`` (faultlab.schema.LABELS). Only *effect* labels count as
positives: rows with ``source == "injected-unmanifested"`` (a fault that slowed
nothing) are dropped, and reported apart (``unmanifested_alarmed``: a detector must
not alarm on them).

Interval overlap (used everywhere below): ``[a0, a1]`` and ``[b0, b1]`` overlap when
their intersection has positive length (``max(a0, b0) < min(a1, b1)``), or, for a
zero-length interval (a point), when the point lies inside the other, ends included.
In replay an alarm is the interval ``[raised_ts, max(end_ts, raised_ts)]``: it counts
only from the moment it was raised.

Per run, :func:`run_stats` returns *sufficient statistics* (counts and sums), so that
a dataset's figures pool runs by adding them (:func:`derive`) and a bootstrap over runs
resamples them cheaply (:mod:`faultlab.scoring.aggregate`). The metrics (keys of
:func:`derive`):

- **component level** over the universe ``U`` = ``components`` union the components of
  labels and alarms: a component is positive if a label names it, predicted if an
  alarm names it: ``precision, recall, f1, mcc`` (pooled over runs: cells are
  (run, component)).
- **component x time-window level** (``window_*``): the run's span cut into windows of
  ``window_s`` (default 10 s) from its first step; a (component, window) cell is
  positive when a label of the component overlaps the window, predicted when an alarm
  of it does. P/R/F1/MCC over all cells of all runs: a random detector gets MCC ~ 0
  whatever the number of components.
- **point-adjusted window F1** (``window_recall_point_adjusted``,
  ``window_f1_point_adjusted``): the same cells, but every cell of a contiguous run
  of positive cells of a component counts as detected once any one of them is
  predicted (Xu et al., WWW'18). **Inflated by design**: Kim et al., "Towards a
  Rigorous Evaluation of Time-Series Anomaly Detection" (AAAI'22) show a random
  detector can beat every published one under point-adjust. It is reported only for
  comparison with papers that use it, always beside the honest ``window_f1``.
- **event level, without point-adjust**: ``event_precision`` = share of alarms that
  overlap a label of the same component; ``event_recall`` = share of labels overlapped
  by an alarm of the same component; ``event_f1``. Each alarm and each label counts
  once (a long alarm earns no credit per point). In replay, an alarm raised up to
  ``late_s`` after a label's end still detects it (its latency says how late).
- **range-based** (Tatbul et al., "Precision and Recall for Time Series", NeurIPS'18;
  flat positional bias, reciprocal cardinality, recall ``alpha`` = 0.2, precision
  alpha 0, as TSB-AD's R-based-F1): alarms of a component merged into disjoint ranges;
  per label ``alpha * existence + (1 - alpha) * overlap share * 1/#ranges touching
  it``; per alarm range the same with the roles swapped and alpha 0;
  ``range_precision``, ``range_recall``, ``range_f1`` (means over ranges, pooled).
- **localization** ``acc_at_1``, ``acc_at_k``: per label, the components are ranked by
  the largest score of their alarms overlapping the label's interval; credit =
  ``clip((k - h) / t, 0, 1)`` with ``h`` components strictly higher and ``t`` tied
  (the labeled one included; a constant detector gets ``k / n``, not 1); 0 when the
  labeled component has no overlapping alarm.
- **continuous scores** (when the detector gives ``scores``): ``auc_pr`` (average
  precision, as scikit-learn's ``average_precision_score``) and ``vus_pr`` (volume
  under the range-PR surface, Paparrizos et al. VLDB'22, as TSB-AD NeurIPS'24
  computes it: buffer windows 0..``vus_window`` points, 250 thresholds), over the
  run's rank series concatenated rank by rank (one point per rank per step, positive
  when a label of the rank covers the step's ``t_start``); mean over runs with a
  positive point.
- **timeliness** (replay only; NaN offline): per detected label ``latency = max(0,
  first raised_ts of a matching alarm - label start_ts)``; ``latency_median_s``,
  ``latency_p95_s`` (linear interpolation).
- **noise**: ``false_alarms_per_component_hour`` = alarms overlapping no label of their
  component / (``|U|`` x run span in hours).

Undefined ratios are NaN (never an exception).

The module runs past 800 lines and is still one idea: the metrics above all count
over the same cells, overlap rule and sufficient statistics, so their definitions
and their counting code stay side by side.
"""

from __future__ import annotations

import math
from typing import Iterable, NamedTuple, Sequence

import numpy as np
import pandas as pd

from faultlab.errors import BadInput
from faultlab.rundata import effect_labels, text_values, unmanifested_labels
from faultlab.scoring.steparrays import step_arrays


#: the additive statistics of one run (every entry a float)
COUNT_KEYS = (
    "comp_tp", "comp_fp", "comp_fn", "comp_tn",
    "win_tp", "win_fp", "win_fn", "win_tn", "win_pa_tp",
    "n_alarms", "n_alarms_true", "n_labels", "n_labels_recalled",
    "n_ranges", "range_precision_sum", "range_recall_sum",
    "acc1_sum", "acck_sum",
    "false_alarms", "component_hours",
    "n_unmanifested", "unmanifested_alarmed",
    "curve_runs", "auc_pr_sum", "vus_pr_sum",
)

#: per-label columns (for breakdowns by fault type and label source)
LABEL_KEYS = ("recalled", "acc1", "acck", "range_recall", "latency_s", "win_pos", "win_hit")


def _overlap(a0, a1, b0, b1) -> np.ndarray:
    """Element-wise overlap test of intervals (broadcasting numpy arrays)."""
    a0, a1, b0, b1 = (np.asarray(x, dtype=np.float64) for x in (a0, a1, b0, b1))
    pos = np.maximum(a0, b0) < np.minimum(a1, b1)
    a_pt = (a0 == a1) & (b0 <= a0) & (a0 <= b1)
    b_pt = (b0 == b1) & (a0 <= b0) & (b0 <= a1)
    return pos | a_pt | b_pt


def _check(df: pd.DataFrame | None, name: str, cols: Sequence[str]) -> pd.DataFrame:
    missing = [] if df is None else [c for c in cols if c not in df.columns]
    if df is None or (len(df) == 0 and missing):
        return pd.DataFrame({c: pd.Series(dtype=object if c == "component" else "float64") for c in cols})
    if missing:
        raise BadInput(f"missing column(s) {', '.join(missing)}", field=name)
    return df


def _div(a, b):
    """a / b elementwise, NaN where b == 0 (scalars or numpy arrays)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(b != 0, a / np.where(b != 0, b, 1.0), np.nan)
    return out if out.ndim else float(out)


def f1_of(p, r):
    """Harmonic mean; 0 when recall is 0 (a detector that raised no alarm while there
    were positives has F1 0, not NaN: its precision is undefined, its recall is 0),
    otherwise NaN if either is NaN, 0 when both are 0."""
    p, r = np.asarray(p, dtype=np.float64), np.asarray(r, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(p + r > 0, 2 * p * r / np.where(p + r > 0, p + r, 1.0), 0.0)
    out = np.where(np.isnan(p) | np.isnan(r), np.nan, out)
    out = np.where(r == 0, 0.0, out)
    return out if out.ndim else float(out)


def mcc_of(tp, fp, fn, tn):
    """Matthews correlation; 0 when a factor of the denominator is 0 (the usual
    convention), NaN when there are no cells."""
    tp, fp, fn, tn = (np.asarray(x, dtype=np.float64) for x in (tp, fp, fn, tn))
    den = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(den > 0, (tp * tn - fp * fn) / np.sqrt(np.where(den > 0, den, 1.0)), 0.0)
    out = np.where(tp + fp + fn + tn == 0, np.nan, out)
    return out if out.ndim else float(out)


# -- range-based precision and recall (Tatbul et al. NeurIPS'18) ----------------------


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as disjoint sorted ``(starts, ends)`` (touching ones merge)."""
    if len(starts) == 0:
        return np.zeros(0), np.zeros(0)
    o = np.argsort(starts, kind="mergesort")
    s, e = np.asarray(starts, float)[o], np.asarray(ends, float)[o]
    out_s, out_e = [s[0]], [e[0]]
    for a, b in zip(s[1:], e[1:]):
        if a <= out_e[-1]:
            out_e[-1] = max(out_e[-1], b)
        else:
            out_s.append(a)
            out_e.append(b)
    return np.asarray(out_s), np.asarray(out_e)


def _covered_share(r0: float, r1: float, s: np.ndarray, e: np.ndarray) -> float:
    """Share of ``[r0, r1]`` covered by the disjoint intervals ``(s, e)``; for a point
    range: 1 when it lies in one of them."""
    if r1 <= r0:
        return float(bool(np.any((s <= r0) & (r0 <= e))))
    inter = np.clip(np.minimum(e, r1) - np.maximum(s, r0), 0.0, None).sum()
    return float(inter / (r1 - r0))


def range_scores(real: tuple[np.ndarray, np.ndarray], pred: tuple[np.ndarray, np.ndarray], alpha: float) -> np.ndarray:
    """Tatbul et al.'s range-based recall of each real range against the predicted
    ranges (disjoint, one component): ``alpha * existence + (1 - alpha) * overlap share
    * gamma``, flat bias, ``gamma = 1 / #predicted ranges overlapping`` (0 if none).
    Swap the arguments (and alpha 0) for the precision of each predicted range.

    Returns: one score per real range, in [0, 1]."""
    rs, re_ = real
    ps, pe = pred
    out = np.zeros(len(rs))
    for i, (a, b) in enumerate(zip(rs, re_)):
        hit = _overlap(a, b, ps, pe) if len(ps) else np.zeros(0, bool)
        n = int(hit.sum())
        if n == 0:
            continue
        out[i] = alpha + (1 - alpha) * _covered_share(a, b, ps[hit], pe[hit]) / n
    return out


# -- threshold-free scores: AUC-PR, VUS-PR --------------------------------------------


def _argsort_desc(s: np.ndarray) -> np.ndarray:
    """The indices that sort ``s`` descending, ties in index order: exactly
    ``np.argsort(-s, kind="mergesort")``, which numpy runs several times slower on
    floats than its default sort. Without ties the default sort's order is the only
    one; with ties, the default sort of (dense rank, index) keys, which are unique;
    with NaN, the stable sort itself."""
    neg = -np.asarray(s, dtype=np.float64)
    n = len(neg)
    o = np.argsort(neg)
    v = neg[o]
    if n < 2 or (not np.isnan(v[-1]) and bool((v[1:] != v[:-1]).all())):
        return o
    if np.isnan(v[-1]):
        return np.argsort(neg, kind="mergesort")
    _, rank = np.unique(neg, return_inverse=True)
    return np.argsort(rank.reshape(-1).astype(np.int64) * n + np.arange(n))


def auc_pr(y: np.ndarray, s: np.ndarray) -> float:
    """Average precision ``sum_n (R_n - R_{n-1}) P_n`` over the distinct score
    thresholds, highest first (as scikit-learn's ``average_precision_score``).

    Args: y (n,) 0/1 labels; s (n,) scores, higher = more anomalous.
    Returns: AP in [0, 1]; NaN without a positive."""
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    P = y.sum()
    if P == 0:
        return float("nan")
    o = _argsort_desc(s)
    s, y = s[o], y[o]
    last = np.r_[np.flatnonzero(np.diff(s) != 0), len(s) - 1]  # end of each tie block
    tp = np.cumsum(y)[last]
    n = last + 1.0
    prec, rec = tp / n, tp / P
    return float(np.sum(np.diff(np.r_[0.0, rec]) * prec))


def _ranges(y: np.ndarray) -> list[tuple[int, int]]:
    """Inclusive (start, end) index pairs of the runs of 1 in ``y``."""
    d = np.diff(np.r_[0, y.astype(np.int8), 0])
    return list(zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1) - 1))


def _buffered_segments(ranges: list[tuple[int, int]], window: int, n: int) -> list[tuple[int, int]]:
    """Label ranges grown by ``window // 2`` on each side, overlapping ones merged."""
    h = window // 2
    out: list[list[int]] = []
    for s, e in ranges:
        a, b = max(s - h, 0), min(e + h, n - 1)
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _soft_labels(y: np.ndarray, ranges: list[tuple[int, int]], window: int) -> np.ndarray:
    """Labels with ``sqrt(1 - d / window)`` ramps over ``window // 2`` points on each side
    of every range (clipped at 1): the buffer of range-based PR (VUS, VLDB'22)."""
    lab = y.astype(np.float64).copy()
    n = len(lab)
    h = window // 2
    for s, e in ranges:
        x1 = np.arange(e + 1, min(e + h + 1, n))
        lab[x1] += np.sqrt(1 - (x1 - e) / window)
        x2 = np.arange(max(s - h, 0), s)
        lab[x2] += np.sqrt(1 - (s - x2) / window)
    return np.minimum(lab, 1.0)


def vus_pr(y: np.ndarray, s: np.ndarray, window: int = 10, n_thresholds: int = 250) -> float:
    """Volume under the range-based precision-recall surface (VUS-PR; Paparrizos et
    al., "Volume Under the Surface", VLDB'22), computed as TSB-AD (Liu & Paparrizos,
    NeurIPS'24) does.

    For each buffer size ``w`` in 0..``window`` points, range-based precision and recall
    (soft buffered labels, existence reward) at ``n_thresholds`` thresholds taken at
    evenly spaced ranks of the sorted scores; the area under each PR curve; their mean.

    Args: y (n,) 0/1 labels; s (n,) scores; window: the largest buffer (points).
    Returns: VUS-PR in [0, 1]; NaN without a positive point.
    Raises: BadInput for window < 0 or n_thresholds < 1."""
    if window < 0 or n_thresholds < 1:
        raise BadInput("window must be >= 0 and n_thresholds >= 1", field="vus_pr")
    y = np.asarray(y).astype(np.int64)
    s = np.asarray(s, dtype=np.float64)
    n = len(y)
    P = float(y.sum())
    if P == 0:
        return float("nan")
    seq = _ranges(y)
    desc = _argsort_desc(s)
    thr = s[desc[np.linspace(0, n - 1, n_thresholds).astype(int)]]
    # points with s >= thr: a prefix of the descending order (ties included)
    n_pred = (n - np.searchsorted(np.sort(s), thr, side="left")).astype(np.int64)
    in_seq_desc = y.astype(bool)[desc]
    W = window + 1
    zero = np.zeros((W, 1))
    # one buffer size at a time, row w of each (W, thresholds) sum being buffer w's: the
    # cumulative sums of the soft labels taken at each threshold's prefix (0 for an empty
    # prefix), so memory holds a few arrays of n points, not (W, n) ones
    at, has = np.maximum(n_pred - 1, 0), n_pred > 0
    tp, c_out = np.zeros((W, len(thr))), np.zeros((W, len(thr)))
    for w in range(W):
        soft_desc = _soft_labels(y, seq, w)[desc]
        cum = np.cumsum(soft_desc)
        tp[w] = np.where(has, cum[at], 0.0)
        soft_desc[in_seq_desc] = 0.0  # the buffer's points outside the label ranges
        np.cumsum(soft_desc, out=cum)
        c_out[w] = np.where(has, cum[at], 0.0)
        del soft_desc, cum
    n_segs, existence = np.zeros((W, 1)), np.zeros((W, len(thr)), np.int64)
    for w in range(W):
        segs = _buffered_segments(seq, w, n)
        seg_max = np.sort(np.array([s[a : b + 1].max() for a, b in segs]))
        existence[w] = len(segs) - np.searchsorted(seg_max, thr, side="left")  # segments with a point >= thr
        n_segs[w] = len(segs)
    n_labels = P + c_out
    recall = np.minimum(tp / ((P + n_labels) / 2), 1.0)
    tpr = recall * existence / n_segs
    precision = tp / n_pred
    d_tpr = tpr - np.concatenate([zero, tpr[:, :-1]], axis=1)
    aps = [np.dot(d_tpr[w].copy(), precision[w].copy()) for w in range(W)]
    return float(np.mean(aps))


def point_adjusted_hits(truth: np.ndarray, guess: np.ndarray) -> int:
    """Point-adjusted true positives (Xu et al., "Unsupervised Anomaly Detection via
    Variational Auto-Encoder for Seasonal KPIs", WWW'18): per row (component) of the
    boolean ``truth`` / ``guess`` grids (components x windows), every cell of a
    contiguous run of truth cells counts as detected when any one of its cells is
    guessed. Returns the number of such cells (>= the plain ``(truth & guess).sum()``)."""
    t = np.asarray(truth, bool)
    g = np.asarray(guess, bool)
    hits = 0
    for t_row, g_row in zip(t, g):
        edges = np.diff(np.r_[0, t_row.astype(np.int8), 0])
        for a, b in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)):  # runs [a, b) of truth cells
            if g_row[a:b].any():
                hits += int(b - a)
    return hits


def score_series(scores: pd.DataFrame, labels: pd.DataFrame | None, components: Iterable[str], *, effect: bool = False,
                 label_ranges: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The run's rank series for AUC-PR / VUS-PR: per component (in ``components``
    order) its scores sorted by ``ts`` (stable), concatenated; a point is positive when
    an effect label of its component covers its ``ts`` (ends included). NaN scores
    count 0, +-inf as +-1e300.

    ``label_ranges``: :func:`label_ranges` of the effect labels, when already made
    (``labels`` is then not read). Returns: ``(y, s)`` arrays of equal length."""
    if label_ranges is None:
        label_ranges = _label_ranges(labels if effect else effect_labels(labels))
    col = scores["component"]
    codes, uniq = pd.factorize(col if isinstance(col.dtype, pd.StringDtype) else col.astype(str))
    code_of = {str(u): i for i, u in enumerate(uniq)}
    ts_all = scores["ts"].to_numpy(np.float64)
    s_all = scores["score"].to_numpy(np.float64)
    ys, ss = [], []
    rows_of = _rows_of(codes)
    for c in components:
        i = code_of.get(c)
        if i is None:
            continue
        rows = rows_of[i]
        rows = rows[np.argsort(ts_all[rows], kind="mergesort")]
        ts = ts_all[rows]
        ys.append(_within_any(ts, *label_ranges.get(c, (np.zeros(0), np.zeros(0)))))
        ss.append(np.nan_to_num(s_all[rows], nan=0.0, posinf=1e300, neginf=-1e300))
    if not ys:
        return np.zeros(0, bool), np.zeros(0)
    return np.concatenate(ys), np.concatenate(ss)


def _within_any(ts: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether each of ``ts`` lies in one of the closed intervals ``[a, b]``: the
    intervals merged, then one binary search a point (a test of every point against
    every label costs points x labels; a run's labels of one component are its own)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    keep = a <= b
    if not keep.any():
        return np.zeros(len(ts), bool)
    o = np.argsort(a[keep], kind="mergesort")
    a, b = a[keep][o], np.maximum.accumulate(b[keep][o])  # b: the furthest end of the intervals starting at or before a
    i = np.searchsorted(a, ts, side="right") - 1
    return (i >= 0) & (ts <= b[np.maximum(i, 0)])


def _label_ranges(lab: pd.DataFrame) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """component -> (start_ts, end_ts arrays, in the labels' order) of ``lab``."""
    if lab is None or not len(lab):
        return {}
    l0, l1 = lab["start_ts"].to_numpy(np.float64), lab["end_ts"].to_numpy(np.float64)
    return {k: (l0[i], l1[i]) for k, i in _rows_of(text_values(lab["component"])).items() if isinstance(k, str)}


def _rows_of(values: np.ndarray) -> dict:
    """Each value of ``values`` (missing ones left out) -> the indices holding it,
    ascending, found by one sort: a pass over every row for each distinct value costs
    rows x values, and a run's labels name as many components as they have rows (a
    labels table of 20,000 rows, each a new component, held the scoring 8 s; 1,000,000
    rows, a few MB, some 6 hours)."""
    if not len(values):
        return {}
    codes, uniq = pd.factorize(values)
    order = np.argsort(codes, kind="stable")
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    return {uniq[codes[g[0]]]: g for g in np.split(order, cuts) if codes[g[0]] >= 0}


# -- one run ---------------------------------------------------------------------------


def _label_groups(lab: pd.DataFrame, injections: pd.DataFrame | None) -> tuple[list[str], list[str]]:
    """Per effect label: its fault type (the injected fault's type, else the label's
    cause) and its source (injected / observed)."""
    types = {}
    if injections is not None and len(injections) and "fault_id" in injections.columns:
        types = dict(zip(injections["fault_id"].astype(str), injections["fault_type"].astype(str)))
    ft, src = [], []
    for r in lab.itertuples():
        fid = getattr(r, "fault_id", None)
        cause = getattr(r, "cause", None)
        ft.append(types.get(str(fid)) if fid is not None and str(fid) in types else (str(cause) if cause is not None and cause == cause else "unknown"))
        s = getattr(r, "source", None)
        src.append(str(s) if s is not None and s == s else "unknown")
    return ft, src


def prepare_labels(labels: pd.DataFrame | None, injections: pd.DataFrame | None = None) -> dict:
    """What :func:`run_stats` derives from a run's labels alone (the same for every
    detector: compute it once per run and pass it as ``prepared``): the checked
    labels, the effect and unmanifested ones, and each effect label's fault type and
    source, their columns as arrays (``effect_arrays``, ``unmanifested_arrays``:
    component, start_ts, end_ts) and :func:`_label_ranges`.

    Raises BadInput for labels that miss a column."""
    labels_in = _check(labels, "labels", ["component", "start_ts", "end_ts"])
    lab = effect_labels(labels_in)
    ft, src = _label_groups(lab, injections)
    unm = unmanifested_labels(labels_in)
    return {"labels": labels_in, "effect": lab, "unmanifested": unm, "fault_type": ft, "source": src,
            "effect_arrays": (text_values(lab["component"]), lab["start_ts"].to_numpy(np.float64), lab["end_ts"].to_numpy(np.float64)),
            "unmanifested_arrays": (text_values(unm["component"]), unm["start_ts"].to_numpy(np.float64), unm["end_ts"].to_numpy(np.float64)),
            "label_ranges": _label_ranges(lab)}


class _AlarmArrays(NamedTuple):
    """One run's usable alarms as arrays, each of shape (n_alarms,): ``comp`` (object,
    text), ``start`` and ``end`` (unix s; in replay from the raise on), ``score``;
    ``replay``: the alarms came with ``raised_ts``."""

    comp: np.ndarray
    start: np.ndarray
    end: np.ndarray
    score: np.ndarray
    replay: bool


class _LabelArrays(NamedTuple):
    """The effect labels as arrays, each of shape (n_labels,): ``comp`` (object, text),
    ``start`` and ``end`` (unix s): :func:`prepare_labels`' ``effect_arrays``."""

    comp: np.ndarray
    start: np.ndarray
    end: np.ndarray


class _Cells(NamedTuple):
    """The component x window grid of one run: ``label_cells`` (n_labels, n_windows)
    the windows each label overlaps; ``truth`` / ``guess`` (|U|, n_windows) the cells
    a label / an alarm of the row's component overlaps; ``row``: component -> row."""

    label_cells: np.ndarray
    truth: np.ndarray
    guess: np.ndarray
    row: dict


#: the most windows one run is cut into, and the widest VUS buffer (points): settings
#: past them (a submitted leaderboard.json's window of a nanosecond) would ask for
#: gigabytes of cells or hours of loops
MAX_WINDOWS = 1_000_000
MAX_VUS_WINDOW = 1000
#: the most cells of a run's window grids (:func:`_window_cells`: a row of windows for
#: each label and alarm, two for each component): the windows are bounded alone, the
#: labels and components by the run's tables only, and a run of 5,000 labels whose steps
#: spanned 1e7 s asked for 4.6 GiB (10 s windows). A week at 10 s for 64 ranks and a
#: thousand labels and alarms is some 7e7
MAX_WINDOW_CELLS = 1 << 28
#: the most (alarm, label) pairs of one run: the event-level figures compare every alarm
#: with every label (:func:`_detections`, a matrix of them; :func:`_localization`;
#: :func:`_unmanifested_counts` with the unmanifested ones), and
#: a run of 30,000 ranks of one step and 30,000 labels (the constant detector alarms each
#: rank) asked for 6.7 GiB. A run's labels and a detector's alarms are some hundreds
MAX_DETECTION_PAIRS = 1 << 24


def _check_settings(k: int, window_s: float, vus_window: int = 10) -> None:
    """Refuse (BadInput) ``k < 1`` for Acc@k, a window that is not ``> 0`` s and a VUS
    buffer outside 0..:data:`MAX_VUS_WINDOW`."""
    if k < 1:
        raise BadInput(f"k must be >= 1, got {k}", field="k")
    if not window_s > 0:
        raise BadInput(f"window must be > 0 s, got {window_s}", field="window_s")
    if not 0 <= vus_window <= MAX_VUS_WINDOW:
        raise BadInput(f"vus_window must be in 0..{MAX_VUS_WINDOW} points, got {vus_window}", field="vus_window")


def _alarm_arrays(al: pd.DataFrame) -> _AlarmArrays:
    """The checked ALARMS frame ``al`` as :class:`_AlarmArrays`: alarms without a finite
    start_ts/end_ts are dropped; in replay (a ``raised_ts`` column) each alarm is the
    interval ``[raised_ts, max(end_ts, raised_ts)]``: it counts only from its raise."""
    replay = "raised_ts" in al.columns
    a_c = text_values(al["component"])
    a0 = al["start_ts"].to_numpy(dtype=np.float64)
    a1 = al["end_ts"].to_numpy(dtype=np.float64)
    a_s = al["score"].to_numpy(dtype=np.float64)
    raised = al["raised_ts"].to_numpy(dtype=np.float64) if replay else None
    fin = np.isfinite(a0) & np.isfinite(a1)
    if not fin.all():
        a_c, a0, a1, a_s = a_c[fin], a0[fin], a1[fin], a_s[fin]
        raised = raised[fin] if replay else None
    if replay:
        a0 = np.maximum(a0, raised)
        a1 = np.maximum(a1, raised)
    return _AlarmArrays(a_c, a0, a1, a_s, replay)


def _universe(components: Iterable[str], al: _AlarmArrays, lab: _LabelArrays) -> list[str]:
    """The component universe ``U``, sorted: ``components`` union the components named
    by the effect labels and by the alarms."""
    return sorted(set(map(str, components)) | set(lab.comp.tolist()) | set(al.comp.tolist()))


def _span(run_span: tuple[float, float] | None, al: _AlarmArrays, lab: _LabelArrays) -> tuple[float, float]:
    """``(t0, t1)`` unix s of the run: ``run_span``, else the extent of the alarms and
    labels (``(0, 0)`` when there are none)."""
    if run_span is None:
        starts, ends = np.concatenate([al.start, lab.start]), np.concatenate([al.end, lab.end])
        run_span = (float(starts.min()), float(ends.max())) if starts.size else (0.0, 0.0)
    return float(run_span[0]), float(run_span[1])


def _component_counts(al: _AlarmArrays, lab: _LabelArrays, universe: list[str]) -> dict:
    """Component level over ``U``: a component is positive when a label names it,
    predicted when an alarm names it. Returns ``comp_tp, comp_fp, comp_fn, comp_tn``
    (ints: numbers of components)."""
    pos, pred = set(lab.comp.tolist()), set(al.comp.tolist())
    tp, fp, fn = len(pos & pred), len(pred - pos), len(pos - pred)
    return {"comp_tp": tp, "comp_fp": fp, "comp_fn": fn, "comp_tn": len(universe) - tp - fp - fn}


def _windows(t0: float, t1: float, window_s: float) -> tuple[np.ndarray, np.ndarray]:
    """The run's windows: ``(w0, w1)``, each (n_windows,) unix s, ``window_s`` long from
    ``t0``, the last one cut at ``t1``; one point window ``[t0, t0]`` when ``t1 <= t0``."""
    if (t1 - t0) / window_s > MAX_WINDOWS:
        raise BadInput(f"a window of {window_s:g} s cuts a run of {t1 - t0:g} s into more than {MAX_WINDOWS} windows",
                       field="window_s", fix="give a wider window")
    n_win = max(1, int(math.ceil((t1 - t0) / window_s))) if t1 > t0 else 1
    w0 = t0 + window_s * np.arange(n_win)
    w1 = np.minimum(w0 + window_s, max(t1, t0))
    if t1 <= t0:
        w1 = w0.copy()
    return w0, w1


def _window_cells(al: _AlarmArrays, lab: _LabelArrays, universe: list[str], windows: tuple[np.ndarray, np.ndarray]) -> _Cells:
    """The component x window grid (:class:`_Cells`): a cell is true when a label of
    its component overlaps its window, guessed when an alarm of it does."""
    w0, w1 = windows
    n_lab, n_al, n_win = len(lab.start), len(al.start), len(w0)
    if (n_lab + n_al + 2 * len(universe)) * n_win > MAX_WINDOW_CELLS:
        span = float(w1[-1] - w0[0])
        raise BadInput(f"{n_win} windows of the run's {span:g} s, for {n_lab} label(s), {n_al} alarm(s) and {len(universe)} "
                       f"component(s), are more than {MAX_WINDOW_CELLS} cells", field="window_s", fix="give a wider window")
    row = {x: i for i, x in enumerate(universe)}
    lab_cells = np.zeros((n_lab, n_win), bool)
    for j in range(n_lab):
        lab_cells[j] = _overlap(lab.start[j], lab.end[j], w0, w1)
    al_cells = np.zeros((n_al, n_win), bool)
    for i in range(n_al):
        al_cells[i] = _overlap(al.start[i], al.end[i], w0, w1)
    truth = np.zeros((len(universe), n_win), bool)
    guess = np.zeros((len(universe), n_win), bool)
    for j in range(n_lab):
        truth[row[lab.comp[j]]] |= lab_cells[j]
    for i in range(n_al):
        guess[row[al.comp[i]]] |= al_cells[i]
    return _Cells(lab_cells, truth, guess, row)


def _window_counts(cells: _Cells) -> dict:
    """The confusion counts of the grid's cells (``win_tp, win_fp, win_fn, win_tn``,
    floats) and the point-adjusted true positives ``win_pa_tp``
    (:func:`point_adjusted_hits`, Xu et al. WWW'18: inflated by design)."""
    truth, guess = cells.truth, cells.guess
    return {
        "win_tp": float((truth & guess).sum()), "win_fp": float((~truth & guess).sum()),
        "win_fn": float((truth & ~guess).sum()), "win_tn": float((~truth & ~guess).sum()),
        "win_pa_tp": float(point_adjusted_hits(truth, guess)),
    }


def _detections(al: _AlarmArrays, lab: _LabelArrays, late_s: float) -> np.ndarray:
    """Event level without point-adjust: the (n_alarms, n_labels) bool matrix of an
    alarm overlapping a label of its own component; in replay with ``late_s`` > 0 (s)
    the label counts as lasting ``late_s`` longer (a late alarm still detects it)."""
    n_al, n_lab = len(al.start), len(lab.start)
    if not (n_al and n_lab):
        return np.zeros((n_al, n_lab), bool)
    same = al.comp[:, None] == lab.comp[None, :]
    a0, a1 = al.start[:, None], al.end[:, None]
    if al.replay and late_s > 0:
        return _overlap(a0, a1, lab.start[None, :], lab.end[None, :] + late_s) & same
    return _overlap(a0, a1, lab.start[None, :], lab.end[None, :]) & same


def _event_counts(detect: np.ndarray) -> dict:
    """From the (n_alarms, n_labels) detection matrix: ``n_alarms``, ``n_alarms_true``
    (alarms that detect a label), ``n_labels``, ``n_labels_recalled`` (floats)."""
    n_al, n_lab = detect.shape
    return {"n_alarms": float(n_al), "n_alarms_true": float(detect.any(axis=1).sum()),
            "n_labels": float(n_lab), "n_labels_recalled": float(detect.any(axis=0).sum())}


def _latencies(al: _AlarmArrays, lab: _LabelArrays, detect: np.ndarray) -> np.ndarray:
    """Timeliness (replay only): per label (n_labels,) s, ``max(0, first raise of an
    alarm detecting it - label start_ts)``; NaN for a label not detected and offline."""
    latency = np.full(len(lab.start), np.nan)
    if al.replay:
        for j in np.flatnonzero(detect.any(axis=0)):
            latency[j] = max(0.0, float(al.start[detect[:, j]].min() - lab.start[j]))
    return latency


def _range_stats(al: _AlarmArrays, lab: _LabelArrays) -> tuple[np.ndarray, dict]:
    """Range-based precision and recall (Tatbul et al., "Precision and Recall for Time
    Series", NeurIPS'18; :func:`range_scores`), per component: each label against the
    component's merged alarm ranges (recall alpha 0.2), each merged alarm range against
    the component's merged labels (precision alpha 0).

    Returns: the per-label range recall (n_labels,) in [0, 1] and the counts
    ``n_ranges``, ``range_precision_sum``, ``range_recall_sum`` (floats)."""
    l_c, l0, l1 = lab
    a_c, a0, a1 = al.comp, al.start, al.end
    range_rec = np.zeros(len(l0))
    n_ranges, precision_sum = 0.0, 0.0
    l_rows, a_rows, none = _rows_of(l_c), _rows_of(a_c), np.zeros(0, np.int64)
    for comp in sorted(set(l_rows) | set(a_rows)):  # sorted: the sum's order (and last digit) must not depend on str hashing
        li = l_rows.get(comp, none)
        ai = a_rows.get(comp, none)
        real = merge_intervals(l0[li], l1[li]) if len(li) else (np.zeros(0), np.zeros(0))
        pr = merge_intervals(a0[ai], a1[ai]) if len(ai) else (np.zeros(0), np.zeros(0))
        if len(li):  # per label (labels of a component rarely overlap; each scored on its own)
            range_rec[li] = range_scores((l0[li], l1[li]), pr, alpha=0.2)
        if len(pr[0]):
            n_ranges += len(pr[0])
            precision_sum += float(range_scores(pr, real, alpha=0.0).sum())
    return range_rec, {"n_ranges": n_ranges, "range_precision_sum": precision_sum, "range_recall_sum": float(range_rec.sum())}


def _localization(al: _AlarmArrays, lab: _LabelArrays, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Acc@1 and Acc@k credit per label (each (n_labels,), in [0, 1]): the components
    ranked by the largest score of their alarms overlapping the label (NaN scores
    lowest); ``clip((k - h) / t, 0, 1)`` with ``h`` components strictly higher and ``t``
    tied with the labeled one; 0 when the labeled component has no overlapping alarm."""
    n_lab = len(lab.start)
    acc1, acck = np.zeros(n_lab), np.zeros(n_lab)
    for j in range(n_lab):
        inside = _overlap(al.start, al.end, lab.start[j], lab.end[j]) if len(al.start) else np.zeros(0, bool)
        best: dict[str, float] = {}
        for cc, s in zip(al.comp[inside], al.score[inside]):
            s = float(s) if np.isfinite(s) else -np.inf
            best[cc] = max(best.get(cc, -np.inf), s)
        if lab.comp[j] not in best:
            continue
        s_l = best[lab.comp[j]]
        higher = sum(1 for v in best.values() if v > s_l)
        tied = sum(1 for v in best.values() if v == s_l)
        acc1[j] = float(np.clip((1 - higher) / tied, 0.0, 1.0))
        acck[j] = float(np.clip((k - higher) / tied, 0.0, 1.0))
    return acc1, acck


def _noise_counts(detect: np.ndarray, universe: list[str], span: tuple[float, float]) -> dict:
    """``false_alarms``: alarms that detect no label of their component;
    ``component_hours``: ``|U|`` x the run's span (h). Floats."""
    t0, t1 = span
    return {"false_alarms": float((~detect.any(axis=1)).sum()), "component_hours": len(universe) * max(0.0, t1 - t0) / 3600.0}


def _unmanifested_counts(al: _AlarmArrays, unmanifested: tuple[np.ndarray, np.ndarray, np.ndarray]) -> dict:
    """Faults that slowed nothing (``unmanifested_arrays``: component, start_ts, end_ts):
    ``n_unmanifested`` and ``unmanifested_alarmed``, those overlapped by an alarm of
    their component (a detector should not alarm on them). Floats."""
    u_c, u0, u1 = unmanifested
    out = {"n_unmanifested": 0.0, "unmanifested_alarmed": 0.0}
    if len(u0):
        out["n_unmanifested"] = float(len(u0))
        if len(al.start):
            hit = _overlap(al.start[:, None], al.end[:, None], u0[None, :], u1[None, :]) & (al.comp[:, None] == u_c[None, :])
            out["unmanifested_alarmed"] = float(hit.any(axis=0).sum())
    return out


def _curve_counts(scores: pd.DataFrame | None, universe: list[str], label_ranges: dict, vus_window: int) -> dict:
    """Threshold-free scores of the run's rank series (:func:`score_series`):
    ``auc_pr_sum`` (average precision, as scikit-learn's ``average_precision_score``)
    and ``vus_pr_sum`` (:func:`vus_pr`, Paparrizos et al. VLDB'22, as TSB-AD computes
    it, buffer up to ``vus_window`` points), with ``curve_runs`` 1; all 0 without
    scores or without a positive point."""
    out = {"curve_runs": 0.0, "auc_pr_sum": 0.0, "vus_pr_sum": 0.0}
    if scores is not None and len(scores):
        y, s = score_series(scores, None, universe, label_ranges=label_ranges)
        if y.any():
            out = {"curve_runs": 1.0, "auc_pr_sum": auc_pr(y, s), "vus_pr_sum": vus_pr(y, s, window=vus_window)}
    return out


def _per_label(prep: dict, lab: _LabelArrays, detect: np.ndarray, acc1: np.ndarray, acck: np.ndarray,
               range_rec: np.ndarray, latency: np.ndarray, cells: _Cells) -> pd.DataFrame:
    """One row per effect label: ``fault_type``, ``source`` and the :data:`LABEL_KEYS`
    (``recalled`` 0/1, ``acc1``, ``acck``, ``range_recall``, ``latency_s`` (s, NaN
    offline), ``win_pos``: its windows, ``win_hit``: those guessed for its component)."""
    win_pos = cells.label_cells.sum(axis=1).astype(float)
    win_hit = np.array([(cells.label_cells[j] & cells.guess[cells.row[lab.comp[j]]]).sum() for j in range(len(lab.start))], dtype=float)
    return pd.DataFrame({
        "fault_type": prep["fault_type"], "source": prep["source"], "recalled": detect.any(axis=0).astype(float), "acc1": acc1, "acck": acck,
        "range_recall": range_rec, "latency_s": latency, "win_pos": win_pos, "win_hit": win_hit,
    })


def run_stats(
    alarms: pd.DataFrame | None,
    labels: pd.DataFrame | None,
    components: Iterable[str] = (),
    run_span: tuple[float, float] | None = None,
    *,
    scores: pd.DataFrame | None = None,
    injections: pd.DataFrame | None = None,
    k: int = 3,
    window_s: float = 10.0,
    late_s: float = 0.0,
    vus_window: int = 10,
    prepared: dict | None = None,
) -> dict:
    """Sufficient statistics of one run (see the module docstring).

    The steps, in order: :func:`_alarm_arrays` (finite alarms; in replay each from its
    raise), :func:`_universe` and :func:`_span`, then one step per metric family:
    :func:`_component_counts`, :func:`_window_cells` / :func:`_window_counts`
    (component x window cells, point-adjusted hits), :func:`_detections` /
    :func:`_event_counts` (event level), :func:`_latencies`, :func:`_range_stats`
    (Tatbul), :func:`_localization` (Acc@k), :func:`_noise_counts` (false alarms),
    :func:`_unmanifested_counts`, :func:`_curve_counts` (AUC-PR, VUS-PR), and
    :func:`_per_label`.

    Args:
        alarms: ALARMS frame; with a ``raised_ts`` column (replay), each alarm counts
            from its raise and latency is measured. None = no alarms.
        labels: LABELS frame (component, start_ts, end_ts; source, cause, fault_id
            when present). None = no labels.
        components: every component that could be alarmed (``rank:N`` ..., ``job``).
        run_span: ``(t0, t1)`` unix s of the run (windows and component-hours); default
            the extent of labels and alarms.
        scores: the detector's continuous scores (component, ts, score) or None.
        injections: INJECTIONS frame, for each label's fault type.
        k: the k of Acc@k (>= 1). window_s: window length (s, > 0). late_s: replay
            tolerance after a label's end (s). vus_window: VUS buffer (points).
        prepared: :func:`prepare_labels` of ``labels`` and ``injections`` (when given,
            they are not re-derived: scoring several detectors on one run).

    Returns:
        ``{"counts": {COUNT_KEYS: float}, "labels": DataFrame(fault_type, source,
        LABEL_KEYS...), "latencies": ndarray (s)}``.

    Raises:
        BadInput when a frame misses a needed column, ``k < 1``, ``window_s <= 0``, a
        window that cuts the run into more than MAX_WINDOWS or a VUS buffer past MAX_VUS_WINDOW.
    """
    _check_settings(k, window_s, vus_window)
    al_checked = _check(alarms, "alarms", ["component", "start_ts", "end_ts", "score"])
    prep = prepared if prepared is not None else prepare_labels(labels, injections)
    al = _alarm_arrays(al_checked)
    lab = _LabelArrays(*prep["effect_arrays"])
    n_lab = len(lab.start) + len(prep["unmanifested_arrays"][1])  # _unmanifested_counts pairs those as well
    if len(al.start) * n_lab > MAX_DETECTION_PAIRS:
        raise BadInput(f"the run's {n_lab} label(s) and the detector's {len(al.start)} alarm(s) make more than "
                       f"{MAX_DETECTION_PAIRS} (alarm, label) pairs to compare", field="labels",
                       fix="score runs as faultlab labels them (a run's labels and a detector's alarms are some hundreds)")
    universe = _universe(components, al, lab)
    span = _span(run_span, al, lab)
    c = dict.fromkeys(COUNT_KEYS, 0.0)
    c.update(_component_counts(al, lab, universe))
    cells = _window_cells(al, lab, universe, _windows(*span, window_s))
    c.update(_window_counts(cells))
    detect = _detections(al, lab, late_s)
    c.update(_event_counts(detect))
    latency = _latencies(al, lab, detect)
    range_rec, range_counts = _range_stats(al, lab)
    c.update(range_counts)
    acc1, acck = _localization(al, lab, k)
    c["acc1_sum"], c["acck_sum"] = float(acc1.sum()), float(acck.sum())
    c.update(_noise_counts(detect, universe, span))
    c.update(_unmanifested_counts(al, prep["unmanifested_arrays"]))
    c.update(_curve_counts(scores, universe, prep["label_ranges"], vus_window))
    per_label = _per_label(prep, lab, detect, acc1, acck, range_rec, latency, cells)
    return {"counts": c, "labels": per_label, "latencies": latency[np.isfinite(latency)]}


def derive(c: dict, latencies: np.ndarray | None = None, k: int = 3) -> dict:
    """The metrics from pooled counts ``c`` (scalars, or numpy arrays for a bootstrap:
    every entry the same shape). ``latencies``: the pooled latencies (s) for the
    median and p95 (scalars only). Returns the metric dict (see the module docstring)."""
    m = {}
    m["precision"] = _div(c["comp_tp"], c["comp_tp"] + c["comp_fp"])
    m["recall"] = _div(c["comp_tp"], c["comp_tp"] + c["comp_fn"])
    m["f1"] = f1_of(m["precision"], m["recall"])
    m["mcc"] = mcc_of(c["comp_tp"], c["comp_fp"], c["comp_fn"], c["comp_tn"])
    m["window_precision"] = _div(c["win_tp"], c["win_tp"] + c["win_fp"])
    m["window_recall"] = _div(c["win_tp"], c["win_tp"] + c["win_fn"])
    m["window_f1"] = f1_of(m["window_precision"], m["window_recall"])
    m["window_mcc"] = mcc_of(c["win_tp"], c["win_fp"], c["win_fn"], c["win_tn"])
    # inflated on purpose, shown only beside the honest window F1 (module docstring)
    m["window_recall_point_adjusted"] = _div(c["win_pa_tp"], c["win_tp"] + c["win_fn"])
    m["window_f1_point_adjusted"] = f1_of(_div(c["win_pa_tp"], c["win_pa_tp"] + c["win_fp"]), m["window_recall_point_adjusted"])
    m["event_precision"] = _div(c["n_alarms_true"], c["n_alarms"])
    m["event_recall"] = _div(c["n_labels_recalled"], c["n_labels"])
    m["event_f1"] = f1_of(m["event_precision"], m["event_recall"])
    m["range_precision"] = _div(c["range_precision_sum"], c["n_ranges"])
    m["range_recall"] = _div(c["range_recall_sum"], c["n_labels"])
    m["range_f1"] = f1_of(m["range_precision"], m["range_recall"])
    m["acc_at_1"] = _div(c["acc1_sum"], c["n_labels"])
    m["acc_at_k"] = _div(c["acck_sum"], c["n_labels"])
    m["auc_pr"] = _div(c["auc_pr_sum"], c["curve_runs"])
    m["vus_pr"] = _div(c["vus_pr_sum"], c["curve_runs"])
    m["false_alarms_per_component_hour"] = _div(c["false_alarms"], c["component_hours"])
    m["unmanifested_alarmed_share"] = _div(c["unmanifested_alarmed"], c["n_unmanifested"])
    if latencies is not None:
        lat = np.asarray(latencies, dtype=float)
        m["latency_median_s"] = float(np.median(lat)) if lat.size else float("nan")
        m["latency_p95_s"] = float(np.percentile(lat, 95)) if lat.size else float("nan")
    return m


def score(
    alarms: pd.DataFrame | None,
    labels: pd.DataFrame | None,
    components: Iterable[str] = (),
    run_span: tuple[float, float] | None = None,
    *,
    k: int = 3,
    **kw,
) -> dict:
    """Every metric of one run (definitions in the module docstring): the keys of
    :func:`derive`, the counts (``tp, fp, fn, tn`` of the component level,
    ``n_alarms``, ``n_labels``, ...), ``n_components`` and ``k``. Keyword arguments
    as :func:`run_stats`. Raises BadInput as :func:`run_stats`."""
    st = run_stats(alarms, labels, components, run_span, k=k, **kw)
    c = st["counts"]
    m = derive(c, st["latencies"] if alarms is not None and "raised_ts" in alarms.columns else np.zeros(0), k=k)
    out = {**m, "tp": int(c["comp_tp"]), "fp": int(c["comp_fp"]), "fn": int(c["comp_fn"]), "tn": int(c["comp_tn"]),
           "n_components": int(c["comp_tp"] + c["comp_fp"] + c["comp_fn"] + c["comp_tn"]), "k": int(k),
           "n_alarms": int(c["n_alarms"]), "n_labels": int(c["n_labels"]), "n_alarms_true": int(c["n_alarms_true"]),
           "n_labels_recalled": int(c["n_labels_recalled"]), "false_alarms": int(c["false_alarms"]),
           "component_hours": c["component_hours"]}
    return out


def run_components(steps: pd.DataFrame | None, labels: pd.DataFrame | None = None) -> list[str]:
    """The component universe of a run: ``"rank:N"`` for every rank in ``steps``, the
    ``"job"``, and the components named by effect labels, sorted."""

    comps: set[str] = set()
    if steps is not None and len(steps):
        comps |= set(step_arrays(steps).rank_names())
        comps.add("job")
    comps |= set(text_values(effect_labels(labels)["component"]).tolist()) if labels is not None else set()
    return sorted(comps)
