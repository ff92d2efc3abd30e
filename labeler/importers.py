"""Importers of public fail-slow data, by format name (``faultlab label --import FORMAT``).

Each importer reads only the telemetry (and its meta file) of a dataset, never the
upstream answers kept beside it, and returns an :class:`ImportResult`: a labels frame
(faultlab.schema.LABELS columns) and, where a what-if slowdown applies, the what-if
dict, and where the format judges whole components, a components summary.
:func:`write_outputs` writes ``labels.parquet`` (+ ``whatif.json``,
``components.parquet``) to a folder.

Formats (:data:`FORMATS`):

- ``long``: generic long-format CSV/TSV/Parquet, columns ``component, peer_group,
  timestamp`` (unix s), ``metric, value`` (larger = slower), optional ``run_id`` and
  ``load`` (what the component served; the value is judged at that load). Labeled with the two views
  of the labeler (see :func:`import_long`), plus a component-level judgement: which
  components are *persistently* slow (``components.parquet``, see
  :func:`judge_persistence`).
- ``perseus``: Perseus drive telemetry (FAST'23), see :mod:`faultlab.labeler.perseus`.
- ``straggler-trace``: StragglerAnalysis operation trace (OSDI'25 what-if), see
  :mod:`faultlab.labeler.trace`.
- ``pai-minibatch``: Alibaba PAI per-worker mini-batch times (alibaba/clusterdata), read
  as published and labeled as ``long`` (see :func:`import_pai`).
"""

from __future__ import annotations

from faultlab.schema import json_safe  # noqa: F401  (re-exported: importers.json_safe)

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from faultlab.errors import BadInput

LONG_COLUMNS = ("component", "peer_group", "timestamp", "metric", "value")
#: optional columns of the long format: ``run_id``, and ``load`` (what the component
#: served at that sample, e.g. throughput in bytes/s: the value is judged against its
#: peer group's value at the same load, see :func:`label_long_components`)
OPTIONAL_COLUMNS = ("run_id", "load")


@dataclass
class ImportResult:
    """What an importer returns.

    Attributes:
        format: the format name.
        labels: labels frame (faultlab.schema.LABELS columns, nullable Int64 steps).
        whatif: the what-if dict (JSON-able; ``slowdown`` and its decomposition) or
            None when no what-if applies.
        info: counts and timings for a person (JSON-able).
        extra: further JSON files to write, ``{file name: JSON-able}``.
        components: one row per component with its component-level judgement (the
            ``long`` importer: :data:`COMPONENT_COLUMNS`, see :func:`judge_persistence`),
            written as ``components.parquet``; None when the format has none.
    """

    format: str
    labels: pd.DataFrame
    whatif: dict | None = None
    info: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    components: pd.DataFrame | None = None


class SkipCount:
    """Rows an importer left out, by reason, so that nothing is dropped in silence:
    :meth:`line` says it in one line (the CLI prints it) and :meth:`to_dict` goes into
    the output's ``import.json``. ``notes`` are changes made without dropping (a
    timestamp column converted from milliseconds)."""

    def __init__(self, n_rows: int) -> None:
        self.n_rows = int(n_rows)
        self.reasons: dict[str, int] = {}
        self.notes: list[str] = []

    def add(self, reason: str, n: int) -> None:
        if int(n):
            self.reasons[reason] = self.reasons.get(reason, 0) + int(n)

    @property
    def total(self) -> int:
        return sum(self.reasons.values())

    def line(self) -> str:
        """``"skipped 7 of 1,200 rows: 4 n/a, 3 duplicated (...)"`` (``"skipped no
        rows"`` when none), then the notes."""
        if self.total:
            head = f"skipped {self.total:,} of {self.n_rows:,} rows: " + ", ".join(
                f"{n:,} {r}" for r, n in self.reasons.items())
        else:
            head = f"skipped no rows of {self.n_rows:,}"
        return "; ".join([head] + self.notes)

    def to_dict(self) -> dict:
        return {"n_rows": self.n_rows, "n_skipped": self.total, "skipped": dict(self.reasons), "notes": list(self.notes)}


#: timestamps above these are in the next unit (unix seconds reach 1e10 only in 2286)
_TS_UNITS = ((1e17, 1e9, "nanoseconds"), (1e14, 1e6, "microseconds"), (1e11, 1e3, "milliseconds"))


def seconds_timestamps(ts: np.ndarray, skips: SkipCount, field: str) -> np.ndarray:
    """Unix timestamps in seconds from ``ts`` (float64; NaN kept).

    A column whose median is in milliseconds (or micro-, nanoseconds: above 1e11,
    1e14, 1e17, which unix seconds reach only after the year 5000) is converted, with a
    note in ``skips``; rows of such a column over 1000x below its median (seconds
    among milliseconds: they would land in 1970) become NaN and are counted. In a
    column of seconds, rows in such a unit cannot be told apart from a clock error:
    they become NaN and are counted (``"timestamps in milliseconds"``). Negative
    timestamps become NaN and are counted."""
    ts = np.asarray(ts, dtype=np.float64)
    fin = ts[np.isfinite(ts)]
    if fin.size:
        med = float(np.median(fin))
        for lim, div, unit in _TS_UNITS:
            if med > lim:
                ts = ts / div
                skips.notes.append(f"{field} converted from {unit} to seconds (median {med:.6g})")
                with np.errstate(invalid="ignore"):
                    coarse = (ts >= 0) & (ts < med / div / 1000.0)
                skips.add(f"{field} in a coarser unit than the column's {unit}", int(coarse.sum()))
                ts = np.where(coarse, np.nan, ts)
                break
        with np.errstate(invalid="ignore"):
            bad = ts > _TS_UNITS[-1][0]
            neg = ts < 0
        if bad.any() or neg.any():
            skips.add(f"{field} in milliseconds or larger units among seconds", int(bad.sum()))
            skips.add(f"negative {field}", int(neg.sum()))
            ts = np.where(bad | neg, np.nan, ts)
    return ts


def make_config(cls, config):
    """``cls()`` for None, ``config`` itself for an instance, ``cls(**config)`` for a
    dict (BadInput naming unknown fields)."""
    if config is None:
        return cls()
    if isinstance(config, cls):
        return config
    if isinstance(config, dict):
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise BadInput(f"unknown field(s) {', '.join(unknown)}", field="config",
                           fix=f"fields of {cls.__name__}: {', '.join(sorted(known))}")
        return cls(**config)
    raise BadInput(f"expected {cls.__name__} or dict, got {type(config).__name__}", field="config")


# -- the generic long format -----------------------------------------------------------


@dataclass(frozen=True)
class LongConfig:
    """Settings of the ``long`` importer. The thresholds are the labeler's own defaults
    (:class:`faultlab.labeler.LabelerConfig`), in samples instead of steps.

    Attributes:
        labeler: a :class:`~faultlab.labeler.LabelerConfig` (or dict of its fields):
            ``temporal_window_steps`` (trailing baseline, samples, 50),
            ``temporal_min_valid_steps`` (10), ``temporal_block_steps`` (5),
            ``temporal_threshold`` (1.3), ``peer_threshold`` (1.3), ``peer_min_ranks``
            (fewest components with data in the group, 2), ``mad_k`` (4.0),
            ``gap_steps`` (2), ``min_steps`` (3 samples), ``gap_s`` (0.3),
            ``min_duration_s`` (1.0), ``min_slowdown`` (1.2).
        align_s: samples are bucketed to ``floor(timestamp / align_s)`` before peers are
            compared (values in a bucket are averaged); 0 compares exact timestamps;
            None (the default) compares exact timestamps when the components share
            them, else aligns to the median sampling interval (seconds) of the metric
            (hosts sampling on their own clocks, 100 ms apart, still have peers).
        higher_is_better: metric names whose value is a speed (throughput, ...): they are
            inverted (1 / value) before judging, so larger still means slower. ().
        group_wide_fraction: when at least this fraction of a group's components are
            slow against their own history at a sample, the group as a whole is slowed
            (a ``group:NAME`` label), not each component. 0.5.
        verdict: the component verdict's settings
            (:class:`faultlab.labeler.verdict.VerdictConfig` or a dict of its fields; the
            same defaults as the ``perseus`` importer's): which components are
            fail-slow (``persistent``), from each component's median peer ratio over
            its time against all the input's components (see :func:`judge_persistence`).
        load_bins: equal-count load bins of the value-vs-load regression, for inputs
            with a ``load`` column (the ``perseus`` importer's ``n_bins``). 16.
        load_min_samples: fewest samples of a peer group (one metric) to fit that
            regression; a smaller group's values are judged as they are (the
            ``perseus`` importer's ``min_fit_samples``). 100.
        level_block_samples: a component's level is the median of the medians of
            blocks of this many consecutive samples of its peer ratio (the ``perseus``
            importer's 5-min window of 15-s samples): on a noisy component a slow
            episode in a quarter of its time would shift the median of single samples
            by half a sample's noise (1.1x at 24% noise), the median of block medians
            by far less. 20.
    """

    labeler: Any = None
    align_s: float | None = None
    higher_is_better: tuple[str, ...] = ()
    group_wide_fraction: float = 0.5
    verdict: Any = None
    load_bins: int = 16
    load_min_samples: int = 100
    level_block_samples: int = 20

    def __post_init__(self) -> None:
        from faultlab.labeler import _config

        object.__setattr__(self, "labeler", _config(self.labeler))
        object.__setattr__(self, "higher_is_better", tuple(str(m) for m in self.higher_is_better))
        if self.align_s is not None and not float(self.align_s) >= 0:
            raise BadInput(f"must be >= 0, got {self.align_s!r}", field="align_s")
        for name in ("load_bins", "load_min_samples", "level_block_samples"):
            if int(getattr(self, name)) < 1:
                raise BadInput(f"must be >= 1, got {getattr(self, name)!r}", field=name)
        if not 0.0 < float(self.group_wide_fraction) <= 1.0:
            raise BadInput(f"must be in (0, 1], got {self.group_wide_fraction!r}", field="group_wide_fraction")
        from faultlab.labeler.verdict import VerdictConfig

        object.__setattr__(self, "verdict", make_config(VerdictConfig, self.verdict))

    def to_dict(self) -> dict:
        return {"labeler": self.labeler.to_dict(), "align_s": self.align_s,
                "higher_is_better": list(self.higher_is_better), "group_wide_fraction": self.group_wide_fraction,
                "verdict": self.verdict.to_dict(), "load_bins": int(self.load_bins),
                "load_min_samples": int(self.load_min_samples), "level_block_samples": int(self.level_block_samples)}


#: upstream answer files kept beside public datasets: an importer never reads them
ANSWER_FILES = ("slow_drives.csv", "result-*", "ms-*", "mw-*")


#: answer files with an exact upstream name: refused even when given by name
_EXACT_ANSWER_FILES = ("slow_drives.csv",)


def _is_answer(f: Path) -> bool:
    return any(f.match(pat) for pat in ANSWER_FILES)


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
        skipped += [f.name for f in cands if _is_answer(f)]
        found = [f for f in cands if not _is_answer(f)]
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
    try:
        if name.endswith(".parquet"):
            import pyarrow.parquet as pq

            have = pq.ParquetFile(f).schema_arrow.names
            missing = [c for c in LONG_COLUMNS if c not in have]
            if missing:
                raise BadInput(f"{f.name} misses column(s) {', '.join(missing)}", field="long",
                               fix="a long-format file has columns " + ", ".join(LONG_COLUMNS))
            cols = list(LONG_COLUMNS) + [c for c in OPTIONAL_COLUMNS if c in have]
            strs = [c for c in ("component", "peer_group", "metric", "run_id") if c in cols]
            df = pq.read_table(f, columns=cols, read_dictionary=strs).to_pandas()
        else:
            sep = _delimiter(f)
            head = pd.read_csv(f, nrows=0, sep=sep)
            missing = [c for c in LONG_COLUMNS if c not in head.columns]
            if missing:
                raise BadInput(f"{f.name} misses column(s) {', '.join(missing)}", field="long",
                               fix="a long-format file has columns " + ", ".join(LONG_COLUMNS)
                               + " (comma- or tab-separated)")
            cols = list(LONG_COLUMNS) + [c for c in OPTIONAL_COLUMNS if c in head.columns]
            df = pd.read_csv(f, usecols=cols, sep=sep, dtype={"component": "category", "peer_group": "category",
                                                              "metric": "category"})
    except BadInput:
        raise
    except Exception as e:  # a malformed file: say which, in one line
        raise BadInput(f"{f} could not be read ({type(e).__name__}: {e})", field="PATH") from None
    df.attrs["source"] = str(f)
    return df


def _delimiter(f: Path) -> str:
    """``"\\t"`` for a TSV file (named ``.tsv``/``.tab``, or a header line with tabs and
    no commas), else ``","``."""
    name = f.name.lower()
    if name.endswith((".tsv", ".tsv.gz", ".tab")):
        return "\t"
    import gzip

    opener = gzip.open if name.endswith(".gz") else open
    with opener(f, "rt", errors="replace") as fh:
        first = fh.readline()
    return "\t" if "\t" in first and "," not in first else ","


def label_long(df: pd.DataFrame, config: LongConfig | dict | None = None, *, run_id: str = "") -> pd.DataFrame:
    """Label a long-format frame with the labeler's two views, per metric: the labels
    of :func:`label_long_components` (same arguments), without the components summary.
    """
    return label_long_components(df, config, run_id=run_id)[0]


def label_long_components(df: pd.DataFrame, config: LongConfig | dict | None = None, *,
                          run_id: str = "", skips: SkipCount | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Label a long-format frame with the labeler's two views, per metric, and judge
    each component as a whole.

    The rows are checked and prepared first (:func:`_long_rows`: the columns, numeric
    timestamps/values/loads, the rows skipped by reason, timestamps in seconds, one row
    per (component, metric, timestamp)). For each metric (name order) the samples
    become a dense ``(T, C)`` grid (:func:`_metric_grid`: T timestamps, C components in
    name order; NaN where a component has no sample), then:

    - **load** (only for a metric whose rows carry the optional ``load`` column, e.g.
      a drive's throughput beside its latency): each value is first divided by its
      peer group's expected value at that load (:func:`_relative_to_load`, the
      ``perseus`` importer's regression), so a component that is slower because it
      serves more load than its peers is not read as slow; everything below then
      judges that ratio;

    - **peer view** (:func:`_peer_view`, :mod:`faultlab.labeler.peer`'s rule): ``ratio
      = value / median of the component's peer group at that timestamp``; flagged when
      ``ratio > peer_threshold`` and ``ratio - 1 > mad_k x sigma_g`` (``sigma_g`` =
      1.4826 MAD of the group's ratios over the run) with at least ``peer_min_ranks``
      components of the group present;
    - **temporal view** (:func:`_temporal_view`,
      :func:`faultlab.labeler.temporal.trailing_baseline`): each component against its
      own trailing robust baseline (window, min_valid, threshold, mad_k, block in
      samples);
    - flags become intervals (:func:`faultlab.labeler.fusion.intervals`: ``gap_steps``,
      ``min_steps``, ``gap_s``, ``min_duration_s``). Labels, three steps in this order:
      (1) :func:`_peer_labels`: peer intervals of a component (``views``
      ``"temporal+peer"`` when its temporal flags agree, else ``"peer"``; ``slowdown``
      = median value / peer median); (2) :func:`_group_labels`: ``group:NAME``
      (``component_kind`` ``"peer_group"``, views ``"temporal"``) where at least
      ``group_wide_fraction`` of a group is up against its own history; (3)
      :func:`_own_history_labels`: a component up against its own history only
      (``views`` ``"temporal"``) outside those. For (2) and (3) ``slowdown`` = median
      value / the higher of the trailing baseline and the typical (whole-input median)
      level, so a value returning to normal after an unusually fast period is no
      slowdown. Each label needs ``slowdown >= min_slowdown``.

    Times: ``start_ts`` the first flagged timestamp, ``end_ts`` the last plus the
    median sampling interval (unix s). ``start_step``/``end_step`` are null.

    Components (:func:`_components_summary`): each sample of a component stands for
    ``[timestamp, timestamp + the metric's median sampling interval)``; the component's
    *observed time* is the union of these over all its metrics
    (:func:`_add_observed`), its *labeled time* the part of it that its own labels
    (``component_kind`` ``"component"``, any metric; not ``group:`` labels) cover. Its
    peer group is the one it has in the first metric (name order). Its level is
    gathered per metric by :func:`_add_levels`. The labeled-time fraction is judged by
    :func:`judge_persistence`.

    Returns:
        ``(labels, components)``: labels frame (LABELS columns), sorted by start_ts,
        component; components frame (:data:`COMPONENT_COLUMNS`, one row per component
        with data, sorted by ``rank``). Deterministic (whatever the input's row order).

    Raises:
        BadInput for a missing column, non-numeric timestamps/values/loads or a bad config field.
    """
    cfg = make_config(LongConfig, config)
    lc = cfg.labeler
    skips = skips if skips is not None else SkipCount(len(df))
    rows = _long_rows(df, skips)
    label_rows: list[dict] = []
    cover: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}  # component -> observed intervals per metric
    levels: dict[str, list[np.ndarray]] = {}  # component -> its peer ratios, per metric
    group_of: dict[str, str] = {}
    for mcode in _metric_order(rows):
        grid = _metric_grid(rows, mcode, cfg, skips)
        _add_observed(grid, cover, group_of)
        peer = _peer_view(grid, lc)
        _add_levels(grid, peer, cfg, levels)
        temporal = _temporal_view(grid, lc)
        sink = _LabelSink(run_id, grid, lc, label_rows)
        labeled = _peer_labels(grid, peer, temporal, lc, sink)
        group_wide = _group_labels(grid, temporal, cfg, sink)
        _own_history_labels(grid, peer, temporal, labeled | group_wide, lc, sink)
    out = _labels_frame(label_rows)
    return out, _components_summary(out, cover, group_of, levels, cfg)


# -- the steps of label_long_components ------------------------------------------------


@dataclass
class _LongRows:
    """The rows of a long-format input, as flat arrays of the input's length N, and
    which of them are kept (:func:`_long_rows`).

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


def _long_rows(df: pd.DataFrame, skips: SkipCount) -> _LongRows:
    """The checked rows of a long-format frame: the columns (:func:`_check_long_columns`),
    numeric timestamps and values (:func:`_numeric`), the rows left out by reason
    (:func:`_keep_rows`), the rows of a metric with a load that have none
    (:func:`_keep_load_rows`), timestamps in seconds (:func:`seconds_timestamps`),
    and one row per (component, metric, timestamp) (:func:`_drop_duplicates`); every
    row left out counted in ``skips``.

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
    return _LongRows(ok=ok, ts=ts, val=val, comp=comp, comp_names=comp_names, grp=grp, grp_names=grp_names,
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


def _metric_order(rows: _LongRows) -> list[int]:
    """The codes of the metrics with kept rows, in name order."""
    return sorted(set(np.unique(rows.met[rows.ok]).tolist()), key=lambda k: rows.met_names[k])


@dataclass
class _Grid:
    """One metric's samples as a dense ``(T, C)`` grid (:func:`_metric_grid`).

    Attributes:
        metric: the metric's name.
        at_load: whether the values are relative to the peer group's value at the
            sample's load.
        X: (T, C) float64, the value of component c at timestamp t (the mean of the
            samples in an aligned bucket; NaN where none).
        u_t: (T,) float64 timestamps (unix s, aligned), ascending.
        names: (C,) object, component names in name order.
        groups: (C,) object, each component's peer group (the first it was seen with).
        dt: the median sampling interval (s; 0 for one timestamp).
    """

    metric: str
    at_load: bool
    X: np.ndarray
    u_t: np.ndarray
    names: np.ndarray
    groups: np.ndarray
    dt: float

    @property
    def t0(self) -> np.ndarray:
        """(T,) start of each sample's time, unix s."""
        return self.u_t

    @property
    def t1(self) -> np.ndarray:
        """(T,) end of each sample's time (start + ``dt``), unix s."""
        return self.u_t + self.dt

    def group_columns(self) -> list[tuple[str, np.ndarray]]:
        """``(peer group, its column indices)`` for each peer group, in name order."""
        return [(g, np.flatnonzero(self.groups == g)) for g in sorted(set(self.groups.tolist()))]


def _metric_grid(rows: _LongRows, mcode: int, cfg: LongConfig, skips: SkipCount) -> _Grid:
    """The ``(T, C)`` grid of metric ``mcode``: its values (:func:`_metric_values`),
    timestamps bucketed to ``align_s`` (:func:`_auto_align` when None), components in
    name order, values in a cell averaged (:func:`_dense`), each component's first peer
    group (:func:`_first_groups`) and the median sampling interval (s)."""
    metric = rows.met_names[mcode]
    m = rows.ok & (rows.met == mcode)
    at_load = mcode in rows.load_metrics
    v = _metric_values(rows, m, metric, at_load, cfg, skips)
    t = rows.ts[m]
    align = cfg.align_s if cfg.align_s is not None else _auto_align(t, rows.comp[m])
    if align > 0:
        t = np.floor(t / align) * align
    u_t, ti = np.unique(t, return_inverse=True)
    ci, u_c = _name_ordered(rows.comp[m], rows.comp_names)
    X = _dense(v, ti, ci, len(u_t), len(u_c))
    groups = _first_groups(ci, rows.grp[m], rows.grp_names, len(u_c))
    dt = float(np.median(np.diff(u_t))) if len(u_t) > 1 else 0.0
    return _Grid(metric=metric, at_load=at_load, X=X, u_t=u_t, names=u_c, groups=groups, dt=dt)


def _metric_values(rows: _LongRows, m: np.ndarray, metric: str, at_load: bool, cfg: LongConfig,
                   skips: SkipCount) -> np.ndarray:
    """The values of the rows ``m`` ((N,) bool) of one metric, larger = slower: 1 /
    value for a ``higher_is_better`` metric (NaN where not > 0), then, for a metric
    with a load, relative to its peer group's value at that load
    (:func:`_relative_to_load`)."""
    v = rows.val[m]
    if metric in cfg.higher_is_better:
        with np.errstate(divide="ignore"):
            v = np.where(v > 0, 1.0 / v, np.nan)
    if at_load:  # the value relative to its peer group's value at the same load
        v = _relative_to_load(v, rows.load[m], rows.grp[m], cfg, skips, metric)
    return v


def _name_ordered(codes: np.ndarray, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(ci, u_c)``: each sample's column ((n,) int, components in name order:
    deterministic whatever the input's order) and the (C,) object component names."""
    u_code, ci = np.unique(codes, return_inverse=True)
    by_name = np.argsort(np.array([names[k] for k in u_code.tolist()], dtype=object), kind="stable")
    rank_of = np.empty_like(by_name)
    rank_of[by_name] = np.arange(len(by_name))
    u_c = np.array([names[k] for k in u_code[by_name].tolist()], dtype=object)
    return rank_of[ci], u_c


def _dense(v: np.ndarray, ti: np.ndarray, ci: np.ndarray, T: int, C: int) -> np.ndarray:
    """(T, C) float64: the mean of the finite values ``v`` ((n,)) at row ``ti`` and
    column ``ci`` of each sample; NaN where a cell has none."""
    fin = np.isfinite(v)
    flat = ti[fin] * C + ci[fin]
    sums = np.bincount(flat, weights=v[fin], minlength=T * C).reshape(T, C)
    cnts = np.bincount(flat, minlength=T * C).astype(np.float64).reshape(T, C)
    del flat
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnts > 0, sums / cnts, np.nan)


def _first_groups(ci: np.ndarray, grp: np.ndarray, grp_names: list[str], C: int) -> np.ndarray:
    """(C,) object: each column's peer group name, the first one (in row order of the
    samples ``ci``/``grp``, (n,)) it was seen with."""
    first = np.full(C, -1, dtype=np.int64)
    order = np.arange(len(ci))[::-1]
    first[ci[order]] = order
    return np.array([grp_names[k] for k in grp[first].tolist()], dtype=object)


def _add_observed(grid: _Grid, cover: dict, group_of: dict) -> None:
    """Add each component's observed time in this metric (its samples' ``[t, t + dt)``
    merged, unix s) to ``cover`` (component -> list of (starts, ends)), and its peer
    group to ``group_of`` when it has none yet."""
    for j in range(len(grid.names)):
        tj = grid.u_t[~np.isnan(grid.X[:, j])]
        if tj.size:
            name = str(grid.names[j])
            cover.setdefault(name, []).append(_union(tj, tj + grid.dt))
            group_of.setdefault(name, str(grid.groups[j]))


@dataclass
class _Peer:
    """The peer view of a grid (:func:`_peer_view`); every array (T, C) unless said.

    Attributes:
        med: leave-one-out median of the component's peer group (its peers without itself).
        cnt: int64, components of the group with a value at that timestamp.
        sigma: (C,) 1.4826 MAD of the group's ratios (the same for a group's columns).
        ratio: value / ``med`` (NaN where not finite).
        flag: bool, slow against its peers.
    """

    med: np.ndarray
    cnt: np.ndarray
    sigma: np.ndarray
    ratio: np.ndarray
    flag: np.ndarray


def _peer_view(grid: _Grid, lc) -> _Peer:
    """Each value against its peer group's leave-one-out median at the same timestamp
    (:func:`_peer_medians`); flagged when ``ratio > peer_threshold`` and ``ratio - 1 >
    mad_k x sigma_g`` (:func:`_group_sigma`) with at least ``peer_min_ranks``
    components of the group present."""
    med, cnt = _peer_medians(grid)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = grid.X / med
    ratio = np.where(np.isfinite(ratio), ratio, np.nan)
    sigma = _group_sigma(grid, ratio)
    with np.errstate(invalid="ignore"):
        flag = (ratio > lc.peer_threshold) & ((ratio - 1.0) > lc.mad_k * sigma[None, :])
    flag &= (cnt >= lc.peer_min_ranks) & ~np.isnan(ratio)
    return _Peer(med=med, cnt=cnt, sigma=sigma, ratio=ratio, flag=flag)


def _peer_medians(grid: _Grid) -> tuple[np.ndarray, np.ndarray]:
    """``(med, cnt)``, (T, C) each: the median of each component's peer group without
    itself, and the count (int64) of the group's components with a value."""
    from faultlab.labeler.temporal import loo_median, nanmedian

    T, C = grid.X.shape
    med = np.full((T, C), np.nan)
    cnt = np.zeros((T, C), dtype=np.int64)
    for _, cols in grid.group_columns():
        _, gn = nanmedian(grid.X[:, cols], axis=1)
        med[:, cols] = loo_median(grid.X[:, cols])  # its peers without itself
        cnt[:, cols] = gn[:, None]
    return med, cnt


def _group_sigma(grid: _Grid, ratio: np.ndarray) -> np.ndarray:
    """(C,) per peer group, as the peer view: 1.4826 x the median over the group's
    components of each one's MAD of its ratio (``(T, C)``) about its own median over
    time (a component slow all along does not raise it); 0 for a group without a
    ratio."""
    from faultlab.labeler.temporal import MAD_TO_SIGMA, nanmedian

    sigma = np.zeros(len(grid.names))
    for _, cols in grid.group_columns():
        cm, cn = nanmedian(ratio[:, cols], axis=0)
        cmad, _ = nanmedian(np.abs(ratio[:, cols] - cm[None, :]), axis=0)
        if (cn > 0).any():
            sigma[cols] = MAD_TO_SIGMA * float(np.median(cmad[cn > 0]))
    return sigma


def _add_levels(grid: _Grid, peer: _Peer, cfg: LongConfig, levels: dict) -> None:
    """Add each component's peer ratios of this metric, as ``level_block_samples``
    block medians (:func:`_block_medians`), to ``levels`` (component -> list of
    arrays). With a load, its value relative to the group's value at that load already
    is that ratio (against a fit that leaves slow samples out): dividing again by the
    peers' median at each timestamp would read a healthy drive low beside several
    slow ones."""
    lev = grid.X if grid.at_load else peer.ratio
    for j in range(len(grid.names)):
        rj = lev[:, j]
        blocks = _block_medians(rj[np.isfinite(rj)], int(cfg.level_block_samples))
        levels.setdefault(str(grid.names[j]), []).append(blocks)


@dataclass
class _Temporal:
    """The temporal view of a grid (:func:`_temporal_view`), (T, C) each.

    Attributes:
        base: the trailing robust baseline (NaN where too few valid samples).
        flag: bool, up against its own history.
        ratio: value / ``base``.
    """

    base: np.ndarray
    flag: np.ndarray
    ratio: np.ndarray


def _temporal_view(grid: _Grid, lc) -> _Temporal:
    """Each component against its own trailing robust baseline
    (:func:`faultlab.labeler.temporal.trailing_baseline`: window, min_valid,
    threshold, mad_k, block, in samples)."""
    from faultlab.labeler.temporal import trailing_baseline

    base, _, flag = trailing_baseline(grid.X, window=lc.temporal_window_steps, min_valid=lc.temporal_min_valid_steps,
                                      threshold=lc.temporal_threshold, mad_k=lc.mad_k, block=lc.temporal_block_steps)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = grid.X / base
    return _Temporal(base=base, flag=flag, ratio=ratio)


class _LabelSink:
    """The label rows of one metric's grid: :meth:`intervals` turns a (T,) flag column
    into sample intervals, :meth:`add` appends one LABELS row to ``rows``."""

    def __init__(self, run_id: str, grid: _Grid, lc, rows: list[dict]) -> None:
        self.run_id, self.grid, self.lc, self.rows = run_id, grid, lc, rows
        self.t0, self.t1 = grid.t0, grid.t1

    def intervals(self, flags: np.ndarray) -> list[tuple[int, int]]:
        """Inclusive ``(i0, i1)`` sample intervals of ``flags`` ((T,) bool;
        :func:`faultlab.labeler.fusion.intervals` with ``gap_steps``, ``min_steps``,
        ``gap_s``, ``min_duration_s``)."""
        from faultlab.labeler.fusion import intervals

        lc = self.lc
        return intervals(flags, lc.gap_steps, lc.min_steps, t0=self.t0, t1=self.t1, gap_s=lc.gap_s,
                         min_s=lc.min_duration_s)

    def add(self, component: str, kind: str, i0: int, i1: int, slowdown: float, views: str, thr: float, n_flag,
            ev: dict) -> None:
        """One label of samples ``i0..i1``: ``start_ts`` = t0[i0], ``end_ts`` = t1[i1]
        (unix s), ``evidence`` = ``ev`` and the metric, sample counts, threshold and
        ``relative_to_load``."""
        from faultlab.labeler.fusion import _confidence, label_row

        lc = self.lc
        n = i1 - i0 + 1
        ev.update({"metric": self.grid.metric, "n_samples": n, "n_flagged": int(n_flag), "threshold": thr,
                   "relative_to_load": self.grid.at_load})
        self.rows.append(label_row(self.run_id, component, kind, self.t0[i0], self.t1[i1], pd.NA, pd.NA, slowdown,
                                   views, _confidence(float(slowdown), thr, n, lc.min_steps, views), ev))


def _peer_labels(grid: _Grid, peer: _Peer, temporal: _Temporal, lc, sink: _LabelSink) -> np.ndarray:
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
            r = _nanmed(ratio[sl, j])
            views = "temporal+peer" if temporal.flag[sl, j].any() else "peer"
            labeled[sl, j] = True
            if r >= lc.min_slowdown:
                sink.add(str(grid.names[j]), "component", i0, i1, r, views, lc.peer_threshold, peer.flag[sl, j].sum(),
                         {"peer_group": str(grid.groups[j]), "peer_ratio": r, "peer_median": _nanmed(peer.med[sl, j]),
                          "median_value": _nanmed(X[sl, j]), "temporal_ratio": _nanmed(temporal.ratio[sl, j])})
    return labeled


def _group_labels(grid: _Grid, temporal: _Temporal, cfg: LongConfig, sink: _LabelSink) -> np.ndarray:
    """Label step 2: a whole group slowed against its own history. Where at least
    ``group_wide_fraction`` of a group's present components (and at least
    ``peer_min_ranks``) are up against their own history, an interval is a
    ``group:NAME`` label (``component_kind`` ``"peer_group"``, ``views``
    ``"temporal"``; ``slowdown`` = the group's median value / the higher of its median
    baseline and its typical level) when ``slowdown >= min_slowdown``. Returns (T, C)
    bool: the group-wide samples of each component's group, which step 3 leaves
    alone."""
    from faultlab.labeler.temporal import nanmedian

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
        g_typical = _nanmed(gm_now)
        for i0, i1 in sink.intervals(wide):
            sl = slice(i0, i1 + 1)
            r = _ratio(gm_now[sl], [np.nanmax([_nanmed(gm_base[sl]), g_typical])])
            if np.isfinite(r) and r >= lc.min_slowdown:
                sink.add(f"group:{g}", "peer_group", i0, i1, r, "temporal", lc.temporal_threshold, wide[sl].sum(),
                         {"peer_group": str(g), "n_components": int(len(cols)), "median_value": _nanmed(gm_now[sl]),
                          "baseline": _nanmed(gm_base[sl])})
    return gw


def _own_history_labels(grid: _Grid, peer: _Peer, temporal: _Temporal, taken: np.ndarray, lc,
                        sink: _LabelSink) -> None:
    """Label step 3: a component slow against its own history only: its temporal
    flags outside ``taken`` ((T, C) bool, the samples of steps 1 and 2, dilated by
    ``gap_steps``). The reference is the higher of its trailing baseline and its
    typical level over the whole input (a value coming back to normal after an
    unusually fast period is no slowdown); a label (``views`` ``"temporal"``) when
    median value / reference ``>= min_slowdown``."""
    from faultlab.labeler.fusion import _dilate
    from faultlab.labeler.temporal import nanmedian

    X, base, tflag = grid.X, temporal.base, temporal.flag
    typical, _ = nanmedian(X, axis=0)
    for j in range(X.shape[1]):
        free = tflag[:, j] & ~_dilate(taken[:, j], lc.gap_steps)
        for i0, i1 in sink.intervals(free):
            sl = slice(i0, i1 + 1)
            ref = np.nanmax([_nanmed(base[sl, j]), typical[j]])
            r = _ratio(X[sl, j], [ref])
            if np.isfinite(r) and r >= lc.min_slowdown:
                sink.add(str(grid.names[j]), "component", i0, i1, r, "temporal", lc.temporal_threshold,
                         tflag[sl, j].sum(),
                         {"peer_group": str(grid.groups[j]), "baseline": ref, "trailing_baseline": _nanmed(base[sl, j]),
                          "typical_value": float(typical[j]), "median_value": _nanmed(X[sl, j]),
                          "peer_ratio": _nanmed(peer.ratio[sl, j])})


def _labels_frame(rows: list[dict]) -> pd.DataFrame:
    """The LABELS frame of the label rows, sorted by ``start_ts``, ``component``
    (stable); the empty LABELS frame for none."""
    from faultlab.labeler.fusion import _empty_labels, _typed

    if rows:
        frame = pd.DataFrame(rows).sort_values(["start_ts", "component"], kind="mergesort")
        return _typed(frame.reset_index(drop=True))
    return _empty_labels()


def _components_summary(labels: pd.DataFrame, cover: dict, group_of: dict, levels: dict,
                        cfg: LongConfig) -> pd.DataFrame:
    """The components summary (:data:`COMPONENT_COLUMNS`): observed and labeled time
    (:func:`_component_time`), each component's ``level`` (the median of its block
    medians over all its metrics; NaN without any) and the verdict
    (:func:`judge_persistence`)."""
    comps = _component_time(labels, cover, group_of)
    comps["level"] = [_nanmed(np.concatenate(levels[c])) if c in levels else float("nan")
                      for c in comps["component"].tolist()]
    return judge_persistence(comps, cfg)


#: columns of the components summary (:func:`label_long_components`, ``components.parquet``)
COMPONENT_COLUMNS = ("component", "peer_group", "observed_s", "labeled_s", "labeled_fraction", "n_labels",
                     "median_slowdown", "level", "share", "group_size", "level_z", "share_z", "bulk_level",
                     "bulk_share", "failslow", "persistent", "rank")


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals ``[starts[i], ends[i])`` as sorted disjoint intervals."""
    s = np.asarray(starts, dtype=np.float64).ravel()
    e = np.asarray(ends, dtype=np.float64).ravel()
    if s.size == 0:
        return s, e
    o = np.lexsort((e, s))
    s, e = s[o], e[o]
    reach = np.maximum.accumulate(e)
    new = np.concatenate([[True], s[1:] > reach[:-1]])
    first = np.flatnonzero(new)
    last = np.concatenate([first[1:] - 1, [s.size - 1]])
    return s[first], reach[last]


def _length(starts: np.ndarray, ends: np.ndarray) -> float:
    s, e = _union(starts, ends)
    return float(np.sum(e - s)) if s.size else 0.0


def _component_time(labels: pd.DataFrame, cover: dict, group_of: dict) -> pd.DataFrame:
    """Per component with data: observed and labeled time (s), labels, median slowdown."""
    own = labels[labels["component_kind"] == "component"] if len(labels) else labels
    by_comp = {str(k): g for k, g in own.groupby(own["component"].astype(str), sort=True)} if len(own) else {}
    recs = []
    for name in sorted(cover):
        obs_s = np.concatenate([a for a, _ in cover[name]])
        obs_e = np.concatenate([b for _, b in cover[name]])
        observed = _length(obs_s, obs_e)
        g = by_comp.get(name)
        if g is not None and len(g):
            ls, le = g["start_ts"].to_numpy(np.float64), g["end_ts"].to_numpy(np.float64)
            # |labels ∩ observed| = |labels| + |observed| - |labels ∪ observed|
            labeled = _length(ls, le) + observed - _length(np.concatenate([ls, obs_s]), np.concatenate([le, obs_e]))
            labeled = min(max(labeled, 0.0), observed)
            n, med = len(g), float(np.median(g["slowdown"].to_numpy(np.float64)))
        else:
            labeled, n, med = 0.0, 0, float("nan")
        recs.append({"component": name, "peer_group": group_of[name], "observed_s": observed, "labeled_s": labeled,
                     "labeled_fraction": labeled / observed if observed > 0 else 0.0, "n_labels": n,
                     "median_slowdown": med})
    cols = ["component", "peer_group", "observed_s", "labeled_s", "labeled_fraction", "n_labels", "median_slowdown"]
    return pd.DataFrame(recs, columns=cols)


def judge_persistence(components: pd.DataFrame, config: LongConfig | dict | None = None) -> pd.DataFrame:
    """Judge which components are fail-slow as a whole (``persistent``), with the
    component verdict shared with the ``perseus`` importer
    (:func:`faultlab.labeler.verdict.judge`).

    Each component's ``level`` (the median over its time of its peer ratio, value /
    the leave-one-out median of its peer group at the same timestamp, or, for a metric
    with a ``load``, value / the group's value at that load; taken as the median of
    ``level_block_samples``-sample block medians, see :class:`LongConfig`) is judged
    against the bulk of all the input's components (a robust z-score on a log scale,
    at least ``verdict.z``, and ``level >= verdict.min_level``); its ``share`` (the
    labeled-time fraction, time covered by its own labels / time it has data) is the
    evidence of how long it was slow and orders the ranking. Transient labels on a
    component (a slow episode in a quarter of its time) leave its level near 1: no
    verdict.

    Args:
        components: one row per component, columns ``component, peer_group,
            labeled_fraction, level`` (others are kept).
        config: a :class:`LongConfig` (or dict of its fields) for ``verdict``.

    Returns:
        a copy with ``share`` (= labeled_fraction), ``group_size`` (components in the
        peer group), the verdict's columns (``level_z``, ``share_z``, ``bulk_level``,
        ``bulk_share``, ``failslow``, ``rank``; 1 = most suspect) and ``persistent``
        (= ``failslow``), sorted by rank, index reset. Deterministic.

    Raises:
        BadInput for a missing column or a bad config field.
    """
    from faultlab.labeler.verdict import judge

    cfg = make_config(LongConfig, config)
    missing = [c for c in ("component", "peer_group", "labeled_fraction", "level") if c not in components.columns]
    if missing:
        raise BadInput(f"missing column(s) {', '.join(missing)}", field="components")
    out = components.copy()
    out["component"] = out["component"].astype(str)
    out["peer_group"] = out["peer_group"].astype(str)
    out["labeled_fraction"] = pd.to_numeric(out["labeled_fraction"], errors="coerce").fillna(0.0).astype(np.float64)
    out["share"] = out["labeled_fraction"]
    out["group_size"] = out.groupby("peer_group")["component"].transform("size").astype(np.int64)
    out = out.sort_values("component", kind="mergesort")
    out = judge(out, cfg.verdict)
    out["persistent"] = out["failslow"]
    first = [c for c in COMPONENT_COLUMNS if c in out.columns]
    return out[first + [c for c in out.columns if c not in first]]


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


def _block_medians(x: np.ndarray, k: int) -> np.ndarray:
    """Medians of consecutive blocks of ``k`` values of ``x`` (1-D, finite, in time
    order); the last block holds the remainder. Empty for an empty ``x``."""
    n = x.size
    if n == 0:
        return x
    full = (n // k) * k
    meds = [np.median(x[:full].reshape(-1, k), axis=1)] if full else []
    if full < n:
        meds.append(np.array([np.median(x[full:])]))
    return np.concatenate(meds)


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


def _relative_to_load(v: np.ndarray, load: np.ndarray, grp: np.ndarray, cfg: LongConfig, skips: SkipCount,
                      metric: str) -> np.ndarray:
    """``v`` / its peer group's expected value at the sample's load, per peer group
    (codes ``grp``): the ``perseus`` importer's binned-median regression
    (:func:`faultlab.labeler.perseus.relative_to_load`, ``cfg.load_bins`` bins, fitted
    again without the samples 3 sigma off), over all of the group's samples of the
    metric. So a component that serves more load than its peers, and is slower for it,
    is not read as slow (latency grows with throughput). A group with fewer than
    ``cfg.load_min_samples`` finite samples keeps its values; a note in ``skips`` says
    how many groups were fitted. NaN where the expected value is not > 0."""
    from faultlab.labeler.perseus import relative_to_load

    out = v.astype(np.float64, copy=True)
    fin = np.isfinite(v) & np.isfinite(load)
    order = np.argsort(grp, kind="stable")
    gs = grp[order]
    starts = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]]) if gs.size else np.zeros(0, dtype=np.int64)
    ends = np.r_[starts[1:], gs.size]
    fitted = 0
    for a, e in zip(starts.tolist(), ends.tolist()):
        idx = order[a:e]
        idx = idx[fin[idx]]
        if idx.size < cfg.load_min_samples:
            continue
        with np.errstate(invalid="ignore", divide="ignore"):
            r, _ = relative_to_load(load[idx], v[idx], int(cfg.load_bins),
                                    max(int(cfg.load_bins), int(cfg.load_min_samples) // 2))
        out[idx] = np.where(np.isfinite(r) & (r > 0), r, np.nan)
        fitted += 1
    skips.notes.append(f"{metric} judged relative to its peer group's value at the same load "
                       f"({fitted} of {len(starts)} peer group(s) fitted)")
    return out


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


def _auto_align(t: np.ndarray, comp: np.ndarray) -> float:
    """The bucket (seconds) for ``align_s=None``: 0 when most samples share their
    timestamp with another component, else the median over components of their median
    sampling interval (0 when that is unknown)."""
    if t.size < 2 or np.unique(comp).size < 2:
        return 0.0
    _, inv, cnt = np.unique(t, return_inverse=True, return_counts=True)
    if float(np.mean(cnt[inv] >= 2)) >= 0.5:
        return 0.0
    order = np.lexsort((t, comp))
    tc, cc = t[order], comp[order]
    d = np.diff(tc)
    same = (np.diff(cc) == 0) & (d > 0)
    return float(np.median(d[same])) if same.any() else 0.0


def _codes(col: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes (-1 for missing) and names (str) of a string-like column, without
    materializing one Python string per row."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy(dtype=np.int64), [str(x) for x in col.cat.categories]
    codes, uniques = pd.factorize(col, use_na_sentinel=True)
    return codes.astype(np.int64, copy=False), [str(x) for x in uniques]


def _nanmed(a) -> float:
    a = np.asarray(a, dtype=np.float64).ravel()
    a = a[~np.isnan(a)]
    return float(np.median(a)) if a.size else float("nan")


def _ratio(values, base) -> float:
    v, b = _nanmed(values), _nanmed(base)
    if not (np.isfinite(v) and np.isfinite(b)) or b <= 0:
        return float("nan")
    return v / b


def import_long(path: str | Path, config: LongConfig | dict | None = None) -> ImportResult:
    """Import a generic long-format file (CSV or Parquet; columns ``component,
    peer_group, timestamp`` [unix s], ``metric, value`` [larger = slower], optional
    ``run_id`` and ``load`` [the load the component served, e.g. bytes/s: the value is
    judged against its peer group's value at that load]) and label it with
    :func:`label_long`.

    Returns:
        :class:`ImportResult` (``whatif`` None: without a job's step structure no what-if
        applies; ``components`` the components summary, ``info["persistent"]`` the
        names of the persistent components by rank). ``run_id`` is the file's single
        ``run_id`` value, else the file stem.

    Raises:
        BadInput for a missing file or column, non-numeric values or a bad config field.
    """
    cfg = make_config(LongConfig, config)
    df = read_long(path)
    src = Path(df.attrs.get("source", str(path)))
    run_id = src.name.split(".")[0]
    ids: list[str] = []
    if "run_id" in df.columns:
        ids = [str(x) for x in pd.unique(df["run_id"].dropna())]
        if len(ids) == 1:
            run_id = ids[0]
    skips = SkipCount(len(df))
    if len(ids) > 1:  # runs are labeled apart: the same component in two runs is two series
        labels, comps = _label_each_run(df, cfg, run_id, skips)
    else:
        labels, comps = label_long_components(df, cfg, run_id=run_id, skips=skips)
    info = {"n_rows": int(len(df)), "n_components": int(df["component"].nunique()),
            "n_metrics": int(df["metric"].nunique()), "source": str(src), "config": cfg.to_dict(),
            "persistent": comps.loc[comps["persistent"], "component"].tolist(),
            "skipped": skips.to_dict(), "skipped_line": skips.line()}
    return ImportResult(format="long", labels=labels, whatif=None, info=info, components=comps)


def _label_each_run(df: pd.DataFrame, cfg: "LongConfig", default: str, skips: SkipCount, *,
                    prefix: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`label_long_components` on each ``run_id`` of ``df`` apart (rows without
    one are run ``default``), each component named ``RUN/component`` when ``prefix``;
    the labels and the components summaries (a ``run_id`` column first) of every run,
    concatenated."""
    rid = df["run_id"].astype(object).where(df["run_id"].notna(), default).astype(str)
    labs, comps = [], []
    for run in sorted(pd.unique(rid).tolist()):
        d = df[(rid == run).to_numpy()].reset_index(drop=True)
        if prefix:
            d["component"] = run + "/" + d["component"].astype(str)
        lab, comp = label_long_components(d, cfg, run_id=run, skips=skips)
        comp.insert(0, "run_id", run)
        labs.append(lab)
        comps.append(comp)
    labels = pd.concat([x for x in labs if len(x)], ignore_index=True) if any(len(x) for x in labs) else labs[0]
    return labels, pd.concat(comps, ignore_index=True)


# -- Alibaba PAI mini-batch times (alibaba/clusterdata, as published) ------------------

PAI_COLUMNS = ("worker", "time", "batch_time_norm")


def numbers_or_refuse(values: pd.Series, present: np.ndarray, *, field: str, where: str, fix: str,
                      at=lambda i: f"at row {i}") -> np.ndarray:
    """``values`` as float64 (NaN where empty). Raises BadInput (``field``) naming
    ``where`` (the file), the count and the first value that is ``present`` ((N,) bool:
    not an empty value, which the caller counts as n/a) yet no number, placed by
    ``at(row)`` (e.g. the CSV line)."""
    v = pd.to_numeric(values, errors="coerce").to_numpy(np.float64)
    bad = np.flatnonzero(np.isnan(v) & present)
    if bad.size:
        i = int(bad[0])
        raise BadInput(f"{where}: {bad.size} value(s) are not numbers, e.g. {values.iloc[i]!r} {at(i)}", field=field, fix=fix)
    return v


def read_pai(path: str | Path) -> pd.DataFrame:
    """Per-worker mini-batch times of PAI training jobs as alibaba/clusterdata publishes
    them (``cluster-trace-gpu-v2020/mini-batch-time/job_N_norm.csv``: an unnamed index,
    ``worker``, ``gpu`` (percent of one GPU requested), ``time`` (s from the job's
    start), ``batch_time_norm`` (the mini-batch time normalized to 0-1000 per job: a
    duration, larger is slower)), as a long-format frame: ``component`` ``worker:N``,
    ``peer_group`` the job (its workers do the same work), ``timestamp`` = ``time``,
    ``metric`` ``batch_time_norm``, ``run_id`` the job. ``path`` is one file or a folder
    of ``job_*.csv`` files (every job; each job its own peer group).

    Raises BadInput naming the file for a missing file or column."""
    p = Path(path)
    if not p.exists():
        raise BadInput(f"{p} does not exist", field="PATH")
    files = sorted(p.glob("job_*.csv")) if p.is_dir() else [p]
    if not files:
        raise BadInput(f"{p} holds no job_*.csv file", field="PATH",
                       fix="give alibaba/clusterdata's mini-batch-time folder or one job_N_norm.csv")
    parts, jobs = [], {}
    for f in files:
        try:
            d = pd.read_csv(f)
        except Exception as e:
            raise BadInput(f"{f} could not be read ({type(e).__name__}: {e})", field="PATH") from None
        missing = [c for c in PAI_COLUMNS if c not in d.columns]
        if missing:
            raise BadInput(f"{f.name} misses column(s) {', '.join(missing)}", field="pai-minibatch",
                           fix="a PAI mini-batch file has columns worker, gpu, time, batch_time_norm")
        job = f.name.split(".")[0].replace("_norm", "")
        if job in jobs:
            raise BadInput(f"{jobs[job].name} and {f.name} are both job {job}", field="PATH",
                           fix="keep one file per job in the folder (job_N_norm.csv as published)")
        jobs[job] = f
        for col, fix in (("time", "seconds from the job's start"), ("batch_time_norm", "a number, larger is slower")):
            numbers_or_refuse(d[col], d[col].notna().to_numpy(), field=col, where=f.name, fix=fix,
                              at=lambda i: f"at CSV line {i + 2}")
        parts.append(pd.DataFrame({"component": "worker:" + d["worker"].astype(str), "peer_group": job,
                                   "timestamp": d["time"], "metric": "batch_time_norm",
                                   "value": d["batch_time_norm"], "run_id": job}))
    df = pd.concat(parts, ignore_index=True)
    df.attrs["source"] = str(p)
    return df


def import_pai(path: str | Path, config: LongConfig | dict | None = None) -> ImportResult:
    """Import PAI mini-batch times (:func:`read_pai`) and label them like any long-format
    input (:func:`label_long_components`, the same defaults): each job separately
    (``run_id`` the job; a worker's ``component`` is ``JOB/worker:N`` when the input
    holds several jobs). A worker steadily slower than its peers by less than the peer
    threshold (1.3x) is no episode; a straggler episode is a peer (or temporal) label.

    Returns:
        :class:`ImportResult` (format ``pai-minibatch``): labels of every job, the
        components summary of every job (``run_id`` column added), ``info`` per job.
    """
    cfg = make_config(LongConfig, config)
    df = read_pai(path)
    jobs = sorted(pd.unique(df["run_id"]).tolist())
    skips = SkipCount(len(df))
    labels, comps = _label_each_run(df, cfg, jobs[0], skips, prefix=len(jobs) > 1)
    per = {}
    for job in jobs:
        lab = labels[labels["run_id"].astype(str) == job] if len(labels) else labels
        comp = comps[comps["run_id"] == job]
        per[job] = {"n_labels": int(len(lab)), "labeled": sorted(set(lab["component"].astype(str))),
                    "failslow": comp.loc[comp["persistent"], "component"].tolist(),
                    "level_by_worker": {str(r.component): round(float(r.level), 4) for r in comp.itertuples()}}
    info = {"n_rows": int(len(df)), "source": df.attrs["source"], "jobs": per, "config": cfg.to_dict(),
            "skipped": skips.to_dict(), "skipped_line": skips.line()}
    return ImportResult(format="pai-minibatch", labels=labels, whatif=None, info=info,
                        components=comps)


# -- registry and output ---------------------------------------------------------------


def _perseus(path, config=None):
    from faultlab.labeler.perseus import import_perseus

    return import_perseus(path, config)


def _trace(path, config=None):
    from faultlab.labeler.trace import import_trace

    return import_trace(path, config)


#: format name -> importer ``(path, config=None) -> ImportResult``
FORMATS: dict[str, Callable[..., ImportResult]] = {
    "long": import_long,
    "pai-minibatch": import_pai,
    "perseus": _perseus,
    "straggler-trace": _trace,
}


def import_path(fmt: str, path: str | Path, config=None) -> ImportResult:
    """Run the importer of format ``fmt`` on ``path`` (a file or a dataset folder).

    Raises:
        BadInput naming ``--import`` and the known formats for an unknown format; the
        importer's BadInput for bad input.
    """
    if fmt not in FORMATS:
        raise BadInput(f"unknown format {fmt!r}", field="--import", fix="formats: " + ", ".join(sorted(FORMATS)))
    return FORMATS[fmt](path, config)


#: files an importer may write into its output folder (:func:`write_outputs`); one
#: that a new result does not have is removed, so a re-used folder keeps no stale one
OUTPUT_FILES = ("labels.parquet", "whatif.json", "components.parquet", "drives.json", "import.json")


def write_outputs(result: ImportResult, out_dir: str | Path) -> dict[str, Path]:
    """Write ``labels.parquet`` (faultlab.schema.LABELS), ``import.json`` (the format and
    the result's ``info``: source, counts, the rows skipped by reason), ``whatif.json``
    when the result has one, ``components.parquet`` when it has a components summary, and the result's
    extra JSON files into ``out_dir`` (created), all or nothing
    (:func:`faultlab.rundir.write_together`): every file goes to a temporary file
    first and all are renamed into place only when all are written; the
    :data:`OUTPUT_FILES` of an earlier import that this result does not have (a
    ``whatif.json`` when this one has no what-if, ...) are removed in the same step.
    Returns ``{file name: path}``.

    Raises:
        OSError when the folder cannot be written; its files are then as before.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from faultlab import schema
    from faultlab.rundir import write_together

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    labels = schema.to_table("labels", result.labels)
    writers: dict[str, Callable[[Path], Any]] = {"labels.parquet": lambda tmp: pq.write_table(labels, tmp)}
    if result.components is not None:
        comps = pa.Table.from_pandas(result.components, preserve_index=False)
        writers["components.parquet"] = lambda tmp: pq.write_table(comps, tmp)
    docs = dict(result.extra)
    # what was read and what was left out (nothing dropped in silence)
    docs["import.json"] = {"format": result.format, **{k: v for k, v in result.info.items() if k != "config"}}
    if result.whatif is not None:
        docs["whatif.json"] = result.whatif
    for name, doc in docs.items():
        text = json.dumps(json_safe(doc), indent=2, sort_keys=True)
        writers[name] = lambda tmp, text=text: tmp.write_text(text)
    stale = [n for n in OUTPUT_FILES if n not in writers]
    return write_together(out, writers, remove=stale)


__all__ = ["COMPONENT_COLUMNS", "FORMATS", "ImportResult", "LONG_COLUMNS", "LongConfig", "OPTIONAL_COLUMNS", "OUTPUT_FILES",
           "SkipCount",
           "find_long_file", "import_long", "import_pai", "read_pai", "seconds_timestamps",
           "import_path", "json_safe", "judge_persistence", "label_long", "label_long_components", "make_config",
           "read_long", "write_outputs"]
