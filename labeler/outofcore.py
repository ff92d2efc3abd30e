"""The labeler out of core: one run's analysis computed block by block on Dask, its
``(S, R)`` arrays on disk (numpy memory maps in a work folder), with the same values
as the in-memory :func:`faultlab.labeler.analysis.analyze`, so its labels are the
in-memory labeler's.

The passes (each a Dask task per block; the blocks run in parallel where nothing
carries from one to the next):

1. **scan** (per step block of the stored table, :func:`faultlab.steptable.blocks`):
   the block's steps and ranks, from its ``step`` and ``rank`` columns only;
   **fill** (per step block): the block's dense ``(steps, R)`` arrays (every rank of
   the run a column, NaN where a rank has no step in the block) into the memory maps
   (``t_start``, the local time, ``comm_s``, ``dataloader_s``; ``step_s`` gives the
   job step time and the steps' ends here and is kept by no map),
   and what needs the whole run: the run id, each rank's node and peer group (first
   seen), the job step time per step (the median ``step_s`` across ranks), each
   rank's first and last start time per block (``t_start`` must increase across
   blocks too);
2. **clock**: the clock skew of each rank from at most 2,000 evenly spaced steps
   (:meth:`StepGrid._align_clocks`'s rule), removed in place stored block by stored
   block, each block's ``step_s`` read again for its steps' ends (a pass only where
   a clock is skewed: the steps' bounds come from pass 1 otherwise);
3. **temporal** (row chunks in step order, per strip of ranks): the trailing
   baseline is a recurrence in step order (flagged steps leave later windows), so its
   state (the last ``temporal_window_steps`` values that may feed the baseline, the
   current baseline and noise per rank) is carried from chunk to chunk; chunks are
   multiples of ``temporal_block_steps`` and ``temporal_window_steps`` rows and the
   first holds the warm-up window. The baseline goes into its map; the ratio, the
   local time over it, is computed where fusion reads it (:class:`~faultlab.labeler.memmaps.RatioMap`).
   Each rank is its own recurrence: one chain of chunks per strip of ranks, as many
   strips as the cluster has worker threads, each on a thread of its own, run in
   parallel (the walk compiled, :mod:`~faultlab.labeler.trailingjit`, where numba is
   installed); the flags come back as runs per rank too, and each rank's median in
   every block of ``temporal_window_steps`` rows, from which the controller scores
   the peer groups' calm stretch (:func:`~faultlab.labeler.peergroups.calm_rows`,
   against the run medians of the sampled steps) and takes the calm blocks' levels,
   reading none of them again;
4. **peer** (per row chunk, one pass): the run-wide noise floor first, in the
   controller, from every ``S // 4096``-th step as the in-memory view samples it
   (those rows' peer medians computed there: a row's medians are its own); then per
   chunk, over a **halo** of :func:`halo_steps` rows on each side for the sustained
   rule's centered window, the leave-one-out peer median (a small group's peers at
   no less than their baseline from pass 3), the peer ratio and the peer flags, and
   for the chunk's own rows the peer groups' median and count and the what-if sums
   (:mod:`~faultlab.labeler.whatif`); the flags come back as runs per rank
   (:mod:`~faultlab.labeler.flagruns`), not as a map.

The ``(S,)`` job series (step time, what-if step time, the job's temporal view, the
sustained job rule) are small at any size and are computed in memory as in
:func:`~faultlab.labeler.analysis.analyze` (the job's temporal view in one task, on a
worker that has the compiled walk loaded for the ranks' strips). Fusion and
reconciliation then run on the
:class:`~faultlab.labeler.analysis.Analysis` whose arrays are the memory maps and
whose flags are :class:`~faultlab.labeler.flagruns.FlagRuns`: the controller reads
a few rank series and the rows of the labels' intervals, a block at a time, never a
map whole.

Cluster: ``client`` (a ``dask.distributed.Client``), else the scheduler at
``scheduler`` or ``$DASK_SCHEDULER_ADDRESS``, else an embedded ``LocalCluster`` sized
to the machine (:mod:`faultlab.labeler.cluster`). The workers write into the work
folder: they must see it (the same machine, or a shared file system).
"""

from __future__ import annotations

import math
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa

from faultlab import steptable
from faultlab.errors import BadInput
from faultlab.labeler import cluster
from faultlab.labeler.analysis import Analysis, _sustained_job, expected_over_median
from faultlab.labeler.config import LabelerConfig, labeler_config
from faultlab.labeler.flagruns import FlagRuns, chunk_runs
from faultlab.labeler.grid import SMALL_GROUP, StepGrid, floored_peers
from faultlab.labeler.memmaps import RatioMap, ReleasedMap, WorkMaps
from faultlab.labeler.peergroups import PeerGroups, assign_groups, block_score, calm_rows, calm_scores, sample_rows
from faultlab.labeler.stats import (MAD_TO_SIGMA, compiled_walk, loo_and_median, loo_median, median, nanmedian,
                                    trailing_baseline_from, trailing_baseline_t)
from faultlab.labeler.views.peer import MEDIAN_SE, PeerView, sustained, window_steps
from faultlab.labeler.views.temporal import TemporalView, _cap_job_baseline
from faultlab.labeler.whatif import GridRows, simulate_job, step_top, whatif_sums
from faultlab.steps import _codes, _column, _int_column, _step_major, check_grid_size, check_recorded_steps, dense_steps

#: rank-steps below which a run is labeled in memory (no cluster is started)
IN_MEMORY_ROWS = 1 << 24
#: the most rank-steps one stored block may hold (its files' footers, all together): a
#: worker reads a block whole, so a block larger than a run labeled in memory (faultlab
#: writes blocks of about steptable.BLOCK_ROWS, or one step of every rank) is refused
#: before any worker reads it, and a worker reads at most this many of the files it
#: opens (their owner may grow them after that check)
BLOCK_MAX_ROWS = IN_MEMORY_ROWS


def halo_steps(config: LabelerConfig) -> int:
    """Rows a block of the peer view reads on each side of its own: the sustained
    rule's centered window is ``k = window_steps(...)`` steps, at most
    ``max(temporal_window_steps, min_steps)`` (50 by default), so a row's window reaches
    ``k`` rows either way at most. The temporal view needs no halo: it carries its
    state; the job series are whole-run arrays."""
    return int(max(config.temporal_window_steps, config.min_steps))


# -- pass 1: the run's steps, ranks and job step time ------------------------------------


def _scan_block(files: list[str]) -> dict:
    """Steps and ranks (ascending) of one stored block, from its two integer columns,
    and whether its rows are the complete grid in step-major order (then no
    ``(rank, step)`` repeats and no rank is negative but the first)."""
    t = steptable.read_lean_files([Path(f) for f in files], ["step", "rank"], max_rows=BLOCK_MAX_ROWS)
    step, rank = _int_column(t, "step"), _int_column(t, "rank")
    hit = _step_major(step, rank)  # the usual layout: a few vectorized passes
    if hit is not None:
        return {"steps": hit[0], "ranks": hit[1], "ordered": True, "rows": int(step.size)}
    return {"steps": _codes(step)[0], "ranks": _codes(rank)[0], "ordered": False, "rows": int(step.size)}


def _fill_block(files: list[str], folder: str, S: int, R: int, row0: int, ranks: np.ndarray, steps: np.ndarray,
                ordered: bool = False, sync: bool = False) -> dict:
    """Write one stored block's dense arrays into the memory maps at rows ``row0..``
    (``ranks`` the run's, ``steps`` the block's own, both ascending: the run's steps
    would be sent to every block, the run's size again at each); return its job step
    time per step, its steps' earliest start and latest end (``t0``, ``t1``, unix s,
    before any clock offset is removed), each rank's first and last start time, its
    run id and its ranks' node and peer group (first seen in the block). ``ordered``:
    the scan found the block's rows the complete grid in step-major order, so only a
    negative rank is left for :func:`~faultlab.steps.check_recorded_steps` to find."""
    frame = steptable.read_lean_files([Path(f) for f in files], max_rows=BLOCK_MAX_ROWS)
    if not ordered or not len(frame) or int(frame["rank"].iloc[0]) < 0:
        check_recorded_steps(frame, Path(files[0]).parent.name if len(files) else steptable.STEPS_FILE)
    d = dense_steps(frame)
    with np.errstate(invalid="ignore"):
        t = frame["t_start"].to_numpy(dtype=np.float64, na_value=np.nan)
        end = t + frame["step_s"].to_numpy(dtype=np.float64, na_value=np.nan)
    span = (float(np.fmin.reduce(t)) if t.size else np.nan, float(np.fmax.reduce(end)) if t.size else np.nan)
    del frame, t, end
    cols = np.searchsorted(ranks, d.ranks)
    every = cols.size == R  # every rank of the run in the block: its arrays are the rows as they are
    rows = row0 + np.searchsorted(steps, d.steps)
    n = d.steps.size
    maps = WorkMaps(Path(folder), S, R, sync)
    out = {"rows": (int(rows[0]), int(rows[-1]) + 1) if n else (row0, row0), "span": span, "run_id": d.run_id,
           "ranks": d.ranks, "nodes": d.nodes, "groups": d.groups}
    assert n == 0 or (rows[-1] - rows[0] + 1 == n), "a stored block holds a step range"
    for name, a in (("t_start", d.t_start), ("compute", d.compute), ("comm", d.comm), ("step_s", d.step_s),
                    ("dataloader", d.dataloader)):
        if a is None and not (name == "dataloader" and os.path.exists(maps.path(name))):
            continue
        dt = np.float64 if name == "t_start" else np.float32
        if every and a is not None:
            blk = a if a.dtype == dt else a.astype(dt)
        else:
            blk = np.full((n, R), np.nan, dtype=dt)
            if a is not None:  # (a block without a dataloader_s value: NaN, not measured)
                blk[:, cols] = a
        if n and name != "step_s":  # step_s: the job step time and the steps' ends below are all that need it
            maps.put(name, int(rows[0]), int(rows[0]) + n, blk)
        if name == "step_s":
            out["job_step"] = nanmedian(blk, axis=1)[0] if n else np.zeros(0)
            out["t0"], out["t1"] = np.fmin.reduce(starts, axis=1), np.fmax.reduce(starts + blk, axis=1)
        if name == "t_start":
            starts = blk
            fin = np.isfinite(blk)
            has = fin.any(axis=0)
            first = np.where(has, blk[np.argmax(fin, axis=0), np.arange(R)], np.nan)
            last = np.where(has, np.fmax.reduce(blk, axis=0), np.nan)
            out["t_first"], out["t_last"] = first, last
    out["loader"] = d.dataloader is not None
    return out


def chunk_rows(config: LabelerConfig, R: int) -> int:
    """Rows of a peer or temporal chunk: about 2^22 cells, a multiple of
    ``temporal_block_steps`` (the temporal baseline's refresh) and of
    ``temporal_window_steps`` (the calm stretch's blocks: each chunk holds whole
    ones), so at least the latter (the first chunk holds the warm-up window)."""
    every = math.lcm(int(config.temporal_block_steps), int(config.temporal_window_steps))
    n = max((1 << 22) // max(1, R), every)
    return -(-n // every) * every


# -- pass 2: clock skew ---------------------------------------------------------------


def _clock_offsets(maps: WorkMaps, job_step: np.ndarray) -> np.ndarray:
    """``(R,)`` s: :meth:`StepGrid._align_clocks`'s offsets, from the sampled rows."""
    S, R = maps.S, maps.R
    off = np.zeros(R)
    step_med, n = nanmedian(np.asarray(job_step, dtype=np.float64), axis=0)
    if S == 0 or R < 2 or not n or not np.isfinite(step_med) or step_med <= 0:
        return off
    rows = np.unique(np.linspace(0, S - 1, min(S, 2000)).astype(np.int64))
    sub = np.asarray(maps.rows("t_start", rows), dtype=np.float64)
    mid, _ = nanmedian(sub, axis=1)
    with np.errstate(invalid="ignore"):
        o, cnt = nanmedian(sub - mid[:, None], axis=0)
    skewed = (cnt > 0) & np.isfinite(o) & (np.abs(o) > float(step_med))
    return np.where(skewed, o, 0.0) if skewed.any() else off


def _shift_clocks(files: list[str], folder: str, S: int, R: int, row0: int, ranks: np.ndarray, steps: np.ndarray,
                  off: np.ndarray, sync: bool = False) -> tuple[int, np.ndarray, np.ndarray]:
    """One stored block (its rows ``row0..``, ``steps`` its own, ``ranks`` the run's):
    remove the clock offsets ``off`` ``(R,)`` from its ``t_start`` rows in place and
    return ``(row0, t0, t1)``, its steps' earliest start and latest end (unix s). The
    ends need every rank's ``step_s``, which no map keeps (this pass runs only where a
    clock is skewed): it is read from the block again and placed as
    :func:`~faultlab.steps.dense_steps` places it (a repeated ``(rank, step)``: the
    last row)."""
    frame = steptable.read_lean_files([Path(f) for f in files], ["step", "rank", "step_s"], max_rows=BLOCK_MAX_ROWS)
    n = int(steps.size)
    cell = np.searchsorted(steps, _int_column(frame, "step")) * R + np.searchsorted(ranks, _int_column(frame, "rank"))
    dur = np.full(n * R, np.nan, dtype=np.float32)
    dur[cell] = _column(frame, "step_s", np.float32)
    del frame, cell
    maps = WorkMaps(Path(folder), S, R, sync)
    blk = maps.read("t_start", row0, row0 + n) - off[None, :]
    maps.put("t_start", row0, row0 + n, blk)
    return row0, np.fmin.reduce(blk, axis=1), np.fmax.reduce(blk + dur.reshape(n, R), axis=1)


# -- pass 4: the peer view ----------------------------------------------------------------


def _peer_medians_of(comp: np.ndarray, base_of, cols: list, R: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(loo (rows, R), median (rows, G), count (rows, G))`` of some rows ``comp``
    ``(rows, R)``: each rank's leave-one-out peer median (a small group's peers at no
    less than their trailing baseline, ``base_of(c)`` ``(rows, |c|)`` for the group's
    columns ``c``; :meth:`StepGrid.floor_small_groups`) and each group's median and
    count (:meth:`StepGrid.group_stats`), all row by row, in ``comp``'s dtype (the
    count int64)."""
    med = np.full((comp.shape[0], len(cols)), np.nan, dtype=comp.dtype)
    cnt = np.zeros((comp.shape[0], len(cols)), dtype=np.int64)
    out = np.full((comp.shape[0], R), np.nan, dtype=comp.dtype)
    for k, c in enumerate(cols):
        vals = comp[:, c]
        if np.arange(R)[c].size <= SMALL_GROUP:  # the median of the values, the peers' of the floored ones
            med[:, k], cnt[:, k] = nanmedian(vals, axis=1)
            vals = floored_peers(vals, base_of(c))
            for i in range(0, comp.shape[0], 4096):
                out[i : i + 4096, c] = loo_median(vals[i : i + 4096])
            continue
        for i in range(0, comp.shape[0], 4096):  # both medians from one partition of the rows
            out[i : i + 4096, c], med[i : i + 4096, k], cnt[i : i + 4096, k] = loo_and_median(vals[i : i + 4096])
    return out, med, cnt


def _ratio(comp: np.ndarray, loo: np.ndarray) -> np.ndarray:
    """The peer ratio, compute over the leave-one-out median (NaN where not finite), as
    :func:`~faultlab.labeler.views.peer.peer_view` computes it."""
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = comp / loo
    ratio[~np.isfinite(ratio)] = np.nan
    return ratio


def _peer_sigma(maps: WorkMaps, cols: list) -> np.ndarray:
    """``(R,)``: the peer view's noise floor from every ``S // 4096``-th step, their
    peer medians computed here from those steps' rows (a row's medians are its own)."""
    R = maps.R
    rows = np.arange(0, maps.S, max(1, maps.S // 4096))
    comp = maps.rows("compute", rows)
    base = maps.open("rank_base", "r")
    ratio = _ratio(comp, _peer_medians_of(comp, lambda c: np.asarray(base[c][:, rows]).T, cols, R)[0])
    del base
    sigma = np.zeros(R)
    for c in cols:
        vals = ratio[:, c]
        if vals.size:
            m, n = nanmedian(vals, axis=0)
            mad, _ = nanmedian(np.abs(vals - m.astype(vals.dtype)[None, :]), axis=0)
            ok = n > 0
            if ok.any():
                sigma[c] = MAD_TO_SIGMA * median(mad[ok])
    return sigma


def _peer_chunk(folder: str, S: int, R: int, a: int, b: int, cols: list, gidx: np.ndarray, job_step: np.ndarray,
                sigma: np.ndarray, k: int, halo: int, config: LabelerConfig, sync: bool = False) -> tuple:
    """Rows ``a..b-1`` of the peer view: the peer ratio into its map (rank-major
    ``(R, S)``: fusion reads a flagged rank's whole series), from the rows' compute and
    their leave-one-out peer median (kept by no map: :class:`PeerMedians` computes it
    again where fusion reads it), itself from the ``rank_base`` map for a small group's
    floors (written by the temporal pass before), over ``halo`` rows either side for
    the sustained rule's window. Returns the groups' ``(rows, G)`` median and count
    (:meth:`StepGrid.group_stats`; ``gidx`` each rank's group), each row's largest
    compute (:func:`~faultlab.labeler.whatif.step_top`), the rows' what-if sums
    (:func:`~faultlab.labeler.whatif.whatif_sums`, ``job_step`` the rows' job step
    time: the what-if reads the same rows and medians) and the rows' flags as runs
    (:func:`~faultlab.labeler.flagruns.chunk_runs`; ``sigma`` the noise floor,
    ``k`` the sustained rule's window)."""
    maps = WorkMaps(Path(folder), S, R, sync)
    h0, h1 = max(0, a - halo), min(S, b + halo)
    comp = maps.read("compute", h0, h1)
    base = maps.open("rank_base", "r")
    loo, med, cnt = _peer_medians_of(comp, lambda c: np.asarray(base[c, h0:h1]).T, cols, R)
    del base
    own = slice(a - h0, b - h0)
    ratio = _ratio(comp, loo)
    del loo
    mine, dt = ratio[own], ratio.dtype.type
    threshold, mad_k = float(config.peer_threshold), float(config.mad_k)
    with np.errstate(invalid="ignore"):
        flag = mine > dt(threshold)
        flag &= (mine - dt(1.0)) > (dt(mad_k) * sigma.astype(ratio.dtype))[None, :]
    if k > 1:
        level = np.maximum(threshold, 1.0 + mad_k * sigma * MEDIAN_SE / np.sqrt(k))
        flag |= sustained(ratio, k, level)[own]
    med, cnt, comp = med[own], cnt[own], comp[own]
    few = cnt < config.peer_min_ranks
    if few.any():
        flag &= ~few[:, gidx]
    maps.put("peer_ratio", a, b, mine.T, 0, R)
    return med, cnt, step_top(comp), whatif_sums(GridRows(comp, job_step, (med, cnt, gidx))), chunk_runs(flag.T, 0, a)


class PeerMedians:
    """The peer view's leave-one-out peer median ``(S, R)`` (s, float32), computed for
    the rows it is indexed for from the ``compute`` and ``rank_base`` maps, as the
    peer pass computes it (:func:`_peer_medians_of`: a row's medians are its own, so
    they are the same numbers): fusion reads it only at the rows of labels' intervals,
    where a map of it would be a write of the whole ``(S, R)`` at every run.
    Indexing: ``[rows]`` or ``[rows, cols]``, ``rows`` a slice, an integer or an
    integer array of grid rows; gives what numpy's indexing of the whole array gives
    (a row array paired with a column array, numpy arrays or a scalar)."""

    def __init__(self, maps: WorkMaps, cols: list):
        self.maps, self.cols = maps, cols
        self.shape = (maps.S, maps.R)
        self.ndim = 2
        self.dtype = np.dtype(np.float32)

    def __getitem__(self, key):
        rk, ck = (tuple(key) + (slice(None),))[:2] if isinstance(key, tuple) else (key, slice(None))
        S, R = self.shape
        pos = np.arange(S)[rk]  # the rows as numpy picks them (negative, repeated, any shape)
        if isinstance(rk, slice):  # crossed with the columns, as numpy crosses a slice
            rows, pick = pos, slice(None)
        else:  # computed once a row, then picked as numpy picks them: paired with an array in ck
            rows, inv = np.unique(pos, return_inverse=True)
            pick = inv.reshape(np.shape(pos)) if np.ndim(pos) else int(inv.reshape(-1)[0])
        every = np.arange(R)
        groups = [c for c in self.cols if np.isin(every[c], np.atleast_1d(every[ck])).any()]
        out = np.full((rows.size, R), np.nan, dtype=self.dtype)
        if rows.size and groups:  # a range of rows is one read (WorkMaps.rows: one per run of rows)
            comp = self.maps.rows("compute", rows)
            base = self.maps.open("rank_base", "r")
            loo = _peer_medians_of(comp, lambda c: np.asarray(base[c][:, rows]).T, groups, R)[0]
            del base
            for c in groups:
                out[:, c] = loo[:, c]
        return out[pick, ck]

    def __array__(self, dtype=None, copy=None):
        out = self[:, :]
        return out if dtype is None else out.astype(dtype)


# -- pass 3: the temporal view (carried state) -------------------------------------------


def _temporal_chunk(folder: str, S: int, R: int, a: int, b: int, c0: int, c1: int, before: tuple | None,
                    config: LabelerConfig, sync: bool = False) -> tuple:
    """Rows ``a..b-1`` of the trailing baseline of the ranks (columns) ``c0..c1-1``
    into its map (:func:`faultlab.labeler.stats.trailing_baseline_from`,
    ``a`` a multiple of ``temporal_block_steps``, ``before`` what the chunk before of the
    same ranks returned, None for the first); returns ``(state after b, flag runs,
    block medians)`` (:func:`~faultlab.labeler.flagruns.chunk_runs`; the ranks' median
    and value count in each whole block of ``temporal_window_steps`` rows of the chunk,
    :func:`_block_medians`: the calm stretch's block scores read them, not the map). Each rank's series is its own
    recurrence: strips of ranks run in parallel; whether the walk runs compiled is
    decided by the strip's whole series (:func:`~faultlab.labeler.stats.compiled_walk`),
    not by a chunk's."""
    maps = WorkMaps(Path(folder), S, R, sync)
    Xt = np.ascontiguousarray(maps.read("compute", a, b)[:, c0:c1].T)
    base, _, flags, state = trailing_baseline_from(
        Xt, a, before[0] if before is not None else None, window=config.temporal_window_steps,
        min_valid=config.temporal_min_valid_steps, threshold=config.temporal_threshold, mad_k=config.mad_k,
        block=config.temporal_block_steps, compiled=compiled_walk((c1 - c0) * S, S))
    maps.put("rank_base", a, b, base, c0, c1)  # (R, S); the ratio is the compute over it (RatioMap), not stored
    return state, chunk_runs(flags, c0, a), _block_medians(Xt, a, int(config.temporal_window_steps), c0)


def _block_medians(Xt: np.ndarray, a: int, window: int, c0: int) -> tuple:
    """``(first block, c0, (C, nb) medians float64, (C, nb) counts int32)`` of the
    columns of ``Xt`` ``(C, n)`` (grid rows ``a..a+n-1``, ``a`` a multiple of ``window``)
    over each of its ``nb`` whole blocks of ``window`` rows, as
    :func:`~faultlab.labeler.peergroups.calm_scores` takes them."""
    nb = Xt.shape[1] // window
    med, n = nanmedian(Xt[:, : nb * window].reshape(Xt.shape[0], nb, window), axis=2)
    return a // window, c0, med, n.astype(np.int32)


def _job_temporal(xj: np.ndarray, config: LabelerConfig, strip_cells: int) -> tuple:
    """The job step time's trailing baseline, sigma and flags (``(S,)`` each, capped as
    :func:`~faultlab.labeler.views.temporal.temporal_view` caps them), on a worker:
    the walk runs compiled where the ranks' strips of ``strip_cells`` cells do (the
    worker has the kernel loaded for them; the controller loads nothing), whatever
    the series' own length."""
    S = xj.shape[0]
    base, sig, flags = trailing_baseline_t(
        xj[None, :], window=config.temporal_window_steps, min_valid=config.temporal_min_valid_steps,
        threshold=config.temporal_threshold, mad_k=config.mad_k, block=config.temporal_block_steps,
        compiled=compiled_walk(max(strip_cells, S), S))
    if S:
        _cap_job_baseline(xj, base[0], sig[0], flags[0], config)
    return base[0], sig[0], flags[0]


# -- the run ------------------------------------------------------------------------------


def analyze_out_of_core(path: str | os.PathLike, config: LabelerConfig | dict | None = None, *, workdir: str | os.PathLike,
                        client=None, progress=None, peer_groups: dict | None = None) -> tuple[Analysis, tuple[float, float] | None]:
    """The :class:`~faultlab.labeler.analysis.Analysis` of the run whose steps table is
    ``path`` (``steps.parquet`` or ``steps/``, :mod:`faultlab.steptable`), computed by the
    passes of the module docstring on ``client`` (a ``dask.distributed.Client``),
    its ``(S, R)`` arrays memory maps in ``workdir`` (which must outlive the
    analysis). Equal, array for array, to ``analyze(StepGrid.from_steps(steps))``.
    ``progress(done, total, what)`` is called as blocks finish; ``peer_groups`` is
    :func:`~faultlab.labeler.analysis.analyze`'s (the groups are assigned on the
    memory-mapped local times, as in memory). Returns ``(analysis,
    span)``: span the run's first ``t_start`` and last ``t_start + step_s`` as
    recorded (unix s; None without steps).

    Raises:
        BadInput as :func:`faultlab.steps.dense_steps` (naming the column), or for
        ``t_start`` that goes back across a block boundary.
        :class:`~faultlab.labeler.cluster.ClusterLost` when the cluster is lost under a
        pass (its scheduler ended, its workers died each time they ran a task)."""
    with cluster.losses(client):
        return _analyze(path, config, workdir, client, progress, peer_groups)


def _analyze(path, config, workdir, client, progress, peer_groups) -> tuple[Analysis, tuple[float, float] | None]:
    """:func:`analyze_out_of_core`'s passes."""
    cfg = labeler_config(config)
    # the workers read the blocks and write the maps from working folders of their own
    # (an existing cluster's were started elsewhere): every path they get is absolute
    path, folder = Path(os.path.abspath(path)), Path(os.path.abspath(workdir))
    folder.mkdir(parents=True, exist_ok=True)
    stored = check_blocks(path)
    note = progress or (lambda *a: None)
    scans = _wait(client, client.map(_scan_block, stored, pure=False), note, "scan")
    steps = np.unique(np.concatenate([s["steps"] for s in scans])) if scans else np.zeros(0, dtype=np.int64)
    ranks = np.unique(np.concatenate([s["ranks"] for s in scans])) if scans else np.zeros(0, dtype=np.int64)
    S, R = int(steps.size), int(ranks.size)
    # the maps, and each block's rows of them in a worker, are sized by the steps and
    # ranks the rows name: checked against the rows before any is made
    check_grid_size(S, R, sum(sc["rows"] for sc in scans), str(path))
    for files, sc in zip(stored, scans):
        check_grid_size(sc["steps"].size, R, sc["rows"], str(Path(files[0]).parent if files else path))
    maps = WorkMaps(folder, S, R, _remote_workers(client))
    has_loader = _has_column(stored, "dataloader_s")
    for name, dt in (("t_start", np.float64), ("compute", np.float32), ("comm", np.float32)) + (
            (("dataloader", np.float32),) if has_loader else ()):
        maps.create(name, dt)  # every step's row is written by the block that holds the step
    row0 = [int(np.searchsorted(steps, sc["steps"][0])) if sc["steps"].size else 0 for sc in scans]
    for sc, r0 in zip(scans, row0):
        k = sc["steps"].size
        assert k == 0 or int(np.searchsorted(steps, sc["steps"][-1])) - r0 + 1 == k, "a stored block holds a step range"
    fills = client.map(_fill_block, stored, [str(folder)] * len(stored), [S] * len(stored), [R] * len(stored), row0,
                       [ranks] * len(stored), [sc["steps"] for sc in scans], [sc["ordered"] for sc in scans], pure=False,
                       sync=maps.sync)
    filled = []
    for i, f in enumerate(fills):
        filled.append(f.result())
        note(i + 1, len(fills), "read")
    nodes = np.empty(R, dtype=object)
    groups = np.empty(R, dtype=object)
    for fb in reversed(filled):  # the first block that has a rank names its node and group
        j = np.searchsorted(ranks, fb["ranks"])
        nodes[j], groups[j] = fb["nodes"], fb["groups"]
    run_ids = [fb["run_id"] for fb in filled if fb["run_id"]]
    job_step = np.full(S, np.nan)
    for fb in filled:
        a, b = fb["rows"]
        job_step[a:b] = fb["job_step"]
    _check_across_blocks(filled, ranks)
    loader = maps.view("dataloader") if has_loader and any(fb["loader"] for fb in filled) else None
    off = _clock_offsets(maps, job_step)
    ch = chunk_rows(cfg, R)
    spans = [(a, min(S, a + ch)) for a in range(0, S, ch)]
    tt = (np.full(S, np.nan), np.full(S, np.nan))  # each step's earliest start and latest end
    if off.any():  # the steps' bounds move with the clocks: a pass of their own
        for r0, t0, t1 in _wait(client, [client.submit(_shift_clocks, fs, str(folder), S, R, r0, ranks, sc["steps"], off,
                                                       pure=False, sync=maps.sync)
                                         for fs, r0, sc in zip(stored, row0, scans)], note, "clocks"):
            tt[0][r0 : r0 + t0.size], tt[1][r0 : r0 + t0.size] = t0, t1
    else:
        for fb in filled:
            a, b = fb["rows"]
            tt[0][a:b], tt[1][a:b] = fb["t0"], fb["t1"]
    grid = _grid(maps, run_ids[0] if run_ids else "", steps, ranks, nodes, groups, loader, job_step, off, tt)
    # first: a small group's peer median reads its baselines, the calm stretch its block medians
    tv, blocks = _temporal_view(client, maps, grid, cfg, spans, note)
    medians: dict = {}  # the blocks' medians, measured on the workers
    calm = calm_rows(grid.compute, int(cfg.temporal_window_steps), k=float(cfg.mad_k), sample=maps.rows("compute", sample_rows(S)),
                     scores=lambda run_med, w: _calm_scores(client, maps, run_med, w, spans, medians, blocks, cfg))
    medians = {blk: medians[blk] for blk in calm if blk in medians}
    del blocks
    pg = assign_groups(grid.compute, [grid.component(j) for j in range(R)], grid.groups, cfg, mapping=peer_groups,
                       part=grid.dataloader, calm=calm, medians=medians)
    del medians
    if pg.source in ("discovered", "mapping"):
        grid.regroup(pg.groups)
    pv, top, wi = _peer_view(client, maps, grid, cfg, spans, note)
    lo = min((fb["span"][0] for fb in filled if np.isfinite(fb["span"][0])), default=np.nan)
    hi = max((fb["span"][1] for fb in filled if np.isfinite(fb["span"][1])), default=np.nan)
    return _analysis(grid, tv, pv, cfg, pg, top, wi), ((lo, hi) if np.isfinite(lo) and np.isfinite(hi) else None)


def check_blocks(path: str | os.PathLike) -> list[list[str]]:
    """The stored blocks of the steps table ``path`` (each as its files, in step order),
    read from their footers before any worker reads one. Raises BadInput naming the
    first block whose files state more than :data:`BLOCK_MAX_ROWS` rows all together (a
    steps table someone hands root: a few KB of run-length-encoded rows would have a
    worker allocate GBs), or a file that is not readable Parquet."""
    stored = [[str(f) for f in fs] for _, fs in steptable.blocks(path)]
    for files in stored:
        try:
            rows = sum(steptable.parquet_file(Path(f)).metadata.num_rows for f in files)
        except (pa.ArrowException, OSError, ValueError) as e:
            raise steptable.unreadable(Path(files[0]), e) from None
        if rows <= BLOCK_MAX_ROWS:
            continue
        where = Path(files[0]).parent if Path(files[0]).parent.name.startswith("step_block=") else Path(files[0])
        raise BadInput(f"{where} holds {rows} rank-steps: more than a block the out-of-core labeler reads at once "
                       f"(at most {BLOCK_MAX_ROWS}; faultlab writes blocks of about {steptable.BLOCK_ROWS})",
                       field=steptable.STEPS_DIR, fix="restore the run's steps table as faultlab wrote it (steptable.write_steps)")
    return stored


def _calm_block_scores(folder: str, S: int, R: int, a: int, b: int, run_med: np.ndarray, window: int) -> tuple:
    """:func:`~faultlab.labeler.peergroups.calm_scores` of the blocks starting in rows
    ``a..b-1`` (their rows read from the ``compute`` map) and their medians
    (``{(i0, i1): (R,)}``)."""
    lo, hi = -(-int(a) // window) * window, min(S, int(b) + window - 1)  # the first block's row, the last one's end
    if hi - lo < window:
        return [], {}
    got: dict = {}
    scores = calm_scores(WorkMaps(Path(folder), S, R).read("compute", lo, hi), 0, int(b) - lo, run_med, window, got)
    return [(lo + i, sc) for i, sc in scores], {(lo + i0, lo + i1): m for (i0, i1), m in got.items()}


def _calm_scores(client, maps: WorkMaps, run_med: np.ndarray, window: int, spans, medians: dict, blocks: tuple,
                 cfg: LabelerConfig) -> list:
    """The calm stretch's block scores of the whole run, from the block medians the
    temporal pass measured (``blocks``, :func:`_temporal_view`) when its blocks are
    ``window`` rows, else chunk by chunk on ``client`` (a run shorter than
    :data:`~faultlab.labeler.peergroups.MIN_NOISE_BLOCKS` blocks); each scored block's
    medians into ``medians`` (``(R,)`` float64 each, kept for the calm blocks' levels
    instead of a second read of them in this process)."""
    if window == int(cfg.temporal_window_steps):
        bm, bn = blocks
        out = []
        for k in range(bm.shape[0]):
            sc = block_score(bm[k], bn[k], run_med, window)
            if sc is not None:
                out.append((k * window, sc))
                medians[(k * window, (k + 1) * window - 1)] = bm[k]
        return out
    parts = client.gather([client.submit(_calm_block_scores, str(maps.folder), maps.S, maps.R, a, b, run_med, window,
                                         pure=False) for a, b in spans])
    for _, m in parts:
        medians.update(m)
    return [x for p, _ in parts for x in p]


def _remote_workers(client) -> bool:
    """Whether a worker of ``client`` runs on another host than this process (by the
    host of its address)."""
    here = {"127.0.0.1", "::1", "localhost", socket.gethostname()}
    try:
        here |= set(socket.gethostbyname_ex(socket.gethostname())[2])
    except OSError:
        pass
    return any(urlsplit(str(addr)).hostname not in here for addr in client.scheduler_info().get("workers", {}))


def _wait(client, futures: list, note, what: str) -> list:
    """The results of ``futures`` in their order (raising the first error), calling
    ``note(done, total, what)`` as each finishes. At the first error the futures not
    yet done are cancelled: a block refused ends the pass on the cluster too (on an
    existing cluster the workers would read the run's other blocks for nothing)."""
    # dask is an optional, heavy dependency: imported only when a run is labeled out of core
    from dask.distributed import as_completed

    for i, f in enumerate(as_completed(futures), 1):
        if f.status != "finished":
            client.cancel([g for g in futures if not g.done()])
            f.result()  # raises the task's error
        note(i, len(futures), what)
    return client.gather(futures)


def _strips(R: int, n: int) -> list[tuple[int, int]]:
    """``[(c0, c1)]``: the columns ``0..R-1`` in at most ``n`` (at least 1) strips of
    near-equal width."""
    edges = np.linspace(0, R, max(1, min(int(n), R)) + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def _has_column(stored: list[list[str]], col: str) -> bool:
    """Whether the stored table has column ``col`` (its first file's schema, read as
    every steps file is: no link followed, its footer bounded). Raises BadInput naming
    the file when it is not readable Parquet or no regular file (the run folder's owner
    may have swapped it for a FIFO or a link since the scan read it)."""
    if not (stored and stored[0]):
        return False
    try:
        return col in steptable.parquet_file(Path(stored[0][0])).schema_arrow.names
    except (pa.ArrowException, OSError, ValueError) as e:
        raise steptable.unreadable(Path(stored[0][0]), e) from None


def _check_across_blocks(filled: list[dict], ranks: np.ndarray) -> None:
    """BadInput naming ``t_start`` when a rank's first start in a block is before its
    latest start in an earlier block (each block was checked inside by dense_steps)."""
    latest = np.full(ranks.size, -np.inf)
    for fb in filled:
        if "t_first" not in fb:
            continue
        with np.errstate(invalid="ignore"):
            back = fb["t_first"] < latest
        if back.any():
            j = int(np.flatnonzero(back)[0])
            raise BadInput(f"must increase with step for each rank: rank {int(ranks[j])} starts a step at "
                           f"{float(fb['t_first'][j])!r}, before an earlier step of it ({float(latest[j])!r})",
                           field="t_start", fix="unix seconds of the step's start, increasing with step for each rank")
        latest = np.fmax(latest, fb["t_last"])


def _grid(maps: WorkMaps, run_id: str, steps, ranks, nodes, groups, loader, job_step, off, tt) -> StepGrid:
    """The run's :class:`StepGrid` on the memory maps, its job step time, clock
    offsets and step bounds set from the passes (its constructor would compute them
    over the whole arrays at once)."""
    g = StepGrid.__new__(StepGrid)
    g.run_id, g.steps, g.ranks, g.nodes, g.groups = run_id, steps, ranks, nodes, groups
    g.t_start, g.compute = maps.view("t_start"), maps.view("compute")
    g.comm, g.dataloader = maps.view("comm"), loader
    g.step_s = None  # read by nothing past the step bounds, which the passes gave: no map keeps it
    g.job_step, g.clock_offsets = job_step, off
    g.t0, g.t1 = tt
    g._group_median = g._group_stats = g._peer_median = None
    return g


def _peer_view(client, maps: WorkMaps, grid: StepGrid, cfg: LabelerConfig, spans, note) -> tuple[PeerView, np.ndarray, dict]:
    """:func:`~faultlab.labeler.views.peer.peer_view` chunk by chunk (its maps), with
    the groups' medians and counts set on ``grid`` (:meth:`StepGrid.group_stats`);
    returns the view, each step's largest compute and the what-if figures."""
    names, gidx, cols = grid.peer_groups()
    sigma = _peer_sigma(maps, cols)
    k = window_steps(grid, cfg)
    maps.create("peer_ratio", np.float32, by_rank=True)
    parts = _wait(client, [client.submit(_peer_chunk, str(maps.folder), maps.S, maps.R, a, b, cols, gidx,
                                         grid.job_step[a:b], sigma, k, halo_steps(cfg), cfg, pure=False, sync=maps.sync)
                           for a, b in spans], note, "peer view")
    med = np.concatenate([p[0] for p in parts]) if parts else np.zeros((0, len(names)), dtype=np.float32)
    cnt = np.concatenate([p[1] for p in parts]) if parts else np.zeros((0, len(names)), dtype=np.int64)
    top = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0)
    grid._group_stats = (med, cnt, gidx)
    grid._peer_median = PeerMedians(maps, cols)
    pv = PeerView(median=grid._peer_median, ratio=maps.view("peer_ratio").T,
                  flag=FlagRuns.from_chunks(maps.S, maps.R, [p[4] for p in parts]), sigma=sigma)
    return pv, top, _whatif_from_sums(grid, [p[3] for p in parts])


def _temporal_view(client, maps: WorkMaps, grid: StepGrid, cfg: LabelerConfig, spans, note) -> tuple[TemporalView, tuple]:
    """:func:`~faultlab.labeler.views.temporal.temporal_view`: the ranks' chunk by
    chunk in step order with the carried state, the job series (``(S,)``) whole in
    one more task (:func:`_job_temporal`); with it, the ranks' medians and value counts
    in every whole block of ``temporal_window_steps`` rows (``(S // window, R)``
    float64 and int32: 0.24 bytes a rank-step at 50-step blocks), from the chunks."""
    dt = grid.compute.dtype
    xj = np.asarray(grid.job_step, dtype=dt)
    maps.create("rank_base", dt, by_rank=True)
    threads = [w for w, n in sorted(client.nthreads().items()) for _ in range(n)]
    strips = _strips(maps.R, len(threads))
    job = client.submit(_job_temporal, xj, cfg, max(c1 - c0 for c0, c1 in strips) * maps.S if strips else 0, pure=False)
    chunks = []
    for (c0, c1), w in zip(strips, threads):
        state = None
        for a, b in spans:  # a recurrence in step order: each chunk waits for the state before it
            # each chain on a thread of its own (the scheduler would put a chain where the first chunk
            # of another ran: the strips one after the other); elsewhere if that worker is gone
            state = client.submit(_temporal_chunk, str(maps.folder), maps.S, maps.R, a, b, c0, c1, state, cfg, pure=False,
                                  sync=maps.sync, workers=[w], allow_other_workers=True)
            chunks.append(state)
    done = _wait(client, chunks, note, "temporal view")
    jb, js, jf = job.result()
    with np.errstate(invalid="ignore", divide="ignore"):
        jr = xj / jb
    nb = maps.S // int(cfg.temporal_window_steps)
    bm, bn = np.full((nb, maps.R), np.nan), np.zeros((nb, maps.R), dtype=np.int32)
    for _, _, (k0, c0, m, n) in done:
        bm[k0 : k0 + m.shape[1], c0 : c0 + m.shape[0]] = m.T
        bn[k0 : k0 + m.shape[1], c0 : c0 + m.shape[0]] = n.T
    tv = TemporalView(job_base=jb, job_sigma=js, job_ratio=jr, job_flag=jf,
                      rank_base=maps.view("rank_base").T,
                      rank_ratio=RatioMap(grid.compute, maps.view("rank_base").T),
                      rank_flag=FlagRuns.from_chunks(maps.S, maps.R, [runs for _, runs, _ in done]))
    return tv, (bm, bn)


def _analysis(grid: StepGrid, tv: TemporalView, pv: PeerView, cfg: LabelerConfig, groups: PeerGroups,
              top: np.ndarray, wi: dict) -> Analysis:
    """The rest of :func:`~faultlab.labeler.analysis.analyze` (``(S,)`` series only;
    ``top`` each step's largest compute and ``wi`` the what-if figures, from the peer
    pass)."""
    sim = simulate_job(grid, top)
    sim = np.where(np.isfinite(sim), sim, np.asarray(grid.job_step, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        jw = (tv.job_flag & (sim > tv.job_base * cfg.temporal_threshold)
              & ((sim - tv.job_base) > cfg.mad_k * np.nan_to_num(tv.job_sigma)))
    jw |= _sustained_job(grid, tv, sim, cfg)
    return Analysis(grid=grid, temporal=tv, peer=pv, sim=sim, job_wide_flag=jw, config=cfg,
                    job_expected=expected_over_median(grid.job_step, tv.job_base, tv.job_flag), groups=groups, whatif=wi)


def _whatif_from_sums(grid: StepGrid, parts: list) -> dict:
    """:func:`faultlab.labeler.whatif.whatif_grid`'s dict from the what-if sums of
    row chunks (:func:`~faultlab.labeler.whatif.whatif_sums`, in step order): the
    sums are taken chunk by chunk, so a figure may differ from the in-memory one in
    its last bits (float64 summation order)."""
    actual = simulated = 0.0
    n_ok = 0
    sums = np.zeros(grid.R)
    for act, sim, n, per_rank in parts:
        actual += act
        simulated += sim
        n_ok += n
        sums += per_rank
    S = actual / simulated if simulated > 0 else float("nan")
    per_rank = {grid.component(j): (actual / float(sums[j]) if sums[j] > 0 else float("nan")) for j in range(grid.R)}
    return {"method": "osdi25-whatif-dp", "run_id": grid.run_id, "slowdown": S, "per_rank": per_rank,
            "actual_s": actual, "simulated_s": simulated, "n_steps": n_ok}
