"""minder / minder-mahalanobis (Minder, NSDI'25): a node whose CPU departs from its
peers' for one window only raises nothing (continuity); one that stays apart for
longer is alarmed, on its rank; with continuity 1 the one-window blip is alarmed
(so continuity is what ignored it). The LSTM-VAE variant trains on train runs only
and keeps that behaviour."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from faultlab.datasets.synthetic import T0, simulate_steps
from faultlab.rundata import RunData
from faultlab.scoring.lookup import load_detector

N_S = 40  # seconds of host samples, one a second


def host(slow_node: str | None = None, first: int = 0, n: int = 0, seed: int = 0) -> pd.DataFrame:
    """``proc_cpu_util_pct`` of four nodes at 1 Hz (~50% +- 1), ``slow_node`` at 95%
    for samples ``first`` .. ``first + n - 1``."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(N_S):
        for k in range(4):
            v = 50 + rng.standard_normal()
            if f"n{k}" == slow_node and first <= i < first + n:
                v = 95.0
            rows.append(("m", f"n{k}", T0 + i + 0.5, "proc_cpu_util_pct", v))
    return pd.DataFrame(rows, columns=["run_id", "node", "ts", "metric", "value"])


STEPS = simulate_steps("m", n_steps=1000, straggler=None)  # ~40 s, rank k on node nk


@pytest.mark.parametrize("name", ["minder", "minder-mahalanobis"])
def test_one_window_blip_is_ignored_a_sustained_one_is_alarmed(name):
    assert load_detector(name).detect(STEPS, host("n2", first=12, n=3)).empty  # one 3-sample window
    a = load_detector(name).detect(STEPS, host("n2", first=12, n=15))
    assert set(a["component"]) == {"rank:2"}
    assert a["start_ts"].min() <= T0 + 13 and a["end_ts"].max() >= T0 + 25
    assert not load_detector(name, continuity=1).detect(STEPS, host("n2", first=12, n=3)).empty


def test_the_vae_variant_fits_on_train_runs():
    train = [RunData(f"t{i}", STEPS, host(seed=i + 1), pd.DataFrame(), pd.DataFrame(), {}) for i in range(3)]
    det = load_detector("minder", epochs=5)
    det.fit(train)
    assert set(det._vaes) == {"proc_cpu_util_pct"}
    assert det.detect(STEPS, host("n2", first=12, n=3)).empty
    assert set(det.detect(STEPS, host("n2", first=12, n=15))["component"]) == {"rank:2"}
