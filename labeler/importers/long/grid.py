"""One metric of a long-format input as a dense timestamp x component grid, and the
labeler's two views on it.

The grid: :func:`metric_grid`, values judged at their load where the rows carry one:
:func:`values_at_load`. The views: against the peer group (:func:`long_peer_view`, the
leave-one-out median of :mod:`faultlab.labeler.stats`) and against the component's own
history (:func:`long_temporal_view`, the labeler's trailing baseline)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from faultlab.errors import FIELD_CHARS, BadInput, printable
from faultlab.labeler.importers.common import SkipCount
from faultlab.labeler.importers.long.config import LongConfig
from faultlab.labeler.importers.long.read import LongRows
from faultlab.labeler.importers.perseus import relative_to_load
from faultlab.labeler.intervals import union
from faultlab.labeler.peergroups import group_columns
from faultlab.labeler.stats import MAD_TO_SIGMA, loo_median, median, nanmedian, trailing_baseline
from faultlab.steps import GRID_FREE_CELLS, GRID_SLACK, grid_too_large


@dataclass
class LongGrid:
    """One metric's samples as a dense ``(T, C)`` grid (:func:`metric_grid`).

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
        return group_columns(self.groups)


def metric_grid(rows: LongRows, mcode: int, cfg: LongConfig, skips: SkipCount) -> LongGrid:
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
    _check_grid(metric, len(t), len(u_t), len(u_c))
    X = _dense(v, ti, ci, len(u_t), len(u_c))
    groups = _first_groups(ci, rows.grp[m], rows.grp_names, len(u_c))
    dt = median(np.diff(u_t)) if len(u_t) > 1 else 0.0
    return LongGrid(metric=metric, at_load=at_load, X=X, u_t=u_t, names=u_c, groups=groups, dt=dt)


def _check_grid(metric: str, n: int, T: int, C: int) -> None:
    """BadInput when ``n`` samples of ``metric`` naming ``T`` distinct (aligned)
    timestamps and ``C`` components would size a grid by their product
    (:func:`faultlab.steps.grid_too_large`), before any array of it is made: a trace
    samples its components at the same times, while a file whose every row names a new
    component at a new timestamp (60,000 rows, some 2 MB of CSV) asked for 27 GiB an
    array."""
    if grid_too_large(T * C, n):
        raise BadInput(f"metric {printable(metric, FIELD_CHARS)}: {n} samples name {T} distinct timestamps and {C} components, "
                       f"a grid of {T * C} cells (at most {GRID_SLACK} times the samples, or {GRID_FREE_CELLS})",
                       field="timestamp", fix="sample every component at the same timestamps, or bucket them (LongConfig align_s)")


def _metric_values(rows: LongRows, m: np.ndarray, metric: str, at_load: bool, cfg: LongConfig,
                   skips: SkipCount) -> np.ndarray:
    """The values of the rows ``m`` ((N,) bool) of one metric, larger = slower: 1 /
    value for a ``higher_is_better`` metric (NaN where not > 0), then, for a metric
    with a load, relative to its peer group's value at that load
    (:func:`values_at_load`)."""
    v = rows.val[m]
    if metric in cfg.higher_is_better:
        with np.errstate(divide="ignore"):
            v = np.where(v > 0, 1.0 / v, np.nan)
    if at_load:  # the value relative to its peer group's value at the same load
        v = values_at_load(v, rows.load[m], rows.grp[m], cfg, skips, metric)
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


def add_observed(grid: LongGrid, cover: dict, group_of: dict) -> None:
    """Add each component's observed time in this metric (its samples' ``[t, t + dt)``
    merged, unix s) to ``cover`` (component -> list of (starts, ends)), and its peer
    group to ``group_of`` when it has none yet."""
    for j in range(len(grid.names)):
        tj = grid.u_t[~np.isnan(grid.X[:, j])]
        if tj.size:
            name = str(grid.names[j])
            cover.setdefault(name, []).append(union(tj, tj + grid.dt))
            group_of.setdefault(name, str(grid.groups[j]))


@dataclass
class LongPeer:
    """The peer view of a grid (:func:`long_peer_view`); every array (T, C) unless said.

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


def long_peer_view(grid: LongGrid, lc) -> LongPeer:
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
    return LongPeer(med=med, cnt=cnt, sigma=sigma, ratio=ratio, flag=flag)


def _peer_medians(grid: LongGrid) -> tuple[np.ndarray, np.ndarray]:
    """``(med, cnt)``, (T, C) each: the median of each component's peer group without
    itself, and the count (int64) of the group's components with a value."""
    T, C = grid.X.shape
    med = np.full((T, C), np.nan)
    cnt = np.zeros((T, C), dtype=np.int64)
    for _, cols in grid.group_columns():
        _, gn = nanmedian(grid.X[:, cols], axis=1)
        med[:, cols] = loo_median(grid.X[:, cols])  # its peers without itself
        cnt[:, cols] = gn[:, None]
    return med, cnt


def _group_sigma(grid: LongGrid, ratio: np.ndarray) -> np.ndarray:
    """(C,) per peer group, as the peer view: 1.4826 x the median over the group's
    components of each one's MAD of its ratio (``(T, C)``) about its own median over
    time (a component slow all along does not raise it); 0 for a group without a
    ratio."""
    sigma = np.zeros(len(grid.names))
    for _, cols in grid.group_columns():
        cm, cn = nanmedian(ratio[:, cols], axis=0)
        cmad, _ = nanmedian(np.abs(ratio[:, cols] - cm[None, :]), axis=0)
        if (cn > 0).any():
            sigma[cols] = MAD_TO_SIGMA * median(cmad[cn > 0])
    return sigma


def add_levels(grid: LongGrid, peer: LongPeer, cfg: LongConfig, levels: dict) -> None:
    """Add each component's peer ratios of this metric, as ``level_block_samples``
    block medians (:func:`_block_medians`), to ``levels`` (component -> list of
    arrays).

    With a load, its value relative to the group's value at that load already is that
    ratio (against a fit that leaves slow samples out): dividing again by the peers'
    median at each timestamp would read a healthy drive low beside several slow ones."""
    lev = grid.X if grid.at_load else peer.ratio
    for j in range(len(grid.names)):
        rj = lev[:, j]
        blocks = _block_medians(rj[np.isfinite(rj)], int(cfg.level_block_samples))
        levels.setdefault(str(grid.names[j]), []).append(blocks)


@dataclass
class LongTemporal:
    """The temporal view of a grid (:func:`long_temporal_view`), (T, C) each.

    Attributes:
        base: the trailing robust baseline (NaN where too few valid samples).
        flag: bool, up against its own history.
        ratio: value / ``base``.
    """

    base: np.ndarray
    flag: np.ndarray
    ratio: np.ndarray


def long_temporal_view(grid: LongGrid, lc) -> LongTemporal:
    """Each component against its own trailing robust baseline
    (:func:`faultlab.labeler.stats.trailing_baseline`: window, min_valid,
    threshold, mad_k, block, in samples)."""
    base, _, flag = trailing_baseline(grid.X, window=lc.temporal_window_steps, min_valid=lc.temporal_min_valid_steps,
                                      threshold=lc.temporal_threshold, mad_k=lc.mad_k, block=lc.temporal_block_steps)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = grid.X / base
    return LongTemporal(base=base, flag=flag, ratio=ratio)


def _block_medians(x: np.ndarray, k: int) -> np.ndarray:
    """Medians of consecutive blocks of ``k`` values of ``x`` (1-D, finite, in time
    order); the last block holds the remainder. Empty for an empty ``x``."""
    n = x.size
    if n == 0:
        return x
    full = (n // k) * k
    meds = [nanmedian(x[:full].reshape(-1, k), axis=1)[0]] if full else []
    if full < n:
        meds.append(np.array([median(x[full:])]))
    return np.concatenate(meds)


def values_at_load(v: np.ndarray, load: np.ndarray, grp: np.ndarray, cfg: LongConfig, skips: SkipCount,
                   metric: str) -> np.ndarray:
    """``v`` / its peer group's expected value at the sample's load, per peer group
    (codes ``grp``): the ``perseus`` importer's binned-median regression
    (:func:`faultlab.labeler.importers.perseus.relative_to_load`, ``cfg.load_bins`` bins, fitted
    again without the samples 3 sigma off), over all of the group's samples of the
    metric.

    So a component that serves more load than its peers, and is slower for it, is not
    read as slow (latency grows with throughput). A group with fewer than
    ``cfg.load_min_samples`` finite samples keeps its values; a note in ``skips`` says
    how many groups were fitted. NaN where the expected value is not > 0."""
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
    return median(d[same]) if same.any() else 0.0
