"""Reading the generic long format: its columns (:data:`LONG_COLUMNS`,
:data:`OPTIONAL_COLUMNS`), the file in a folder (:func:`find_long_file`), CSV/TSV/Parquet
(:func:`read_long`), and the rows checked and coded once (:func:`long_rows`: numbers,
timestamps in seconds, one row per (component, metric, timestamp), every row left out
counted by reason).
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from faultlab import inputfile
from faultlab.errors import BadInput
from faultlab.labeler.importers.common import (ANSWER_FILES, SkipCount, _EXACT_ANSWER_FILES, gunzipped, is_answer, refuse_parquet_bomb,
                                               seconds_timestamps)


LONG_COLUMNS = ("component", "peer_group", "timestamp", "metric", "value")


#: optional columns of the long format: ``run_id``, and ``load`` (what the component
#: served at that sample, e.g. throughput in bytes/s: the value is judged against its
#: peer group's value at the same load, see :func:`label_long_components`)
OPTIONAL_COLUMNS = ("run_id", "load")


def find_long_file(path: str | Path) -> Path:
    """The data file for ``path``: the file itself, or the only ``*.parquet`` (else the
    only ``*.csv``/``*.csv.gz``) in a folder. When scanning a folder, upstream answer
    files (:data:`ANSWER_FILES`: ``slow_drives.csv``, ``result-*``, ``ms-*``,
    ``mw-*``) are skipped. A file given by name is read whatever its name, except the
    Perseus answer file ``slow_drives.csv`` (an exact upstream name, refused).

    Raises:
        BadInput (field ``PATH``): ``path`` does not exist or is that answer file; the
        folder holds several data files, or none (saying which answer files were
        skipped, when it holds only those).
    """
    p = Path(path)
    if not p.exists():
        raise BadInput(f"{p} does not exist", field="PATH")
    if p.is_file():
        if p.name in _EXACT_ANSWER_FILES:
            raise BadInput(f"{p.name} is an upstream answer file, not telemetry", field="PATH",
                           fix="give the telemetry file, or rename it if it is your own data")
        return p
    skipped: list[str] = []
    for pat in (("*.parquet",), ("*.csv", "*.csv.gz", "*.tsv", "*.tsv.gz", "*.tab")):
        cands = sorted({f for g in pat for f in p.glob(g)})
        skipped += [f.name for f in cands if is_answer(f)]
        found = [f for f in cands if not is_answer(f)]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise BadInput(f"{p} holds several data files ({', '.join(f.name for f in found)})", field="PATH",
                           fix="give the long-format file itself")
    if skipped:
        raise BadInput(f"{p} holds only upstream answer files, skipped: {', '.join(skipped)} (named like "
                       f"{', '.join(ANSWER_FILES)})", field="PATH",
                       fix="give the file itself as PATH: a file given by name is read")
    raise BadInput(f"{p} holds no .parquet or .csv file", field="PATH",
                   fix="give a long-format file with columns " + ", ".join(LONG_COLUMNS))


def read_long(path: str | Path) -> pd.DataFrame:
    """Read a long-format CSV or Parquet file (only ``LONG_COLUMNS`` and the
    :data:`OPTIONAL_COLUMNS` ``run_id``, ``load``).

    Raises BadInput for a missing file, an unreadable file or a missing column.
    """
    f = find_long_file(path)
    name = f.name.lower()
    below = Path(path) if Path(path).is_dir() else None
    try:
        if name.endswith(".parquet"):
            with inputfile.open_data(f, "PATH", below=below) as fh:  # no link, FIFO or device; checked and read as one file
                held = refuse_parquet_bomb(fh, f, LONG_COLUMNS + OPTIONAL_COLUMNS)  # before a column is decoded
                have = held.schema_arrow.names
                missing = [c for c in LONG_COLUMNS if c not in have]
                if missing:
                    raise BadInput(f"{f.name} misses column(s) {', '.join(missing)}", field="long",
                                   fix="a long-format file has columns " + ", ".join(LONG_COLUMNS))
                cols = list(LONG_COLUMNS) + [c for c in OPTIONAL_COLUMNS if c in have]
                strs = [c for c in ("component", "peer_group", "metric", "run_id") if c in cols]
                df = held(read_dictionary=strs).read(columns=cols).to_pandas()
        else:
            gz = "gzip" if name.endswith(".gz") else None
            with inputfile.open_data(f, "PATH", below=below) as fh:  # no link, FIFO or device
                sep = _delimiter(fh, name)
                fh.seek(0)
                # the header too through the bound: its line is read whole, and a gzip
                # of one line with no end decompressed to GBs before a column was named
                head = pd.read_csv(gunzipped(fh, f) if gz else fh, nrows=0, sep=sep, compression=None)
            missing = [c for c in LONG_COLUMNS if c not in head.columns]
            if missing:
                raise BadInput(f"{f.name} misses column(s) {', '.join(missing)}", field="long",
                               fix="a long-format file has columns " + ", ".join(LONG_COLUMNS)
                               + " (comma- or tab-separated)")
            cols = list(LONG_COLUMNS) + [c for c in OPTIONAL_COLUMNS if c in head.columns]
            with inputfile.open_data(f, "PATH", below=below) as fh:  # a gzipped one decompressed with a bound
                df = pd.read_csv(gunzipped(fh, f) if gz else fh, usecols=cols, sep=sep, compression=None,
                                 dtype={"component": "category", "peer_group": "category", "metric": "category"})
    except BadInput:
        raise
    except Exception as e:  # a malformed file: say which, in one line
        raise BadInput(f"{f} could not be read ({type(e).__name__}: {e})", field="PATH") from None
    df.attrs["source"] = str(f)
    return df


def _delimiter(fh, name: str) -> str:
    """``"\\t"`` for a TSV file (named ``.tsv``/``.tab``, or a header line with tabs and
    no commas), else ``","``; ``fh`` the open binary file, ``name`` its lower-case name."""
    if name.endswith((".tsv", ".tsv.gz", ".tab")):
        return "\t"
    raw = gzip.GzipFile(fileobj=fh) if name.endswith(".gz") else fh
    first = raw.readline(1 << 20).decode("utf-8", errors="replace")
    return "\t" if "\t" in first and "," not in first else ","


@dataclass
class LongRows:
    """The rows of a long-format input, as flat arrays of the input's length N, and
    which of them are kept (:func:`long_rows`).

    Attributes:
        ok: (N,) bool, rows kept (valid, finite, not duplicated).
        ts: (N,) float64 timestamps, unix s (NaN where not usable).
        val: (N,) float64 values (the metric's unit, larger = slower unless inverted).
        comp, grp, met: (N,) int64 codes of component, peer group, metric (-1: missing).
        comp_names, grp_names, met_names: the names (str) of those codes.
        load: (N,) float64 loads, or None without a ``load`` column.
        load_metrics: codes of the metrics judged at their load.
    """

    ok: np.ndarray
    ts: np.ndarray
    val: np.ndarray
    comp: np.ndarray
    comp_names: list[str]
    grp: np.ndarray
    grp_names: list[str]
    met: np.ndarray
    met_names: list[str]
    load: np.ndarray | None
    load_metrics: set[int]


def long_rows(df: pd.DataFrame, skips: SkipCount) -> LongRows:
    """The checked rows of a long-format frame, every row left out counted in ``skips``.

    The checks, in order: the columns (:func:`_check_long_columns`), numeric timestamps
    and values (:func:`_numeric`), the rows left out by reason (:func:`_keep_rows`), the
    rows of a metric with a load that have none (:func:`_keep_load_rows`), timestamps in
    seconds (:func:`seconds_timestamps`), and one row per (component, metric, timestamp)
    (:func:`_drop_duplicates`).

    Raises:
        BadInput for a missing column or non-numeric timestamps/values/loads.
    """
    _check_long_columns(df)
    ts = _numeric(df, "timestamp", "unix seconds, e.g. 1700000000.5")
    val = _numeric(df, "value", "a plain number in the metric's unit, e.g. 12.5 (no unit suffix)")
    comp, comp_names = _codes(df["component"])
    grp, grp_names = _codes(df["peer_group"])
    met, met_names = _codes(df["metric"])
    ok = _keep_rows(ts, val, comp, grp, met, skips)
    load = _numeric(df, "load", "a plain number, e.g. 5.2e6 (bytes/s), or empty") if "load" in df.columns else None
    load_metrics: set[int] = set()
    if load is not None:
        load_metrics = _keep_load_rows(load, met, ok, skips)
    ts = seconds_timestamps(np.where(ok, ts, np.nan), skips, "timestamp")
    ok &= np.isfinite(ts)
    _drop_duplicates(comp, met, ts, ok, skips)
    return LongRows(ok=ok, ts=ts, val=val, comp=comp, comp_names=comp_names, grp=grp, grp_names=grp_names,
                     met=met, met_names=met_names, load=load, load_metrics=load_metrics)


def _check_long_columns(df: pd.DataFrame) -> None:
    """BadInput (field ``long``) naming the :data:`LONG_COLUMNS` that ``df`` lacks."""
    missing = [c for c in LONG_COLUMNS if c not in df.columns]
    if missing:
        raise BadInput(f"missing column(s) {', '.join(missing)}", field="long",
                       fix="a long-format frame has columns " + ", ".join(LONG_COLUMNS))


def _drop_duplicates(comp: np.ndarray, met: np.ndarray, ts: np.ndarray, ok: np.ndarray, skips: SkipCount) -> None:
    """A component's metric sampled twice at one timestamp (s): the first kept row is
    kept, the others cleared in ``ok`` ((N,) bool, in place) and counted."""
    if ok.any():
        idx = np.flatnonzero(ok)
        key = pd.MultiIndex.from_arrays([comp[idx], met[idx], ts[idx]])
        dup = key.duplicated(keep="first")
        skips.add("duplicated (component, metric, timestamp)", int(dup.sum()))
        ok[idx[dup]] = False


def metric_order(rows: LongRows) -> list[int]:
    """The codes of the metrics with kept rows, in name order."""
    return sorted(set(np.unique(rows.met[rows.ok]).tolist()), key=lambda k: rows.met_names[k])


def _keep_rows(ts, val, comp, grp, met, skips: SkipCount) -> np.ndarray:
    """Rows of a long-format input to keep; the others counted in ``skips`` by their
    first reason: an empty or missing value (n/a), an infinite one, a negative value
    (a duration or latency below zero)."""
    na = np.isnan(ts) | np.isnan(val) | (comp < 0) | (grp < 0) | (met < 0)
    skips.add("n/a (empty or missing value)", int(na.sum()))
    inf = ~na & (np.isinf(ts) | np.isinf(val))
    skips.add("infinite", int(inf.sum()))
    with np.errstate(invalid="ignore"):
        neg = ~na & ~inf & (val < 0)
    skips.add("negative value", int(neg.sum()))
    return ~(na | inf | neg)


def _keep_load_rows(load: np.ndarray, met: np.ndarray, ok: np.ndarray, skips: SkipCount) -> set[int]:
    """The metrics (codes) whose kept rows carry a ``load`` (any finite one); their kept
    rows without a usable load are left out (``ok`` cleared in place) and counted: an
    empty load (n/a), an infinite one, a negative one. Metrics without any load are
    judged as they are."""
    have = ok & np.isfinite(load)
    metrics = set(np.unique(met[have]).tolist()) if have.any() else set()
    if not metrics:
        return metrics
    rows = ok & np.isin(met, np.fromiter(metrics, dtype=np.int64))
    na = rows & np.isnan(load)
    skips.add("n/a load (empty or missing) of a metric with a load", int(na.sum()))
    inf = rows & np.isinf(load)
    skips.add("infinite load", int(inf.sum()))
    with np.errstate(invalid="ignore"):
        neg = rows & ~na & ~inf & (load < 0)
    skips.add("negative load", int(neg.sum()))
    ok &= ~(na | inf | neg)
    return metrics


def _numeric(df: pd.DataFrame, col: str, fix: str) -> np.ndarray:
    """Column ``col`` as float64; BadInput naming the column, the first offending
    value and its row (0-based; line row + 2 of a CSV with a header) otherwise.
    Missing values stay NaN (dropped later)."""
    try:
        return pd.to_numeric(df[col], errors="raise").to_numpy(dtype=np.float64)
    except (ValueError, TypeError):
        pass
    num = pd.to_numeric(df[col], errors="coerce")
    bad = np.flatnonzero((num.isna() & df[col].notna()).to_numpy())
    i = int(bad[0]) if bad.size else 0
    raise BadInput(f"must be numeric: {df[col].iloc[i]!r} at row {i} (CSV line {i + 2})", field=col, fix=fix)


def _codes(col: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes (-1 for missing) and names (str) of a string-like column, without
    materializing one Python string per row."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy(dtype=np.int64), [str(x) for x in col.cat.categories]
    codes, uniques = pd.factorize(col, use_na_sentinel=True)
    return codes.astype(np.int64, copy=False), [str(x) for x in uniques]
