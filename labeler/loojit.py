"""The leave-one-out peer median compiled with numba: the values of
:func:`faultlab.labeler.stats.loo_and_median`, bit for bit, in one pass over each row.

Why: the vectorized version partitions every row at up to four positions, then builds
the answer from nested ``np.where`` over ``(S, n)`` temporaries; on a run of 1e9
rank-steps that is most of the peer view's time (about 33 ns a rank-step).

Method, per row: its values without NaN copied out (``n`` of them); the leave-one-out
median of ``k = n - 1`` others reads sorted positions ``(k-1)//2`` and ``k//2`` of the
rest and the next of each, the row's median ``(n-1)//2`` and ``n//2``: three
consecutive positions ``a..a+2``. They are selected (Hoare's selection, then the two
smallest above ``a``) among the values of a narrow band around the row before's
``a``-th value when a count of the values below and above the band puts ``a..a+2``
inside it (rows of one step time differ little: a few dozen values instead of
hundreds; the band narrows or widens with what it held), else among all of them.
Each member's value then comes from the same rule as the vectorized version, by
selects (a member's side of the middle is a coin toss for a branch), its arithmetic
in the row's dtype and the median's mean in float64.

numba is an optional dependency (the ``scale`` extra); this module is imported only
where :mod:`faultlab.labeler.trailingjit` imports (numba installed, the working folder
trusted: numba reads its configuration there).
"""

from __future__ import annotations

import numpy as np

from faultlab.labeler import trailingjit  # noqa: F401  (numba only from a trusted working folder)

import numba  # noqa: E402 (after the working folder's check)


def loo_and_median(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`faultlab.labeler.stats.loo_and_median` of ``x`` ``(S, n)`` float32 or
    float64: ``(loo (S, n) in x's dtype, median (S,) float64, count (S,) int64)``."""
    x = np.ascontiguousarray(x)
    S, L = x.shape
    out = np.empty((S, L), dtype=x.dtype)
    med = np.empty(S, dtype=np.float64)
    cnt = np.empty(S, dtype=np.int64)
    if S and L:
        _loo_rows(x, out, med, cnt, np.array([0.5, np.nan, 0.0], dtype=x.dtype))
    else:  # rows without a member: no median, no value (not the empty arrays' leftovers)
        med[:] = np.nan
        cnt[:] = 0
    return out, med, cnt


@numba.njit(cache=True, nogil=True)
def _select(v, n, a):
    """Reorder ``v[:n]`` (no NaN) so that ``v[a]`` is its ``a``-th smallest, none
    before it larger and none after it smaller (Hoare's selection, the middle of
    three as the pivot)."""
    lo, hi = 0, n - 1
    while hi > lo:
        mid = (lo + hi) >> 1
        if v[mid] < v[lo]:
            v[mid], v[lo] = v[lo], v[mid]
        if v[hi] < v[lo]:
            v[hi], v[lo] = v[lo], v[hi]
        if v[hi] < v[mid]:
            v[hi], v[mid] = v[mid], v[hi]
        pivot = v[mid]
        i, j = lo, hi
        while i <= j:
            while v[i] < pivot:
                i += 1
            while v[j] > pivot:
                j -= 1
            if i <= j:
                v[i], v[j] = v[j], v[i]
                i += 1
                j -= 1
        if a <= j:
            hi = j
        elif a >= i:
            lo = i
        else:
            return


@numba.njit(cache=True, nogil=True)
def _three(v, n, a, top):
    """``top[0..2]``: the ``a``-th smallest of ``v[:n]`` (no NaN) and the two next
    (as far as there are values; ``v`` reordered)."""
    _select(v, n, a)
    top[0] = v[a]
    b1 = b2 = np.inf  # the two smallest above position a (+inf where there are none)
    for q in range(a + 1, n):
        w = v[q]
        if w < b1:
            b2 = b1
            b1 = w
        elif w < b2:
            b2 = w
    top[1] = b1
    top[2] = b2


@numba.njit(cache=True, nogil=True)
def _three_in_band(v, n, a, b, p0, p1, band, top):
    """:func:`_three` of ``v[:n]`` among its values in ``[p0, p1]`` only (copied to
    ``band``), when the values below ``p0`` and above ``p1`` leave positions ``a..b`` in
    the band; returns how many values the band held, or -1 (``top`` untouched) when it
    does not hold those positions."""
    below = 0
    above = 0
    for q in range(n):
        below += v[q] < p0
        above += v[q] > p1
    if a < below or b >= n - above:
        return -1
    m = 0
    for q in range(n):
        w = v[q]
        if w >= p0 and w <= p1:
            band[m] = w
            m += 1
    _three(band, m, a - below, top)
    return m


@numba.njit(cache=True, nogil=True)
def _at(top, a, n, p, L, nan):
    """Sorted position ``p`` of a row of ``n`` values (NaN sorted after them), as the
    vectorized version reads it: ``p`` at most ``L - 1``; NaN (``nan``, the row's
    dtype) past the values; else ``top[p - a]`` (positions ``a..a+2``)."""
    p = min(p, L - 1)
    if p >= n:
        return nan
    return top[p - a]


@numba.njit(cache=True, nogil=True)
def _loo_rows(x, out, med, cnt, consts):
    """Fill ``out`` ``(S, L)``, ``med`` and ``cnt`` ``(S,)`` (:func:`loo_and_median`);
    ``consts``: 0.5, NaN and 0 in ``x``'s dtype."""
    S, L = x.shape
    half, nan, zero = consts[0], consts[1], consts[2]
    buf = np.empty(L, dtype=x.dtype)
    band = np.empty(L, dtype=x.dtype)
    top = np.empty(3, dtype=x.dtype)  # sorted positions a, a+1, a+2 of the row's values
    center = nan  # the last row's a-th value, and a half-width around it
    width = nan
    for i in range(S):
        n = 0
        for j in range(L):
            v = x[i, j]
            if not np.isnan(v):
                buf[n] = v + zero  # -0.0 read as 0.0, as the vectorized version reads it
                n += 1
        cnt[i] = n
        k = n - 1  # a member's others
        lo = min(max((k - 1) // 2, 0), L - 1)
        hi = min(max(k // 2, 0), L - 1)
        m0, m1 = max((n - 1) // 2, 0), max(n // 2, 0)
        a = min(lo, m0, max(n - 1, 0))  # every position read is a, a+1 or a+2 (or past the values)
        if n > 0:
            # rows of one step time differ little from the last: select within a narrow
            # band around its a-th value, widened (or narrowed) by what the band held
            b = min(a + 2, n - 1)
            held = -1
            if np.isfinite(center) and np.isfinite(width):
                held = _three_in_band(buf, n, a, b, center - width, center + width, band, top)
                width *= 4.0 if held < 0 else 0.5 if held > 64 else 2.0 if held < 8 else 1.0
            if held < 0:
                _three(buf, n, a, top)
                if not np.isfinite(width):
                    width = (top[min(b - a, 2)] - top[0]) * 8.0
            center = top[0]
            if not (width > 0):
                width = abs(center) * 1e-3
        s_lo, s_hi = _at(top, a, n, lo, L, nan), _at(top, a, n, hi, L, nan)
        s_lo1, s_hi1 = _at(top, a, n, lo + 1, L, nan), _at(top, a, n, hi + 1, L, nan)
        m = 0.5 * (np.float64(_at(top, a, n, m0, L, nan)) + np.float64(_at(top, a, n, m1, L, nan))) if n > 0 else np.nan
        med[i] = m
        if k < 1:  # no peer left for a member with a value
            for j in range(L):
                out[i, j] = m if np.isnan(x[i, j]) else nan
            continue
        r_hi, r_lo, r_mid = half * (s_lo + s_hi), half * (s_lo1 + s_hi1), half * (s_lo + s_hi1)
        for j in range(L):  # selects, not branches: a member's side of the middle is a coin toss
            v = x[i, j]
            o = r_hi if v > s_hi else (r_lo if v <= s_lo else r_mid)
            out[i, j] = m if np.isnan(v) else o
