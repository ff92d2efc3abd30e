"""The trailing baseline walked in compiled code (faultlab.labeler.trailingjit) gives
the vectorized walk's values bit for bit (faultlab.labeler.stats.trailing_baseline_from):
baseline, sigma, flags and the carried state, in float32 and float64, on series with
gaps, single spikes, long faults, ties, infinite values and a series with no value,
whole and cut into chunks that carry the state."""

from __future__ import annotations

import numpy as np
import pytest

from faultlab.labeler import stats

pytest.importorskip("numba", reason="numba is the 'scale' extra: pip install -e '.[scale]'")

CONFIGS = [
    dict(window=50, min_valid=10, threshold=1.3, mad_k=4.0, block=5),  # the labeler's defaults
    dict(window=20, min_valid=3, threshold=1.3, mad_k=4.0, block=1),
    dict(window=7, min_valid=7, threshold=1.1, mad_k=0.0, block=3),
    dict(window=50, min_valid=50, threshold=1.5, mad_k=2.0, block=50),
    dict(window=13, min_valid=1, threshold=1.2, mad_k=6.0, block=4),
]


def _series(rng, C: int, n: int, dt) -> np.ndarray:
    """``(C, n)`` step times: 3% noise, 1% gaps, rare spikes, a fault on every third
    series (1.2x to 3x, up to 400 steps), a series with no value, a gap of 200 steps,
    one with ties, two with infinite values."""
    x = (0.03 * (1 + 0.03 * rng.standard_normal((C, n)))).astype(dt)
    x[rng.random((C, n)) < 0.01] = np.nan
    x[rng.random((C, n)) < 0.002] *= 3
    for c in range(0, C, 3):
        a = int(rng.integers(0, n))
        x[c, a : a + int(rng.integers(1, 400))] *= rng.choice([1.2, 1.5, 2.0, 3.0])
    x[1] = np.nan
    x[2, 100:300] = np.nan
    x[4] = np.round(x[4], 2)
    x[5, 50:400:2] = np.inf
    x[7, 100:400] = np.inf
    x[7, 200:260] = -np.inf
    return x


def _bits_equal(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("cfg", range(len(CONFIGS)))
def test_compiled_walk_equals_vectorized_bit_for_bit(dt, cfg):
    kw = CONFIGS[cfg]
    rng = np.random.default_rng(cfg)
    x = _series(rng, 16, 3000, dt)
    with np.errstate(invalid="ignore"):
        ref = stats.trailing_baseline_from(x, 0, None, compiled=False, **kw)
    got = stats.trailing_baseline_from(x, 0, None, compiled=True, **kw)
    assert int(ref[2].sum()) > 100  # the faults are flagged: the recurrence is exercised
    for r, g in zip(ref[:3] + ref[3], got[:3] + got[3]):
        assert _bits_equal(r, g)
    # in chunks (the first holds the warm-up window), the state carried from chunk to chunk
    b = kw["block"]
    cuts = [0, b * -(-kw["window"] // b), b * 40, b * 41, b * 300, x.shape[1]]
    state, parts = None, []
    for a, e in zip(cuts[:-1], cuts[1:]):
        base, sig, flags, state = stats.trailing_baseline_from(x[:, a:e], a, state, compiled=True, **kw)
        parts.append((base, sig, flags))
    for k in range(3):
        assert _bits_equal(ref[k], np.concatenate([p[k] for p in parts], axis=1))
    for r, g in zip(ref[3], state):
        assert _bits_equal(r, g)


def test_long_walks_run_compiled_short_ones_vectorized():
    assert stats.compiled_walk(stats.COMPILED_CELLS, 10) and stats.compiled_walk(1, stats.COMPILED_STEPS)
    assert not stats.compiled_walk(stats.COMPILED_CELLS - 1, stats.COMPILED_STEPS - 1)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_compiled_walk_reads_a_median_of_signed_zeros_as_the_vectorized_walk_does(dt):
    # -0.0 and 0.0 compare equal: which of them a sort or the sorted window holds at the
    # middle is each walk's own choice, so the baseline of a window of zeros could come
    # out -0.0 in one walk and 0.0 in the other
    rng = np.random.default_rng(11)
    x = rng.choice(np.array([0.0, -0.0, 1e-3], dtype=dt), (6, 400))
    x[1, rng.random(400) < 0.2] = np.nan  # a series whose windows hold gaps: the vectorized walk's other path
    x[2] = -0.0
    for kw in CONFIGS + [dict(window=4, min_valid=1, threshold=1.0, mad_k=0.0, block=1)]:
        with np.errstate(invalid="ignore"):
            ref = stats.trailing_baseline_from(x, 0, None, compiled=False, **kw)
        got = stats.trailing_baseline_from(x, 0, None, compiled=True, **kw)
        for r, g in zip(ref[:3] + ref[3], got[:3] + got[3]):
            assert _bits_equal(r, g), kw
