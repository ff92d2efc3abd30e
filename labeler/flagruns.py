"""Per-step flags of every rank kept as each rank's runs of flagged steps
(:class:`FlagRuns`): the out-of-core labeler's peer and temporal flags. Each Dask task
returns the runs of its chunk (:func:`chunk_runs`, a few numbers per run), the
controller joins them (:meth:`FlagRuns.from_chunks`), and fusion reads them as it
reads the dense ``(S, R)`` flags in memory, without a byte per rank-step in the
controller.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np


def chunk_runs(flags: np.ndarray, rank0: int, row0: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The runs of True of a chunk's flags ``(ranks, rows)`` bool (rank-major), as
    ``(rank, start, end)`` int64 arrays (``[start, end)`` grid rows, ranks counted from
    ``rank0``, rows from ``row0``), sorted by rank then start. Only the ranks with a
    flag are walked (most ranks of a chunk have none)."""
    hot = np.flatnonzero(flags.any(axis=1))
    f = np.zeros((hot.size, flags.shape[1] + 2), dtype=np.int8)
    f[:, 1:-1] = flags[hot]
    d = np.diff(f, axis=1)
    rank, start = np.nonzero(d == 1)
    _, end = np.nonzero(d == -1)
    return hot[rank].astype(np.int64) + rank0, start.astype(np.int64) + row0, end.astype(np.int64) + row0


class FlagRuns:
    """An ``(S, R)`` bool array (steps x ranks) held as each rank's runs ``[start,
    end)`` of True.

    It reads as the dense array does for the forms fusion and
    :meth:`~faultlab.labeler.analysis.Analysis.measure` use, each a numpy bool array:
    ``f.any(axis=0)`` ``(R,)`` (``f.any()`` one bool); ``f[:, j]``, ``f[a:b, j]``,
    ``f[rows, j]`` (rank column ``j``; ``rows`` integer grid rows); ``f[a:b]``
    ``(b - a, R)``; ``np.asarray(f)`` the whole ``(S, R)``. Memory: three int64 per run
    and ``R + 1`` offsets. Other keys raise TypeError (a slice with a step, a list of
    ranks)."""

    ndim = 2
    dtype = np.dtype(bool)

    def __init__(self, S: int, R: int, rank: np.ndarray, start: np.ndarray, end: np.ndarray):
        """``rank``/``start``/``end``: the runs, sorted by rank then start, disjoint and
        not touching within a rank (:meth:`from_chunks` makes them so)."""
        self.shape = (int(S), int(R))
        self._start = np.asarray(start, dtype=np.int64)
        self._end = np.asarray(end, dtype=np.int64)
        self._ptr = np.searchsorted(np.asarray(rank, dtype=np.int64), np.arange(int(R) + 1))

    @classmethod
    def from_chunks(cls, S: int, R: int, parts) -> "FlagRuns":
        """The runs of the whole run from the chunks' :func:`chunk_runs` (any order);
        a run a chunk edge cut in two is joined again."""
        parts = list(parts)
        if not parts:
            return cls(S, R, *(np.zeros(0, dtype=np.int64),) * 3)
        rank, start, end = (np.concatenate([p[k] for p in parts]).astype(np.int64) for k in range(3))
        o = np.lexsort((start, rank))
        rank, start, end = rank[o], start[o], end[o]
        first = np.r_[True, (rank[1:] != rank[:-1]) | (start[1:] != end[:-1])] if rank.size else np.zeros(0, dtype=bool)
        if not first.all():  # a run continued across a chunk edge: its first piece's start, its last's end
            heads = np.flatnonzero(first)
            tails = np.r_[heads[1:] - 1, rank.size - 1]
            rank, start, end = rank[heads], start[heads], end[tails]
        return cls(S, R, rank, start, end)

    def runs(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Rank column ``j``'s runs: ``(start, end)`` grid rows, ``[start, end)``."""
        a, b = self._ptr[j], self._ptr[j + 1]
        return self._start[a:b], self._end[a:b]

    def any(self, axis: int | None = None):
        """``(R,)`` bool, whether each rank has a flag (``axis=0``); one bool (None)."""
        has = np.diff(self._ptr) > 0
        if axis is None:
            return bool(has.any())
        if axis == 0:
            return has
        raise TypeError(f"FlagRuns.any: axis must be 0 or None, not {axis!r}")

    def _column(self, j: int, rows: np.ndarray) -> np.ndarray:
        """Rank column ``j`` at grid rows ``rows`` (int)."""
        s, e = self.runs(j)
        i = np.searchsorted(s, rows, side="right") - 1
        return (i >= 0) & (rows < e[np.maximum(i, 0)]) if s.size else np.zeros(rows.shape, dtype=bool)

    def _column_range(self, j: int, a: int, b: int) -> np.ndarray:
        """Rank column ``j`` at grid rows ``a..b-1``, set from its runs (no search per row)."""
        s, e = self.runs(j)
        out = np.zeros(max(0, b - a), dtype=bool)
        hit = (s < b) & (e > a)
        if hit.any():
            lo = np.maximum(s[hit], a) - a
            n = np.minimum(e[hit], b) - a - lo  # each run's cells inside the rows
            first = np.cumsum(n) - n
            out[np.repeat(lo - first, n) + np.arange(int(n.sum()))] = True
        return out

    def _rows(self, key) -> np.ndarray:
        if isinstance(key, slice):
            if key.step not in (None, 1):
                raise TypeError("FlagRuns: a row slice with a step")
            return np.arange(*key.indices(self.shape[0]), dtype=np.int64)
        rows = np.asarray(key)
        if rows.dtype.kind not in "iu":
            raise TypeError(f"FlagRuns: rows must be a slice or integer rows, not {rows.dtype}")
        return np.where(rows < 0, rows + self.shape[0], rows).astype(np.int64)

    def _block(self, a: int, b: int) -> np.ndarray:
        """Rows ``a..b-1`` of every rank, ``(b - a, R)``."""
        S, R = self.shape
        out = np.zeros((max(0, b - a), R), dtype=bool)
        hit = (self._start < b) & (self._end > a)
        s = np.maximum(self._start[hit], a) - a
        n = np.minimum(self._end[hit], b) - a - s  # the runs' cells inside the rows
        ranks = np.repeat(np.arange(R), np.diff(self._ptr))[hit]
        first = np.cumsum(n) - n  # each run's first cell among all the cells set
        out[np.repeat(s - first, n) + np.arange(int(n.sum())), np.repeat(ranks, n)] = True
        return out

    def __getitem__(self, key):
        rows, col = key if isinstance(key, tuple) else (key, slice(None))
        if isinstance(col, Integral):
            j = int(col) + (self.shape[1] if int(col) < 0 else 0)
            if isinstance(rows, slice) and rows.step in (None, 1):
                a, b, _ = rows.indices(self.shape[0])
                return self._column_range(j, a, b)
            return self._column(j, self._rows(rows))
        if col == slice(None) and isinstance(rows, slice) and rows.step in (None, 1):
            a, b, _ = rows.indices(self.shape[0])
            return self._block(a, b)
        raise TypeError(f"FlagRuns: unsupported key {key!r}")

    def __array__(self, dtype=None, copy=None):
        out = self._block(0, self.shape[0])
        return out if dtype is None else out.astype(dtype)
