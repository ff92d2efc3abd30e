"""Scoring and detector-plugin tests: hand-computed small cases, then baselines on a
synthetic straggler run."""

from __future__ import annotations

import math
from importlib.metadata import EntryPoint, entry_points

import numpy as np
import pandas as pd
import pytest

from faultlab.scoring import detectors as det_mod
from faultlab.scoring import lookup
from faultlab.errors import BadInput
from faultlab.scoring.baselines import ConstantDetector, PeerMedianDetector, RandomDetector
from faultlab.scoring.detectors import Detector
from faultlab.scoring.lookup import load_detector
from faultlab.labeler import label
from faultlab.scoring import run_components, score, score_table

RANKS = [f"rank:{i}" for i in range(4)]
T0 = 1_700_000_000.0


def alarms(*rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["component", "start_ts", "end_ts", "score"])


def labels(*rows) -> pd.DataFrame:
    cols = ["component", "start_ts", "end_ts", "source"]
    return pd.DataFrame([r if len(r) == 4 else (*r, "injected") for r in rows], columns=cols)


# -- hand-computed cases -------------------------------------------------------------


def test_one_of_each_cell():
    # positives {1, 2}, predicted {1, 3}, universe {0..3}: tp=fp=fn=tn=1
    m = score(
        alarms(("rank:1", 150, 160, 0.9), ("rank:3", 500, 510, 0.5)),
        labels(("rank:1", 100, 200), ("rank:2", 300, 400)),
        RANKS,
        run_span=(0, 3600),
    )
    assert (m["tp"], m["fp"], m["fn"], m["tn"]) == (1, 1, 1, 1)
    assert m["precision"] == 0.5 and m["recall"] == 0.5 and m["f1"] == 0.5
    assert m["mcc"] == 0.0  # (1*1 - 1*1) / sqrt(2*2*2*2)
    assert m["event_precision"] == 0.5 and m["event_recall"] == 0.5
    assert math.isnan(m["latency_median_s"])  # offline: latency is measured only in replay
    assert m["acc_at_1"] == 0.5 and m["acc_at_k"] == 0.5  # rank:2's label has no alarm
    assert m["false_alarms"] == 1
    assert m["false_alarms_per_component_hour"] == pytest.approx(0.25)  # 1 / (4 components x 1 h)
    assert m["component_hours"] == pytest.approx(4.0)


def test_mcc_by_hand():
    # universe 5, positives {0, 1}, predicted {0, 1, 2}: tp=2 fp=1 fn=0 tn=2
    comps = [f"rank:{i}" for i in range(5)]
    m = score(
        alarms(("rank:0", 0, 10, 1), ("rank:1", 0, 10, 1), ("rank:2", 0, 10, 1)),
        labels(("rank:0", 0, 10), ("rank:1", 0, 10)),
        comps,
    )
    assert (m["tp"], m["fp"], m["fn"], m["tn"]) == (2, 1, 0, 2)
    assert m["precision"] == pytest.approx(2 / 3)
    assert m["recall"] == 1.0
    assert m["f1"] == pytest.approx(0.8)  # 2 (2/3)(1) / (5/3)
    assert m["mcc"] == pytest.approx(4 / 6)  # (2*2 - 1*0) / sqrt(3*2*3*2)


def test_perfect_and_inverted_mcc():
    lab = labels(("rank:0", 0, 10))
    assert score(alarms(("rank:0", 0, 10, 1)), lab, RANKS)["mcc"] == pytest.approx(1.0)
    inv = alarms(("rank:1", 0, 10, 1), ("rank:2", 0, 10, 1), ("rank:3", 0, 10, 1))
    assert score(inv, lab, RANKS)["mcc"] == pytest.approx(-1.0)


def test_localization_ties_are_credited_by_expectation():
    lab = labels(("rank:0", 0, 10))
    const = alarms(*[(c, 0, 10, 1.0) for c in RANKS])
    m = score(const, lab, RANKS, k=3)
    assert m["acc_at_1"] == pytest.approx(0.25) and m["acc_at_k"] == pytest.approx(0.75)
    # rank:1 ranked above; rank:0 tied with rank:2
    a = alarms(("rank:1", 0, 10, 2.0), ("rank:0", 0, 10, 1.0), ("rank:2", 0, 10, 1.0))
    assert score(a, lab, RANKS, k=1)["acc_at_k"] == 0.0
    assert score(a, lab, RANKS, k=2)["acc_at_k"] == pytest.approx(0.5)
    assert score(a, lab, RANKS, k=3)["acc_at_k"] == 1.0
    # an alarm outside the label's interval does not count for localization
    out = alarms(("rank:0", 50, 60, 9.0), ("rank:1", 0, 10, 1.0))
    assert score(out, lab, RANKS)["acc_at_1"] == 0.0


def test_event_level_without_point_adjust():
    lab = labels(("rank:0", 0, 100), ("rank:1", 0, 100))
    # two short alarms inside rank:0's label, one on the wrong component, none on rank:1
    a = alarms(("rank:0", 50, 51, 1), ("rank:0", 70, 71, 1), ("rank:2", 50, 51, 1))
    m = score(a, lab, RANKS)
    assert m["event_precision"] == pytest.approx(2 / 3)
    assert m["event_recall"] == 0.5  # one label recalled; no credit for its other points
    assert m["n_alarms_true"] == 2 and m["n_labels_recalled"] == 1


def test_point_adjusted_f1_is_shown_beside_the_honest_one_and_inflates():
    # a 100 s label on rank:0 = 10 cells of 10 s; one alarm touching one cell
    lab = labels(("rank:0", 0, 100))
    m = score(alarms(("rank:0", 51, 52, 1)), lab, RANKS, run_span=(0, 100))
    assert m["window_recall"] == pytest.approx(0.1) and m["window_f1"] == pytest.approx(2 * 0.1 / 1.1)
    assert m["window_recall_point_adjusted"] == 1.0 and m["window_f1_point_adjusted"] == 1.0  # the whole stretch credited
    # two separate stretches of one component: only the touched one is adjusted
    lab2 = labels(("rank:0", 0, 30), ("rank:0", 60, 90))
    m2 = score(alarms(("rank:0", 5, 6, 1)), lab2, RANKS, run_span=(0, 100))
    assert m2["window_recall_point_adjusted"] == pytest.approx(0.5) and m2["window_recall"] == pytest.approx(1 / 6)
    # the AAAI'22 critique: sparse random alarms look good under point-adjust, not honestly
    rng = np.random.default_rng(0)
    long = labels(*[(f"rank:{i}", 1000.0 * i, 1000.0 * i + 400) for i in range(4)])
    rnd = alarms(*[(f"rank:{i}", t, t + 10, 1) for i in range(4) for t in 10.0 * rng.choice(400, 20, replace=False)])
    mr = score(rnd, long, RANKS, run_span=(0, 4000))
    assert mr["window_f1_point_adjusted"] > mr["window_f1"] + 0.3 and abs(mr["window_mcc"]) < 0.1


def test_overlap_edges():
    lab = labels(("rank:0", 20, 30))
    assert score(alarms(("rank:0", 10, 20, 1)), lab, RANKS)["event_recall"] == 0.0  # touching
    assert score(alarms(("rank:0", 20, 20, 1)), lab, RANKS)["event_recall"] == 1.0  # a point inside
    assert score(alarms(("rank:0", 29.5, 40, 1)), lab, RANKS)["event_recall"] == 1.0


def test_timeliness_median_and_p95():
    lab = labels(("rank:0", 0, 100), ("rank:1", 0, 100), ("rank:2", 0, 100))
    a = alarms(("rank:0", -5, 1, 1), ("rank:1", 10, 20, 1), ("rank:1", 5, 8, 1), ("rank:2", 20, 30, 1))
    a["raised_ts"] = a["start_ts"]  # replay: each raised at its start
    m = score(a, lab, RANKS)
    # delays: rank:0 0 (alarm before onset), rank:1 5 (its first alarm), rank:2 20
    assert m["latency_median_s"] == 5.0
    assert m["latency_p95_s"] == pytest.approx(5 + 0.9 * 15)  # linear: position 1.9


def test_unmanifested_labels_do_not_count():
    lab = pd.concat([labels(("rank:0", 0, 10)), labels(("rank:1", 0, 10, "injected-unmanifested"))])
    m = score(alarms(("rank:0", 0, 10, 1)), lab, RANKS)
    assert m["n_labels"] == 1 and m["recall"] == 1.0 and m["precision"] == 1.0


def test_empty_inputs():
    m = score(None, labels(("rank:0", 0, 10)), RANKS, run_span=(0, 3600))
    assert math.isnan(m["precision"]) and m["recall"] == 0.0 and m["f1"] == 0.0  # no alarm: recall 0, F1 0 (not NaN)
    assert m["mcc"] == 0.0  # tp+fp = 0: the denominator vanishes
    assert math.isnan(m["event_precision"]) and m["event_recall"] == 0.0
    assert math.isnan(m["latency_median_s"]) and m["acc_at_1"] == 0.0
    assert m["false_alarms_per_component_hour"] == 0.0

    m = score(alarms(("rank:0", 0, 3600, 1)), None, RANKS, run_span=(0, 3600))
    assert m["precision"] == 0.0 and math.isnan(m["recall"]) and math.isnan(m["f1"])
    assert math.isnan(m["acc_at_1"]) and m["event_precision"] == 0.0
    assert m["false_alarms_per_component_hour"] == pytest.approx(0.25)

    m = score(pd.DataFrame(columns=["component", "start_ts", "end_ts", "score"]), pd.DataFrame(columns=["component", "start_ts", "end_ts"]), [])
    assert m["n_components"] == 0 and math.isnan(m["mcc"])
    assert math.isnan(m["false_alarms_per_component_hour"])

    with pytest.raises(BadInput):
        score(pd.DataFrame({"component": ["rank:0"]}), None, RANKS)
    with pytest.raises(BadInput):
        score(None, None, RANKS, k=0)


# -- detectors on synthetic telemetry -----------------------------------------------


def simulate(n_ranks=4, n_steps=300, straggler=(1, 100, 150, 3.0), seed=0, noise=0.03):
    """4 DP ranks, 0.03 s compute with noise; rank ``straggler[0]`` x ``straggler[3]``
    over steps [a, b); step_s = max compute + all-reduce; comm_s = step_s - compute."""
    rng = np.random.default_rng(seed)
    c = 0.03 * (1 + noise * rng.standard_normal((n_steps, n_ranks)))
    core = 0.01 * (1 + noise * rng.standard_normal(n_steps))
    if straggler:
        r, a, b, f = straggler
        c[a:b, r] *= f
    step = c.max(axis=1) + core
    t = T0 + np.concatenate([[0.0], np.cumsum(step)[:-1]])
    S, R = np.meshgrid(np.arange(n_steps), np.arange(n_ranks), indexing="ij")
    s, r = S.ravel(), R.ravel()
    return pd.DataFrame(
        {"run_id": "run-s", "rank": r, "node": [f"n{x // 2}" for x in r], "peer_group": "dp0", "step": s,
         "t_start": t[s], "compute_s": c.ravel(), "comm_s": (step[:, None] - c).ravel(), "step_s": step[s]}
    )


@pytest.fixture(scope="module")
def run():
    """Steps with rank 1 slowed 3x over steps [100, 150), and the *injected* ground
    truth of that, taken from the simulation's own parameters: peer-median is scored
    against what was done, not against labels of the labeler's peer view (the same
    rule as the detector, which would score it against itself)."""
    steps = simulate()
    t0 = steps.groupby("step").t_start.min()
    t1 = (steps.t_start + steps.step_s).groupby(steps.step).max()
    return steps, labels(("rank:1", float(t0[100]), float(t1[149])))


def test_the_labeler_finds_the_injected_straggler(run):
    """(The labeler itself, checked against the same ground truth.)"""
    steps, truth = run
    lab = label(steps)
    assert lab.component.tolist() == ["rank:1"]
    assert lab.start_ts.iloc[0] == pytest.approx(truth.start_ts.iloc[0], abs=0.5)
    assert lab.end_ts.iloc[0] == pytest.approx(truth.end_ts.iloc[0], abs=0.5)


def test_peer_median_is_perfect_on_a_rank_straggler_and_baselines_are_worse(run):
    steps, lab = run
    assert lab.component.tolist() == ["rank:1"]
    tab = score_table(steps, None, lab, "peer-median").set_index("detector")
    assert tab.index.tolist() == ["peer-median", "random", "constant"]
    pm = tab.loc["peer-median"]
    assert (pm.precision, pm.recall, pm.f1, pm.mcc) == (1.0, 1.0, 1.0, 1.0)
    assert (pm.event_precision, pm.event_recall, pm.acc_at_1) == (1.0, 1.0, 1.0)
    assert pm.window_mcc == 1.0 and pm.event_f1 == 1.0 and pm.range_recall > 0.9
    assert pm.false_alarms_per_component_hour == 0.0
    for base in ("random", "constant"):
        b = tab.loc[base]
        assert not (b.precision >= 1.0 or b.f1 >= 1.0 or b.mcc >= 1.0 or b.event_precision >= 1.0)  # NaN: no alarm
    assert tab.loc["constant", "false_alarms_per_component_hour"] > 0
    assert tab.loc["constant", "precision"] == 0.2  # every rank and the job alarmed, one positive
    assert tab.loc["constant", "acc_at_1"] == pytest.approx(0.2)
    assert tab.loc["constant", "window_mcc"] == 0.0  # every cell predicted: no information


def test_peer_median_alarm_matches_the_fault(run):
    steps, _ = run
    a = PeerMedianDetector().detect(steps, None)
    assert a.component.tolist() == ["rank:1"]
    t100 = steps.loc[steps.step == 100, "t_start"].min()
    last = steps[steps.step == 149]
    assert a.start_ts.iloc[0] == pytest.approx(t100)
    assert a.end_ts.iloc[0] == pytest.approx((last.t_start + last.step_s).max())
    assert a.score.iloc[0] == pytest.approx(3.0, rel=0.1)


def test_peer_median_needs_k_consecutive_steps():
    blip = simulate(straggler=(2, 100, 102, 3.0))
    assert len(PeerMedianDetector(k=3).detect(blip, None)) == 0
    assert PeerMedianDetector(k=2).detect(blip, None).component.tolist() == ["rank:2"]


def test_random_is_seeded_and_constant_covers_everything(run):
    steps, _ = run
    # seed 5 alarms 3 times here (seeds 0, 1, 3, 4 not at all: comparing two empty frames
    # would show nothing)
    a, b = RandomDetector(seed=5).detect(steps, None), RandomDetector(seed=5).detect(steps, None)
    assert len(a) > 0
    pd.testing.assert_frame_equal(a, b)
    assert not RandomDetector(seed=2).detect(steps, None).equals(a)
    # each random alarm is exactly one cell of the window grid (none spills into the next)
    from faultlab.scoring.metrics import run_stats

    t0, t1 = steps.t_start.min(), (steps.t_start + steps.step_s).max()
    half = RandomDetector(seed=1, p=0.5).detect(steps, None)
    off = (half.start_ts - t0) / 10.0
    assert np.allclose(off, off.round()) and np.allclose(half.end_ts, np.minimum(half.start_ts + 10.0, t1))
    assert len(half) and run_stats(half, None, RANKS + ["job"], (t0, t1))["counts"]["win_fp"] == len(half)  # one cell per alarm
    c = ConstantDetector().detect(steps, None)
    assert sorted(c.component.tolist()) == ["job"] + RANKS
    assert (c.start_ts == steps.t_start.min()).all()
    assert c.end_ts.max() == pytest.approx((steps.t_start + steps.step_s).max())
    for d in (PeerMedianDetector(), RandomDetector(), ConstantDetector()):
        assert len(d.detect(steps.iloc[0:0], None)) == 0
        assert list(d.detect(steps, None).columns) == ["component", "start_ts", "end_ts", "score"]


def test_load_detector_builtins_entry_points_and_specs(monkeypatch):
    assert isinstance(load_detector("peer-median"), PeerMedianDetector)
    assert load_detector("peer-median", threshold=2.0).threshold == 2.0
    assert isinstance(load_detector("random", seed=3), RandomDetector)
    assert isinstance(load_detector("faultlab.scoring.baselines:ConstantDetector"), ConstantDetector)
    assert isinstance(load_detector("faultlab.detectors:ConstantDetector"), ConstantDetector)  # the name kept for existing imports
    with pytest.raises(BadInput, match="unknown detector"):
        load_detector("no-such-detector")

    # the project's own registration (pyproject entry point) when installed
    eps = {ep.name: ep.value for ep in entry_points(group="faultlab.detectors")}
    if eps:
        assert eps.get("peer-median") == "faultlab.scoring.baselines:PeerMedianDetector"

    # a third-party plugin found through its entry point
    class Plug(Detector):
        name = "plug"

        def detect(self, steps, host):
            return det_mod.empty_alarms()

    monkeypatch.setattr(det_mod, "_test_plug", Plug, raising=False)
    fake = EntryPoint(name="plug", value="faultlab.scoring.detectors:_test_plug", group="faultlab.detectors")
    monkeypatch.setattr(lookup, "entry_points", lambda group: [fake] if group == "faultlab.detectors" else [])
    d = load_detector("plug")
    assert isinstance(d, Plug) and d.name == "plug"
    assert "plug" in lookup.available_detectors()


def test_run_components_and_job_labels(run):
    steps, lab = run
    assert run_components(steps, lab) == ["job"] + RANKS  # the job is always a component
    extra = pd.concat([lab, pd.DataFrame([{"component": "node:n1", "start_ts": T0, "end_ts": T0 + 1, "source": "observed"}])])
    assert run_components(steps, extra) == ["job", "node:n1"] + RANKS
