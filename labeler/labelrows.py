"""Label rows as every labeler and importer writes them: one ``observed`` label
(:func:`label_row`, :func:`grid_row` for grid steps), its confidence
(:func:`label_confidence`), its evidence as deterministic JSON (:func:`evidence_json`),
and the labels frame in faultlab.schema.LABELS dtypes (:func:`typed_labels`).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from faultlab import schema
from faultlab.labeler.grid import StepGrid


def label_confidence(ratio: float, threshold: float, n: int, min_len: int, views: str) -> float:
    """Confidence in 0..1: margin x duration x view agreement.

    margin = clip((ratio - 1) / (2 (threshold - 1)), 0, 1): 0.5 at the threshold, 1 at
    twice the excess; duration = n / (n + min_len): 0.5 at the minimum duration;
    agreement = 1.0 for "temporal+peer", 0.8 for a single view.
    """
    if not np.isfinite(ratio):
        return 0.0
    margin = float(np.clip((ratio - 1.0) / (2.0 * max(threshold - 1.0, 1e-9)), 0.0, 1.0))
    duration = n / (n + min_len)
    agree = 1.0 if "+" in views else 0.8
    return round(margin * duration * agree, 6)


def jsonable(x):
    """JSON-safe value (:func:`faultlab.schema.json_safe`: NaN/inf -> None, numpy
    scalars to Python), floats rounded to 9 decimals."""
    x = schema.json_safe(x)
    if isinstance(x, float):
        return round(x, 9)
    if isinstance(x, list):
        return [jsonable(v) for v in x]
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    return x


def evidence_json(ev: dict) -> str:
    """Deterministic JSON of an evidence dict (sorted keys, NaN -> null)."""
    return json.dumps({k: jsonable(v) for k, v in ev.items()}, sort_keys=True)


def label_row(run_id: str, component: str, kind: str, start_ts: float, end_ts: float, start_step, end_step,
              slowdown: float, views: str, confidence: float, ev: dict) -> dict:
    """One ``observed`` label (faultlab.schema.LABELS fields) as a dict: times unix s,
    steps int or ``pd.NA``, ``slowdown`` a ratio, ``confidence`` 0..1, ``ev`` the
    evidence (written as deterministic JSON). ``fault_id``/``source``/``cause`` are
    set later by reconciliation. Used by the run labeler and every importer."""
    return {
        "run_id": run_id,
        "component": component,
        "component_kind": kind,
        "start_ts": float(start_ts),
        "end_ts": float(end_ts),
        "start_step": start_step,
        "end_step": end_step,
        "slowdown": float(slowdown),
        "views": views,
        "confidence": float(confidence),
        "fault_id": None,
        "source": "observed",
        "cause": "unknown",
        "evidence": evidence_json(ev),
    }


def grid_row(g: StepGrid, component, kind, i0, i1, slowdown, views, confidence, ev) -> dict:
    return label_row(g.run_id, component, kind, g.t0[i0], g.t1[i1], int(g.steps[i0]), int(g.steps[i1]),
                     slowdown if np.isfinite(slowdown) else float("nan"), views, confidence, ev)


def empty_labels() -> pd.DataFrame:
    return typed_labels(schema.empty("labels"))


def typed_labels(df: pd.DataFrame) -> pd.DataFrame:
    """Column order and dtypes of faultlab.schema.LABELS (steps as nullable Int64)."""
    cols = [f.name for f in schema.LABELS]
    df = df.reindex(columns=cols)
    for c in ("start_step", "end_step"):
        df[c] = df[c].astype("Int64")
    for c in ("start_ts", "end_ts", "slowdown", "confidence"):
        df[c] = df[c].astype("float64")
    for c in ("run_id", "component", "component_kind", "views", "fault_id", "source", "cause", "evidence"):
        df[c] = df[c].astype(object)
    df["fault_id"] = df["fault_id"].where(df["fault_id"].notna(), None)
    return df
