"""perseus (Perseus, ported to ranks): the bound follows the load, so a rank whose
time rises and falls with its peers' is not slow while one over the bound is; and
the score needs duration, so a few slow steps in a window are no fail-slow."""

from __future__ import annotations

import numpy as np
import pandas as pd

from faultlab.datasets.synthetic import simulate_steps
from faultlab.scoring.lookup import load_detector


def loaded(straggler=None) -> pd.DataFrame:
    """Four ranks whose work varies by +-40% with the step (a load every rank
    shares), optionally a straggler ``(rank, first, end, factor)``."""
    s = simulate_steps("perseus", n_steps=600, straggler=None, seed=4)
    s["compute_s"] *= 1.0 + 0.4 * np.sin(s["step"].to_numpy() / 15.0)
    if straggler:
        r, a, b, f = straggler
        s.loc[(s["rank"] == r) & (s["step"] >= a) & (s["step"] < b), "compute_s"] *= f
    return s


def test_load_is_not_slowness_a_rank_over_the_bound_is():
    assert load_detector("perseus").detect(loaded(), None).empty
    a = load_detector("perseus").detect(loaded((2, 200, 450, 1.6)), None)
    assert set(a["component"]) == {"rank:2"}


def test_a_short_excursion_scores_below_the_alarm():
    blip = loaded((2, 300, 303, 3.0))
    assert load_detector("perseus").detect(blip, None).empty
    assert not load_detector("perseus", duration_bins="0.0,0.3,0.6").detect(blip, None).empty  # no duration needed
