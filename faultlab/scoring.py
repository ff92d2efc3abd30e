"""Score detector alarms against labels. Every metric is reported; none hides another.

Inputs: ``alarms`` (faultlab.schema.ALARMS: component, start_ts, end_ts [unix s],
score) and ``labels`` (faultlab.schema.LABELS). Only *effect* labels count: rows with
``source == "injected-unmanifested"`` (a fault that slowed nothing) are dropped.

Interval overlap (used everywhere below): ``[a0, a1]`` and ``[b0, b1]`` overlap when
their intersection has positive length (``max(a0, b0) < min(a1, b1)``), or, for a
zero-length interval (a point), when the point lies inside the other, ends included.

Metrics (keys of :func:`score`):

- **component level** over the universe ``U`` = ``components`` union the components
  of labels and alarms: a component is *positive* if a label names it, *predicted
  positive* if an alarm names it. ``tp, fp, fn, tn``; ``precision = tp/(tp+fp)``
  (NaN when nothing is alarmed), ``recall = tp/(tp+fn)`` (NaN when nothing is
  labeled), ``f1 = 2PR/(P+R)`` (NaN if P or R is NaN, 0 if both are 0), ``mcc =
  (tp tn - fp fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn))`` (0 when a factor is 0, the
  usual convention; NaN when U is empty).
- **localization** ``acc_at_1``, ``acc_at_k``: per label, the components are ranked by
  the largest score of their alarms overlapping the label's interval; the label
  counts 1 if its component is within the top k. Ties are credited by expectation
  under a random tie order: with ``h`` components strictly higher and ``t`` tied
  (the labeled one included), credit = ``clip((k - h) / t, 0, 1)`` (so a constant
  detector gets ``k / n``, not 1). A labeled component with no overlapping alarm
  counts 0. Mean over labels; NaN with no labels.
- **event level, without point-adjust**: ``event_precision`` = share of alarms that
  overlap a label of the same component (NaN with no alarms); ``event_recall`` = share
  of labels overlapped by an alarm of the same component (NaN with no labels). A long
  alarm does not earn credit for every point of a label: each alarm and each label
  counts once.
- **timeliness**: for each recalled label, ``delay = max(0, first start_ts of an
  overlapping same-component alarm - label start_ts)`` (seconds);
  ``onset_delay_median_s``, ``onset_delay_p95_s`` (linear interpolation); NaN when no
  label is recalled.
- **noise**: ``false_alarms_per_component_hour`` = alarms overlapping no label of
  their component / (``|U|`` x run span in hours); NaN when ``|U|`` or the span is 0.
  ``run_span`` defaults to the extent of labels and alarms together.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from faultlab.errors import BadInput

UNMANIFESTED = "injected-unmanifested"


def _overlap(a0, a1, b0, b1) -> np.ndarray:
    """Element-wise overlap test of intervals (broadcasting numpy arrays)."""
    a0, a1, b0, b1 = (np.asarray(x, dtype=np.float64) for x in (a0, a1, b0, b1))
    pos = np.maximum(a0, b0) < np.minimum(a1, b1)
    a_pt = (a0 == a1) & (b0 <= a0) & (a0 <= b1)
    b_pt = (b0 == b1) & (a0 <= b0) & (b0 <= a1)
    return pos | a_pt | b_pt


def effect_labels(labels: pd.DataFrame | None) -> pd.DataFrame:
    """Labels that describe a real slowdown: drops ``injected-unmanifested`` rows and
    rows without a finite start_ts/end_ts."""
    if labels is None or len(labels) == 0:
        return pd.DataFrame(columns=["component", "start_ts", "end_ts"])
    lab = labels
    if "source" in lab.columns:
        lab = lab[lab["source"].astype(str) != UNMANIFESTED]
    lab = lab[np.isfinite(lab["start_ts"].astype(float)) & np.isfinite(lab["end_ts"].astype(float))]
    return lab.reset_index(drop=True)


def _check(df: pd.DataFrame | None, name: str, cols: Sequence[str]) -> pd.DataFrame:
    missing = [] if df is None else [c for c in cols if c not in df.columns]
    if df is None or (len(df) == 0 and missing):
        return pd.DataFrame({c: pd.Series(dtype=object if c == "component" else "float64") for c in cols})
    if missing:
        raise BadInput(f"missing column(s) {', '.join(missing)}", field=name)
    return df


def _safe_div(a: float, b: float) -> float:
    return a / b if b else float("nan")


def score(
    alarms: pd.DataFrame | None,
    labels: pd.DataFrame | None,
    components: Iterable[str] = (),
    run_span: tuple[float, float] | None = None,
    *,
    k: int = 3,
) -> dict:
    """Score alarms against labels (definitions in the module docstring).

    Args:
        alarms: faultlab.schema.ALARMS frame (component, start_ts, end_ts [unix s],
            score); None or empty = no alarms.
        labels: faultlab.schema.LABELS frame (needs component, start_ts, end_ts;
            ``source`` is used when present); None or empty = no labels.
        components: every component that could be alarmed (e.g. ``"rank:0"`` ...);
            the universe is this plus the components of labels and alarms.
        run_span: ``(t0, t1)`` unix s, for false alarms per component-hour; default
            the extent of labels and alarms.
        k: the k of ``acc_at_k`` (>= 1).

    Returns:
        a dict of floats/ints: precision, recall, f1, mcc, tp, fp, fn, tn,
        n_components, acc_at_1, acc_at_k, k, event_precision, event_recall,
        n_alarms, n_labels, n_alarms_true, n_labels_recalled, onset_delay_median_s,
        onset_delay_p95_s, false_alarms, false_alarms_per_component_hour,
        component_hours. Undefined ratios are NaN (never an exception).

    Raises:
        BadInput when a frame misses a needed column or ``k < 1``.
    """
    if k < 1:
        raise BadInput(f"k must be >= 1, got {k}", field="k")
    al = _check(alarms, "alarms", ["component", "start_ts", "end_ts", "score"])
    lab = effect_labels(_check(labels, "labels", ["component", "start_ts", "end_ts"]))
    al = al[np.isfinite(al["start_ts"].astype(float)) & np.isfinite(al["end_ts"].astype(float))].reset_index(drop=True)

    a_c = al["component"].astype(str).to_numpy()
    a0 = al["start_ts"].to_numpy(dtype=np.float64)
    a1 = al["end_ts"].to_numpy(dtype=np.float64)
    a_s = al["score"].to_numpy(dtype=np.float64)
    l_c = lab["component"].astype(str).to_numpy()
    l0 = lab["start_ts"].to_numpy(dtype=np.float64)
    l1 = lab["end_ts"].to_numpy(dtype=np.float64)

    # -- component level ------------------------------------------------------------
    universe = set(map(str, components)) | set(l_c.tolist()) | set(a_c.tolist())
    pos, pred = set(l_c.tolist()), set(a_c.tolist())
    tp = len(pos & pred)
    fp = len(pred - pos)
    fn = len(pos - pred)
    tn = len(universe) - tp - fp - fn
    precision = _safe_div(tp, tp + fp)
    recall = _safe_div(tp, tp + fn)
    if math.isnan(precision) or math.isnan(recall):
        f1 = float("nan")
    else:
        f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    if not universe:
        mcc = float("nan")
    else:
        den = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
        mcc = (tp * tn - fp * fn) / math.sqrt(den) if den else 0.0

    # -- event level: overlap matrix [alarm, label] of the same component ------------
    if len(al) and len(lab):
        ov = _overlap(a0[:, None], a1[:, None], l0[None, :], l1[None, :]) & (a_c[:, None] == l_c[None, :])
    else:
        ov = np.zeros((len(al), len(lab)), dtype=bool)
    alarm_true = ov.any(axis=1)
    label_hit = ov.any(axis=0)
    event_precision = _safe_div(float(alarm_true.sum()), len(al))
    event_recall = _safe_div(float(label_hit.sum()), len(lab))

    # -- timeliness -------------------------------------------------------------------
    delays = []
    for j in np.flatnonzero(label_hit):
        first = a0[ov[:, j]].min()
        delays.append(max(0.0, float(first - l0[j])))
    if delays:
        d = np.asarray(delays)
        delay_med, delay_p95 = float(np.median(d)), float(np.percentile(d, 95))
    else:
        delay_med = delay_p95 = float("nan")

    # -- localization -------------------------------------------------------------------
    def acc(kk: int) -> float:
        if len(lab) == 0:
            return float("nan")
        credits = []
        for j in range(len(lab)):
            if len(al):
                inside = _overlap(a0, a1, l0[j], l1[j])
            else:
                inside = np.zeros(0, dtype=bool)
            best: dict[str, float] = {}
            for c, s in zip(a_c[inside], a_s[inside]):
                s = float(s) if np.isfinite(s) else -np.inf
                best[c] = max(best.get(c, -np.inf), s)
            if l_c[j] not in best:
                credits.append(0.0)
                continue
            s_l = best[l_c[j]]
            higher = sum(1 for v in best.values() if v > s_l)
            tied = sum(1 for v in best.values() if v == s_l)
            credits.append(float(np.clip((kk - higher) / tied, 0.0, 1.0)))
        return float(np.mean(credits))

    # -- noise ----------------------------------------------------------------------------
    if run_span is None:
        starts = np.concatenate([a0, l0])
        ends = np.concatenate([a1, l1])
        run_span = (float(starts.min()), float(ends.max())) if starts.size else (0.0, 0.0)
    span_h = max(0.0, float(run_span[1]) - float(run_span[0])) / 3600.0
    comp_hours = len(universe) * span_h
    false_alarms = int((~alarm_true).sum())
    fa_rate = false_alarms / comp_hours if comp_hours > 0 else float("nan")

    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "mcc": mcc,
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": tn,
        "n_components": len(universe),
        "acc_at_1": acc(1),
        "acc_at_k": acc(k),
        "k": int(k),
        "event_precision": event_precision,
        "event_recall": event_recall,
        "n_alarms": int(len(al)),
        "n_labels": int(len(lab)),
        "n_alarms_true": int(alarm_true.sum()),
        "n_labels_recalled": int(label_hit.sum()),
        "onset_delay_median_s": delay_med,
        "onset_delay_p95_s": delay_p95,
        "false_alarms": false_alarms,
        "false_alarms_per_component_hour": fa_rate,
        "component_hours": comp_hours,
    }


def run_components(steps: pd.DataFrame | None, labels: pd.DataFrame | None = None) -> list[str]:
    """The component universe of a run: ``"rank:N"`` for every rank in ``steps`` plus
    the components named by effect labels (e.g. ``"job"``), sorted."""
    comps: set[str] = set()
    if steps is not None and len(steps):
        comps |= {f"rank:{int(r)}" for r in pd.unique(steps["rank"])}
    comps |= set(effect_labels(labels)["component"].astype(str).tolist()) if labels is not None else set()
    return sorted(comps)


def score_table(
    steps: pd.DataFrame,
    host: pd.DataFrame | None,
    labels: pd.DataFrame,
    detector_names: str | Sequence[str],
    *,
    k: int = 3,
    seed: int = 0,
) -> pd.DataFrame:
    """Run detectors on one run's telemetry and score each against ``labels``.

    The ``random`` (seeded with ``seed``) and ``constant`` baselines are always added
    (once each), to expose inflated metrics. The universe is :func:`run_components`;
    ``run_span`` is the steps' extent (first ``t_start`` to last ``t_start + step_s``,
    unix s).

    Args:
        steps, host: the run's telemetry (faultlab.schema.STEPS / HOST; host may be
            None or empty).
        labels: the run's labels (faultlab.schema.LABELS).
        detector_names: one name or a list, resolved by
            :func:`faultlab.detectors.load_detector`.

    Returns:
        a DataFrame, one row per detector (column ``detector`` first, then the keys
        of :func:`score`), in the order given, baselines last.

    Raises:
        BadInput for an unknown detector or a malformed table.
    """
    from faultlab import schema
    from faultlab.detectors import load_detector

    if isinstance(detector_names, str):
        detector_names = [detector_names]
    names: list[str] = []
    for n in list(detector_names) + ["random", "constant"]:
        if n not in names:
            names.append(n)
    if host is None:
        host = schema.empty("host")
    comps = run_components(steps, labels)
    if steps is not None and len(steps):
        span = (float(steps["t_start"].min()), float((steps["t_start"] + steps["step_s"]).max()))
    else:
        span = None
    rows = []
    for n in names:
        det = load_detector(n, seed=seed) if n == "random" else load_detector(n)
        alarms = det.detect(steps, host)
        rows.append({"detector": n, **score(alarms, labels, comps, span, k=k)})
    return pd.DataFrame(rows)
