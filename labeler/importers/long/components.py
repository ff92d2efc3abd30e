"""The component verdict of a long-format input: each component's observed and labeled
time, its level (median peer ratio) and whether it is persistently slow
(:func:`judge_persistence`, :mod:`faultlab.labeler.verdict`'s rule); the rows of
``components.parquet`` (:data:`COMPONENT_COLUMNS`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from faultlab.errors import BadInput
from faultlab.labeler.config import make_config
from faultlab.labeler.importers.long.config import LongConfig
from faultlab.labeler.intervals import total_length
from faultlab.labeler.stats import median
from faultlab.labeler.verdict import judge


def components_summary(labels: pd.DataFrame, cover: dict, group_of: dict, levels: dict,
                       cfg: LongConfig, groups: list[dict] | None = None) -> pd.DataFrame:
    """The components summary (:data:`COMPONENT_COLUMNS`): observed and labeled time
    (:func:`_component_time`), each component's ``level`` (the median of its block
    medians over all its metrics; NaN without any), the verdict
    (:func:`judge_persistence`) and its peer group's heterogeneity from ``groups``
    (:meth:`faultlab.labeler.peergroups.PeerGroups.summary`): ``group_members``
    (comma-separated), ``group_vs_fastest`` (the group's typical value over the
    fastest group's, a ratio; 1.0 for a job of one group), ``group_source``."""
    comps = _component_time(labels, cover, group_of)
    comps["level"] = [median(np.concatenate(levels[c])) if c in levels else float("nan")
                      for c in comps["component"].tolist()]
    by_group = {r["group"]: r for r in (groups or [])}
    g = [by_group.get(str(x), {}) for x in comps["peer_group"].tolist()]
    comps["group_members"] = _members_column(comps["peer_group"].tolist(), by_group)
    comps["group_vs_fastest"] = [float(r.get("vs_fastest", float("nan"))) for r in g]
    comps["group_source"] = [str(r.get("source", "")) for r in g]
    return judge_persistence(comps, cfg)


def _members_column(peer_groups: list, by_group: dict) -> pd.Categorical:
    """``group_members`` of each component: its group's members joined by commas, each
    group's text made once and every component of the group coded to it (a categorical,
    a dictionary column in ``components.parquet``). A string per component would hold a
    group of C components' C names in each of its C rows (100,000 one-sample components
    of one group, a 3 MB file: some 70 GB); a categorical made from such strings hashes
    each row's whole text, as costly. Codes: one lookup of the group's name a row."""
    texts, code_of = [], {}
    codes = np.empty(len(peer_groups), dtype=np.int64)
    for i, name in enumerate(str(x) for x in peer_groups):
        if name not in code_of:
            code_of[name] = len(texts)
            texts.append(",".join(by_group.get(name, {}).get("members", [])))
        codes[i] = code_of[name]
    # groups' member sets are disjoint and not empty, so their texts differ; a group
    # missing from by_group has "" (at most one such text is kept, others recoded to it)
    first = {}
    remap = np.array([first.setdefault(t, len(first)) for t in texts], dtype=np.int64)
    return pd.Categorical.from_codes(remap[codes] if len(codes) else codes, categories=pd.Index(list(first), dtype=object))


#: columns of the components summary (:func:`label_long_components`, ``components.parquet``)
COMPONENT_COLUMNS = ("component", "peer_group", "observed_s", "labeled_s", "labeled_fraction", "n_labels",
                     "median_slowdown", "level", "share", "group_size", "level_z", "share_z", "bulk_level",
                     "bulk_share", "failslow", "persistent", "rank", "group_members", "group_vs_fastest",
                     "group_source")


def _component_time(labels: pd.DataFrame, cover: dict, group_of: dict) -> pd.DataFrame:
    """Per component with data: observed and labeled time (s), labels, median slowdown."""
    own = labels[labels["component_kind"] == "component"] if len(labels) else labels
    by_comp = {str(k): g for k, g in own.groupby(own["component"].astype(str), sort=True)} if len(own) else {}
    recs = []
    for name in sorted(cover):
        obs_s = np.concatenate([a for a, _ in cover[name]])
        obs_e = np.concatenate([b for _, b in cover[name]])
        observed = total_length(obs_s, obs_e)
        g = by_comp.get(name)
        if g is not None and len(g):
            ls, le = g["start_ts"].to_numpy(np.float64), g["end_ts"].to_numpy(np.float64)
            # |labels ∩ observed| = |labels| + |observed| - |labels ∪ observed|
            labeled = total_length(ls, le) + observed - total_length(np.concatenate([ls, obs_s]), np.concatenate([le, obs_e]))
            labeled = min(max(labeled, 0.0), observed)
            n, med = len(g), median(g["slowdown"].to_numpy(np.float64))
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
