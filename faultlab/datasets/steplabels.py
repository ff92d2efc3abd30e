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
    rank_comp = np.array([f"rank:{int(r)}" for r in st["rank"]], dtype=object)
    pick = np.full(len(st), -1)
    own = np.zeros(len(st), bool)
    if labels is not None and len(labels):
        s = labels["start_ts"].to_numpy(np.float64)
        e = labels["end_ts"].to_numpy(np.float64)
        s_step = pd.to_numeric(labels["start_step"]).to_numpy(np.float64, na_value=np.nan)
        e_step = pd.to_numeric(labels["end_step"]).to_numpy(np.float64, na_value=np.nan)
        step_no = st["step"].to_numpy(np.float64)
        comp = text_values(labels["component"])
        ok = np.isfinite(s) & np.isfinite(e)
        if "source" in labels.columns:
            ok &= text_values(labels["source"]) != UNMANIFESTED
        for k in np.argsort(s, kind="mergesort"):
            if not ok[k]:
                continue
            is_job = bool(comp[k] == "job")
            if np.isfinite(s_step[k]) and np.isfinite(e_step[k]):
                inside = (step_no >= s_step[k]) & (step_no <= e_step[k])
            else:
                inside = (ts >= s[k]) & (ts <= e[k])
            hit = inside & ((rank_comp == comp[k]) | is_job)
            # the rank's own label wins over a job label; earlier starts win among equals
            take = hit & ((pick < 0) | (~own if not is_job else np.zeros(len(st), bool)))
            pick[take] = k
            own[take] = not is_job
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
