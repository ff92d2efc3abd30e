"""Labels of a long-format metric from its views: a component slow against its peers
(:func:`peer_labels`), a peer group slowed as a whole (:func:`group_labels`), a
component slow against its own history where its peers do not tell
(:func:`own_history_labels`), through the labeler's interval rules and label rows
(:class:`LabelSink`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from faultlab.labeler.importers.long.config import LongConfig
from faultlab.labeler.importers.long.grid import LongGrid, LongPeer, LongTemporal
from faultlab.labeler.intervals import dilate, intervals
from faultlab.labeler.labelrows import empty_labels, label_confidence, label_row, typed_labels
from faultlab.labeler.stats import median, median_ratio, nanmedian


class LabelSink:
    """The label rows of one metric's grid: :meth:`intervals` turns a (T,) flag column
    into sample intervals, :meth:`add` appends one LABELS row to ``rows``."""

    def __init__(self, run_id: str, grid: LongGrid, lc, rows: list[dict]) -> None:
        self.run_id, self.grid, self.lc, self.rows = run_id, grid, lc, rows
        self.t0, self.t1 = grid.t0, grid.t1

    def intervals(self, flags: np.ndarray) -> list[tuple[int, int]]:
        """Inclusive ``(i0, i1)`` sample intervals of ``flags`` ((T,) bool;
        :func:`faultlab.labeler.intervals.intervals` with ``gap_steps``, ``min_steps``,
        ``gap_s``, ``min_duration_s``)."""
        lc = self.lc
        return intervals(flags, lc.gap_steps, lc.min_steps, t0=self.t0, t1=self.t1, gap_s=lc.gap_s,
                         min_s=lc.min_duration_s)

    def add(self, component: str, kind: str, i0: int, i1: int, slowdown: float, views: str, thr: float, n_flag,
            ev: dict) -> None:
        """One label of samples ``i0..i1``: ``start_ts`` = t0[i0], ``end_ts`` = t1[i1]
        (unix s), ``evidence`` = ``ev`` and the metric, sample counts, threshold and
        ``relative_to_load``."""
        lc = self.lc
        n = i1 - i0 + 1
        ev.update({"metric": self.grid.metric, "n_samples": n, "n_flagged": int(n_flag), "threshold": thr,
                   "relative_to_load": self.grid.at_load})
        self.rows.append(label_row(self.run_id, component, kind, self.t0[i0], self.t1[i1], pd.NA, pd.NA, slowdown,
                                   views, label_confidence(float(slowdown), thr, n, lc.min_steps, views), ev))


def peer_labels(grid: LongGrid, peer: LongPeer, temporal: LongTemporal, lc, sink: LabelSink) -> np.ndarray:
    """Label step 1: components slow against their peers. Each interval of a
    component's peer flags is a label (``views`` ``"temporal+peer"`` when its temporal
    flags agree, else ``"peer"``; ``slowdown`` = median peer ratio) when ``slowdown >=
    min_slowdown``. Returns (T, C) bool: the samples in any peer interval (labeled or
    not), which step 3 leaves alone."""
    X, ratio = grid.X, peer.ratio
    labeled = np.zeros(X.shape, dtype=bool)
    for j in range(X.shape[1]):
        for i0, i1 in sink.intervals(peer.flag[:, j]):
            sl = slice(i0, i1 + 1)
            r = median(ratio[sl, j])
            views = "temporal+peer" if temporal.flag[sl, j].any() else "peer"
            labeled[sl, j] = True
            if r >= lc.min_slowdown:
                sink.add(str(grid.names[j]), "component", i0, i1, r, views, lc.peer_threshold, peer.flag[sl, j].sum(),
                         {"peer_group": str(grid.groups[j]), "peer_ratio": r, "peer_median": median(peer.med[sl, j]),
                          "median_value": median(X[sl, j]), "temporal_ratio": median(temporal.ratio[sl, j])})
    return labeled


def group_labels(grid: LongGrid, temporal: LongTemporal, cfg: LongConfig, sink: LabelSink) -> np.ndarray:
    """Label step 2: a whole group slowed against its own history.

    Where at least ``group_wide_fraction`` of a group's present components (and at least
    ``peer_min_ranks``) are up against their own history, an interval is a
    ``group:NAME`` label (``component_kind`` ``"peer_group"``, ``views`` ``"temporal"``;
    ``slowdown`` = the group's median value / the higher of its median baseline and its
    typical level) when ``slowdown >= min_slowdown``. Returns (T, C) bool: the
    group-wide samples of each component's group, which step 3 leaves alone."""
    lc = cfg.labeler
    X, base = grid.X, temporal.base
    gw = np.zeros(X.shape, dtype=bool)
    for g, cols in grid.group_columns():
        present = np.sum(~np.isnan(X[:, cols]), axis=1)
        up = np.sum(temporal.flag[:, cols], axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            wide = (present >= lc.peer_min_ranks) & (up >= cfg.group_wide_fraction * present) & (up > 0)
        gw[:, cols] = wide[:, None]
        gm_now, _ = nanmedian(X[:, cols], axis=1)
        gm_base, _ = nanmedian(base[:, cols], axis=1)
        g_typical = median(gm_now)
        for i0, i1 in sink.intervals(wide):
            sl = slice(i0, i1 + 1)
            r = median_ratio(gm_now[sl], [np.nanmax([median(gm_base[sl]), g_typical])])
            if np.isfinite(r) and r >= lc.min_slowdown:
                sink.add(f"group:{g}", "peer_group", i0, i1, r, "temporal", lc.temporal_threshold, wide[sl].sum(),
                         {"peer_group": str(g), "n_components": int(len(cols)), "median_value": median(gm_now[sl]),
                          "baseline": median(gm_base[sl])})
    return gw


def own_history_labels(grid: LongGrid, peer: LongPeer, temporal: LongTemporal, taken: np.ndarray, lc,
                       sink: LabelSink) -> None:
    """Label step 3: a component slow against its own history only: its temporal
    flags outside ``taken`` ((T, C) bool, the samples of steps 1 and 2, dilated by
    ``gap_steps``).

    The reference is the higher of its trailing baseline and its typical level over the
    whole input (a value coming back to normal after an unusually fast period is no
    slowdown); a label (``views`` ``"temporal"``) when median value / reference ``>=
    min_slowdown``."""
    X, base, tflag = grid.X, temporal.base, temporal.flag
    typical, _ = nanmedian(X, axis=0)
    for j in range(X.shape[1]):
        free = tflag[:, j] & ~dilate(taken[:, j], lc.gap_steps)
        for i0, i1 in sink.intervals(free):
            sl = slice(i0, i1 + 1)
            ref = np.nanmax([median(base[sl, j]), typical[j]])
            r = median_ratio(X[sl, j], [ref])
            if np.isfinite(r) and r >= lc.min_slowdown:
                sink.add(str(grid.names[j]), "component", i0, i1, r, "temporal", lc.temporal_threshold,
                         tflag[sl, j].sum(),
                         {"peer_group": str(grid.groups[j]), "baseline": ref, "trailing_baseline": median(base[sl, j]),
                          "typical_value": float(typical[j]), "median_value": median(X[sl, j]),
                          "peer_ratio": median(peer.ratio[sl, j])})


def labels_frame(rows: list[dict]) -> pd.DataFrame:
    """The LABELS frame of the label rows, sorted by ``start_ts``, ``component``
    (stable); the empty LABELS frame for none."""
    if rows:
        frame = pd.DataFrame(rows).sort_values(["start_ts", "component"], kind="mergesort")
        return typed_labels(frame.reset_index(drop=True))
    return empty_labels()
