"""The out-of-core labeler's work maps: one run's ``(S, R)`` arrays as ``.npy`` files
in a work folder, written and read with ``pwrite``/``pread`` (a copy out of the page
cache, without a memory map's page faults), and the read-only views the controller
holds of them (:class:`ReleasedMap`, and :class:`RatioMap` for a ratio of two maps
that is computed where it is read instead of stored)."""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class WorkMaps:
    """The work folder's memory maps of one run (``(S, R)``, C order)."""

    folder: Path
    S: int
    R: int
    #: whether :meth:`put` flushes what it wrote to the file (fdatasync): when a worker
    #: runs on another host (a shared file system); on one host the page cache is shared
    sync: bool = False

    def path(self, name: str) -> str:
        return str(self.folder / f"{name}.npy")

    def create(self, name: str, dtype, *, by_rank: bool = False) -> None:
        """An uninitialized map ``(S, R)`` (``(R, S)`` when ``by_rank``: a rank's series
        contiguous, as the in-memory temporal view lays it out); every pass writes all
        the rows (steps) it owns."""
        shape = (self.R, self.S) if by_rank else (self.S, self.R)
        m = np.lib.format.open_memmap(self.path(name), mode="w+", dtype=dtype, shape=shape)
        del m

    def open(self, name: str, mode: str = "r+") -> np.ndarray:
        return np.load(self.path(name), mmap_mode=mode)

    def view(self, name: str) -> "ReleasedMap":
        """Map ``name``, read-only, as the controller holds it: a :class:`ReleasedMap`
        that reads rows picked by an integer array from the file."""
        m = self.open(name, "r").view(ReleasedMap)
        with open(self.path(name), "rb") as f:
            _, _, header = _npy_header(f)
        m._file = (self.path(name), header, m.ctypes.data, m.shape)
        return m

    def rows(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Rows ``rows`` (grid rows, int) of map ``name``, read from the file (a new
        array, :func:`_read_rows`): a memory map's page faults map whole folios of the
        page cache around each row read, so sampled rows read through one count most
        of the map in this process's resident memory."""
        with open(self.path(name), "rb") as f:
            shape, dtype, header = _npy_header(f)
        picked = _within(np.asarray(rows, dtype=np.int64), shape[0])
        if picked is None:  # not an offset before the data or past it
            raise IndexError(f"rows {int(np.min(rows))}..{int(np.max(rows))} of a map of {shape[0]} rows")
        return _read_rows(self.path(name), header, picked, shape[1], dtype)

    def read(self, name: str, a: int, b: int) -> np.ndarray:
        """Rows ``a..b-1`` of map ``name`` (steps; ranks for a map by rank), read from
        the file into a new array (one ``pread``: a copy out of the page cache, without
        the page faults of reading through a map)."""
        with open(self.path(name), "rb") as f:
            shape, dtype, header = _npy_header(f)
            b = max(a, min(b, shape[0]))
            out = np.empty((b - a, shape[1]), dtype=dtype)
            _pread_into(f.fileno(), out, header + a * shape[1] * dtype.itemsize)
        return out

    def put(self, name: str, a: int, b: int, value: np.ndarray, c0: int | None = None, c1: int | None = None) -> None:
        """Write ``value`` into rows ``a..b-1`` of map ``name``, or, for a map by rank,
        into steps ``a..b-1`` of its ranks ``c0..c1-1`` (cast to the map's dtype, as an
        assignment casts), with ``pwrite``: one call for the rows, one per rank for a
        map by rank. A fresh page written through a memory map costs a page fault and
        the zeroing of the page before the copy, more than the copy itself. With
        :attr:`sync`, what was written is flushed to the file (a worker on another
        machine of a shared file system reads it next)."""
        with open(self.path(name), "r+b") as f:
            shape, dtype, header = _npy_header(f)
            r0, r1 = (a, b) if c0 is None else (c0, c1)
            if r1 <= r0 or b <= a:
                return
            row = shape[1] * dtype.itemsize
            fd = f.fileno()
            if c0 is None:
                buf = np.ascontiguousarray(np.broadcast_to(value, (b - a, shape[1])), dtype=dtype)
                _pwrite_all(fd, buf, header + a * row)
            else:
                buf = np.ascontiguousarray(np.broadcast_to(value, (c1 - c0, b - a)), dtype=dtype)
                for i in range(c1 - c0):
                    _pwrite_all(fd, buf[i], header + (c0 + i) * row + a * dtype.itemsize)
            if self.sync:
                os.fdatasync(fd)


def _npy_header(f) -> tuple[tuple, np.dtype, int]:
    """``(shape, dtype, data offset)`` of the ``.npy`` file open as ``f`` (read from its
    header; ``f`` left at the data)."""
    version = np.lib.format.read_magic(f)
    shape, _, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                       else np.lib.format.read_array_header_2_0(f))
    return shape, dtype, f.tell()


def _pread_into(fd: int, out: np.ndarray, offset: int) -> None:
    """Fill ``out`` (C-contiguous) from file ``fd`` at byte ``offset``; OSError when
    the file ends first (a map is written whole before it is read)."""
    mv = memoryview(out).cast("B")
    while mv:
        n = os.preadv(fd, [mv], offset)
        if n <= 0:
            raise OSError(f"a memory map's file ends {len(mv)} bytes early")
        mv, offset = mv[n:], offset + n


def _within(rows: np.ndarray, n: int) -> np.ndarray | None:
    """``rows`` (int64) of an array of ``n`` rows with a negative row counted from the
    end, as numpy reads it; None when one is outside it."""
    rows = np.where(rows < 0, rows + n, rows)
    return None if rows.size and (rows.min() < 0 or rows.max() >= n) else rows


def _read_rows(path: str, header: int, rows: np.ndarray, width: int, dtype) -> np.ndarray:
    """``(len(rows), width)``: rows ``rows`` of the ``.npy`` file ``path`` (its data at
    byte ``header``), one ``pread`` per run of consecutive rows. Runs scattered over a
    map larger than memory are on disk: every run is asked for first
    (``POSIX_FADV_WILLNEED``, reads the kernel starts at once), then each is copied as
    it arrives, instead of one disk read after the other."""
    out = np.empty((rows.size, width), dtype=dtype)
    size = width * out.dtype.itemsize
    if rows.size == 0 or size == 0:
        return out
    cut = np.flatnonzero(np.diff(rows) != 1) + 1
    runs = list(zip(np.r_[0, cut].tolist(), np.r_[cut, rows.size].tolist()))
    with open(path, "rb") as f:
        if len(runs) > 1:
            for a, b in runs:
                os.posix_fadvise(f.fileno(), header + int(rows[a]) * size, (b - a) * size, os.POSIX_FADV_WILLNEED)
        for a, b in runs:
            _pread_into(f.fileno(), out[a:b], header + int(rows[a]) * size)
    return out


def _pwrite_all(fd: int, buf: np.ndarray, offset: int) -> None:
    """Write ``buf`` (C-contiguous) to file ``fd`` at byte ``offset``, whole."""
    mv = memoryview(buf).cast("B")
    while mv:
        n = os.pwrite(fd, mv, offset)
        mv, offset = mv[n:], offset + n


def _basic_index(k) -> bool:
    """Whether ``k``, an index of one axis, is basic indexing (a slice, an integer, ``...``
    or ``None``), not an array numpy pairs with the other arrays of the key."""
    if k is None or k is Ellipsis or isinstance(k, slice):
        return True
    return isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))


class ReleasedMap(np.memmap):
    """A read-only memory map that copies out what it is indexed for (rows picked by an
    integer array: read from its file, ``pread`` per run of rows, where numpy's copy
    through the mapping takes a page fault per page), then gives the
    mapping's pages back (``madvise(MADV_DONTNEED)``; the data stay in the page cache
    and the file): a page fault maps whole folios of the page cache around the rows
    it reads, so the rows fusion reads through a plain map (label intervals, stall
    rows) would stay counted in the controller's resident memory, most of the map in
    the end. Indexing gives numpy arrays (or scalars)."""

    def __getitem__(self, key):
        rows, rest = self._picked_rows(key)
        if rows is not None:  # a copy of the rows read from the file, not through the mapping
            out = _read_rows(self._file[0], self._file[1], rows, self.shape[1], self.dtype)
            return out if rest is None else out[(slice(None),) + rest]
        got = super().__getitem__(key)
        out = np.array(got) if isinstance(got, np.ndarray) else got
        mm = getattr(self, "_mmap", None)
        if mm is not None:
            mm.madvise(mmap.MADV_DONTNEED)
        return out

    def _picked_rows(self, key) -> tuple[np.ndarray | None, tuple | None]:
        """``(rows, rest)`` when ``key`` picks rows of the whole map (not a view of it)
        by a 1-D integer array, all within it (``rest`` the key's other axes, or None);
        ``(None, None)`` otherwise: numpy's indexing (and its errors) then."""
        whole = getattr(self, "_file", None)
        if whole is None or self.ndim != 2 or self.ctypes.data != whole[2] or self.shape != whole[3]:
            return None, None
        first, rest = (key[0], key[1:] or None) if isinstance(key, tuple) and key else (key, None)
        if not isinstance(first, np.ndarray) or first.ndim != 1 or first.dtype.kind not in "iu":
            return None, None
        if rest is not None and not all(map(_basic_index, rest)):
            # another array (or list, or mask) in the key: numpy pairs it with the rows
            # (advanced indexing), where the rows' copy indexed by it would cross them
            return None, None
        rows = _within(first.astype(np.int64), self.shape[0])
        return (rows, rest) if rows is not None else (None, None)


class RatioMap:
    """``num / den`` of two ``(S, R)`` maps (or their ``.T`` views), computed for the
    cells it is indexed for, in their common dtype, as the stored ratio would hold it:
    a ratio read rarely (a label's rows, an episode's steps) costs a second read of
    its two operands there instead of a write of the whole ratio. Indexing gives
    numpy arrays (or scalars); ``np.asarray`` the whole ratio (a small run's)."""

    def __init__(self, num, den):
        assert num.shape == den.shape, (num.shape, den.shape)
        self.num, self.den = num, den
        self.shape = num.shape
        self.ndim = len(num.shape)
        self.dtype = np.result_type(num.dtype, den.dtype)

    def __getitem__(self, key):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.divide(self.num[key], self.den[key], dtype=self.dtype)

    def __array__(self, dtype=None, copy=None):
        out = self[...]
        return out if dtype is None else out.astype(dtype)
