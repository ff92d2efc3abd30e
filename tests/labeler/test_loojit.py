"""The leave-one-out peer median compiled (faultlab.labeler.loojit) gives the
vectorized version's values bit for bit (faultlab.labeler.stats.loo_and_median): the
leave-one-out medians, the rows' medians and counts, in float32 and float64, on rows
of 1 to 501 members with gaps, ties, infinite values, rows without a value and rows
of one value, and on rows whose level jumps (the band the compiled version selects
in, taken from the row before, then misses)."""

from __future__ import annotations

import numpy as np
import pytest

from faultlab.labeler import stats

pytest.importorskip("numba", reason="numba is the 'scale' extra: pip install -e '.[scale]'")


def _rows(rng, S: int, L: int, dt, case: str) -> np.ndarray:
    x = (0.1 + 0.01 * rng.standard_normal((S, L))).astype(dt)
    if case == "gaps":
        x[rng.random(x.shape) < 0.1] = np.nan
    elif case == "ties":
        x = np.round(x, 2).astype(dt)
    elif case == "infinite":
        x[rng.random(x.shape) < 0.05] = np.inf
        x[rng.random(x.shape) < 0.02] = -np.inf
        x[rng.random(x.shape) < 0.05] = np.nan
    elif case == "empty-rows":
        x[::3] = np.nan
    elif case == "sparse":
        x[rng.random(x.shape) < 0.8] = np.nan
    elif case == "level-jumps":
        x *= np.where(rng.random(S) < 0.2, 10.0, 1.0).astype(dt)[:, None]
        x[rng.random(S) < 0.05] = np.float32(0.1)  # a row of one value repeated
    return x


def _bits_equal(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["clean", "gaps", "ties", "infinite", "empty-rows", "sparse", "level-jumps"])
def test_compiled_loo_median_equals_vectorized_bit_for_bit(dt, case):
    rng = np.random.default_rng(7)
    for L in (1, 2, 3, 4, 5, 7, 50, 500, 501):
        x = _rows(rng, 300, L, dt, case)
        ref = stats.loo_and_median(x, compiled=False)
        got = stats.loo_and_median(x, compiled=True)
        for r, g in zip(ref, got):
            assert _bits_equal(r, g), (L, case)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_compiled_loo_median_reads_negative_zero_as_the_vectorized_version_does(dt):
    # -0.0 and 0.0 compare equal: which of them a selection or partition leaves at a
    # sorted position is each version's own choice, and a peer median of -0.0 against
    # 0.0 turns a member's ratio to it from +inf into -inf
    rng = np.random.default_rng(3)
    for L in (2, 3, 4, 5, 16, 65):
        x = rng.choice(np.array([0.0, -0.0, 0.0, -0.0, 1.0], dtype=dt), (200, L))
        x[rng.random(x.shape) < 0.1] = np.nan
        x[::5, -1] = np.nan  # rows with and without a gap take the vectorized version's two paths
        x[1::7] = -0.0
        ref = stats.loo_and_median(x, compiled=False)
        got = stats.loo_and_median(x, compiled=True)
        for r, g in zip(ref, got):
            assert _bits_equal(r, g), L


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_compiled_loo_median_of_rows_without_members_is_nan_with_count_zero(dt):
    x = np.empty((5, 0), dtype=dt)
    ref = stats.loo_and_median(x, compiled=False)
    got = stats.loo_and_median(x, compiled=True)
    assert np.isnan(got[1]).all() and not got[2].any()
    for r, g in zip(ref, got):
        assert _bits_equal(r, g)
