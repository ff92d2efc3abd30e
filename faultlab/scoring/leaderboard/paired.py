"""The paired bootstrap over runs: is detector A better than detector B on the same
runs?

Both detectors' per-run counts (runs x ``COUNT_KEYS``, same run order) are pooled
over the *same* resamples of runs (one multiplicity matrix,
:func:`faultlab.scoring.aggregate.multiplicity`, the one the CIs use), and the metric's
difference A - B is taken within each resample. Runs that are hard for both move both
figures together, so the difference's interval is much narrower than the two
detectors' own intervals suggest (Efron & Tibshirani, *An Introduction to the
Bootstrap*, ch. 16; Koehn 2004 for paired bootstrap significance of rankings). A is
*better* when the 95% interval of the difference lies above 0.
"""

from __future__ import annotations

import math

import numpy as np

from faultlab.errors import BadInput
from faultlab.scoring.aggregate import multiplicity, percentile_ci
from faultlab.scoring.metrics import COUNT_KEYS, derive


def _metric(counts: np.ndarray, metric: str, k: int):
    """``metric`` from pooled counts: a row (one value) or a matrix (one per row)."""
    cols = np.atleast_2d(counts)
    out = derive({key: cols[:, i] for i, key in enumerate(COUNT_KEYS)}, None, k=k)[metric]
    return np.asarray(out, dtype=float)


def paired_difference(a: np.ndarray, b: np.ndarray, metric: str = "window_mcc", *, n_boot: int = 1000, seed: int = 0,
                      k: int = 3) -> dict:
    """The paired bootstrap of ``metric`` between two detectors scored on the same runs.

    Args:
        a, b: (runs, ``len(COUNT_KEYS)``) per-run counts
            (:attr:`faultlab.scoring.api.ScoreResult.run_counts`), rows in the same run
            order. metric: a count-derived metric (``window_mcc``, ``event_f1`` ...).
        n_boot: resamples (0: no interval, never ``better``); seed: theirs.

    Returns:
        ``{"metric", "diff": A - B on all runs, "ci": [lo, hi] of the paired
        differences, "better": lo > 0}`` (NaN diff or CI when the metric is undefined).

    Raises:
        BadInput when the two have different numbers of runs or columns, or the metric
        is not derived from counts.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 2 or a.shape[1] != len(COUNT_KEYS):
        raise BadInput(f"per-run counts of shapes {a.shape} and {b.shape} cannot be paired", field="run_counts",
                       fix=f"score both detectors on the same runs: (runs, {len(COUNT_KEYS)}) each")
    if metric not in derive(dict.fromkeys(COUNT_KEYS, 1.0), None, k=k):
        raise BadInput(f"{metric!r} is not derived from counts", field="metric", fix="e.g. window_mcc, event_f1")
    diff = float(_metric(a.sum(axis=0), metric, k)[0] - _metric(b.sum(axis=0), metric, k)[0])
    if n_boot <= 0 or a.shape[0] == 0:
        return {"metric": metric, "diff": diff, "ci": [math.nan, math.nan], "better": False}
    C = multiplicity(a.shape[0], n_boot, seed)
    ci = percentile_ci(_metric(C @ a, metric, k) - _metric(C @ b, metric, k))
    return {"metric": metric, "diff": diff, "ci": ci, "better": bool(ci[0] > 0)}
