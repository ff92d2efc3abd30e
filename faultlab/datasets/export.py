"""``faultlab dataset export DIR --format timeeval``: the dataset as TimeEval inputs.

TimeEval: Wenig, Schmidl, Papenbrock, "TimeEval: A Benchmarking Toolkit for Time Series
Anomaly Detection", VLDB'22 demo. One CSV per run and rank, ``timestamp`` (the step's
``t_start``, unix s), the rank's step-time columns as channels, ``is_anomaly`` (1 where
an effect label of the rank or of the job covers the step); and TimeEval's
``datasets.csv`` index (collection_name, dataset_name, train_path, test_path,
dataset_type, datetime_index, split_at, train_type, train_is_normal, input_type, length,
dimensions, contamination, num_anomalies, min/median/max_anomaly_length, mean, stddev,
trend, stationarity, period_size)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pandas as pd

from faultlab import safefs
from faultlab.datasets.layout import Dataset, open_output
from faultlab.errors import BadInput
from faultlab.rundata import effect_labels

CHANNELS = ("compute_s", "comm_s", "step_s", "gc_s", "dataloader_s")
INDEX_COLUMNS = ("collection_name", "dataset_name", "train_path", "test_path", "dataset_type", "datetime_index", "split_at",
                 "train_type", "train_is_normal", "input_type", "length", "dimensions", "contamination", "num_anomalies",
                 "min_anomaly_length", "median_anomaly_length", "max_anomaly_length", "mean", "stddev", "trend",
                 "stationarity", "period_size")
FORMATS = ("timeeval",)


def _runs_of(y: np.ndarray) -> list[int]:
    d = np.diff(np.r_[0, y.astype(np.int8), 0])
    return list(np.flatnonzero(d == -1) - np.flatnonzero(d == 1))


def export(dataset, out_dir: str | Path, fmt: str = "timeeval") -> Path:
    """Write the export into ``out_dir`` (created); returns the index path. Each file
    is written relative to its folder's descriptor, the folders opened from ``/`` with
    no symlink followed, as a fresh file renamed over its name: a link someone planted
    in ``out_dir`` is replaced, never written through.

    Raises BadInput for an unknown format (field ``--format``), a malformed dataset
    file (naming it) or an output folder that cannot be made (field ``--out``; nothing
    written then), UntrustedPath (one line)
    when a component of ``out_dir`` or ``multivariate/`` is a symlink."""

    if fmt not in FORMATS:
        raise BadInput(f"unknown format {fmt!r}", field="--format", fix="one of " + ", ".join(FORMATS))
    ds = dataset if isinstance(dataset, Dataset) else Dataset(dataset)
    ds.runs_info()  # a malformed runs.json is refused before anything is written
    out = Path(out_dir)
    with open_output(out / "multivariate", "--out") as folder:  # before anything is written: nothing half-applied
        rows = _write_runs(ds, folder)
    index = io.StringIO(newline="")
    w = csv.DictWriter(index, fieldnames=list(INDEX_COLUMNS) + ["faultlab_split"])
    w.writeheader()
    w.writerows(rows)
    safefs.write_file_nofollow(out / "datasets.csv", index.getvalue(), 0o644)
    return out / "datasets.csv"


def _write_runs(ds, folder: safefs.TrustedDir) -> list[dict]:
    """Write one CSV per run and rank of ``ds`` into ``folder`` (``multivariate/``);
    returns their rows of the index."""

    rows = []
    split_of = {r: s for s in ("train", "test") for r in ds.splits[s]}
    for run in ds.iter_runs("all"):
        lab = effect_labels(run.labels)
        for rank, g in run.steps.groupby("rank", sort=True):
            g = g.sort_values("step")
            ts = g["t_start"].to_numpy(float)
            y = np.zeros(len(g), bool)
            for c, a, b in zip(lab["component"].astype(str), lab["start_ts"].astype(float), lab["end_ts"].astype(float)):
                if c in (f"rank:{int(rank)}", "job"):
                    y |= (ts >= a) & (ts <= b)
            chans = [c for c in CHANNELS if c in g.columns and g[c].notna().any()]
            df = pd.DataFrame({"timestamp": ts, **{c: g[c].fillna(0.0).to_numpy(float) for c in chans}, "is_anomaly": y.astype(int)})
            name = f"{run.run_id}-rank{int(rank)}"
            rel = f"multivariate/{name}.test.csv"
            folder.write_atomic(safefs.check_name(f"{name}.test.csv"), df.to_csv(index=False), 0o644, durable=False)
            lens = _runs_of(y)
            vals = df[chans].to_numpy(float)
            rows.append({
                "collection_name": ds.name, "dataset_name": name, "train_path": "", "test_path": rel, "dataset_type": "real",
                "datetime_index": False, "split_at": "", "train_type": "unsupervised", "train_is_normal": False,
                "input_type": "multivariate" if len(chans) > 1 else "univariate", "length": len(df), "dimensions": len(chans),
                "contamination": float(y.mean()) if len(y) else 0.0, "num_anomalies": len(lens),
                "min_anomaly_length": min(lens) if lens else 0, "median_anomaly_length": float(np.median(lens)) if lens else 0,
                "max_anomaly_length": max(lens) if lens else 0, "mean": float(vals.mean()) if vals.size else 0.0,
                "stddev": float(vals.std()) if vals.size else 0.0, "trend": "", "stationarity": "", "period_size": "",
                "faultlab_split": split_of.get(run.run_id, ""),
            })
    return rows
