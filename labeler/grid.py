"""The ``steps`` table of one run as the dense step x rank grid every view of the
labeler works on (:class:`StepGrid`): the arrays of :func:`faultlab.steps.dense_steps`,
the job's step time, clock skew between ranks removed, and per-step peer-group
medians (cached).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from faultlab.labeler.peergroups import group_columns
from faultlab.labeler.stats import loo_median, nanmedian
from faultlab.steps import dense_steps


@dataclass
class StepGrid:
    """The ``steps`` table of one run as dense ``(S, R)`` arrays (S steps x R ranks).

    Missing (rank, step) cells are NaN. Row ``i`` is the i-th distinct step number in
    ascending order (``steps[i]``, int64); column ``j`` is rank ``ranks[j]`` (int64,
    ascending).

    Attributes (units): ``t_start`` unix s (float64: a unix time needs its 52 bits);
    ``compute`` the rank's *local time* (``compute_s`` + ``dataloader_s``, the part of
    the step spent on the rank itself before the collective), ``comm``, ``step_s``
    seconds (float32 when built by
    :meth:`from_steps`: 7 significant digits, ~2 ns at 30 ms, ~4 us at 60 s; any
    float array when given directly); ``job_step`` (S,) the median ``step_s`` across
    ranks, seconds, float64; ``t0`` (S,) the earliest ``t_start`` of the step, unix s;
    ``t1`` (S,) the latest ``t_start + step_s`` of the step, unix s;
    ``clock_offsets`` (R,) seconds subtracted from a rank's ``t_start`` when its clock
    is skewed (see :meth:`_align_clocks`; zeros otherwise). ``step_s`` serves only
    ``job_step`` and ``t1``: the out-of-core labeler's grid, which gets both from its
    passes, has None there.
    """

    run_id: str
    steps: np.ndarray
    ranks: np.ndarray
    nodes: np.ndarray  # (R,) node name per rank (first seen)
    groups: np.ndarray  # (R,) peer group per rank (first seen)
    t_start: np.ndarray
    compute: np.ndarray
    comm: np.ndarray
    step_s: np.ndarray | None
    job_step: np.ndarray = field(init=False)
    t0: np.ndarray = field(init=False)
    t1: np.ndarray = field(init=False)
    clock_offsets: np.ndarray = field(init=False, repr=False)  # (R,) s removed from t_start (skew)
    #: (S, R) the ``dataloader_s`` part of ``compute`` (s; NaN where not measured), or
    #: None when the steps table has no such column
    dataloader: np.ndarray | None = field(default=None, repr=False)
    _group_median: np.ndarray | None = field(init=False, default=None, repr=False)
    _group_stats: tuple | None = field(init=False, default=None, repr=False)
    _peer_median: np.ndarray | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self.job_step, _ = nanmedian(self.step_s, axis=1) if self.S else (np.zeros(0), None)
        self.clock_offsets = np.zeros(self.R)
        if self.S and self.R > 1:
            self._align_clocks()
        if self.S and self.R:
            # fmin/fmax ignore NaN (a row of NaN gives NaN, without a warning)
            self.t0 = np.fmin.reduce(self.t_start, axis=1).astype(np.float64, copy=False)
            t1 = np.empty(self.S)
            for i in range(0, self.S, 4096):  # bounded temporaries
                t1[i : i + 4096] = np.fmax.reduce(self.t_start[i : i + 4096] + self.step_s[i : i + 4096], axis=1)
            self.t1 = t1
        else:
            self.t0 = np.zeros(0)
            self.t1 = np.zeros(0)

    def _align_clocks(self) -> None:
        """Remove clock skew between ranks' ``t_start`` (unsynchronized hosts).

        In synchronous training a rank can start a step later than its peers by less
        than one step time (they wait for it in the collective, so the step time
        includes the wait). A rank whose median offset from the per-step median
        ``t_start`` exceeds the median job step time is therefore on a skewed clock:
        that offset (seconds, ``clock_offsets`` ``(R,)``) is subtracted from its
        ``t_start``. Offsets within one step time are left alone: they are real
        (a rank persistently late with its post-step work). Estimated on at most 2,000
        evenly spaced steps."""
        step_med, n = nanmedian(np.asarray(self.job_step, dtype=np.float64), axis=0)
        if not n or not np.isfinite(step_med) or step_med <= 0:
            return
        rows = np.unique(np.linspace(0, self.S - 1, min(self.S, 2000)).astype(np.int64))
        sub = np.asarray(self.t_start[rows], dtype=np.float64)
        mid, _ = nanmedian(sub, axis=1)
        with np.errstate(invalid="ignore"):
            off, cnt = nanmedian(sub - mid[:, None], axis=0)
        skewed = (cnt > 0) & np.isfinite(off) & (np.abs(off) > float(step_med))
        if not skewed.any():
            return
        self.clock_offsets = np.where(skewed, off, 0.0)
        self.t_start = np.asarray(self.t_start, dtype=np.float64) - self.clock_offsets[None, :]

    @property
    def S(self) -> int:
        return int(self.steps.shape[0])

    @property
    def R(self) -> int:
        return int(self.ranks.shape[0])

    @classmethod
    def from_steps(cls, steps: pd.DataFrame) -> "StepGrid":
        """Build the grid from a ``steps`` frame of ONE run (faultlab.schema.STEPS):
        the arrays of :func:`faultlab.steps.dense_steps`, whose checks, units and local
        time (``compute_s + dataloader_s``) they carry.

        Raises:
            BadInput naming the column (see :func:`faultlab.steps.dense_steps`).
        """
        d = dense_steps(steps)
        return cls(run_id=d.run_id, steps=d.steps, ranks=d.ranks, nodes=d.nodes, groups=d.groups, t_start=d.t_start,
                   compute=d.compute, comm=d.comm, step_s=d.step_s, dataloader=d.dataloader)

    def regroup(self, groups: np.ndarray) -> None:
        """Set each rank's peer group (``(R,)`` names, e.g. the groups
        :mod:`faultlab.labeler.peergroups` found) and drop the cached group medians."""
        self.groups = np.asarray([str(g) for g in groups], dtype=object)
        self._group_median = self._group_stats = self._peer_median = None

    def peer_groups(self) -> tuple[list[str], np.ndarray, list]:
        """``(names, gidx, cols)``: the sorted peer group names, ``(R,)`` the index of
        each rank's group in ``names``, and per group its rank columns (a slice when
        contiguous, else an index array)."""
        names, gidx, cols = [], np.zeros(self.R, dtype=np.intp), []
        # one sort (group_columns), not a pass over every rank for each group: a run's
        # steps may give each rank a group of its own
        for k, (g, c) in enumerate(group_columns(self.groups)):
            names.append(g)
            gidx[c] = k
            cols.append(slice(int(c[0]), int(c[-1]) + 1) if c[-1] - c[0] + 1 == c.size else c)
        return names, gidx, cols

    def group_stats(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(median, count, gidx)``: ``(S, G)`` per step and peer group (groups in
        sorted name order) the median ``compute_s`` (s, in the dtype of ``compute``)
        and the number of ranks with data; ``(R,)`` each rank's group index. Cached."""
        if self._group_stats is None:
            names, gidx, cols = self.peer_groups()
            med = np.full((self.S, len(names)), np.nan, dtype=self.compute.dtype)
            cnt = np.zeros((self.S, len(names)), dtype=np.int64)
            for k, c in enumerate(cols):
                m, n = nanmedian(self.compute[:, c], axis=1)
                med[:, k] = m
                cnt[:, k] = n
            self._group_stats = (med, cnt, gidx)
        return self._group_stats

    def group_median(self) -> np.ndarray:
        """``(S, R)``: per step, the median ``compute_s`` of the rank's peer group (s,
        in the dtype of ``compute``).

        NaN ranks (no record at that step) are left out of the median. Cached.
        """
        if self._group_median is None:
            med, _, gidx = self.group_stats()
            self._group_median = np.broadcast_to(med, (self.S, self.R)) if med.shape[1] == 1 else med[:, gidx]
        return self._group_median

    def peer_median(self) -> np.ndarray:
        """``(S, R)``: per step, the median ``compute_s`` of the rank's peers *without
        the rank itself* (:func:`loo_median`; s, in the dtype of ``compute``). NaN
        where the rank has no peer with data at that step. Computed in blocks of
        4,096 steps (bounded temporaries). Cached."""
        if self._peer_median is None:
            _, _, cols = self.peer_groups()
            out = np.full((self.S, self.R), np.nan, dtype=self.compute.dtype)
            for c in cols:
                for i in range(0, self.S, 4096):
                    out[i : i + 4096, c] = loo_median(self.compute[i : i + 4096, c])
            self._peer_median = out
        return self._peer_median

    def floor_small_groups(self, base: np.ndarray) -> None:
        """In every peer group of at most :data:`SMALL_GROUP` ranks, let each peer
        count in the leave-one-out peer median (:meth:`peer_median`, cached; changed
        in place) at no less than its own usual level ``base`` ``(S, R)`` (s: the
        temporal view's trailing baseline of its local time; see
        :func:`floored_peers`). Larger groups are left as they are."""
        med = self.peer_median()
        _, _, cols = self.peer_groups()
        for c in cols:
            if np.arange(self.R)[c].size > SMALL_GROUP:
                continue
            for i in range(0, self.S, 4096):
                med[i : i + 4096, c] = loo_median(floored_peers(self.compute[i : i + 4096, c], base[i : i + 4096, c]))

    def group_count(self) -> np.ndarray:
        """``(S, R)``: per step, the number of ranks of the rank's peer group with data."""
        _, cnt, gidx = self.group_stats()
        return cnt[:, gidx]

    def component(self, j: int) -> str:
        """Component name of rank column ``j``: ``"rank:N"``."""
        return f"rank:{int(self.ranks[j])}"

    def steps_between(self, t_lo: float, t_hi: float) -> np.ndarray:
        """Row indices of the steps whose ``[t0, t1]`` overlaps ``[t_lo, t_hi]`` (unix s)."""
        if not self.S:
            return np.zeros(0, dtype=np.int64)
        hi = np.inf if not np.isfinite(t_hi) else t_hi
        return np.flatnonzero((self.t0 <= hi) & (self.t1 >= t_lo))


#: peer groups of at most this many ranks (at most two peers) take each peer at no
#: less than its own usual level (:meth:`StepGrid.floor_small_groups`)
SMALL_GROUP = 3


def floored_peers(compute: np.ndarray, base: np.ndarray) -> np.ndarray:
    """``(rows, n)``: the local times ``compute`` of a small peer group's ranks as their
    peers see them: each at no less than its own usual level ``base`` (same shape,
    s; NaN ``base`` leaves the value as it is, NaN ``compute`` stays NaN: no record).

    Why: the peer median of a group of two is the other rank's time, of three the
    mean of the other two; neither is robust to a peer that runs *fast* for a while
    (on a shared host one rank often gets more CPU while another gets less), and a
    rank would read slow against a peer's fast spell while it is at its own usual
    level. A peer that is slower than usual still counts as it is (the rank then
    reads fast, never slow). Groups of four and more have a median of three or more
    peers, which one peer's spell does not move far."""
    with np.errstate(invalid="ignore"):
        v = np.fmax(compute, base.astype(compute.dtype, copy=False))
    return np.where(np.isnan(compute), compute, v)
