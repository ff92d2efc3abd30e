"""Temporal view: each series against its own recent history.

Part of the two-view labeler (the SlowSight idea of a *temporal* view, a component
against its own past, and a *peer* view, a component against its peers at the same
moment). Every view works on the run's :class:`~faultlab.labeler.grid.StepGrid`; the
baseline is :func:`faultlab.labeler.stats.trailing_baseline`.

Series judged here:

- the job's step time: per step, the median ``step_s`` across ranks (seconds);
- each rank's *local time* (seconds): ``compute_s`` plus ``dataloader_s`` where the
  steps table has it (the step's wait on the rank's own data loader, e.g. the
  disk-backed one of benchmarks/diskdata.py; faultlab.schema keeps it out of
  ``compute_s``). A rank waiting on its own disk arrives late at the collective just
  as a rank computing slowly does: both are its own time, not the collective's.

Baseline: a robust *trailing* baseline, the median of the preceding ``window`` steps,
in which steps already flagged are left out (so a long fault does not become the new
normal), refreshed every ``block`` steps. When fewer than ``min_valid`` unflagged
values are in the window (deep inside a long fault) the last baseline is kept. The
first ``min_valid`` steps, which have no history, use a warm-up baseline: the median of
the first ``window`` steps. Noise floor: ``sigma = 1.4826 * MAD`` of the same window.

A step is flagged when ``value / baseline > threshold`` **and**
``value - baseline > mad_k * sigma`` (jitter must not fire).

Limitation (by design of a temporal view): a fault present from the first step is part
of the baseline and is not flagged; the peer view covers that case.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from faultlab.errors import BadInput
from faultlab.labeler.config import LabelerConfig
from faultlab.labeler.grid import StepGrid
from faultlab.labeler.stats import nanmedian, trailing_baseline_t


@dataclass
class TemporalView:
    """Result of :func:`temporal_view` for one run (shapes: S steps, R ranks).

    ``job_*`` are ``(S,)`` for the job step time (seconds, median ``step_s`` across
    ranks); ``rank_*`` are ``(S, R)`` for each rank's ``compute_s`` (seconds).
    ``*_base`` baseline (s), ``job_sigma`` robust noise (s; a rank's noise decides its
    flags and is not kept: nothing reads it after), ``*_ratio`` value/baseline,
    ``*_flag`` bool. Floats are in the dtype of the grid's ``compute`` (float32 from
    :meth:`StepGrid.from_steps`); the ``(S, R)`` arrays are transposed views of
    ``(R + 1, S)`` arrays (a rank's series is contiguous).
    """

    job_base: np.ndarray
    job_sigma: np.ndarray
    job_ratio: np.ndarray
    job_flag: np.ndarray
    rank_base: np.ndarray
    rank_ratio: np.ndarray
    rank_flag: np.ndarray


def _cap_job_baseline(x: np.ndarray, base: np.ndarray, sig: np.ndarray, flag: np.ndarray, config) -> None:
    """A job slowed from its first step has a slowed trailing baseline, and a temporal
    view alone never sees it (SlowSight's caveat; for a single rank the peer view
    covers it, for the whole job nothing would). Where the job's trailing baseline is
    itself above ``temporal_threshold`` x the run's typical step time (the median over
    the run), the typical step time is the baseline instead and those steps are judged
    against it (same threshold and noise floor). In place on ``base`` and ``flag``."""
    typical, n = nanmedian(np.asarray(x, dtype=np.float64), axis=0)
    if not n or not np.isfinite(typical) or typical <= 0:
        return
    with np.errstate(invalid="ignore"):
        high = base > config.temporal_threshold * typical
    if not high.any():
        return
    t = base.dtype.type(typical)
    base[high] = t
    with np.errstate(invalid="ignore"):
        flag[high] = (x[high] / t > config.temporal_threshold) & ((x[high] - t) > config.mad_k * np.nan_to_num(sig[high]))


def temporal_view(grid: StepGrid, config=None) -> TemporalView:
    """Temporal view (SlowSight-style): the job's step time and each rank's compute time
    against their own trailing robust baseline (see module docstring).

    Args:
        grid: the run as a :class:`StepGrid`.
        config: a :class:`faultlab.labeler.LabelerConfig` (defaults when None); uses
            ``temporal_window_steps``, ``temporal_min_valid_steps``,
            ``temporal_threshold``, ``mad_k``, ``temporal_block_steps``.

    Returns:
        a :class:`TemporalView`.
    """
    if config is None:
        config = LabelerConfig()
    if config.temporal_window_steps < 1 or config.temporal_min_valid_steps < 1 or config.temporal_block_steps < 1:
        raise BadInput("window, min_valid and block must be >= 1", field="temporal")
    dt = np.float32 if grid.compute.dtype == np.float32 else np.float64
    # series per row: row 0 the job step time, row 1 + j rank j's compute_s
    Xt = np.empty((grid.R + 1, grid.S), dtype=dt)
    if grid.S:
        Xt[0] = grid.job_step
        Xt[1:] = grid.compute.T
    base, sig, flags = trailing_baseline_t(
        Xt,
        window=config.temporal_window_steps,
        min_valid=config.temporal_min_valid_steps,
        threshold=config.temporal_threshold,
        mad_k=config.mad_k,
        block=config.temporal_block_steps,
    )
    if grid.S:
        _cap_job_baseline(Xt[0], base[0], sig[0], flags[0], config)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.divide(Xt, base, out=Xt)  # Xt is not needed any more
    return TemporalView(
        job_base=base[0],
        job_sigma=sig[0],
        job_ratio=ratio[0],
        job_flag=flags[0],
        rank_base=base[1:].T,
        rank_ratio=ratio[1:].T,
        rank_flag=flags[1:].T,
    )
