"""The ``long`` importer: generic long-format tables (``component, peer_group,
timestamp, metric, value``, optional ``run_id`` and ``load``; CSV/TSV/Parquet) labeled
with the labeler's own views, statistics, interval rules and label rows, plus the
component verdict (``components.parquet``).

Modules: :mod:`.config`, :mod:`.read`, :mod:`.grid` (the grid and its views),
:mod:`.labels`, :mod:`.components`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from faultlab.labeler.config import make_config
from faultlab.labeler.importers.common import ImportResult, SkipCount
from faultlab.labeler.importers.long.components import COMPONENT_COLUMNS, components_summary, judge_persistence
from faultlab.labeler.importers.long.config import LongConfig
from faultlab.labeler.importers.long.grid import (
    add_levels,
    add_observed,
    long_peer_view,
    long_temporal_view,
    metric_grid,
)
from faultlab.labeler.importers.long.labels import LabelSink, group_labels, labels_frame, own_history_labels, peer_labels
from faultlab.labeler.peergroups import assign_groups
from faultlab.labeler.importers.long.read import LONG_COLUMNS, OPTIONAL_COLUMNS, find_long_file, long_rows, metric_order, read_long

__all__ = ["COMPONENT_COLUMNS", "LONG_COLUMNS", "LongConfig", "OPTIONAL_COLUMNS", "find_long_file", "import_long",
           "judge_persistence", "label_each_run", "label_long", "label_long_components", "read_long"]


def label_long(df: pd.DataFrame, config: LongConfig | dict | None = None, *, run_id: str = "") -> pd.DataFrame:
    """Label a long-format frame with the labeler's two views, per metric: the labels
    of :func:`label_long_components` (same arguments), without the components summary.
    """
    return label_long_components(df, config, run_id=run_id)[0]


def label_long_components(df: pd.DataFrame, config: LongConfig | dict | None = None, *,
                          run_id: str = "", skips: SkipCount | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Label a long-format frame with the labeler's two views, per metric, and judge
    each component as a whole.

    The rows are checked and prepared first (:func:`long_rows`: the columns, numeric
    timestamps/values/loads, the rows skipped by reason, timestamps in seconds, one row
    per (component, metric, timestamp)). For each metric (name order) the samples
    become a dense ``(T, C)`` grid (:func:`metric_grid`: T timestamps, C components in
    name order; NaN where a component has no sample), then:

    - **load** (only for a metric whose rows carry the optional ``load`` column, e.g.
      a drive's throughput beside its latency): each value is first divided by its
      peer group's expected value at that load (:func:`values_at_load`, the
      ``perseus`` importer's regression), so a component that is slower because it
      serves more load than its peers is not read as slow; everything below then
      judges that ratio;

    - **peer view** (:func:`long_peer_view`, :mod:`faultlab.labeler.views.peer`'s rule): ``ratio
      = value / median of the component's peer group at that timestamp``; flagged when
      ``ratio > peer_threshold`` and ``ratio - 1 > mad_k x sigma_g`` (``sigma_g`` =
      1.4826 MAD of the group's ratios over the run) with at least ``peer_min_ranks``
      components of the group present;
    - **temporal view** (:func:`long_temporal_view`,
      :func:`faultlab.labeler.stats.trailing_baseline`): each component against its
      own trailing robust baseline (window, min_valid, threshold, mad_k, block in
      samples);
    - flags become intervals (:func:`faultlab.labeler.intervals.intervals`: ``gap_steps``,
      ``min_steps``, ``gap_s``, ``min_duration_s``). Labels, three steps in this order:
      (1) :func:`peer_labels`: peer intervals of a component (``views``
      ``"temporal+peer"`` when its temporal flags agree, else ``"peer"``; ``slowdown``
      = median value / peer median); (2) :func:`group_labels`: ``group:NAME``
      (``component_kind`` ``"peer_group"``, views ``"temporal"``) where at least
      ``group_wide_fraction`` of a group is up against its own history; (3)
      :func:`own_history_labels`: a component up against its own history only
      (``views`` ``"temporal"``) outside those. For (2) and (3) ``slowdown`` = median
      value / the higher of the trailing baseline and the typical (whole-input median)
      level, so a value returning to normal after an unusually fast period is no
      slowdown. Each label needs ``slowdown >= min_slowdown``.

    Times: ``start_ts`` the first flagged timestamp, ``end_ts`` the last plus the
    median sampling interval (unix s). ``start_step``/``end_step`` are null.

    Components (:func:`components_summary`): each sample of a component stands for
    ``[timestamp, timestamp + the metric's median sampling interval)``; the component's
    *observed time* is the union of these over all its metrics
    (:func:`add_observed`), its *labeled time* the part of it that its own labels
    (``component_kind`` ``"component"``, any metric; not ``group:`` labels) cover. Its
    peer group is the one it has in the first metric (name order). Its level is
    gathered per metric by :func:`add_levels`. The labeled-time fraction is judged by
    :func:`judge_persistence`.

    Peer groups (:func:`faultlab.labeler.peergroups.assign_groups`, per metric): a
    ``peer_groups`` mapping of the config, else the input's ``peer_group`` when it
    holds more than one, else the groups discovered from the components' typical
    values; every view above then works within them. A persistent difference between
    groups is no label: ``components.parquet`` gives each component's group, its
    members and its typical value against the fastest group's (``group_vs_fastest``).

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
    rows = long_rows(df, skips)
    label_rows: list[dict] = []
    cover: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}  # component -> observed intervals per metric
    levels: dict[str, list[np.ndarray]] = {}  # component -> its peer ratios, per metric
    group_of: dict[str, str] = {}
    hetero: list[dict] = []  # the peer groups of the first metric, fastest first
    for mcode in metric_order(rows):
        grid = metric_grid(rows, mcode, cfg, skips)
        pg = assign_groups(grid.X, grid.names, grid.groups, lc, mapping=cfg.peer_groups)
        if pg.source in ("discovered", "mapping"):
            grid.groups = pg.groups
        if not hetero:
            hetero = pg.summary(grid.names)
        add_observed(grid, cover, group_of)
        peer = long_peer_view(grid, lc)
        add_levels(grid, peer, cfg, levels)
        temporal = long_temporal_view(grid, lc)
        sink = LabelSink(run_id, grid, lc, label_rows)
        labeled = peer_labels(grid, peer, temporal, lc, sink)
        group_wide = group_labels(grid, temporal, cfg, sink)
        own_history_labels(grid, peer, temporal, labeled | group_wide, lc, sink)
    out = labels_frame(label_rows)
    return out, components_summary(out, cover, group_of, levels, cfg, hetero)


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
        labels, comps = label_each_run(df, cfg, run_id, skips)
    else:
        labels, comps = label_long_components(df, cfg, run_id=run_id, skips=skips)
    info = {"n_rows": int(len(df)), "n_components": int(df["component"].nunique()),
            "n_metrics": int(df["metric"].nunique()), "source": str(src), "config": cfg.to_dict(),
            "persistent": comps.loc[comps["persistent"], "component"].tolist(),
            "skipped": skips.to_dict(), "skipped_line": skips.line()}
    return ImportResult(format="long", labels=labels, whatif=None, info=info, components=comps)


def label_each_run(df: pd.DataFrame, cfg: "LongConfig", default: str, skips: SkipCount, *,
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
    # each run's group_members is a categorical (components_summary); concat would make
    # every row its own string where the runs' texts differ: their union keeps each once
    members = union_categoricals([c["group_members"].array for c in comps])
    comp = pd.concat([c.drop(columns="group_members") for c in comps], ignore_index=True)
    comp.insert(list(comps[0].columns).index("group_members"), "group_members", members)
    return labels, comp
