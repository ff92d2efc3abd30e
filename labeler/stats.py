"""Robust statistics of the labeler, one of each, used by every view and importer:
the NaN-ignoring median (:func:`nanmedian`, and :func:`median` of any values as one
number), the leave-one-out median of peers (:func:`loo_median`), the MAD-to-sigma
scale, and the robust trailing baseline (:func:`trailing_baseline`: the median of the
preceding window with flagged values left out, a MAD noise floor).
"""

from __future__ import annotations

import functools
import importlib.util
import sys

import numpy as np

from faultlab import safefs
from faultlab.errors import BadInput


#: scale factor from MAD to the standard deviation of a normal distribution
MAD_TO_SIGMA = 1.4826


def nanmedian(a: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Median along ``axis`` ignoring NaN, vectorized (no Python loop).

    ``a`` may be float32 or float64 (other dtypes are converted to float64); it is
    sorted in its own dtype, along a contiguous copy of ``axis`` (partitioned at the
    middle positions instead when no value is NaN: the same values in linear time). The median of an
    even count is ``0.5 * (lo + hi)`` of the two middle values, computed in float64.

    Returns ``(median, count)``: the float64 median (NaN where a slice has no finite
    value) and the int64 number of non-NaN values per slice, both with ``axis``
    removed.
    """
    a = np.asarray(a)
    if a.dtype != np.float32 and a.dtype != np.float64:
        a = a.astype(np.float64)
    s = np.array(np.moveaxis(a, axis, -1), order="C")  # own copy, sorted axis contiguous
    L = s.shape[-1]
    if L == 0:
        return np.full(s.shape[:-1], np.nan), np.zeros(s.shape[:-1], dtype=np.int64)
    if not np.isnan(s).any():  # no NaN at all: the two middle order statistics, found in linear time
        s.partition(sorted({(L - 1) // 2, L // 2}), axis=-1)
        n = np.full(s.shape[:-1], L, dtype=np.int64)
        return 0.5 * (s[..., (L - 1) // 2].astype(np.float64) + s[..., L // 2]), n
    s.sort(axis=-1)  # NaN sorts last
    n = L - np.count_nonzero(np.isnan(s), axis=-1).astype(np.int64)
    lo = np.clip((n - 1) // 2, 0, None)
    hi = np.clip(n // 2, 0, None)
    lo_v = np.take_along_axis(s, lo[..., None], axis=-1)[..., 0].astype(np.float64)
    hi_v = np.take_along_axis(s, hi[..., None], axis=-1)[..., 0]
    med = np.where(n > 0, 0.5 * (lo_v + hi_v), np.nan)
    return med, n


#: values of a leave-one-out peer median from which it runs compiled where numba is
#: installed (below, numba's first call costs more than it saves)
COMPILED_LOO_CELLS = 1 << 16


def loo_median(x: np.ndarray) -> np.ndarray:
    """Leave-one-out median of each row's members: ``out[i, j]`` = the median of row
    ``i`` of ``x`` without ``x[i, j]`` (NaN ignored), i.e. each member's peers without
    itself. A member that is NaN gets the median of the others (all of the row); a
    member with no other value in its row gets NaN (no peer left: the caller falls
    back to its own history).

    Why: with two ranks in a peer group the median is their mean, and a 2x straggler
    reads ``2 / 1.5 = 1.33x``; against the other rank alone it reads 2x.

    Method: one sort per row (NaN last; a partition at the few middle positions when
    no value is NaN, the same values in linear time); with ``k`` other values the median of the
    rest uses sorted positions ``lo = (k-1)//2`` and ``hi = k//2`` of the rest, which
    are ``s[lo]``/``s[hi]`` when the member sorts above them and ``s[lo+1]``/``s[hi+1]``
    when below; ties give the same multiset whichever copy is removed.

    Args:
        x: ``(S, n)`` float32 or float64 (other dtypes are converted to float64).

    Returns:
        ``(S, n)`` in the dtype of ``x`` (float64 for other dtypes).
    """
    return loo_and_median(x)[0]


def loo_and_median(x: np.ndarray, compiled: bool | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`loo_median` of ``x`` ``(S, n)`` and, from the same sort or partition,
    :func:`nanmedian` of its rows: ``(loo (S, n) in x's dtype, median (S,) float64,
    count (S,) int64)``, each equal to what the two functions return. Compiled
    (:mod:`faultlab.labeler.loojit`, the same values bit for bit) when ``compiled``,
    or by default from :data:`COMPILED_LOO_CELLS` values on where numba is installed.
    """
    x = np.asarray(x)
    if x.dtype != np.float32 and x.dtype != np.float64:
        x = x.astype(np.float64)
    if compiled if compiled is not None else x.size >= COMPILED_LOO_CELLS and _kernel_importable():
        # numba is optional and heavy: imported once a peer median is large enough to use it
        from faultlab.labeler import loojit

        return loojit.loo_and_median(x)
    S, L = x.shape
    if L == 0:
        return x.copy(), np.full(S, np.nan), np.zeros(S, dtype=np.int64)
    zero = x.dtype.type(0)  # x + 0 is x, but 0.0 for -0.0: a sorted position holding a zero reads 0.0
    nan_x = np.isnan(x)
    any_nan = bool(nan_x.any())
    if not any_nan:  # every row full: fixed positions (a slice, no gather), partitioned in linear time
        k = np.full(S, L - 1)
        lo, hi = max((L - 2) // 2, 0), (L - 1) // 2
        s = np.partition(x, sorted({lo, hi, min(lo + 1, L - 1), min(hi + 1, L - 1)}), axis=1)
        s_lo, s_hi = s[:, lo : lo + 1], s[:, hi : hi + 1]
        s_lo1, s_hi1 = s[:, min(lo + 1, L - 1) : min(lo + 1, L - 1) + 1], s[:, min(hi + 1, L - 1) : min(hi + 1, L - 1) + 1]
        # positions (L-1)//2 and L//2, the median's, are among those partitioned
        # + 0: -0.0 read as 0.0 (which of equal zeros a partition puts at a position is
        # its own choice; the compiled version reads every zero as 0.0)
        s_lo, s_hi, s_lo1, s_hi1 = s_lo + zero, s_hi + zero, s_lo1 + zero, s_hi1 + zero
        med = 0.5 * ((s[:, (L - 1) // 2] + zero).astype(np.float64) + (s[:, L // 2] + zero))
        n = np.full(S, L, dtype=np.int64)
    else:
        s = np.sort(x, axis=1)  # NaN last
        k = L - np.count_nonzero(nan_x, axis=1) - 1  # (S,) others, for a member that has a value
        lo_i = np.clip((k - 1) // 2, 0, L - 1)[:, None]
        hi_i = np.clip(k // 2, 0, L - 1)[:, None]

        def at(i):
            return np.take_along_axis(s, np.minimum(i, L - 1), axis=1)

        s_lo, s_hi, s_lo1, s_hi1 = at(lo_i) + zero, at(hi_i) + zero, at(lo_i + 1) + zero, at(hi_i + 1) + zero
        n = k + 1  # values per row
        m_lo = (at(np.clip((n - 1) // 2, 0, None)[:, None])[:, 0] + zero).astype(np.float64)
        m_hi = at(np.clip(n // 2, 0, None)[:, None])[:, 0] + zero
        med = np.where(n > 0, 0.5 * (m_lo + m_hi), np.nan)
    half = x.dtype.type(0.5)
    with np.errstate(invalid="ignore"):
        out = np.where(x > s_hi, half * (s_lo + s_hi),
                       np.where(x <= s_lo, half * (s_lo1 + s_hi1), half * (s_lo + s_hi1)))
    if any_nan:  # a member without a value: the plain median of the row
        out = np.where(nan_x, med.astype(x.dtype)[:, None], out)
    if L < 2 or any_nan:
        out[(k < 1)[:, None] & ~nan_x] = np.nan  # no peer left
    return out.astype(x.dtype, copy=False), med, n


def median(a) -> float:
    """The median of ``a`` (any shape, any numbers) as one float64, NaN ignored (NaN
    when no value is left): :func:`nanmedian` of the flattened values."""
    a = np.asarray(a, dtype=np.float64).ravel()
    m, n = nanmedian(a, axis=0)
    return float(m) if n else float("nan")


def mean(a) -> float:
    """The mean of ``a`` (any shape) as one float64, NaN ignored (NaN when none left)."""
    a = np.asarray(a, dtype=np.float64).ravel()
    a = a[~np.isnan(a)]
    return float(a.mean()) if a.size else float("nan")


def mad_sigma(a) -> float:
    """The robust sigma of ``a`` (any shape, NaN ignored): 1.4826 x the median absolute
    deviation from its :func:`median` (NaN when no value is left)."""
    a = np.asarray(a, dtype=np.float64).ravel()
    return MAD_TO_SIGMA * median(np.abs(a - median(a)))


def median_ratio(values, base) -> float:
    """Median of ``values`` / median of ``base`` (NaN when either is missing or 0)."""
    v, b = median(values), median(base)
    if not (np.isfinite(v) and np.isfinite(b)) or b <= 0:
        return float("nan")
    return v / b


def time_ratio(values, base) -> float:
    """Time ratio: sum of ``values`` / sum of ``base`` over the entries where both are
    known (NaN when none). The slowdown of time, which a median would understate for
    intermittent stalls."""
    v = np.asarray(values, dtype=np.float64).ravel()
    b = np.asarray(base, dtype=np.float64).ravel()
    ok = np.isfinite(v) & np.isfinite(b)
    tb = float(b[ok].sum())
    return float(v[ok].sum()) / tb if ok.any() and tb > 0 else float("nan")


#: cells of a block :func:`column_nansum` converts to float64 at once (8 MiB)
SUM_BLOCK_CELLS = 1 << 20


def column_nansum(x, minus=None) -> np.ndarray:
    """``(C,)`` float64: the sum over rows of ``x`` ``(n, C)`` (less ``minus``, the same
    shape, when given), NaN as 0: ``np.nansum(np.asarray(x, float64) - np.asarray(minus,
    float64), axis=0)`` bit for bit, a block of rows at a time (:data:`SUM_BLOCK_CELLS`
    cells), so a memory map is never converted whole. Exact because a reduction over
    the rows of a C-order array adds row after row: the running sum is carried in as
    each block's first row."""
    n, C = x.shape
    step = max(1, SUM_BLOCK_CELLS // max(1, C))
    acc = np.zeros(C)
    for a in range(0, n, step):
        blk = np.asarray(x[a : a + step], dtype=np.float64)
        if minus is not None:
            blk = blk - np.asarray(minus[a : a + step], dtype=np.float64)
        blk = np.concatenate([acc[None, :], np.where(np.isnan(blk), 0.0, blk)])
        acc = np.add.reduce(blk, axis=0) if a else np.add.reduce(blk[1:], axis=0)
    return acc


#: values :func:`median_of_blocks` sorts at once (32 MiB of float64)
GATHER_VALUES = 1 << 22


def _order_keys(v: np.ndarray) -> np.ndarray:
    """uint64 keys of float64 values that sort as the values do (sign bit flipped for
    positives, every bit for negatives)."""
    b = v.view(np.uint64)
    return np.where(b >> np.uint64(63), ~b, b | np.uint64(1 << 63))


def median_of_blocks(blocks) -> float:
    """:func:`median` of all the values of ``blocks()`` (a callable giving an iterable
    of arrays, called once per pass over the data), the same float64, with at most
    :data:`GATHER_VALUES` values held at once.

    Method: an exact radix selection of the two middle values: each pass counts the
    values by the next 16 bits of their order key (:func:`_order_keys`) inside the
    bucket the middle values are known to lie in, until that bucket holds at most
    :data:`GATHER_VALUES` values, which are then sorted (three or four passes on
    real data; a bucket at all 64 bits is one value)."""
    n = 0
    small = []
    for blk in blocks():
        v = np.asarray(blk, dtype=np.float64).ravel()
        v = v[~np.isnan(v)]
        n += v.size
        if n <= GATHER_VALUES:
            small.append(v)
    if n <= GATHER_VALUES:
        return median(np.concatenate(small)) if small else float("nan")
    del small
    # each middle value: [its rank in its bucket, the bucket's key prefix, bits below the prefix, values in the bucket]
    tg = [[(n - 1) // 2, 0, 64, n], [n // 2, 0, 64, n]]
    found: list = [None, None]
    while found[0] is None or found[1] is None:
        for i, (r, prefix, bits, count) in enumerate(tg):
            if found[i] is None and bits == 0:  # every value of the bucket is this one
                found[i] = _key_value(prefix)
        live = {(t[1], t[2]) for i, t in enumerate(tg) if found[i] is None}
        gather = {k: [] for k in live if max(t[3] for t in tg if (t[1], t[2]) == k) <= GATHER_VALUES}
        hist = {k: np.zeros(1 << 16, dtype=np.int64) for k in live if k not in gather}
        for blk in blocks():
            v = np.asarray(blk, dtype=np.float64).ravel()
            v = v[~np.isnan(v)]
            k = _order_keys(v)
            for prefix, bits in live:
                inb = (k >> np.uint64(bits)) == np.uint64(prefix) if bits < 64 else np.ones(k.size, dtype=bool)
                if (prefix, bits) in gather:
                    gather[(prefix, bits)].append(v[inb])
                else:
                    digit = (k[inb] >> np.uint64(bits - 16)) & np.uint64(0xFFFF)
                    hist[(prefix, bits)] += np.bincount(digit.astype(np.int64), minlength=1 << 16)
        for i, t in enumerate(tg):
            key = (t[1], t[2])
            if found[i] is not None or key not in live:
                continue
            if key in gather:
                found[i] = float(np.sort(np.concatenate(gather[key]))[t[0]])
                continue
            h = np.cumsum(hist[key])
            d = int(np.searchsorted(h, t[0], side="right"))
            t[0] -= int(h[d - 1]) if d else 0
            t[3] = int(hist[key][d])
            t[1], t[2] = (t[1] << 16) | d, t[2] - 16
    return float(0.5 * (found[0] + found[1]))


def _key_value(key: int) -> float:
    """The float64 whose :func:`_order_keys` key is ``key``."""
    k = np.uint64(key)
    b = k & ~np.uint64(1 << 63) if k >> np.uint64(63) else ~k
    return float(np.array([b], dtype=np.uint64).view(np.float64)[0])


def median_of_rows(x) -> float:
    """:func:`median` of all the cells of ``x`` ``(n, C)`` (a memory map, say), read
    a block of rows at a time (:func:`median_of_blocks`)."""
    n, C = x.shape
    step = max(1, SUM_BLOCK_CELLS // max(1, C))
    return median_of_blocks(lambda: (x[a : a + step] for a in range(0, n, step)))


def _window_stats(win: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | int]:
    """Median, MAD (both in the dtype of ``win``) and non-NaN count of each row of
    ``win`` ``(C, w)``, ignoring NaN; a row without values gives NaN. The median of an
    even count is the mean of the two middle values (computed in float64); the MAD is
    taken about the median as stored. The count is an int when no row holds a NaN."""
    dt = win.dtype
    w = win.shape[1]
    srt = np.sort(win, axis=1)  # NaN last
    lo, hi = (w - 1) // 2, w // 2
    # + 0: a median of zeros is 0.0, never -0.0 (which of equal zeros the sort puts at
    # a position is its own choice; the compiled walk reads them the same way)
    med = (0.5 * (srt[:, lo].astype(np.float64) + srt[:, hi])).astype(dt) + dt.type(0)
    dev = np.abs(win - med[:, None])
    dev.sort(axis=1)
    mad = (0.5 * (dev[:, lo].astype(np.float64) + dev[:, hi])).astype(dt)
    rows = np.flatnonzero(np.isnan(srt[:, -1]))
    if rows.size == 0:
        return med, mad, w
    # rows holding a NaN (no record, or a flagged step left out): redo with their count
    srt = srt[rows]
    n_r = w - np.count_nonzero(np.isnan(srt), axis=1)
    lo_r = np.clip((n_r - 1) // 2, 0, None)[:, None]
    hi_r = np.clip(n_r // 2, 0, None)[:, None]

    def mid(a):
        return 0.5 * (np.take_along_axis(a, lo_r, axis=1)[:, 0].astype(np.float64) + np.take_along_axis(a, hi_r, axis=1)[:, 0])

    med_r = mid(srt).astype(dt) + dt.type(0)
    med_r[n_r == 0] = np.nan
    dev = np.abs(win[rows] - med_r[:, None])
    dev.sort(axis=1)
    mad_r = mid(dev).astype(dt)
    mad_r[n_r == 0] = np.nan
    med[rows] = med_r
    mad[rows] = mad_r
    n = np.full(win.shape[0], w, dtype=np.int64)
    n[rows] = n_r
    return med, mad, n


def trailing_baseline_t(
    Xt: np.ndarray, *, window: int, min_valid: int, threshold: float, mad_k: float, block: int,
    compiled: bool | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`trailing_baseline` on the transposed layout: ``Xt`` ``(C, S)`` (a series
    per row, time along the contiguous axis), float32 or float64. Returns ``(C, S)``
    baseline, sigma (dtype of ``Xt``) and flags (bool): :func:`trailing_baseline_from`
    over the whole series at once (``compiled`` as there).
    """
    base, sig, flags, _ = trailing_baseline_from(Xt, 0, None, window=window, min_valid=min_valid, threshold=threshold,
                                                 mad_k=mad_k, block=block, compiled=compiled)
    return base, sig, flags


#: a series walk of at least this many cells (or :data:`COMPILED_STEPS` steps) runs
#: compiled (:mod:`faultlab.labeler.trailingjit`) where numba is installed: below, the
#: import and the kernel's load cost more than the walk
COMPILED_CELLS = 1 << 20
COMPILED_STEPS = 1 << 15


def compiled_walk(cells: int, steps: int) -> bool:
    """Whether a trailing-baseline walk of ``cells`` values (``steps`` per series) runs
    compiled: long enough, and numba installed and importable."""
    return (cells >= COMPILED_CELLS or steps >= COMPILED_STEPS) and _kernel_importable()


@functools.lru_cache(maxsize=1)
def _kernel_importable() -> bool:
    """Whether the compiled kernels (:mod:`faultlab.labeler.trailingjit`, and
    :mod:`faultlab.labeler.loojit` behind it) import: numba installed, built for this
    numpy, and the working folder trusted (numba reads its configuration there,
    :func:`faultlab.safefs.working_folder_problem`; else one note line on stderr)."""
    if importlib.util.find_spec("numba") is None:
        return False
    why = safefs.working_folder_problem()
    if why is not None:
        print(f"faultlab: note: the trailing walk (and the peer median) runs vectorized, not compiled (slower, the same "
              f"values): numba reads its configuration from the working folder, which is not trusted ({why}); run from a "
              f"folder of yours", file=sys.stderr)
        return False
    try:
        # numba is optional and heavy: imported once a walk or a peer median is large enough to use it
        from faultlab.labeler import trailingjit  # noqa: F401
    except ImportError:
        return False
    return True


def trailing_baseline_from(
    Xt: np.ndarray, first: int, state: tuple | None, *, window: int, min_valid: int, threshold: float, mad_k: float,
    block: int, compiled: bool | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple]:
    """:func:`trailing_baseline_t` of the steps ``first .. first + n - 1`` of the series
    (``Xt`` ``(C, n)``), carrying the recurrence from the steps before.

    The feedback (flagged steps leave the baseline) makes block ``k`` depend on the
    flags of the blocks before it, so blocks run in order, each vectorized over all C
    series: per block, one sort of the ``(C, window)`` trailing window for the median
    and one for the MAD (a few hundred KB, in cache). ``first`` is a multiple of
    ``block``; ``state`` is None at the run's first step (the warm-up baseline is the
    median of ``Xt``'s first ``window`` steps, which must then be there), else what the
    call for the steps before returned: ``(baseline, sigma, feed)``, ``(C,)`` each and
    ``(C, <= window)`` the last values that may feed the baseline (flagged ones NaN).

    ``compiled``: walk each series in compiled code
    (:func:`faultlab.labeler.trailingjit.trailing_from`, the same values bit for bit;
    needs numba), or vectorized over the series block by block (False); None: by
    :func:`compiled_walk`.

    Returns ``(base, sigma, flags, state)``: ``(C, n)`` each, and the state after the
    last step.
    """
    C, n = Xt.shape
    dt = Xt.dtype
    flags = np.zeros((C, n), dtype=bool)
    if C == 0 or (n == 0 and state is None):
        return np.full((C, n), np.nan, dtype=dt), np.full((C, n), np.nan, dtype=dt), flags, state
    if compiled or (compiled is None and compiled_walk(C * n, n)):
        # numba is optional and heavy (a third of a second to import, a kernel to load):
        # imported for a long walk only
        from faultlab.labeler import trailingjit

        return trailingjit.trailing_from(Xt, first, state, window=window, min_valid=min_valid, threshold=threshold,
                                         mad_k=mad_k, block=block, sigma_per_mad=MAD_TO_SIGMA)
    if state is None:  # warm-up baseline: median of the first `window` rows
        cur_b, cur_s, _ = _window_stats(Xt[:, :window])
        cur_s = (cur_s * MAD_TO_SIGMA).astype(dt)
        tail = np.zeros((C, 0), dtype=dt)
    else:
        cur_b, cur_s, tail = state
    feed = np.concatenate([tail, Xt], axis=1)  # the values allowed to feed the baseline (flagged ones -> NaN)
    off = tail.shape[1]
    base = np.empty((C, n), dtype=dt)
    sig = np.empty((C, n), dtype=dt)
    thr_b = cur_b * dt.type(threshold)
    floor = dt.type(mad_k) * np.nan_to_num(cur_s)
    for i in range(0, n, block):
        s0 = first + i
        if s0 >= min_valid:
            med, mad, cnt = _window_stats(feed[:, off + i - min(window, s0) : off + i])
            mad = (mad * MAD_TO_SIGMA).astype(dt)
            if isinstance(cnt, int):
                if cnt >= min_valid:
                    cur_b, cur_s = med, mad
            else:
                ok = cnt >= min_valid
                cur_b = np.where(ok, med, cur_b)
                cur_s = np.where(ok, mad, cur_s)
            thr_b = cur_b * dt.type(threshold)
            floor = dt.type(mad_k) * np.nan_to_num(cur_s)
        blk = Xt[:, i : i + block]
        # a NaN value or baseline compares False: never flagged
        f = (blk > thr_b[:, None]) & ((blk - cur_b[:, None]) > floor[:, None])
        base[:, i : i + block] = cur_b[:, None]
        sig[:, i : i + block] = cur_s[:, None]
        if f.any():
            flags[:, i : i + block] = f
            feed[:, off + i : off + i + block][f] = np.nan
    return base, sig, flags, (cur_b, cur_s, feed[:, -window:].copy())



def trailing_baseline(
    X: np.ndarray,
    *,
    window: int,
    min_valid: int,
    threshold: float,
    mad_k: float,
    block: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flag values above a robust trailing baseline, column by column (vectorized over columns).

    Args:
        X: ``(S, C)`` float array, rows in time order; NaN = no value. float32 is
            computed in float32, anything else in float64.
        window: number of preceding rows the baseline is the median of (steps).
        min_valid: fewest unflagged values in the window to refresh the baseline;
            with fewer the previous baseline is kept (also the warm-up length).
        threshold: ratio ``value / baseline`` above which a row may be flagged.
        mad_k: the value must also exceed the baseline by ``mad_k * 1.4826 * MAD``.
        block: the baseline is refreshed every ``block`` rows (1 = every row).

    Returns:
        ``(baseline, sigma, flags)``: baseline and robust sigma ``(S, C)`` in the
        unit (and float dtype) of ``X``, and the boolean ``(S, C)`` flags (possibly
        transposed views of ``(C, S)`` arrays). Deterministic.

    Raises:
        BadInput when a parameter is out of range.
    """
    if window < 1 or min_valid < 1 or block < 1:
        raise BadInput("window, min_valid and block must be >= 1", field="temporal")
    X = np.asarray(X)
    dt = np.float32 if X.dtype == np.float32 else np.float64
    Xt = np.ascontiguousarray(X.T, dtype=dt)
    base, sig, flags = trailing_baseline_t(Xt, window=window, min_valid=min_valid, threshold=threshold,
                                            mad_k=mad_k, block=block)
    return base.T, sig.T, flags.T
