"""``iaso``: IASO's peer-based fail-slow score, ported from storage nodes to ranks.

Paper: Biswaranjan Panda, Deepthi Srinivasan, Huan Ke, Karan Gupta, Vinayak Khot,
Haryadi S. Gunawi, "IASO: A Fail-Slow Detection and Mitigation Framework for
Distributed Storage Services", USENIX ATC 2019. IASO judges a node by how its peers
experience it: a node much slower than its peers accumulates a fail-slow score, the
score is bounded, and a node is reported when its score stays high over a window
rather than on one slow response.

Port (nodes -> ranks): a rank's peers are the ranks of its peer group at the same
step. Per step, its slowdown ``r = value / median(peer group's values) - 1`` where
the value is its local time (``compute_s + dataloader_s``); its score is
multiplicative, ``score = clamp(score_prev * (1 + r), 1, 100)`` (it grows while the
rank is slower than its peers and shrinks back towards 1 while it is faster); per
window of ``window_s`` seconds, the ``percentile`` of the rank's step scores is its
window score, and a window score of at least ``threshold`` is an alarm on that rank
for that window (score = the window score). A job slowed as a whole leaves every
ratio near 0: IASO is blind to it by design (peers are the reference).

Signals read: ``steps`` (``compute_s``, ``dataloader_s``, ``peer_group``). Replay:
the base class's re-run on what the clock has shown (the score of a step depends on
earlier steps only).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from faultlab.scoring.detectors import as_alarms, empty_alarms
from faultlab.scoring.published.params import Param, PublishedDetector, params_doc
from faultlab.scoring.steparrays import memo
from faultlab.steps import dense_steps

PARAMS = (
    Param("score_min", 1.0, "score", "paper: the score's floor", "the score's lower clamp", lambda v: v > 0),
    Param("score_max", 100.0, "score", "paper: the score's ceiling", "the score's upper clamp", lambda v: v > 0),
    Param("percentile", 50.0, "percent",
          "ours, the paper's number not found: the window's median step score, so a rank must stay slow for half the "
          "window, IASO's 'high over a window, not on one slow response'", "percentile of the step scores in a window",
          lambda v: 0 <= v <= 100),
    Param("threshold", 10.0, "score",
          "ours, the paper's number not found: a tenth of the ceiling, reached by a rank 10% slower than its peers for "
          "~25 steps in a row (1.1^25) or 2x slower for ~4", "a window score at least this is an alarm", lambda v: v > 0),
    Param("window_s", 10.0, "s", "ours: faultlab's scoring window, so each scored cell gets one window score",
          "window length", lambda v: v > 0),
)
__doc__ += params_doc(PARAMS)


def peer_ratio(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """``values`` (S x R) over the median of the rank's peer group at the same step,
    minus 1 (S x R; NaN where a value or the median is missing or not positive)."""
    out = np.full(values.shape, np.nan)
    for g in np.unique(groups.astype(str)):
        cols = groups.astype(str) == g
        with np.errstate(all="ignore"):
            med = np.nanmedian(values[:, cols], axis=1, keepdims=True) if values[:, cols].size else None
            if med is not None:
                out[:, cols] = np.where(med > 0, values[:, cols] / med - 1.0, np.nan)
    return out


def multiplicative_score(ratio: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Per rank (columns of ``ratio``, S x R), ``score_t = clamp(score_{t-1} * (1 +
    ratio_t), lo, hi)`` from ``lo``; a NaN ratio leaves the score as it was."""
    score = np.full(ratio.shape[1], lo)
    out = np.empty_like(ratio)
    for t in range(ratio.shape[0]):
        r = ratio[t]
        score = np.where(np.isfinite(r), np.clip(score * (1.0 + np.nan_to_num(r)), lo, hi), score)
        out[t] = score
    return out


class IasoDetector(PublishedDetector):
    """IASO (ATC'19) peer-ratio fail-slow score ported to ranks (see the module)."""

    name = "iaso"
    PARAMS = PARAMS

    def __init__(self, **values):
        super().__init__(**values)
        if self.score_max < self.score_min:
            raise ValueError(f"score_max ({self.score_max}) must be at least score_min ({self.score_min})")

    def _frame(self, steps: pd.DataFrame):
        d = dense_steps(steps)
        score = multiplicative_score(peer_ratio(d.compute, d.groups), self.score_min, self.score_max)
        return d, score

    def _memo(self, steps):
        return memo(self, "iaso", steps, lambda: self._frame(steps))

    def detect(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        if steps is None or len(steps) == 0:
            return empty_alarms()
        d, score = self._memo(steps)
        t0 = d.t_start
        t1 = d.t_start + d.step_s
        start = np.nanmin(t0)
        win = np.floor((t0 - start) / self.window_s)
        rows = []
        for j, rank in enumerate(d.ranks):
            ok = np.isfinite(t0[:, j])
            for w in np.unique(win[ok, j]):
                m = ok & (win[:, j] == w)
                p = float(np.percentile(score[m, j], self.percentile))
                if p >= self.threshold:
                    rows.append((f"rank:{int(rank)}", float(np.min(t0[m, j])), float(np.max(t1[m, j])), p))
        if not rows:
            return empty_alarms()
        return as_alarms(pd.DataFrame(rows, columns=["component", "start_ts", "end_ts", "score"]))

    def scores(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        d, score = self._memo(steps)
        ok = np.isfinite(d.t_start)
        comp = np.broadcast_to(np.array([f"rank:{int(r)}" for r in d.ranks], dtype=object), d.t_start.shape)
        return pd.DataFrame({"component": comp[ok], "ts": d.t_start[ok], "score": score[ok]})
