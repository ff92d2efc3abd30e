"""Per-step labels of a dataset: ``is_straggler`` per rank and step, and the label it
comes from, beside the interval table (``labels``), so users need not join intervals
to steps themselves.

Rule (the TimeEval and TSB-AD exports read these rows): rank r's step is straggling
when an *effect* label (``source`` injected or observed; an ``injected-unmanifested``
row slowed nothing) of ``rank:r`` or of ``job`` covers it: ``start_step <= step <=
end_step``, or for a label without steps (an imported trace's) ``start_ts <= t_start
<= end_ts``. Its ``label_id``
is that label's (the rank's own before a ``job`` label, then the earliest start);
null when the step is not straggling.

``label_id`` is ``RUN_ID#K``, K the label's row (0-based) in the run's labels in the
labeler's order (start_ts, component, source); the dataset's ``labels`` table carries
the same id in its own ``label_id`` column.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from faultlab import schema
from faultlab.rundata import UNMANIFESTED, text_values

#: the per-step labels table of a dataset
STEP_LABELS = pa.schema([
    ("run_id", pa.string()),
    ("rank", pa.int32()),
    ("step", pa.int64()),
    ("t_start", pa.float64()),
    ("is_straggler", pa.bool_()),
    ("label_id", pa.string()),
    ("component", pa.string()),
    ("cause", pa.string()),
])

#: the dataset's labels table: faultlab.schema.LABELS and the label's id
DATASET_LABELS = schema.LABELS.append(pa.field("label_id", pa.string()))


def with_label_ids(labels: pd.DataFrame, run_id: str) -> pd.DataFrame:
    """``labels`` (one run's, LABELS columns) with ``label_id`` = ``RUN_ID#K`` by row."""
    return labels.reset_index(drop=True).assign(label_id=[f"{run_id}#{k}" for k in range(len(labels))])


def step_labels(steps: pd.DataFrame, labels: pd.DataFrame, run_id: str) -> pd.DataFrame:
    """One row per rank and step of ``steps`` (STEPS columns) with ``is_straggler``,
    ``label_id``, ``component`` and ``cause`` of the label it comes from (the module
    docstring's rule); ``labels`` carries ``label_id`` (:func:`with_label_ids`).
    Returns a frame of STEP_LABELS columns, sorted by rank and step (empty for no
    steps)."""
    if steps is None or len(steps) == 0:
        return STEP_LABELS.empty_table().to_pandas()
    st = steps.sort_values(["rank", "step"], kind="mergesort").reset_index(drop=True)
    ts = st["t_start"].to_numpy(np.float64)
    pick = _pick(st, ts, labels) if labels is not None and len(labels) else np.full(len(st), -1)
    yes = pick >= 0
    idx = np.where(yes, pick, 0)

    def col(name: str) -> np.ndarray:
        if labels is None or len(labels) == 0:
            return np.full(len(st), None, dtype=object)
        v = labels[name].astype(object).to_numpy()[idx]
        return np.where(yes, v, None)

    return pd.DataFrame({
        "run_id": run_id, "rank": st["rank"].astype("int32"), "step": st["step"].astype("int64"), "t_start": ts,
        "is_straggler": yes, "label_id": col("label_id"), "component": col("component"), "cause": col("cause"),
    })


def _pick(st: pd.DataFrame, ts: np.ndarray, labels: pd.DataFrame) -> np.ndarray:
    """Each step row's label (its row in ``labels``), -1 for none: the earliest-starting
    effect label of the row's own rank that covers it, else the earliest-starting
    ``job`` label that does (the module docstring's rule). ``st`` is sorted by rank and
    step. Each label paints the rows of its range not painted yet (:class:`_Painter`):
    the labels and the steps are both the run's to state, and a test of every step
    against every label cost steps x labels (20,000 of each 3 CPU s, 200,000 of each
    some 5 minutes)."""
    s = labels["start_ts"].to_numpy(np.float64)
    e = labels["end_ts"].to_numpy(np.float64)
    s_step = pd.to_numeric(labels["start_step"]).to_numpy(np.float64, na_value=np.nan)
    e_step = pd.to_numeric(labels["end_step"]).to_numpy(np.float64, na_value=np.nan)
    step_no = st["step"].to_numpy(np.float64)
    comp = text_values(labels["component"])
    ok = np.isfinite(s) & np.isfinite(e)
    if "source" in labels.columns:
        ok &= text_values(labels["source"]) != UNMANIFESTED
    rank = st["rank"].to_numpy()
    bounds = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1], True])
    block = {f"rank:{int(rank[lo])}": np.arange(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])}
    everyone = np.arange(len(st))
    pick = np.full(len(st), -1)
    order = [k for k in np.argsort(s, kind="mergesort").tolist() if ok[k]]
    painters: dict = {}
    # a rank's own labels first, then job labels on the rows still unpainted: the
    # rank's own label wins over a job label, the earliest start among equals
    for job in (False, True):
        for k in order:
            if (comp[k] == "job") != job:
                continue
            rows = everyone if job else block.get(comp[k])
            if rows is None:
                continue
            by_step = bool(np.isfinite(s_step[k]) and np.isfinite(e_step[k]))
            key = (comp[k], by_step)
            if key not in painters:
                painters[key] = _Painter(rows, step_no[rows] if by_step else ts[rows])
            painters[key].paint(s_step[k] if by_step else s[k], e_step[k] if by_step else e[k], pick, k)
    return pick


class _Painter:
    """Rows of the steps table in the order of a key (their step or their ``t_start``),
    each visited at most once: painting the rows whose key is within ``[lo, hi]`` skips
    the rows visited already (a path-compressed pointer to the next unvisited one), so
    L ranges over C rows cost C + L steps and L binary searches, never C x L. A row is
    given the label only when no label has it yet (another painter of the same rows, a
    rank's step or time order, may have painted it first)."""

    def __init__(self, rows: np.ndarray, keys: np.ndarray):
        o = np.argsort(keys, kind="mergesort")  # NaN last: never within a range
        self.rows, self.keys = rows[o], keys[o]
        self.next = list(range(len(rows) + 1))

    def _find(self, i: int) -> int:
        root = i
        while self.next[root] != root:
            root = self.next[root]
        while self.next[i] != root:
            self.next[i], i = root, self.next[i]
        return root

    def paint(self, lo: float, hi: float, pick: np.ndarray, label: int) -> None:
        i = self._find(int(np.searchsorted(self.keys, lo, side="left")))
        end = int(np.searchsorted(self.keys, hi, side="right"))
        while i < end:
            r = self.rows[i]
            if pick[r] < 0:
                pick[r] = label
            self.next[i] = i + 1
            i = self._find(i + 1)
