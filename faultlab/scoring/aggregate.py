"""Pool per-run statistics into a dataset's figures, each with a 95% bootstrap
confidence interval over runs (Efron's percentile bootstrap: runs resampled with
replacement, ``n_boot`` times, the metric recomputed from the pooled counts of each
resample; the interval is the 2.5th..97.5th percentile), and break the label-side
figures down by fault type or label source.

The resampling is one multiplicity matrix ``C`` (resamples x runs) times the per-run
count matrix, so 1,000 resamples of 100 runs cost milliseconds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from faultlab.errors import BadInput
from faultlab.scoring.metrics import COUNT_KEYS, derive

#: label-side figures a breakdown can give (from per-label rows)
GROUP_METRICS = ("event_recall", "window_recall", "range_recall", "acc_at_1", "acc_at_k", "latency_median_s", "latency_p95_s")


#: cells (resamples x values) of one block of the weighted quantiles' running weights:
#: the resamples are taken a block at a time, so memory stays some 64 MiB (a block and
#: its running sum) however many latencies the runs' labels give (all the resamples at
#: once was resamples x latencies)
QUANTILE_BLOCK_CELLS = 1 << 22

#: groups a breakdown (``--by``) may have: a table row and a bootstrap each; a run's
#: labels name their own fault types (a label's cause), so without a bound a few MB of
#: labels asked for hundreds of thousands of rows of resamples
MAX_GROUPS = 256


def multiplicity(n_runs: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n_runs): how often each run is drawn in each resample (float counts).
    The same ``seed`` gives the same resamples: a paired comparison of two detectors
    scored on the same runs uses one matrix for both."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n_runs, size=(n_boot, n_runs))
    flat = (np.arange(n_boot)[:, None] * n_runs + idx).ravel()
    return np.bincount(flat, minlength=n_boot * n_runs).reshape(n_boot, n_runs).astype(np.float64)


def _wquantile(values: np.ndarray, run_of: np.ndarray, C: np.ndarray, q: float) -> np.ndarray:
    """Per resample, the ``q`` quantile (lower) of ``values`` weighted by their run's
    multiplicity; NaN for a resample without values."""
    if values.size == 0:
        return np.full(C.shape[0], np.nan)
    o = np.argsort(values, kind="mergesort")
    v, r = values[o], run_of[o]
    out = np.full(C.shape[0], np.nan)
    rows = max(1, QUANTILE_BLOCK_CELLS // len(v))
    for b0 in range(0, C.shape[0], rows):
        cw = np.cumsum(C[b0:b0 + rows, r], axis=1)  # each resample's running weight over the sorted values
        total = cw[:, -1]
        pos = (cw < (q * total)[:, None]).sum(axis=1)  # the first value whose running weight reaches q of the total
        block = out[b0:b0 + rows]
        has = total > 0
        block[has] = v[np.minimum(pos[has], len(v) - 1)]
    return out


def percentile_ci(samples: np.ndarray) -> list[float]:
    """The 2.5th..97.5th percentile of the finite ``samples`` ([nan, nan] when none is)."""
    s = np.asarray(samples, dtype=float)
    s = s[np.isfinite(s)]
    if s.size == 0:
        return [float("nan"), float("nan")]
    lo, hi = np.percentile(s, [2.5, 97.5])
    return [float(lo), float(hi)]


def _with_ci(point: dict, boot: dict) -> dict:
    return {m: {"value": float(v), "ci": percentile_ci(boot[m]) if m in boot else [float("nan")] * 2} for m, v in point.items()}


def _group_point(g: pd.DataFrame, replay: bool) -> dict:
    n = len(g)
    wp = g["win_pos"].sum()
    lat = g["latency_s"].dropna().to_numpy()
    out = {
        "event_recall": g["recalled"].sum() / n if n else np.nan,
        "window_recall": g["win_hit"].sum() / wp if wp else np.nan,
        "range_recall": g["range_recall"].sum() / n if n else np.nan,
        "acc_at_1": g["acc1"].sum() / n if n else np.nan,
        "acc_at_k": g["acck"].sum() / n if n else np.nan,
    }
    if replay:
        out["latency_median_s"] = float(np.median(lat)) if lat.size else np.nan
        out["latency_p95_s"] = float(np.percentile(lat, 95)) if lat.size else np.nan
    return out


def _group_boot(g: pd.DataFrame, n_runs: int, C: np.ndarray, replay: bool) -> dict:
    sums = np.zeros((n_runs, 6))
    cols = ["recalled", "win_hit", "win_pos", "range_recall", "acc1", "acck"]
    agg = g.groupby("run", sort=False)[cols].sum()
    sums[agg.index.to_numpy(), :] = agg.to_numpy()
    cnt = np.zeros(n_runs)
    vc = g["run"].value_counts()
    cnt[vc.index.to_numpy()] = vc.to_numpy()
    S = C @ sums
    N = C @ cnt
    with np.errstate(divide="ignore", invalid="ignore"):
        out = {
            "event_recall": S[:, 0] / N, "window_recall": S[:, 1] / S[:, 2], "range_recall": S[:, 3] / N,
            "acc_at_1": S[:, 4] / N, "acc_at_k": S[:, 5] / N,
        }
    if replay:
        lat = g.dropna(subset=["latency_s"])
        v, r = lat["latency_s"].to_numpy(float), lat["run"].to_numpy(int)
        out["latency_median_s"] = _wquantile(v, r, C, 0.5)
        out["latency_p95_s"] = _wquantile(v, r, C, 0.95)
    return out


def summarize(stats: list[dict], *, replay: bool, k: int = 3, by: str | None = None, n_boot: int = 1000, seed: int = 0) -> dict:
    """Pool runs' :func:`faultlab.scoring.metrics.run_stats` results.

    Args:
        stats: one run_stats result per run.
        replay: whether alarms carried their raise time (latency is reported only then).
        by: ``fault_type``, ``source`` or None: the label column of the breakdown.
        n_boot: bootstrap resamples (0: no intervals); seed: their seed. Fewer than 2
            runs have no interval over runs (``[nan, nan]``): a resample of one run
            is that run, and its zero-width "interval" would read as certainty.

    Returns:
        ``{"n_runs", "metrics": {name: {"value", "ci": [lo, hi]}}, "counts": pooled
        counts, "by": {group: {"n_labels", "metrics": {...}}}}``. A metric undefined on
        the data is NaN (None in JSON).

    Raises BadInput (``--by``) for a breakdown of more than :data:`MAX_GROUPS` groups.
    """
    R = len(stats)
    S = np.array([[st["counts"][key] for key in COUNT_KEYS] for st in stats], dtype=float).reshape(R, len(COUNT_KEYS))
    pooled = dict(zip(COUNT_KEYS, S.sum(axis=0))) if R else dict.fromkeys(COUNT_KEYS, 0.0)
    lat_v = np.concatenate([st["latencies"] for st in stats]) if R else np.zeros(0)
    lat_r = np.concatenate([np.full(len(st["latencies"]), i) for i, st in enumerate(stats)]).astype(int) if R else np.zeros(0, int)
    point = derive(pooled, lat_v if replay else None, k=k)
    if not replay:
        point["latency_median_s"] = point["latency_p95_s"] = float("nan")
    boot: dict = {}
    C = multiplicity(R, n_boot, seed) if R >= 2 and n_boot > 0 else None  # one run: every resample the same, no interval
    if C is not None:
        SB = C @ S
        boot = derive({key: SB[:, i] for i, key in enumerate(COUNT_KEYS)}, None, k=k)
        if replay:
            boot["latency_median_s"] = _wquantile(lat_v, lat_r, C, 0.5)
            boot["latency_p95_s"] = _wquantile(lat_v, lat_r, C, 0.95)
    out = {"n_runs": R, "metrics": _with_ci(point, boot), "counts": {k_: float(v) for k_, v in pooled.items()}, "by": {}}
    if by:
        frames = [st["labels"] for st in stats if len(st["labels"])]
        if frames:
            lab = pd.concat(frames, ignore_index=True)
            lab["run"] = np.repeat([i for i, st in enumerate(stats) if len(st["labels"])], [len(f) for f in frames])
        else:
            lab = pd.DataFrame(columns=[by, "run"])
        n_groups = lab[by].nunique()
        if n_groups > MAX_GROUPS:
            raise BadInput(f"the labels name {n_groups} {by} values, more than the {MAX_GROUPS} a breakdown may have", field="--by",
                           fix="score these labels with --by none or --by source")
        for key, g in lab.groupby(by, sort=True):
            gp = _group_point(g, replay)
            gb = _group_boot(g, R, C, replay) if C is not None else {}
            out["by"][str(key)] = {"n_labels": int(len(g)), "metrics": _with_ci(gp, gb)}
    return out
