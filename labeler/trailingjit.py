"""The robust trailing baseline's recurrence compiled with numba: the values of
:func:`faultlab.labeler.stats.trailing_baseline_from`, bit for bit, at a fraction of
its cost on long series.

Why: the baseline is a recurrence in step order (a flagged step leaves the later
windows), so the vectorized version walks the blocks of ``block`` steps one by one,
each with two sorts of the ``(C, window)`` trailing window; at ``block`` = 5 and
``window`` = 50 every value is sorted ten times, and a numpy call per block costs
more than its work when ``C`` is small (the job series) or the run long.

Method: each series is walked once. Its window is kept sorted as it slides (a
value that leaves and one that comes in swap places, the values between them
shifted by one; a place is found by counting the values below, a loop without
branches; a value is NaN'd, if flagged, before it enters, so the sorted window
never changes after the fact); the median is read at the middle positions; the
MAD is the ``lo``-th and ``hi``-th smallest of ``|x - median|``, found by a binary
search over the two sides of the median (each side's distances are sorted
already). Every quantity is computed in the dtype the vectorized version uses (the
median of two middle values in float64, then cast; thresholds, noise floors and
comparisons in the series' dtype), so the results are the same numbers.

numba is an optional dependency (the ``scale`` extra): this module imports it,
and is itself imported only where numba is installed
(:func:`faultlab.labeler.stats.trailing_baseline_from`); the kernel is compiled on
first use and cached on disk. It refuses to import (ImportError) when the working
folder is not a trusted folder (:func:`faultlab.safefs.working_folder_problem`): numba
reads its configuration, and through it the folder of its pickled cache, from there.
"""

from __future__ import annotations

import numpy as np

from faultlab import safefs

# numba reads ``.numba_config.yaml`` from the working folder when imported and at every
# compile, and loads its cache index (a pickle) from the ``cache_dir`` that file names:
# whoever may write the working folder (``/tmp``, another user's folder) would run code
# as us. numba is imported only from a trusted working folder.
_UNTRUSTED = safefs.working_folder_problem()
if _UNTRUSTED is not None:
    raise ImportError(f"numba is not imported from an untrusted working folder: {_UNTRUSTED}")

import numba  # noqa: E402 (after the working folder's check)

def trailing_from(Xt: np.ndarray, first: int, state: tuple | None, *, window: int, min_valid: int, threshold: float,
                  mad_k: float, block: int, sigma_per_mad: float) -> tuple:
    """:func:`faultlab.labeler.stats.trailing_baseline_from` (the same arguments and
    results, ``Xt`` ``(C, n)`` float32 or float64, ``n`` > 0 or ``state`` given;
    ``sigma_per_mad`` its MAD-to-sigma scale), series by series in compiled code."""
    Xt = np.ascontiguousarray(Xt)
    dt = Xt.dtype
    C, n = Xt.shape
    if state is None:
        cur_b, cur_s, tail = np.zeros(C, dt), np.zeros(C, dt), np.zeros((C, 0), dt)
    else:
        cur_b, cur_s, tail = (np.array(a, dtype=dt) for a in state)
        tail = np.ascontiguousarray(tail.reshape(C, -1))
    base = np.empty((C, n), dtype=dt)
    sig = np.empty((C, n), dtype=dt)
    flags = np.zeros((C, n), dtype=bool)
    keep = min(int(window), tail.shape[1] + n)
    tail_out = np.empty((C, keep), dtype=dt)
    params = np.array([threshold, mad_k, sigma_per_mad, np.finfo(dt).max], dtype=dt)
    _walk(Xt, int(first), state is not None, cur_b, cur_s, tail, int(window), int(min_valid), int(block), params,
          base, sig, flags, tail_out)
    return base, sig, flags, (cur_b, cur_s, tail_out)


@numba.njit(cache=True, nogil=True)
def _walk(X, first, has_state, cur_b, cur_s, tail, window, min_valid, block, params, base, sig, flags, tail_out):
    """Walk each series of ``X`` ``(C, n)``: fills ``base``, ``sig``, ``flags``
    ``(C, n)`` and ``tail_out`` (the last values that may feed the baseline), and
    leaves each series' last baseline and sigma in ``cur_b``, ``cur_s``.
    ``params``: threshold, mad_k, sigma per MAD, the dtype's largest finite value."""
    C, n = X.shape
    t = tail.shape[1]
    thr, mad_k, spm, big = params[0], params[1], params[2], params[3]
    one = params[:1].copy()  # a value cast to the series' dtype: written here, read back
    feed = np.empty(t + n, dtype=X.dtype)
    srt = np.empty(window, dtype=X.dtype)  # the window's values sorted, then +inf
    pad = np.empty(window + 2, dtype=X.dtype)  # _replace's copy of it
    dev = np.empty(window, dtype=X.dtype)
    keep = tail_out.shape[1]
    for c in range(C):
        for j in range(t):
            feed[j] = tail[c, j]
        for j in range(n):
            feed[t + j] = X[c, j]
        m = _clear(srt)
        if has_state:
            b, s = cur_b[c], cur_s[c]
        else:  # warm-up: the median and MAD of the first `window` values
            for j in range(min(window, n)):
                m = _insert(srt, m, feed[j])
            med, mad = _median_mad(srt, m, dev, one)
            b = med
            one[0] = mad * spm
            s = one[0]
        thr_b = b * thr
        floor = mad_k * _nan_to_num(s, big)
        ws = we = 0  # the feed positions [ws, we) the sorted window holds
        for i in range(0, n, block):
            s0 = first + i
            if s0 >= min_valid:
                st = t + i - min(window, s0)
                en = t + i
                if st >= we:  # no overlap: start over
                    m = _clear(srt)
                    ws = we = st
                both = min(st - ws, en - we)  # one value leaves as one comes in: moved, not shifted twice
                for j in range(both):
                    m = _replace(srt, pad, m, feed[ws + j], feed[we + j])
                for j in range(ws + both, st):
                    m = _remove(srt, m, feed[j])
                for j in range(we + both, en):
                    m = _insert(srt, m, feed[j])
                ws, we = st, en
                if m >= min_valid:
                    med, mad = _median_mad(srt, m, dev, one)
                    b = med
                    one[0] = mad * spm
                    s = one[0]
                thr_b = b * thr
                floor = mad_k * _nan_to_num(s, big)
            for j in range(i, min(i + block, n)):
                x = X[c, j]
                base[c, j] = b
                sig[c, j] = s
                if x > thr_b and (x - b) > floor:  # a NaN value or baseline compares False
                    flags[c, j] = True
                    feed[t + j] = np.nan
        for j in range(keep):
            tail_out[c, j] = feed[t + n - keep + j]
        cur_b[c] = b
        cur_s[c] = s


@numba.njit(cache=True, nogil=True)
def _clear(srt):
    """Empty the sorted window (every place +inf); returns its count, 0."""
    for j in range(srt.shape[0]):
        srt[j] = np.inf
    return 0


@numba.njit(cache=True, nogil=True)
def _nan_to_num(s, big):
    """``np.nan_to_num`` of one value: NaN as 0, +-inf as +-``big`` (in its dtype)."""
    if np.isnan(s):
        return big - big
    if np.isinf(s):
        return big if s > 0 else -big
    return s


@numba.njit(cache=True, nogil=True)
def _below(srt, v):
    """How many values of ``srt`` are below ``v``: the sorted position of ``v``, as a
    count over the whole array (its length fixed, the loop compiles to vector
    compares without branches: faster than a binary search at these lengths; the
    places past the window's values hold +inf)."""
    k = 0
    for i in range(srt.shape[0]):
        if srt[i] < v:
            k += 1
    return k


@numba.njit(cache=True, nogil=True)
def _not_above(srt, v):
    """How many values of ``srt`` are at most ``v`` (``v`` finite: the +inf past the
    window's values are not counted)."""
    k = 0
    for i in range(srt.shape[0]):
        if srt[i] <= v:
            k += 1
    return k


@numba.njit(cache=True, nogil=True)
def _insert(srt, m, v):
    """Put ``v`` into the sorted ``srt[:m]`` (a NaN is left out; ``m`` below its
    length, +inf after it); returns the new count."""
    if np.isnan(v):
        return m
    q = _below(srt, v)
    for j in range(m, q, -1):
        srt[j] = srt[j - 1]
    srt[q] = v
    return m + 1


@numba.njit(cache=True, nogil=True)
def _remove(srt, m, v):
    """Take one value equal to ``v`` out of the sorted ``srt[:m]`` (a NaN was never
    put in); returns the new count."""
    if np.isnan(v):
        return m
    for j in range(_below(srt, v), m - 1):
        srt[j] = srt[j + 1]
    srt[m - 1] = np.inf
    return m - 1


@numba.njit(cache=True, nogil=True)
def _replace(srt, pad, m, old, new):
    """:func:`_remove` ``old`` and :func:`_insert` ``new`` in one move (the values
    between their places shift by one place); returns the new count. ``pad`` (two
    places longer than ``srt``) holds a copy of ``srt`` while each place takes its own
    value, its neighbour's or ``new``, chosen by compares of the place's index: loops
    without branches that compile to vector selects, where a shift loop's trip count
    (the distance between the two places, at random) is a branch mispredicted at every
    step (the walk 13% faster)."""
    if np.isnan(old):
        return _insert(srt, m, new)
    if np.isnan(new):
        return _remove(srt, m, old)
    k = _below(srt, old)
    q = _below(srt, new)
    w = srt.shape[0]
    for i in range(w):
        pad[i + 1] = srt[i]
    pad[0] = pad[1]
    pad[w + 1] = pad[w]
    right = q <= k  # new at q, places q+1..k take their left neighbour; else new at q-1, k..q-2 their right one
    p = q if right else q - 1
    lo = q if right else k
    hi = k if right else q - 1
    nb = 0 if right else 2  # place i's neighbour is pad[i + nb]
    for i in range(w):
        x = pad[i + 1]
        y = pad[i + nb]
        v = y if (i >= lo) & (i <= hi) else x
        srt[i] = new if i == p else v
    return m


@numba.njit(cache=True, nogil=True)
def _median_mad(srt, m, dev, one):
    """The median and MAD of the sorted ``srt[:m]`` (NaN for ``m`` = 0) in its dtype,
    as ``_window_stats`` computes them."""
    if m == 0:
        one[0] = np.nan
        return one[0], one[0]
    lo, hi = (m - 1) // 2, m // 2
    one[0] = 0.5 * (np.float64(srt[lo]) + np.float64(srt[hi]))
    if one[0] == 0:  # a median of zeros is 0.0, never -0.0, as _window_stats reads it
        one[0] = 0.0
    med = one[0]
    if np.isfinite(med):  # the distances on each side of the median are sorted: select in the two
        p = _not_above(srt, med)  # srt[:p] <= med < srt[p:]
        d_lo, d_hi = _two_sorted(srt, m, p, med, lo)
        if hi == lo:
            d_hi = d_lo
    else:  # an infinite median: the distances sorted as the vectorized version sorts them (NaN last)
        for k in range(m):
            d = abs(srt[k] - med)
            j = k
            while j > 0 and (np.isnan(dev[j - 1]) and not np.isnan(d) or dev[j - 1] > d):
                dev[j] = dev[j - 1]
                j -= 1
            dev[j] = d
        d_lo, d_hi = dev[lo], dev[hi]
    one[0] = 0.5 * (np.float64(d_lo) + np.float64(d_hi))
    return med, one[0]


@numba.njit(cache=True, nogil=True)
def _two_sorted(srt, m, p, med, k):
    """The ``k``-th and ``k+1``-th smallest (0-based) of the distances ``|x - med|``
    of the sorted ``srt[:m]``, ``srt[:p]`` <= ``med`` < ``srt[p:]``: the left side's
    distances ``A[i] = |srt[p-1-i] - med|`` and the right side's ``B[j] =
    |srt[p+j] - med|`` both ascend, so the first ``k+1`` are ``A[:i]`` and ``B[:k+1-i]``
    for the smallest ``i`` with ``B[k-i] <= A[i]`` (a binary search); the ``k+1``-th is
    ``med`` when there is none."""
    a, b = p, m - p
    lo, hi = max(0, k + 1 - b), min(a, k + 1)
    while lo < hi:
        i = (lo + hi) >> 1
        j = k + 1 - i
        if abs(srt[p + j - 1] - med) > abs(srt[p - 1 - i] - med):
            lo = i + 1
        else:
            hi = i
    i, j = lo, k + 1 - lo
    if i == 0:
        kth = abs(srt[p + j - 1] - med)
    elif j == 0:
        kth = abs(srt[p - i] - med)
    else:
        kth = max(abs(srt[p - i] - med), abs(srt[p + j - 1] - med))
    if i == a and j == b:
        return kth, med
    if i == a:
        return kth, abs(srt[p + j] - med)
    if j == b:
        return kth, abs(srt[p - 1 - i] - med)
    return kth, min(abs(srt[p - 1 - i] - med), abs(srt[p + j] - med))
