"""What lets the out-of-core labeler's controller stay flat in memory gives the values
the in-memory labeler computes on whole arrays: flags held as runs
(faultlab.labeler.flagruns), column sums and medians taken a block at a time
(faultlab.labeler.stats)."""

from __future__ import annotations

import numpy as np
import pytest

from faultlab.labeler import stats
from faultlab.labeler.flagruns import FlagRuns, chunk_runs


def _flags(rng, S: int, R: int) -> np.ndarray:
    """Sparse single flags, some long runs, a rank with none, a run at each edge."""
    f = rng.random((S, R)) < 0.02
    f[10:200, 1] = True
    f[:, 2] = False
    f[:5, 3] = True
    f[-7:, 4] = True
    return f


@pytest.mark.parametrize("rows", [37, 64, 1000])
def test_flag_runs_read_as_the_dense_flags(rows):
    rng = np.random.default_rng(rows)
    S, R = 1000, 6
    dense = _flags(rng, S, R)
    parts = []
    for a in range(0, S, rows):  # chunks of rows, rank strips of 4: runs cut at the edges are joined
        for c0 in range(0, R, 4):
            parts.append(chunk_runs(dense[a : a + rows, c0 : c0 + 4].T, c0, a))
    f = FlagRuns.from_chunks(S, R, parts[::-1])
    assert np.array_equal(np.asarray(f), dense)
    assert np.array_equal(f.any(axis=0), dense.any(axis=0)) and f.any() == dense.any()
    rows_at = rng.integers(0, S, 50)
    for j in range(R):
        assert np.array_equal(f[:, j], dense[:, j])
        assert np.array_equal(f[150:420, j], dense[150:420, j])
        assert np.array_equal(f[rows_at, j], dense[rows_at, j])
    assert np.array_equal(f[150:420], dense[150:420])
    assert np.array_equal(f[995:], dense[995:])
    s, e = f.runs(1)
    assert ((s <= 10) & (e >= 200)).any()  # the long run is one run, whatever the chunks
    with pytest.raises(TypeError):
        f[::2, 0]


def test_column_nansum_is_the_one_pass_sum_bit_for_bit(monkeypatch):
    monkeypatch.setattr(stats, "SUM_BLOCK_CELLS", 700)  # many blocks
    rng = np.random.default_rng(1)
    for n, C in [(5000, 30), (3, 900), (0, 4)]:
        x = (rng.random((n, C)) * 0.03).astype(np.float32)
        x[rng.random((n, C)) < 0.01] = np.nan
        base = np.ascontiguousarray((x * np.float32(0.9)).T).T  # a transposed view, as a rank-major baseline
        assert np.array_equal(stats.column_nansum(x), np.nansum(np.asarray(x, dtype=np.float64), axis=0))
        assert np.array_equal(stats.column_nansum(x, base),
                              np.nansum(np.asarray(x, dtype=np.float64) - np.asarray(base, dtype=np.float64), axis=0))


def test_median_of_blocks_is_the_median_of_all_values(monkeypatch):
    monkeypatch.setattr(stats, "GATHER_VALUES", 1000)  # forces the radix passes
    rng = np.random.default_rng(2)
    alike = rng.normal(1.0, 0.03, 60_001).astype(np.float32)
    alike[rng.random(alike.size) < 0.05] = np.nan
    signed = rng.normal(0.0, 1e-3, 50_000)
    signed[:40] = -np.inf
    signed[40:90] = np.inf
    cases = [alike, signed, np.full(20_000, 1.25), np.r_[np.full(30_000, 0.5), np.full(30_001, 0.75)],
             rng.normal(1.0, 0.1, 999), np.full(5000, np.nan)]
    for x in cases:
        got = stats.median_of_blocks(lambda: (x[i : i + 777] for i in range(0, x.size, 777)))
        want = stats.median(x)
        assert got == want or (np.isnan(got) and np.isnan(want))
    X = rng.normal(1.0, 0.03, (3000, 7)).astype(np.float32)
    assert stats.median_of_rows(X) == stats.median(X)
