"""nvrx (NVIDIA Resiliency Extension straggler scores): identical ranks score 1.0
on both scores and raise nothing; a rank twice as slow as the best scores 0.5
relative and is reported below the 0.75 threshold (not below a 0.4 one); a job that
slows as a whole keeps relative 1.0 but its individual scores fall; reports come
as the tool schedules them (the interval in iterations from the first 16, never at
the end of training), so the tool's 60 s gives a ~24 s run none and ``nvrx-short``'s
10 s reports on it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from faultlab.datasets.synthetic import simulate_steps
from faultlab.scoring.lookup import load_detector
from faultlab.scoring.published.nvrx import report_schedule, report_scores


def identical(n_steps: int = 300, slow_from: int | None = None, factor: float = 2.0) -> pd.DataFrame:
    """Four ranks with exactly the same compute time (30 ms), all slowed by
    ``factor`` from ``slow_from`` on."""
    s = simulate_steps("nvrx", n_steps=n_steps, straggler=None, noise=0.0)
    if slow_from is not None:
        s.loc[s["step"] >= slow_from, "compute_s"] *= factor
    return s


def test_identical_ranks_score_one():
    s = report_scores(identical(), 1.0)
    assert len(s) and np.allclose(s["relative"], 1.0) and np.allclose(s["individual"], 1.0)
    assert load_detector("nvrx", report_time_interval=1.0).detect(identical(), None).empty


def test_a_rank_twice_as_slow_is_a_straggler():
    steps = simulate_steps("nvrx", n_steps=300, straggler=(2, 0, 300, 2.0), noise=0.0)
    s = report_scores(steps, 1.0)
    assert s.loc[s["rank"] == 2, "relative"].to_numpy() == pytest.approx(0.5)
    a = load_detector("nvrx", report_time_interval=1.0).detect(steps, None)
    assert set(a["component"]) == {"rank:2"}
    assert load_detector("nvrx", report_time_interval=1.0, section_rel_threshold=0.4).detect(steps, None).empty


def test_a_job_slowed_as_a_whole_is_seen_by_the_individual_score_only():
    steps = identical(slow_from=150)
    s = report_scores(steps, 1.0)
    assert np.allclose(s["relative"], 1.0)
    assert s["individual"].min() == pytest.approx(0.5)
    assert not load_detector("nvrx", report_time_interval=1.0).detect(steps, None).empty
    assert load_detector("nvrx", report_time_interval=1.0, scores_to_compute="relative_perf_scores").detect(steps, None).empty


def test_reports_only_after_their_interval():
    """A run shorter than the report interval (60 s by default) gets no report."""
    steps = simulate_steps("nvrx", n_steps=300, straggler=(2, 0, 300, 2.0), noise=0.0)
    assert (steps["t_start"].max() - steps["t_start"].min()) < 60
    assert load_detector("nvrx").detect(steps, None).empty


def test_reports_follow_the_interval_in_iterations():
    """Iterations of ``step_s`` seconds: an interval of ``x`` s is a report every
    ``int(x / step_s)`` iterations; the steps after the last report are in none."""
    steps = identical()
    r0 = steps["rank"].to_numpy() == 0
    for interval in (1.0, 2.0):
        every = int(interval / steps["step_s"].median())
        k = report_schedule(steps, interval)
        assert 17 <= every < 150
        assert np.bincount(k[r0 & (k >= 0)]).tolist() == [every] * (300 // every)
        assert (k[r0] == -1).sum() == 300 % every


def test_the_interval_decides_whether_a_short_run_is_reported():
    """A 2x straggler in a ~24 s run: the tool's 60 s reports nothing (no report at
    the end of training), ``nvrx-short`` (10 s) and an explicit 10 s report it."""
    steps = simulate_steps("nvrx", n_steps=800, straggler=(2, 0, 800, 2.0), noise=0.0)
    assert 20 < steps["t_start"].max() - steps["t_start"].min() < 60
    assert load_detector("nvrx").detect(steps, None).empty
    assert set(load_detector("nvrx-short").detect(steps, None)["component"]) == {"rank:2"}
    assert set(load_detector("nvrx", report_time_interval=10.0).detect(steps, None)["component"]) == {"rank:2"}
