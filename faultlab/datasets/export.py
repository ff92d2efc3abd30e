"""``faultlab dataset export DIR --format timeeval|tsb-ad``: the dataset as inputs of
the two time-series anomaly-detection benchmark toolkits.

Both write one series per run and rank: the rank's step-time channels per step (the
columns of ``CHANNELS`` the dataset measures anywhere; a step without a value reads
0.0) and the step's label, read from the per-step labels
(:mod:`faultlab.datasets.steplabels`): **1 where** ``is_straggler`` **is true**, i.e.
an effect label (injected or observed) of that rank or of the whole job covers the
step; 0 elsewhere, also over an injected fault that slowed nothing
(``injected-unmanifested``).

- **timeeval** (Wenig, Schmidl, Papenbrock, "TimeEval: A Benchmarking Toolkit for Time
  Series Anomaly Detection", VLDB'22 demo): ``multivariate/<run>-rank<r>.test.csv``
  for every series of a test run, ``timestamp`` (the step's ``t_start``, unix s), the
  channels, ``is_anomaly`` (the label above); ``multivariate/<name>.train.csv``, every
  series of the train runs one after another (the same columns), the train file of
  every test series; and TimeEval's ``datasets.csv`` index, one row per test series
  (collection_name, dataset_name, train_path, test_path, dataset_type, datetime_index,
  split_at, train_type ``supervised`` (the train file carries labels),
  train_is_normal false, input_type, length, dimensions, contamination,
  num_anomalies, min/median/max_anomaly_length, mean, stddev, trend, stationarity,
  period_size).
- **tsb-ad** (Liu, Paparrizos, "The Elephant in the Room: Towards A Reliable
  Time-Series Anomaly Detection Benchmark", NeurIPS'24 datasets track): one CSV per
  series named as TSB-AD names its files,
  ``<index>_<dataset>_id_<n>_<domain>_tr_<train index>_1st_<first anomaly index>.csv``
  (index 3 digits from 001; dataset the dataset's name without ``_`` or ``-``; n the
  series' number; domain ``WebService``, the nearest of TSB-AD's domains to a
  computing job; train index: the steps before the first straggling step, at most half
  the series and at least 1: TSB-AD fits semi-supervised detectors on the first
  ``tr`` rows; first anomaly index: that step's row, the series' length when it has
  none), the channels then ``Label`` (the label above); and ``File-List.csv`` (file,
  run_id, rank, faultlab_split) for choosing the split.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pandas as pd

from faultlab import safefs
from faultlab.datasets import manifest
from faultlab.datasets.layout import Dataset, open_output
from faultlab.datasets.steplabels import step_labels, with_label_ids
from faultlab.errors import BadInput

CHANNELS = ("compute_s", "comm_s", "step_s", "gc_s", "dataloader_s")
INDEX_COLUMNS = ("collection_name", "dataset_name", "train_path", "test_path", "dataset_type", "datetime_index", "split_at",
                 "train_type", "train_is_normal", "input_type", "length", "dimensions", "contamination", "num_anomalies",
                 "min_anomaly_length", "median_anomaly_length", "max_anomaly_length", "mean", "stddev", "trend",
                 "stationarity", "period_size")
FORMATS = ("timeeval", "tsb-ad")
#: TSB-AD's domain of the exported series (its file names carry one of its domains)
TSB_AD_DOMAIN = "WebService"


def _runs_of(y: np.ndarray) -> list[int]:
    d = np.diff(np.r_[0, y.astype(np.int8), 0])
    return list(np.flatnonzero(d == -1) - np.flatnonzero(d == 1))


def export(dataset, out_dir: str | Path, fmt: str = "timeeval") -> Path:
    """Write the export into ``out_dir`` (created); returns the index path
    (``datasets.csv`` for timeeval, ``File-List.csv`` for tsb-ad). Each file is written
    relative to its folder's descriptor, the folders opened from ``/`` with no symlink
    followed, as a fresh file renamed over its name: a link someone planted in
    ``out_dir`` is replaced, never written through.

    Raises BadInput for an unknown format (field ``--format``), a malformed dataset
    file or one that does not fit the others (naming it, :meth:`Dataset.check`), a dataset whose files differ from its ``MANIFEST.sha256`` or an output folder that cannot be made (field ``--out``; nothing
    written then), UntrustedPath (one line) when a component of ``out_dir`` or its
    series folder is a symlink."""
    if fmt not in FORMATS:
        raise BadInput(f"unknown format {fmt!r}", field="--format", fix="one of " + ", ".join(FORMATS))
    ds = dataset if isinstance(dataset, Dataset) else Dataset(dataset)
    ds.runs_info()  # a malformed runs.json is refused (naming it) before the manifest is hashed
    ds.pin(manifest.require_intact(ds.path, override="", root_fd=ds.fd))  # no file changed or swapped since the build, nor after
    ds.check()  # files that do not fit together are refused before anything is written
    out = Path(out_dir)
    sub = "multivariate" if fmt == "timeeval" else "TSB-AD-M"
    with open_output(out / sub, "--out") as folder:  # before anything is written: nothing half-applied
        chans = _channels(ds)
        if fmt == "timeeval":
            rows = _timeeval(ds, folder, chans)
            return _write_csv(out / "datasets.csv", list(INDEX_COLUMNS) + ["faultlab_split"], rows)
        rows = _tsb_ad(ds, folder, chans)
        return _write_csv(out / "File-List.csv", ["file", "run_id", "rank", "faultlab_split"], rows)


def _write_csv(path: Path, columns: list[str], rows: list[dict]) -> Path:
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=columns)
    w.writeheader()
    w.writerows(rows)
    safefs.write_file_nofollow(path, buf.getvalue(), 0o644)
    return path


def _channels(ds: Dataset) -> list[str]:
    """The CHANNELS the dataset measures in some run (the same columns in every file)."""
    have: set[str] = set()
    for run in ds.iter_runs("all"):
        have |= {c for c in CHANNELS if c in run.steps.columns and run.steps[c].notna().any()}
    return [c for c in CHANNELS if c in have]


def series(ds: Dataset, chans: list[str], split: str = "all"):
    """Each run's ranks of ``split`` as ``(run_id, rank, frame)``: ``timestamp``, the
    channels (NaN read as 0.0), ``label`` (0/1, the per-step labels' ``is_straggler``),
    by step."""
    for run in ds.iter_runs(split):
        sl = step_labels(run.steps, with_label_ids(run.labels, run.run_id), run.run_id)
        st = run.steps.sort_values(["rank", "step"], kind="mergesort").reset_index(drop=True)
        for rank, idx in st.groupby("rank", sort=True).indices.items():
            g = st.iloc[idx]
            y = sl.iloc[idx]["is_straggler"].to_numpy(bool)
            df = pd.DataFrame({"timestamp": g["t_start"].to_numpy(float),
                               **{c: (g[c].fillna(0.0).to_numpy(float) if c in g else np.zeros(len(g))) for c in chans},
                               "label": y.astype(int)})
            yield run.run_id, int(rank), df


def _timeeval(ds: Dataset, folder: safefs.TrustedDir, chans: list[str]) -> list[dict]:
    """The train file and one test file per test series; returns the index rows."""
    train_name = f"{safefs.check_name(ds.name)}.train.csv"
    train = [df for _, _, df in series(ds, chans, "train")]
    train_df = pd.concat(train, ignore_index=True) if train else pd.DataFrame(columns=["timestamp", *chans, "label"])
    folder.write_atomic(train_name, train_df.rename(columns={"label": "is_anomaly"}).to_csv(index=False), 0o644, durable=False)
    rows = []
    for run_id, rank, df in series(ds, chans, "test"):
        name = f"{run_id}-rank{rank}"
        folder.write_atomic(safefs.check_name(f"{name}.test.csv"), df.rename(columns={"label": "is_anomaly"}).to_csv(index=False),
                            0o644, durable=False)
        y = df["label"].to_numpy(bool)
        lens = _runs_of(y)
        vals = df[chans].to_numpy(float)
        rows.append({
            "collection_name": ds.name, "dataset_name": name, "train_path": f"multivariate/{train_name}" if train else "",
            "test_path": f"multivariate/{name}.test.csv", "dataset_type": "real", "datetime_index": False, "split_at": "",
            "train_type": "supervised" if train else "unsupervised", "train_is_normal": False,
            "input_type": "multivariate" if len(chans) > 1 else "univariate", "length": len(df), "dimensions": len(chans),
            "contamination": float(y.mean()) if len(y) else 0.0, "num_anomalies": len(lens),
            "min_anomaly_length": min(lens) if lens else 0, "median_anomaly_length": float(np.median(lens)) if lens else 0,
            "max_anomaly_length": max(lens) if lens else 0, "mean": float(vals.mean()) if vals.size else 0.0,
            "stddev": float(vals.std()) if vals.size else 0.0, "trend": "", "stationarity": "", "period_size": "",
            "faultlab_split": "test",
        })
    return rows


def tsb_ad_name(index: int, dataset: str, n: int, y: np.ndarray) -> str:
    """TSB-AD's file name of series number ``n`` (labels ``y``), see the module doc."""
    first = int(np.argmax(y)) if y.any() else len(y)
    tr = max(1, min(first, len(y) // 2))
    clean = "".join(ch for ch in dataset if ch.isalnum())
    return f"{index:03d}_{clean}_id_{n}_{TSB_AD_DOMAIN}_tr_{tr}_1st_{first}.csv"


def _tsb_ad(ds: Dataset, folder: safefs.TrustedDir, chans: list[str]) -> list[dict]:
    """One TSB-AD file per series (channels + ``Label``); returns the file list rows."""
    split_of = {r: s for s in ("train", "test") for r in ds.splits[s]}
    rows = []
    for k, (run_id, rank, df) in enumerate(series(ds, chans, "all"), start=1):
        y = df["label"].to_numpy(bool)
        name = tsb_ad_name(k, ds.name, k, y)
        body = df[chans].assign(Label=df["label"].to_numpy(int))
        folder.write_atomic(safefs.check_name(name), body.to_csv(index=False), 0o644, durable=False)
        rows.append({"file": f"TSB-AD-M/{name}", "run_id": run_id, "rank": rank, "faultlab_split": split_of.get(run_id, "")})
    return rows
