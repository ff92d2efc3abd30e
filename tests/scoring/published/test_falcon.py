"""falcon (Greyhound / FALCON): the paper's claims on simulated steps. A 5% shift
is below the paper's 10% threshold and ignored; a 20% shift is flagged, on the
slowed rank, starting where the shift starts, once ``min_segment`` steps of it have
been seen; with the shift threshold removed the 5% shift is flagged (so the
threshold is what ignored it)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from faultlab.datasets.synthetic import simulate_steps
from faultlab.errors import BadInput
from faultlab.scoring.lookup import load_detector
from faultlab.scoring.published.falcon import acf_period

ONSET, SLOW_RANK = 200, 1


def run(factor: float, n_steps: int = 400) -> pd.DataFrame:
    return simulate_steps("falcon", n_steps=n_steps, straggler=(SLOW_RANK, ONSET, n_steps, factor), noise=0.02, seed=3)


def onset_ts(steps: pd.DataFrame, step: int) -> float:
    return float(steps.loc[(steps["step"] == step) & (steps["rank"] == SLOW_RANK), "t_start"].iloc[0])


def test_ignores_a_5pct_shift_and_flags_a_20pct_one():
    assert load_detector("falcon").detect(run(1.05), None).empty
    steps = run(1.2)
    a = load_detector("falcon").detect(steps, None)
    assert list(a["component"]) == [f"rank:{SLOW_RANK}"]
    assert abs(a["start_ts"].iloc[0] - onset_ts(steps, ONSET)) < 0.2  # within a few steps of the onset
    assert a["score"].iloc[0] == pytest.approx(1.2, abs=0.03)


def test_without_the_shift_threshold_the_5pct_shift_is_flagged():
    a = load_detector("falcon", shift=0.0).detect(run(1.05), None)
    assert f"rank:{SLOW_RANK}" in set(a["component"])


def test_flagged_only_after_its_minimum_segment():
    """Online: the 20% shift is not flagged before ``min_segment`` slowed steps are
    visible, and is flagged once enough are."""
    steps = run(1.2)
    det = load_detector("falcon", min_segment=20)
    det.start({})
    early = steps[steps["step"] < ONSET + 19]
    assert det.update(early, None, float("inf")).empty
    late = steps[(steps["step"] >= ONSET + 19) & (steps["step"] < ONSET + 60)]
    assert not det.update(late, None, float("inf")).empty


def test_the_artifact_preset_needs_its_degradation():
    """The artifact's preset accepts only a degradation over 0.2: 30% is flagged, 15% not."""
    assert load_detector("falcon", preset="artifact").detect(run(1.15), None).empty
    assert not load_detector("falcon", preset="artifact").detect(run(1.3), None).empty


def test_acf_gate():
    """The iteration period is the first lag whose ACF reaches the threshold; a
    stream with no period has none, and with period_from=acf such a rank is silent."""
    rng = np.random.default_rng(0)
    periodic = np.tile([0.003, 0.03, 0.01], 64) * (1 + 0.01 * rng.standard_normal(192))
    assert acf_period(periodic, 12, 0.95) == 3
    assert acf_period(rng.random(192), 12, 0.95) == 0
    steps = run(1.3)
    noisy = steps.assign(comm_s=rng.random(len(steps)))  # no periodic op stream
    assert load_detector("falcon", period_from="acf").detect(noisy, None).empty
    assert not load_detector("falcon", period_from="acf", acf_threshold=-1.0).detect(noisy, None).empty


def test_parameters_are_checked():
    with pytest.raises(BadInput, match="preset"):
        load_detector("falcon", preset="nope")
    with pytest.raises(BadInput, match="p_change"):
        load_detector("falcon", p_change=1.5)
    with pytest.raises(BadInput, match="does not take"):
        load_detector("falcon", bogus=1)
