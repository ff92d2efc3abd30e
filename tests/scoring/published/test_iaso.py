"""iaso (IASO, peer-based fail-slow score): a rank slower than its peers
accumulates score and is reported; a job slowed as a whole (every rank alike) is
not, since the peers are the reference; the score is bounded by its clamp."""

from __future__ import annotations

import numpy as np

from faultlab.datasets.synthetic import simulate_steps
from faultlab.scoring.lookup import load_detector
from faultlab.scoring.published.iaso import multiplicative_score


def test_a_rank_slower_than_its_peers_is_reported_a_job_wide_slowdown_is_not():
    steps = simulate_steps("iaso", n_steps=400, straggler=(3, 150, 400, 1.3), seed=2)
    a = load_detector("iaso").detect(steps, None)
    assert set(a["component"]) == {"rank:3"}
    whole = simulate_steps("iaso", n_steps=400, straggler=None, seed=2)
    whole.loc[whole["step"] >= 150, "compute_s"] *= 1.3  # every rank alike
    assert load_detector("iaso").detect(whole, None).empty


def test_the_clamp_and_threshold_are_used():
    steps = simulate_steps("iaso", n_steps=400, straggler=(3, 150, 400, 1.3), seed=2)
    assert load_detector("iaso", score_max=5.0).detect(steps, None).empty  # never reaches 10
    assert load_detector("iaso", threshold=101.0).detect(steps, None).empty
    s = multiplicative_score(np.array([[1.0], [1.0], [-0.9], [np.nan]]), 1.0, 3.0)
    assert s[:, 0].tolist() == [2.0, 3.0, 1.0, 1.0]  # doubled, clamped at 3, shrunk to the floor, held
