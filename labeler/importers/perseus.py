"""Perseus importer: fail-slow drives from per-drive latency and throughput.

Method: after Perseus (Lu et al., "Perseus: A Fail-Slow Detection Framework for Cloud
Storage Systems", FAST'23): judge a drive's latency *against its throughput*, with
the drives of the same host as the reference (Perseus found the latency-vs-throughput
distribution homogeneous only within a node). An independent implementation of the
steps the paper describes, with a robust binned-median regression in place of its
DBSCAN + polynomial OLS (the median ignores a slow drive's samples without a
clustering step; no scikit-learn).

Input (format name ``perseus``): ``metrics.parquet`` (or a folder holding it) with
columns ``host, ts`` (unix s), ``disk_id``, ``throughput`` (bytes/s), ``latency`` (any
unit, larger is slower), and optionally ``cluster``. Only these columns are read. Or
the dataset as upstream publishes it (ucare-uchicago/kratos-failslow): its ``data/``
folder (``cluster_X/HOST/YYYY-MM-DD.csv``: ``ts, disk_id, throughput, latency``; the
cluster and host from the folder names) or one ``cluster_X/`` folder;
``slow_drive_info.csv`` there (the answers) is never read. Rows left out are counted
and said (``info["skipped_line"]``, ``import.json``).

1. **Regression** (per host and fit window, default one day as Perseus fits per node
   per day): throughput is cut into ``n_bins`` equal-count bins; the expected latency
   ``E(tp)`` is the piecewise-linear curve through the bins' (median throughput, median
   latency), flat beyond the outer bins. Fitted twice: the second fit leaves out the
   samples more than ``3 sigma`` off the first (Perseus's outlier removal before the
   regression).
2. **Sample score**: ``r = latency / E(throughput)`` (the sample's slowdown, a ratio).
   ``sigma = 1.4826 x MAD(r)`` over the host-window; the upper bound of normal latency
   is ``E x (1 + upper_z x sigma)`` (Perseus: the regression's prediction upper bound,
   alpha 0.05, z 1.96); ``SR = r / (1 + upper_z x sigma)``.
3. **Slow windows**: per drive, windows of ``window_s`` (Perseus: 20 samples, 5 min);
   a window is slow when the median of the top half of its SR values exceeds 1
   (Perseus's rule: at least about a quarter of the window above the bound).
4. **Slow periods**: runs of slow windows joined across gaps of at most
   ``gap_windows`` windows, kept when they last ``min_period_s`` (Perseus's shortest
   scored duration, 30 min) and their slowdown (median ``r`` over the period) reaches
   ``min_slowdown``.
5. **Drive verdict and ranking** (Perseus's risk evaluation, as a share of time so
   it does not depend on the length of a day or of the data), by the component
   verdict shared with the ``long`` importer (:func:`faultlab.labeler.verdict.judge`):
   per cluster, each drive's *level* (its median window ``r`` over all its observed
   time) and *share* (kept slow periods / observed time) against the cluster's bulk of
   drives; fail-slow when both are robust outliers above the bulk and the level
   reaches ``verdict.min_level``. Ranked by the verdict (fail-slow first, then the sum
   of the two z-scores).

Labels: one per slow period of a fail-slow drive: component ``drive:HOST/DISK``
(``CLUSTER/HOST/DISK`` when the input holds several clusters), ``component_kind``
``drive``, ``start_ts``/``end_ts`` the period's window bounds (unix s), ``slowdown`` the
period's median ``latency / expected latency``, ``views`` ``"peer"`` (the host's drives
are the reference), ``source`` ``"observed"``, ``cause`` ``"unknown"``.

Defaults are the same for every dataset; a 1.2x drive is judged like a 2x one (the
decision needs sustained time above the noise bound, not a large ratio).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.compute as pc

from faultlab import inputfile
from faultlab.errors import BadInput
from faultlab.labeler.config import make_config
from faultlab.labeler.importers.common import ImportResult, SkipCount, gunzipped, refuse_parquet_bomb, seconds_timestamps
from faultlab.labeler.labelrows import empty_labels, label_confidence, label_row, typed_labels
from faultlab.labeler.stats import mad_sigma, median
from faultlab.labeler.verdict import VerdictConfig, judge

FORMAT = "perseus"
REQUIRED = ("host", "ts", "disk_id", "throughput", "latency")
#: the columns read: REQUIRED and the optional cluster
READ_COLUMNS = REQUIRED + ("cluster",)


@dataclass(frozen=True)
class PerseusConfig:
    """Defaults of the Perseus importer (the same for every dataset; units in names).

    Attributes:
        fit_window_s: the regression is fitted per host per this window (s). 86400.
        n_bins: equal-count throughput bins of the binned-median regression. 16.
        min_fit_samples: fewest samples in a host-window to fit (else unscored). 100.
        min_peer_drives: fewest drives with samples in a host-window (a peer model). 2.
        upper_z: the normal-latency upper bound is ``E x (1 + upper_z x sigma)``. 1.96.
        window_s: slow-window length (s). 300.
        min_window_samples: a window with fewer samples is not judged. 4.
        gap_windows: slow windows separated by at most this many windows join. 1.
        min_period_s: shortest slow period kept (s). 1800.
        min_slowdown: a period's median latency / expected latency must reach this. 1.1.
        verdict: the drive verdict's settings, a
            :class:`~faultlab.labeler.verdict.VerdictConfig` (or a dict of its fields;
            the same defaults as the ``long`` importer's).
    """

    fit_window_s: float = 86400.0
    n_bins: int = 16
    min_fit_samples: int = 100
    min_peer_drives: int = 2
    upper_z: float = 1.96
    window_s: float = 300.0
    min_window_samples: int = 4
    gap_windows: int = 1
    min_period_s: float = 1800.0
    min_slowdown: float = 1.1
    verdict: Any = None

    def __post_init__(self) -> None:
        for name in ("fit_window_s", "window_s", "upper_z"):
            if not float(getattr(self, name)) > 0:
                raise BadInput(f"must be > 0, got {getattr(self, name)!r}", field=name)
        for name in ("n_bins", "min_fit_samples", "min_peer_drives", "min_window_samples"):
            if int(getattr(self, name)) < 1:
                raise BadInput(f"must be >= 1, got {getattr(self, name)!r}", field=name)
        if int(self.gap_windows) < 0 or float(self.min_period_s) < 0:
            raise BadInput("gap_windows and min_period_s must be >= 0", field="gap_windows")
        if not float(self.min_slowdown) >= 1.0:
            raise BadInput(f"must be >= 1.0 (a ratio), got {self.min_slowdown!r}", field="min_slowdown")
        object.__setattr__(self, "verdict", make_config(VerdictConfig, self.verdict))

    def to_dict(self) -> dict:
        return asdict(self)


def find_file(path: str | Path) -> Path:
    """The metrics Parquet for ``path`` (the file, or a folder holding ``metrics.parquet``).

    Raises BadInput when it does not exist (a folder in the kratos-failslow layout is
    read by :func:`read_samples` through :func:`kratos_files` instead).
    """
    p = Path(path)
    if not p.exists():
        raise BadInput(f"{p} does not exist", field="PATH")
    if p.is_dir():
        f = p / "metrics.parquet"
        if not f.exists():
            raise BadInput(f"{p} holds no metrics.parquet and no cluster_X/HOST/DAY.csv folders", field="PATH",
                           fix="give a Perseus folder (metrics.parquet: host, ts, disk_id, throughput, latency), "
                               "the file, or kratos-failslow's data/ (or data/cluster_X/) folder as published")
        return f
    return p


#: the upstream answer file of the kratos-failslow layout: never read
KRATOS_ANSWER = "slow_drive_info.csv"


def kratos_files(path: str | Path) -> list[tuple[str, str, Path]]:
    """The per-host-per-day CSV files of the kratos-failslow layout, as upstream
    publishes the Perseus dataset (ucare-uchicago/kratos-failslow ``data/``):
    ``data/cluster_X/host_N/YYYY-MM-DD.csv`` with columns ``ts, disk_id, throughput,
    latency``, and ``data/slow_drive_info.csv`` (the operators' answers: never read).
    ``path`` is ``data/`` (every cluster) or one ``cluster_X/`` folder.

    Returns ``[(cluster, host, file)]`` sorted, or ``[]`` when ``path`` is not in that
    layout (no ``*/*.csv`` below it, nor ``*/*/*.csv``; ``.csv.gz`` files count too)."""
    p = Path(path)
    if not p.is_dir() or (p / "metrics.parquet").exists():
        return []
    out = []
    for f in _day_files(p, "*/*/"):  # data/cluster_X/host/day.csv
        out.append((f.parent.parent.name, f.parent.name, f))
    if not out:
        for f in _day_files(p, "*/"):  # cluster_X/host/day.csv
            out.append((p.name, f.parent.name, f))
    return [x for x in out if x[2].name not in (KRATOS_ANSWER, KRATOS_ANSWER + ".gz")]


def _day_files(p: Path, below: str) -> list[Path]:
    """The ``.csv`` and gzipped ``.csv.gz`` files ``below`` ``p`` (a glob prefix),
    sorted (pyarrow's CSV reader opens both; a gzipped day was skipped in silence)."""
    return sorted([*p.glob(below + "*.csv"), *p.glob(below + "*.csv.gz")])


def _read_kratos(files: list[tuple[str, str, Path]], below: Path):
    """One Arrow table (``cluster, host, ts, disk_id, throughput, latency``) from the
    kratos-failslow CSV files (pyarrow.csv, one file at a time), each opened with no
    link below ``below``, the folder the user named (:func:`faultlab.inputfile.open_data`).

    Raises BadInput naming the file for an unreadable CSV or a missing column."""

    parts = []
    need = ("ts", "disk_id", "throughput", "latency")
    opts = pcsv.ConvertOptions(
        include_columns=list(need), column_types={"disk_id": pa.string(), "ts": pa.float64(),
                                                  "throughput": pa.float64(), "latency": pa.float64()},
        null_values=["", "NA", "N/A", "n/a", "NaN", "nan", "null", "None"], strings_can_be_null=True)
    for cluster, host, f in files:
        try:
            with inputfile.open_data(f, "PATH", below=below) as fh:  # no link below the folder, no FIFO or device
                src = gunzipped(fh, f) if f.name.endswith(".gz") else fh  # a gzipped day decompressed with a bound
                t = pcsv.read_csv(pa.input_stream(src), convert_options=opts)
        except (pa.ArrowInvalid, KeyError, OSError) as e:
            raise BadInput(f"{f} could not be read ({type(e).__name__}: {str(e).splitlines()[0]})", field="PATH",
                           fix="a kratos-failslow day file has columns " + ", ".join(need)) from None
        n = t.num_rows
        parts.append(t.append_column("cluster", pa.array([cluster] * n, pa.string()))
                      .append_column("host", pa.array([host] * n, pa.string())))
    return pa.concat_tables(parts) if parts else pa.table({c: pa.array([], pa.float64()) for c in need})


@dataclass
class DriveSamples:
    """The input as flat numpy arrays (one entry per sample, NaN rows dropped).

    ``drive`` (int codes into ``drive_names``), ``host`` (int codes into
    ``host_names``), ``ts`` unix s (int64 or float64), ``throughput`` bytes/s,
    ``latency`` (input unit); ``drive_host[d]`` the host code of drive ``d``;
    ``skips`` the rows left out by reason (n/a, infinite, negative, timestamps in
    another unit, duplicated keys) and ``source`` the file or folder read.
    """

    drive: np.ndarray
    host: np.ndarray
    ts: np.ndarray
    throughput: np.ndarray
    latency: np.ndarray
    drive_names: list[str]
    host_names: list[str]
    drive_host: np.ndarray
    clusters: list[str]
    n_rows: int
    skips: Any = None  # faultlab.labeler.importers.SkipCount: the rows left out, by reason
    source: str = ""


def read_samples(path: str | Path) -> DriveSamples:
    """Read only the needed columns of a Perseus metrics file with pyarrow, or the
    per-host-per-day CSV files of the kratos-failslow layout (:func:`kratos_files`).

    Rows left out are counted by reason (``DriveSamples.skips``): an empty or missing
    value, an infinite one, a negative throughput or a latency <= 0, a timestamp in
    milliseconds among seconds or negative, a drive sampled twice at one timestamp
    (the first row kept). A whole ``ts`` column in milliseconds (or micro-,
    nanoseconds) is converted to seconds, with a note.

    Raises:
        BadInput for a missing file, an unreadable file or a missing column.
    """

    kfiles = kratos_files(path)
    if kfiles:  # the layout as upstream publishes it
        table = _read_kratos(kfiles, Path(path))
        names, n_rows, source = table.column_names, table.num_rows, str(Path(path))

        def read(col: str, dictionary: bool):
            c = table.column(col)
            return pc.dictionary_encode(c) if dictionary else c
        return _samples(names, n_rows, source, read)
    f = find_file(path)
    below = Path(path) if Path(path).is_dir() else None
    with inputfile.open_data(f, "PATH", below=below) as fh:  # no link, FIFO or device; checked and read as one file
        try:
            held = refuse_parquet_bomb(fh, f, READ_COLUMNS)  # before a column is decoded
        except BadInput:
            raise
        except Exception as e:
            raise BadInput(f"{f} is not a readable Parquet file ({e})", field="PATH") from None

        def read_held(col: str, dictionary: bool):
            # one column at a time keeps the peak memory near one column's size
            try:
                return held(read_dictionary=[col] if dictionary else None).read(columns=[col], use_threads=False).column(col)
            except (pa.ArrowException, OSError, ValueError) as e:  # a body past its bound, rewritten or damaged
                raise BadInput(f"{f} is not a readable Parquet file ({e})", field="PATH",
                               fix="give the file as its source publishes it") from None
        return _samples(held.schema_arrow.names, held.metadata.num_rows, str(f), read_held)


def _samples(names: list[str], n_rows: int, source: str, read) -> DriveSamples:
    """:func:`read_samples` of a table of columns ``names`` and ``n_rows`` rows,
    ``read(column, dictionary)`` reading one column (dictionary-encoded or not)."""
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise BadInput(f"{Path(source).name} misses column(s) {', '.join(missing)}", field="metrics",
                       fix=f"a Perseus metrics file has columns {', '.join(REQUIRED)}")
    skips = SkipCount(n_rows)

    def codes(col: str) -> tuple[np.ndarray, list[str]]:
        arr = read(col, True)
        if not pa.types.is_dictionary(arr.type):
            arr = pc.dictionary_encode(arr)
        arr = arr.unify_dictionaries()
        if not arr.num_chunks:
            return np.zeros(0, dtype=np.int32), []
        dic = [str(x) for x in arr.chunks[0].dictionary.to_pylist()]
        idx = np.concatenate([pc.fill_null(c.indices, -1).to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
                              for c in arr.chunks])
        return idx, dic

    def num(col: str) -> np.ndarray:
        a = read(col, False)
        try:
            if pa.types.is_timestamp(a.type):  # a timestamp column: unix seconds
                per_s = {"s": 1, "ms": 1e3, "us": 1e6, "ns": 1e9}[a.type.unit]
                a = pc.divide(pc.cast(pc.cast(a, pa.int64()), pa.float64()), per_s)
            # an integer past 2**53 (nanoseconds since 1970) loses only its last digits
            # in float64; a safe cast refused it as "not numeric"
            a = pc.cast(a, pa.float64(), safe=not pa.types.is_integer(a.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise BadInput(f"column {col} must be numeric, got {a.type} ({e})", field="metrics") from None
        if a.null_count:
            a = pc.fill_null(a, float("nan"))
        return a.to_numpy()

    h_idx, h_names = codes("host")
    d_idx, d_names = codes("disk_id")
    if "cluster" in names:
        c_idx, c_names = codes("cluster")
    else:
        c_idx, c_names = np.zeros(n_rows, dtype=np.int32), [""]
    ts = num("ts")
    tp = num("throughput")
    lat = num("latency")
    # every row left out is counted by its first reason
    na = np.isnan(ts) | np.isnan(tp) | np.isnan(lat) | (h_idx < 0) | (d_idx < 0) | (c_idx < 0)
    skips.add("n/a (empty or missing value)", int(na.sum()))
    inf = ~na & (np.isinf(ts) | np.isinf(tp) | np.isinf(lat))
    skips.add("infinite", int(inf.sum()))
    ok = ~na & ~inf
    with np.errstate(invalid="ignore"):
        neg = ok & ((tp < 0) | (lat <= 0))
    skips.add("negative throughput or latency <= 0", int(neg.sum()))
    ok &= ~neg
    ts = seconds_timestamps(np.where(ok, ts, np.nan), skips, "ts")
    ok &= np.isfinite(ts)
    if not ok.all():
        h_idx, d_idx, c_idx, ts, tp, lat = h_idx[ok], d_idx[ok], c_idx[ok], ts[ok], tp[ok], lat[ok]
    del ok
    nh, nd_ = max(len(h_names), 1), max(len(d_names), 1)
    # host key (cluster, host) and drive key (host key, disk), numbered by the keys the
    # rows use (np.unique): never a table of every cluster x host or host x disk the
    # file names, which a file whose every row names a new one of each sizes by their
    # product (30,000 such rows asked for 7 GB)
    hk = c_idx.astype(np.int64) * nh + h_idx
    seen, host = np.unique(hk, return_inverse=True)
    host = host.astype(np.int32)
    used_clusters = sorted({c_names[k // nh] for k in seen.tolist()})
    multi = len(used_clusters) > 1
    host_names = [(f"{c_names[k // nh]}/" if multi else "") + h_names[k % nh] for k in seen.tolist()]
    del hk
    dk = host.astype(np.int64) * nd_ + d_idx
    seen_d, drive = np.unique(dk, return_inverse=True)
    drive = drive.astype(np.int32)
    del dk, h_idx, d_idx, c_idx
    drive_host = (seen_d // nd_).astype(np.int64)
    drive_names = [f"{host_names[k // nd_]}/{d_names[k % nd_]}" for k in seen_d.tolist()]
    # a drive sampled twice at one timestamp: the first row is kept
    if len(ts):
        o = np.lexsort((ts, drive))
        dup = np.zeros(len(ts), dtype=bool)
        dup[o[1:]] = (drive[o[1:]] == drive[o[:-1]]) & (ts[o[1:]] == ts[o[:-1]])
        if dup.any():
            skips.add("duplicated (host, disk_id, ts)", int(dup.sum()))
            keep = ~dup
            drive, host, ts, tp, lat = drive[keep], host[keep], ts[keep], tp[keep], lat[keep]
    return DriveSamples(drive=drive, host=host, ts=ts, throughput=tp, latency=lat,
                        drive_names=drive_names, host_names=host_names, drive_host=drive_host,
                        clusters=used_clusters, n_rows=int(n_rows), skips=skips, source=source)


def _fit(tp: np.ndarray, lat: np.ndarray, n_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Binned-median regression: ``(bin median throughput, bin median latency)``, sorted."""
    q = np.quantile(tp, np.linspace(0.0, 1.0, n_bins + 1)[1:-1])
    b = np.searchsorted(q, tp, side="right")
    order = np.lexsort((lat, b))
    bs = b[order]
    starts = np.flatnonzero(np.r_[True, bs[1:] != bs[:-1]])
    ends = np.r_[starts[1:], len(bs)]
    n = ends - starts
    lat_s = lat[order]
    med_lat = 0.5 * (lat_s[starts + (n - 1) // 2] + lat_s[starts + n // 2])
    med_tp = np.array([median(tp[order[a:e]]) for a, e in zip(starts, ends)])
    o = np.argsort(med_tp, kind="mergesort")
    return med_tp[o], med_lat[o]


def relative_to_load(load: np.ndarray, value: np.ndarray, n_bins: int, min_inliers: int) -> tuple[np.ndarray, float]:
    """Steps 1-2 on one host-window: ``(r, sigma)``, ``r = value / E(load)`` per sample
    (a ratio) and ``sigma = 1.4826 x MAD(r)``.

    ``E`` is the binned-median regression of ``value`` on ``load`` (:func:`_fit`, the
    piecewise-linear curve through ``n_bins`` equal-count bins' medians, flat beyond the
    outer bins), fitted a second time without the samples more than ``3 sigma`` off the
    first fit when at least ``min_inliers`` remain (Perseus's outlier removal before
    the regression). ``load`` and ``value``: float arrays of one length (>= 1); shared
    with the ``long`` importer's ``load`` column."""
    ctp, clat = _fit(load, value, n_bins)
    rr = value / np.interp(load, ctp, clat)
    sig = mad_sigma(rr)
    inl = np.abs(rr - 1.0) <= 3.0 * sig if sig > 0 else np.ones(len(rr), dtype=bool)
    if inl.sum() >= min_inliers:
        ctp, clat = _fit(load[inl], value[inl], n_bins)
        rr = value / np.interp(load, ctp, clat)
        sig = mad_sigma(rr)
    return rr, float(sig)


def score_samples(s: DriveSamples, cfg: PerseusConfig) -> tuple[np.ndarray, np.ndarray, dict]:
    """Steps 1-2: per sample ``r = latency / expected`` and the bound ``u = 1 + z sigma``.

    Returns ``(r, u, stats)``: float64 arrays (NaN where the host-window could not be
    fitted) and ``{"n_fits": int, "n_unfit_samples": int, "sigma_median": float}``.
    """
    n = len(s.ts)
    r = np.full(n, np.nan)
    u = np.full(n, np.nan, dtype=np.float32)
    if n == 0:
        return r, u, {"n_fits": 0, "n_unfit_samples": 0, "sigma_median": float("nan")}
    t0 = np.floor(np.min(s.ts) / cfg.fit_window_s) * cfg.fit_window_s
    w = np.floor((s.ts - t0) / cfg.fit_window_s).astype(np.int64)
    key = s.host.astype(np.int64) * (int(w.max()) + 1) + w
    order = np.argsort(key, kind="stable")
    ks = key[order]
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    ends = np.r_[starts[1:], n]
    sigmas = []
    for a, e in zip(starts, ends):
        idx = order[a:e]
        if e - a < cfg.min_fit_samples or len(np.unique(s.drive[idx])) < cfg.min_peer_drives:
            continue
        rr, sig = relative_to_load(s.throughput[idx], s.latency[idx], cfg.n_bins, max(cfg.n_bins, cfg.min_fit_samples // 2))
        r[idx] = rr
        u[idx] = 1.0 + cfg.upper_z * sig
        sigmas.append(sig)
    return r, u, {"n_fits": len(sigmas), "n_unfit_samples": int(np.isnan(r).sum()),
                  "sigma_median": median(sigmas) if sigmas else float("nan")}


@dataclass
class Windows:
    """Per (drive, window) statistics, sorted by drive then window index.

    ``drive``, ``widx`` (window index from ``t0``, unix s), ``n`` samples, ``med_r``
    median ``r``, ``top_sr`` median of the top half of SR, ``slow`` bool; ``lo``/``hi``
    each window's sample range ``[lo, hi)`` into ``r_sorted`` (``r`` sorted by drive,
    window, then value).
    """

    drive: np.ndarray
    widx: np.ndarray
    n: np.ndarray
    med_r: np.ndarray
    top_sr: np.ndarray
    slow: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    r_sorted: np.ndarray
    t0: float


def windows(s: DriveSamples, r: np.ndarray, u: np.ndarray, cfg: PerseusConfig) -> Windows:
    """Step 3: per-drive windows and the Perseus slow-window rule (vectorized)."""
    ok = np.isfinite(r)
    if ok.all():
        drive, ts, rr, uu = s.drive, s.ts, r, u
    else:
        drive, ts, rr, uu = s.drive[ok], s.ts[ok], r[ok], u[ok]
    del ok
    if len(rr) == 0:
        z = np.zeros(0, dtype=np.int64)
        return Windows(z, z, z, np.zeros(0), np.zeros(0), np.zeros(0, dtype=bool), z, z, np.zeros(0), 0.0)
    t0 = float(np.floor(np.min(ts) / cfg.window_s) * cfg.window_s)
    widx = np.floor((ts - t0) / cfg.window_s).astype(np.int64)
    nw = int(widx.max()) + 1
    key = drive.astype(np.int64) * nw
    key += widx
    del widx
    order = np.lexsort((rr, key))
    ks = key[order]
    del key
    rs = rr[order]
    us = uu[order]
    del order
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    ends = np.r_[starts[1:], len(ks)]
    n = ends - starts
    med = 0.5 * (rs[starts + (n - 1) // 2] + rs[starts + n // 2])
    top0 = starts + n // 2  # the values >= the median
    m = ends - top0
    top = 0.5 * (rs[top0 + (m - 1) // 2] + rs[top0 + m // 2])
    # a window lies inside one host fit-window when window_s divides fit_window_s; else
    # the bound of its first sample is used
    top_sr = top / us[starts].astype(np.float64)
    slow = (top_sr > 1.0) & (n >= cfg.min_window_samples)
    wk = ks[starts]
    return Windows(drive=wk // nw, widx=wk % nw, n=n, med_r=med, top_sr=top_sr, slow=slow, lo=starts, hi=ends,
                   r_sorted=rs, t0=t0)


def periods(w: Windows, cfg: PerseusConfig) -> pd.DataFrame:
    """Step 4: slow periods (one row each): ``drive, w0, w1`` (window indices),
    ``n_windows``, ``n_slow``, ``slowdown`` (median r), ``duration_s``, ``kept``."""
    cols = ["drive", "w0", "w1", "n_windows", "n_slow", "slowdown", "duration_s", "kept"]
    idx = np.flatnonzero(w.slow)
    if idx.size == 0:
        return pd.DataFrame({c: [] for c in cols})
    joined = (w.drive[idx[1:]] == w.drive[idx[:-1]]) & (w.widx[idx[1:]] - w.widx[idx[:-1]] <= cfg.gap_windows + 1)
    br = np.flatnonzero(~joined)
    a = idx[np.r_[0, br + 1]]
    b = idx[np.r_[br, idx.size - 1]]
    slow_cum = np.r_[0, np.cumsum(w.slow)]
    rows = []
    for i0, i1 in zip(a.tolist(), b.tolist()):
        seg = w.r_sorted[w.lo[i0]:w.hi[i1]]
        rows.append((int(w.drive[i0]), int(w.widx[i0]), int(w.widx[i1]), i1 - i0 + 1, int(slow_cum[i1 + 1] - slow_cum[i0]),
                     median(seg) if seg.size else float("nan")))
    p = pd.DataFrame(rows, columns=cols[:-2])
    p["duration_s"] = (p["w1"] - p["w0"] + 1) * cfg.window_s
    p["kept"] = (p["duration_s"] >= cfg.min_period_s) & (p["slowdown"] >= cfg.min_slowdown)
    return p


def rank_drives(s: DriveSamples, w: Windows, p: pd.DataFrame, cfg: PerseusConfig) -> pd.DataFrame:
    """Step 5: one row per drive, sorted by rank.

    Columns: ``drive`` (name), ``host``, ``observed_s`` (windows with samples x
    window_s), ``slow_s`` (those inside kept periods), ``share`` (slow_s / observed_s),
    ``max_window_share`` (the largest share within one fit window), ``n_periods``
    (kept), ``slowdown`` (duration-weighted mean of its kept periods' slowdowns, else
    its median window ``r``), ``median_r``, ``cluster`` (the host name's prefix when the
    input holds several clusters, else ""), ``level`` (= ``median_r``) and the verdict's
    columns (:data:`faultlab.labeler.verdict.VERDICT_COLUMNS`: ``level_z``, ``share_z``,
    ``bulk_level``, ``bulk_share``, ``failslow``, ``rank``; 1 = most suspect)."""
    nd = len(s.drive_names)
    nwin = len(w.drive)
    kept = p[p["kept"]] if len(p) else p
    covered = np.zeros(nwin, dtype=bool)  # window inside a kept period
    if len(kept) and nwin:
        # windows are sorted by (drive, widx): locate each kept period's window range
        key = w.drive.astype(np.int64) * (int(w.widx.max()) + 1) + w.widx
        nw = int(w.widx.max()) + 1
        a = np.searchsorted(key, kept["drive"].to_numpy(dtype=np.int64) * nw + kept["w0"].to_numpy(dtype=np.int64), "left")
        b = np.searchsorted(key, kept["drive"].to_numpy(dtype=np.int64) * nw + kept["w1"].to_numpy(dtype=np.int64), "right")
        delta = np.zeros(nwin + 1, dtype=np.int64)
        np.add.at(delta, a, 1)
        np.add.at(delta, b, -1)
        covered = np.cumsum(delta[:-1]) > 0
    observed = np.bincount(w.drive, minlength=nd).astype(np.float64) * cfg.window_s if nwin else np.zeros(nd)
    slow_s = np.bincount(w.drive, weights=covered.astype(np.float64), minlength=nd) * cfg.window_s if nwin else np.zeros(nd)
    share = np.divide(slow_s, observed, out=np.zeros(nd), where=observed > 0)
    # the same share within each fit window (a drive slow for most of one day)
    max_wshare = np.zeros(nd)
    if nwin:
        fw = np.floor((w.t0 + w.widx * cfg.window_s) / cfg.fit_window_s).astype(np.int64)
        fw -= fw.min()
        k2 = w.drive.astype(np.int64) * (int(fw.max()) + 1) + fw
        u, inv = np.unique(k2, return_inverse=True)
        obs_k = np.bincount(inv).astype(np.float64)
        slow_k = np.bincount(inv, weights=covered.astype(np.float64))
        np.maximum.at(max_wshare, (u // (int(fw.max()) + 1)).astype(np.int64), slow_k / obs_k)
    nper = np.bincount(kept["drive"].to_numpy(dtype=np.int64), minlength=nd) if len(kept) else np.zeros(nd, dtype=np.int64)
    med_r = np.full(nd, np.nan)
    if nwin:
        o = np.lexsort((w.med_r, w.drive))
        dsrt, msrt = w.drive[o], w.med_r[o]
        st = np.flatnonzero(np.r_[True, dsrt[1:] != dsrt[:-1]])
        en = np.r_[st[1:], len(dsrt)]
        cnt = en - st
        med_r[dsrt[st]] = 0.5 * (msrt[st + (cnt - 1) // 2] + msrt[st + cnt // 2])
    sd = med_r.copy()
    if len(kept):
        dd = kept["drive"].to_numpy(dtype=np.int64)
        wsum = np.bincount(dd, weights=kept["duration_s"].to_numpy(dtype=np.float64), minlength=nd)
        vsum = np.bincount(dd, weights=(kept["duration_s"] * kept["slowdown"]).to_numpy(dtype=np.float64), minlength=nd)
        has = wsum > 0
        sd[has] = vsum[has] / wsum[has]
    df = pd.DataFrame({
        "drive": s.drive_names,
        "host": [s.host_names[h] for h in s.drive_host.tolist()],
        "observed_s": observed,
        "slow_s": slow_s,
        "share": share,
        "max_window_share": max_wshare,
        "n_periods": nper.astype(np.int64),
        "slowdown": sd,
        "median_r": med_r,
    })
    cl = [s.host_names[h].split("/", 1)[0] if "/" in s.host_names[h] else "" for h in s.drive_host.tolist()]
    df["cluster"] = cl
    df["level"] = np.where(observed > 0, med_r, np.nan)
    df = df.sort_values("drive", kind="mergesort")  # ties in the verdict's rank by name
    return judge(df, cfg.verdict, cluster="cluster")


def analyze(s: DriveSamples, config: PerseusConfig | None = None) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Steps 1-5 on samples. Returns ``(drives, periods, stats)`` (see
    :func:`rank_drives`, :func:`periods`; ``periods`` gains ``start_ts``, ``end_ts``
    (unix s) and the drive name)."""
    cfg = config or PerseusConfig()
    r, u, stats = score_samples(s, cfg)
    w = windows(s, r, u, cfg)
    p = periods(w, cfg)
    drives = rank_drives(s, w, p, cfg)
    if len(p):
        p["start_ts"] = w.t0 + p["w0"] * cfg.window_s
        p["end_ts"] = w.t0 + (p["w1"] + 1) * cfg.window_s
        p["name"] = [s.drive_names[d] for d in p["drive"].tolist()]
    stats.update({"n_samples": int(len(s.ts)), "n_rows": s.n_rows, "n_drives": len(s.drive_names),
                  "n_hosts": len(s.host_names), "n_windows": int(len(w.drive)), "n_slow_windows": int(w.slow.sum()),
                  "n_periods": int(len(p)), "n_periods_kept": int(p["kept"].sum()) if len(p) else 0})
    return drives, p, stats


def labels_from(drives: pd.DataFrame, p: pd.DataFrame, cfg: PerseusConfig, run_id: str = "") -> pd.DataFrame:
    """Labels (faultlab.schema.LABELS columns): the kept periods of fail-slow drives."""
    if not len(p):
        return empty_labels()
    fs = drives[drives["failslow"]].set_index("drive")
    kept = p[p["kept"] & p["name"].isin(fs.index)]
    min_len = max(1, int(round(cfg.min_period_s / cfg.window_s)))
    rows = []
    for row in kept.itertuples(index=False):
        d = fs.loc[row.name]
        ev = {
            "method": "perseus-fast23",
            "host": d["host"],
            "median_latency_over_expected": row.slowdown,
            "n_windows": int(row.n_windows),
            "n_slow_windows": int(row.n_slow),
            "drive_share": float(d["share"]),
            "drive_max_window_share": float(d["max_window_share"]),
            "drive_level": float(d["level"]),
            "drive_level_z": float(d["level_z"]),
            "drive_share_z": float(d["share_z"]),
            "cluster_bulk_level": float(d["bulk_level"]),
            "cluster_bulk_share": float(d["bulk_share"]),
            "drive_rank": int(d["rank"]),
            "drive_slowdown": float(d["slowdown"]),
            "upper_z": cfg.upper_z,
            "window_s": cfg.window_s,
            "threshold": cfg.min_slowdown,
        }
        rows.append(label_row(run_id, f"drive:{row.name}", "drive", row.start_ts, row.end_ts, pd.NA, pd.NA, row.slowdown, "peer",
                              label_confidence(float(row.slowdown), cfg.min_slowdown, int(row.n_windows), min_len, "peer"), ev))
    if not rows:
        return empty_labels()
    df = pd.DataFrame(rows).sort_values(["start_ts", "component"], kind="mergesort").reset_index(drop=True)
    return typed_labels(df)


def import_perseus(path: str | Path, config: PerseusConfig | dict | None = None):
    """Import Perseus drive telemetry and label its fail-slow drives.

    Args:
        path: ``metrics.parquet`` or a folder holding it.
        config: :class:`PerseusConfig` or a dict of its fields.

    Returns:
        :class:`faultlab.labeler.importers.ImportResult`: ``labels`` (LABELS columns),
        ``whatif`` None (no what-if applies to drives), ``extra["drives.json"]`` the
        drive ranking (every drive: share of slow time, slowdown, fail-slow, rank) and
        ``info`` counts. Deterministic.

    Raises:
        BadInput for a missing file or column or a bad config field.
    """
    cfg = make_config(PerseusConfig, config)
    s = read_samples(path)
    drives, p, stats = analyze(s, cfg)
    run_id = s.clusters[0] if len(s.clusters) == 1 and s.clusters[0] else "perseus"
    labels = labels_from(drives, p, cfg, run_id)
    ranking = {
        "method": "perseus-fast23",
        "run_id": run_id,
        "config": cfg.to_dict(),
        "stats": stats,
        "failslow": drives.loc[drives["failslow"], "drive"].tolist(),
        "drives": json.loads(drives.to_json(orient="records")),
    }
    stats["skipped"] = s.skips.to_dict()
    stats["skipped_line"] = s.skips.line()
    stats["source"] = s.source
    return ImportResult(format=FORMAT, labels=labels, whatif=None, info=stats, extra={"drives.json": ranking})


__all__ = ["FORMAT", "PerseusConfig", "DriveSamples", "analyze", "find_file", "import_perseus", "labels_from",
           "periods", "rank_drives", "read_samples", "relative_to_load", "score_samples", "windows"]
