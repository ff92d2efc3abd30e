"""Scoring a run holds memory in proportion to the run, with no multiple of it to
spare: the VUS-PR curve works one buffer size at a time, and a run too large to read
whole is refused from its Parquet footers before its steps are read."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from faultlab import rundata, steptable
from faultlab.datasets.synthetic import make_run
from faultlab.errors import BadInput
from faultlab.rundata import read_run_dir
from faultlab.scoring.metrics import vus_pr


def test_vus_pr_holds_a_few_arrays_of_the_series_not_one_per_buffer_size():
    # all 11 buffer sizes at once held about 380 bytes a point (a 1e7 rank-step run: 6.4 GB)
    n = 200_000
    y = np.zeros(n, int)
    y[1000:3000] = 1
    y[50_000:50_100] = 1
    s = np.random.default_rng(1).random(n)
    tracemalloc.start()
    try:
        vus_pr(y, s, window=10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * n, f"{peak / n:.0f} bytes a point"


def test_a_run_past_the_bound_is_refused_in_one_line_before_its_steps_are_read(tmp_path, monkeypatch):
    run = make_run(tmp_path / "r", "r", seed=0)
    rows = steptable.count_rows(steptable.steps_source(run))
    monkeypatch.setattr(rundata, "MAX_RUN_ROWS", rows - 1)

    def never(*a, **kw):
        raise AssertionError("the steps were read")

    monkeypatch.setattr(steptable, "read_table", never)
    with pytest.raises(BadInput) as e:
        read_run_dir(run)
    msg = str(e.value)
    assert "\n" not in msg and f"{rows:,} rank-steps" in msg and f"{rows - 1:,}" in msg and "--run" in msg


def test_a_run_at_the_bound_is_read(tmp_path, monkeypatch):
    run = make_run(tmp_path / "r", "r", seed=0)
    monkeypatch.setattr(rundata, "MAX_RUN_ROWS", steptable.count_rows(steptable.steps_source(run)))
    assert len(read_run_dir(run).steps) == rundata.MAX_RUN_ROWS
