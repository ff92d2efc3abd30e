"""Labeler tests on synthetic telemetry from a small synchronous-training simulator."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from faultlab import schema
from faultlab.errors import BadInput
from faultlab.injectors.nic import NicSlow
from faultlab.injectors.registry import register, unregister
from faultlab.labeler import LabelerConfig, label, label_run
from faultlab.labeler.intervals import intervals
from faultlab.labeler.whatif import whatif
from faultlab.rundir import RunDir
from tests.helpers import DATA

T0 = 1_700_000_000.0


def simulate(
    n_ranks: int = 4,
    n_steps: int = 300,
    compute: float = 0.03,
    comm: float = 0.01,
    noise: float = 0.03,
    straggler: tuple[int | list[int], int, int, float] | None = None,
    jobwide: tuple[int, int, float] | None = None,
    seed: int = 0,
    run_id: str = "run-1",
    groups: list[str] | None = None,
    scale: list[float] | None = None,
) -> pd.DataFrame:
    """Synchronous data-parallel steps: every rank waits for the slowest compute.

    ``straggler=(ranks, a, b, factor)`` multiplies those ranks' compute_s over steps
    ``a <= step < b``; ``jobwide=(a, b, extra_s)`` adds ``extra_s`` to the all-reduce
    of every rank over steps ``a <= step < b``. step_s = max compute + all-reduce time;
    comm_s = step_s - own compute (the straggler waits least). ``groups`` gives each
    rank's peer group (default one DP group), ``scale`` each rank's compute multiplier
    (e.g. pipeline stages of unequal cost).
    """
    rng = np.random.default_rng(seed)
    c = compute * (1 + noise * rng.standard_normal((n_steps, n_ranks)))
    if scale is not None:
        c *= np.asarray(scale)[None, :]
    core = comm * (1 + noise * rng.standard_normal(n_steps))
    if straggler:
        ranks, a, b, f = straggler
        c[a:b, ranks] *= f
    if jobwide:
        a, b, extra = jobwide
        core[a:b] += extra
    step = c.max(axis=1) + core
    t = T0 + np.concatenate([[0.0], np.cumsum(step)[:-1]])
    S, R = np.meshgrid(np.arange(n_steps), np.arange(n_ranks), indexing="ij")
    s, r = S.ravel(), R.ravel()
    return pd.DataFrame(
        {
            "run_id": run_id,
            "rank": r.astype("int32"),
            "node": [f"n{x // 2}" for x in r],
            "peer_group": np.asarray(groups)[r] if groups else "dp0",
            "step": s.astype("int64"),
            "t_start": t[s],
            "compute_s": c.ravel(),
            "comm_s": (step[:, None] - c).ravel(),
            "step_s": step[s],
        }
    )


def step_time(steps: pd.DataFrame, step: int) -> float:
    return float(steps.loc[steps["step"] == step, "t_start"].min())


def step_end(steps: pd.DataFrame, step: int) -> float:
    sel = steps[steps["step"] == step]
    return float((sel["t_start"] + sel["step_s"]).max())


def injection(fault_id, fault_type, node, target, start_ts, end_ts, run_id="run-1") -> dict:
    return {
        "run_id": run_id,
        "fault_id": fault_id,
        "fault_type": fault_type,
        "node": node,
        "target": target,
        "start_ts": start_ts,
        "end_ts": end_ts,
        "params": "{}",
        "severity": 1.0,
        "status": "reverted",
        "verified": True,
        "evidence": "{}",
    }


@pytest.fixture(scope="module")
def both():
    """rank 1 computes 3x over steps 100-149; every all-reduce +40 ms over 200-239."""
    return simulate(straggler=(1, 100, 150, 3.0), jobwide=(200, 240, 0.04))


def test_finds_exactly_the_straggler_and_the_jobwide_slowdown(both):
    lab = label(both)
    assert list(lab.columns) == [f.name for f in schema.LABELS]
    assert len(lab) == 2, lab
    r, j = lab.iloc[0], lab.iloc[1]

    assert (r.component, r.component_kind, r.views) == ("rank:1", "rank", "temporal+peer")
    assert abs(r.start_step - 100) <= 2 and abs(r.end_step - 149) <= 2
    assert 2.5 < r.slowdown < 3.5
    assert r.start_ts == pytest.approx(step_time(both, int(r.start_step)))
    assert r.end_ts == pytest.approx(step_end(both, int(r.end_step)))
    ev = json.loads(r.evidence)
    assert {"baseline_s", "peer_median_s", "peer_ratio", "n_steps", "job_slowdown"} <= set(ev)
    assert ev["job_slowdown"] > 2.0  # the whole job waited for rank 1
    assert ev["peer_median_s"] == pytest.approx(0.03, rel=0.05)

    assert (j.component, j.component_kind, j.views) == ("job", "job", "temporal")
    assert abs(j.start_step - 200) <= 2 and abs(j.end_step - 239) <= 2
    # step 0.04 -> 0.08 s
    assert 1.8 < j.slowdown < 2.2
    assert json.loads(j.evidence)["job_slowdown"] == pytest.approx(j.slowdown)

    for x in (r, j):
        assert 0.5 < x.confidence <= 1.0
        assert (x.run_id, x.source, x.cause) == ("run-1", "observed", "unknown")
        assert x.fault_id is None


def test_onset_within_two_steps_for_several_seeds():
    for seed in range(5):
        lab = label(simulate(straggler=(1, 100, 150, 3.0), jobwide=(200, 240, 0.04), seed=seed))
        assert sorted(lab.component) == ["job", "rank:1"]
        r = lab[lab.component == "rank:1"].iloc[0]
        j = lab[lab.component == "job"].iloc[0]
        assert abs(r.start_step - 100) <= 2 and abs(j.start_step - 200) <= 2


def test_clean_runs_give_no_labels():
    for seed in range(20):
        assert len(label(simulate(seed=seed, noise=0.05))) == 0


def test_reconcile_injected_unmanifested_and_observed(both):
    inj = pd.DataFrame(
        [
            injection("f1", "cpu-contention", "n0", "rank:1", step_time(both, 100), step_time(both, 150)),
            injection("f2", "process-pause", "n1", "rank:2", step_time(both, 260), step_time(both, 280)),
        ]
    )
    lab = label(both, inj)
    assert len(lab) == 3
    by = {(c, s): row for c, s, row in zip(lab.component, lab.source, lab.itertuples())}
    r = by[("rank:1", "injected")]
    assert (r.fault_id, r.cause) == ("f1", "cpu-contention")
    j = by[("job", "observed")]  # nothing injected for the job-wide slowdown
    assert (j.fault_id, j.cause) == (None, "unknown")
    u = by[("rank:2", "injected-unmanifested")]
    assert (u.fault_id, u.cause, u.views, u.component_kind) == ("f2", "process-pause", "", "rank")
    assert u.slowdown == pytest.approx(1.0, abs=0.1)
    assert u.confidence == 0.0
    assert abs(u.start_step - 260) <= 1 and abs(u.end_step - 280) <= 1
    assert u.start_ts == step_time(both, 260)


def test_reconcile_jobwide_fault_matches_job_label(both):
    inj = pd.DataFrame(
        [
            injection("f1", "cpu-contention", "n0", "rank:1", step_time(both, 100), step_time(both, 150)),
            injection("f2", "nic-slow", "n1", "veth-n1", step_time(both, 200), step_time(both, 240)),
        ]
    )
    lab = label(both, inj)
    assert len(lab) == 2
    assert lab.set_index("component")["fault_id"].to_dict() == {"rank:1": "f1", "job": "f2"}
    assert set(lab.source) == {"injected"}
    assert lab.set_index("component")["cause"].to_dict() == {"rank:1": "cpu-contention", "job": "nic-slow"}


def test_a_fault_type_that_declares_a_job_wide_effect_matches_the_job_label(both):
    class SlowFabric(NicSlow):  # a new fault type's module declares job_wide, nothing else changes
        type = "slow-fabric"
        job_wide = True

    register(SlowFabric)
    try:
        assert "slow-fabric" in LabelerConfig().job_wide_fault_types
        inj = pd.DataFrame([injection("f3", "slow-fabric", "n1", "fabric0", step_time(both, 200), step_time(both, 240))])
        lab = label(both, inj)
        job = lab[lab.component == "job"]
        assert list(job.fault_id) == ["f3"] and list(job.source) == ["injected"], lab[["component", "fault_id", "source"]]
    finally:
        unregister("slow-fabric")
    assert "slow-fabric" not in LabelerConfig().job_wide_fault_types


def test_localized_fault_must_match_its_rank(both):
    # a cpu-contention on rank 3 at the time of rank 1's straggle explains nothing
    inj = pd.DataFrame([injection("f9", "cpu-contention", "n1", "rank:3", step_time(both, 100), step_time(both, 150))])
    lab = label(both, inj)
    assert lab[lab.component == "rank:1"].source.tolist() == ["observed"]
    u = lab[lab.source == "injected-unmanifested"]
    assert u.component.tolist() == ["rank:3"] and u.fault_id.tolist() == ["f9"]


def test_node_target_matches_ranks_on_the_node(both):
    # target names PIDs, not a rank: any rank on node n0 (ranks 0, 1) matches
    inj = pd.DataFrame([injection("f3", "cpu-contention", "n0", "pids:123,456", step_time(both, 100), step_time(both, 150))])
    lab = label(both, inj)
    assert lab.set_index("component").loc["rank:1", "fault_id"] == "f3"


def test_unmanifested_node_fault_measures_ratio(both):
    inj = pd.DataFrame([injection("f4", "gpu-clock-cap", "n1", "gpu0", step_time(both, 20), step_time(both, 60))])
    lab = label(both, inj)
    u = lab[lab.source == "injected-unmanifested"].iloc[0]
    assert (u.component, u.component_kind) == ("node:n1", "node")
    assert u.slowdown == pytest.approx(1.0, abs=0.1)


def test_deterministic_and_row_order_independent(both):
    inj = pd.DataFrame([injection("f1", "cpu-contention", "n0", "rank:1", step_time(both, 100), step_time(both, 150))])
    a = label(both, inj)
    b = label(both, inj)
    c = label(both.sample(frac=1.0, random_state=7), inj)
    assert len(a) > 0 and "rank:1" in set(a.component)  # equal frames, not two empty ones
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(a, c)


def test_fault_present_from_the_start_is_caught_by_the_peer_view():
    s = simulate(straggler=(2, 0, 300, 2.0))
    lab = label(s)
    assert lab.component.tolist() == ["rank:2"]
    r = lab.iloc[0]
    assert r.views == "peer"  # no history in which rank 2 was fast
    assert r.start_step == 0 and r.end_step == 299
    assert 1.8 < r.slowdown < 2.2  # against the peer median
    assert json.loads(r.evidence)["baseline_kind"] == "peer"


def test_most_peers_slowed_is_a_job_label():
    # 3 of 4 ranks compute 2x: the peer median is slowed too, the peer view is blind
    s = simulate(straggler=([0, 1, 2], 100, 150, 2.0))
    lab = label(s)
    assert lab.component.tolist() == ["job"]
    ev = json.loads(lab.iloc[0].evidence)
    assert ev["ranks_compute_up"] == ["rank:0", "rank:1", "rank:2"]
    assert abs(lab.iloc[0].start_step - 100) <= 2


def test_straggler_during_jobwide_slowdown_rank_explains_its_steps():
    """A job-wide slowdown (80-179) with a rank straggler inside it (100-149): the rank
    is labeled for its steps, the job for the rest, and the two never overlap."""
    s = simulate(straggler=(1, 100, 150, 3.0), jobwide=(80, 180, 0.05))
    lab = label(s)
    rank = lab[lab.component == "rank:1"]
    job = lab[lab.component == "job"].sort_values("start_step")
    assert len(rank) == 1 and abs(rank.iloc[0].start_step - 100) <= 2
    assert len(job) >= 1
    assert abs(job.iloc[0].start_step - 80) <= 2 and abs(job.iloc[-1].end_step - 179) <= 2
    r0, r1 = rank.iloc[0].start_step, rank.iloc[0].end_step
    assert all(j.end_step < r0 or j.start_step > r1 for j in job.itertuples())


def test_peer_groups_of_unequal_cost():
    # two pipeline stages, stage b computes 2x: normal, not a straggler
    kw = dict(groups=["a", "a", "b", "b", "b", "a"], scale=[1, 1, 2, 2, 2, 1], n_ranks=6)
    assert len(label(simulate(**kw))) == 0
    lab = label(simulate(straggler=(0, 100, 150, 3.0), **kw))
    assert lab.component.tolist() == ["rank:0"] and lab.views.tolist() == ["temporal+peer"]
    w = whatif(simulate(straggler=(0, 100, 150, 3.0), **kw))
    assert max(w["per_rank"], key=w["per_rank"].get) == "rank:0"


def test_bursty_straggler_is_one_interval():
    # a CFS quota throttles in bursts: the straggler is slow every other step
    s = simulate()
    sel = (s["rank"] == 1) & (s["step"] >= 100) & (s["step"] < 150) & (s["step"] % 2 == 0)
    s.loc[sel, "compute_s"] *= 4
    s["step_s"] = s.groupby("step")["compute_s"].transform("max") + 0.01
    s["comm_s"] = s["step_s"] - s["compute_s"]
    lab = label(s)
    assert lab.component.tolist() == ["rank:1"]
    assert abs(lab.iloc[0].start_step - 100) <= 2 and abs(lab.iloc[0].end_step - 148) <= 2


def test_short_blip_is_not_labeled():
    s = simulate(straggler=(1, 100, 102, 3.0))  # 2 steps < min_steps
    assert len(label(s)) == 0


def test_intervals_gap_and_min_length():
    f = np.zeros(20, dtype=bool)
    f[[2, 3, 6, 10, 11, 12, 15]] = True
    # 3 and 6 are 2 unflagged steps apart -> joined; 6 and 10: 3 apart -> split
    assert intervals(f, gap=2, min_len=3) == [(2, 6), (10, 15)]
    assert intervals(f, gap=0, min_len=3) == [(10, 12)]
    assert intervals(np.zeros(5, dtype=bool), 2, 3) == []


def test_whatif_hand_computed():
    # 3 ranks, 2 steps; step 0: compute 1, 1, 3 (rank 2 straggles), step_s 3.5;
    # step 1: all compute 1, step_s 1.5. actual = 5.0;
    # stragglers removed: 3.5 - (3 - 1) = 1.5 and 1.5 -> S = 5 / 3.
    rows = []
    for step, comp, ss in ((0, [1.0, 1.0, 3.0], 3.5), (1, [1.0, 1.0, 1.0], 1.5)):
        for r, c in enumerate(comp):
            rows.append(dict(run_id="w", rank=r, node="n0", peer_group="dp", step=step, t_start=T0 + 10 * step,
                             compute_s=c, comm_s=ss - c, step_s=ss))
    w = whatif(pd.DataFrame(rows))
    assert w["slowdown"] == pytest.approx(5 / 3)
    assert w["per_rank"]["rank:2"] == pytest.approx(5 / 3)
    assert w["per_rank"]["rank:0"] == pytest.approx(1.0)
    assert w["actual_s"] == pytest.approx(5.0) and w["simulated_s"] == pytest.approx(3.0)


class _Rows:
    """A grid as the what-if reads one: ``compute`` ``(S, R)``, ``job_step``, ``group_stats()``."""

    def __init__(self, compute: np.ndarray, job_step: np.ndarray, groups: np.ndarray):
        from faultlab.labeler.stats import nanmedian

        self.compute, self.job_step = compute, job_step
        self.S, self.R = compute.shape
        G = int(groups.max()) + 1
        med = np.full((self.S, G), np.nan, dtype=compute.dtype)
        cnt = np.zeros((self.S, G), dtype=np.int64)
        for k in range(G):
            med[:, k], cnt[:, k] = nanmedian(compute[:, groups == k], axis=1)
        self._stats = (med, cnt, groups)

    def group_stats(self):
        return self._stats


@pytest.mark.parametrize("R,G", [(1, 1), (2, 1), (8, 1), (12, 3)])
def test_whatif_sums_equal_the_column_sums_of_the_per_rank_times(R, G):
    """Each rank's what-if sum, taken without the (S, R) array, is the sum of its column
    of simulate's per-rank times, with ties for the largest compute, ranks without a
    step, steps without compute and steps without a job step time."""
    from faultlab.labeler.whatif import simulate, whatif_sums

    rng = np.random.default_rng(R * 10 + G)
    S = 2000
    comp = np.round(rng.lognormal(-3.0, 0.3, size=(S, R)), 3).astype(np.float32)  # rounded: ties
    comp[rng.random((S, R)) < 0.05] = np.nan
    comp[7] = np.nan  # a step with no compute at all
    step = np.nanmax(np.where(np.isnan(comp), 0, comp), axis=1).astype(np.float64) * rng.uniform(1.0, 1.5, S) + 0.01
    step[rng.random(S) < 0.02] = np.nan
    grid = _Rows(comp, step, (np.arange(R) * G) // R)
    sim, sim_w = simulate(grid)
    ok = ~np.isnan(step) & ~np.isnan(sim)
    actual, simulated, n, per_rank = whatif_sums(grid)
    assert n == int(ok.sum()) and actual == float(np.sum(step[ok])) and simulated == float(np.sum(sim[ok]))
    want = np.sum(np.where(ok[:, None], sim_w, 0.0), axis=0)
    assert np.allclose(per_rank, want, rtol=1e-12, atol=0)


def test_ranks_cost_is_the_whatif_slowdown_of_the_intervals_rows(monkeypatch):
    """The what-if slowdown of a set of ranks over an interval, read a few rows at a
    time: for one rank, the job's time over those rows / their time with only that
    rank made ideal (simulate's per-rank times); for two ranks slowed together, far
    more than either alone, each of which the other still holds up."""
    from faultlab.labeler import whatif as wi

    rng = np.random.default_rng(3)
    S, R = 600, 6
    comp = rng.lognormal(-3.0, 0.2, size=(S, R)).astype(np.float32)
    comp[200:320, 2] *= 1.8
    comp[5, 2] = np.nan  # a step the rank did not report
    step = np.nanmax(comp, axis=1).astype(np.float64) + 0.01
    grid = _Rows(comp, step, np.zeros(R, dtype=np.int64))
    _, sim_w = wi.simulate(grid)
    monkeypatch.setattr(wi, "COST_CHUNK_CELLS", 7 * R)  # chunks of 7 rows: the sums cross chunk edges
    for j in (2, 4):
        want = float(np.sum(step[0:340]) / np.sum(sim_w[0:340, j]))
        assert wi.ranks_cost(grid, [j], 0, 339) == pytest.approx(want, rel=1e-12)
    assert wi.ranks_cost(grid, [2], 200, 319) > 1.3 and wi.ranks_cost(grid, [4], 200, 319) < 1.01
    both = comp.copy()
    both[200:320, 3] = both[200:320, 2]  # rank 3 as slow as rank 2, step for step
    grid2 = _Rows(both, step, np.zeros(R, dtype=np.int64))
    alone = [wi.ranks_cost(grid2, [j], 200, 319) for j in (2, 3)]
    assert alone == [pytest.approx(1.0), pytest.approx(1.0)]
    assert wi.ranks_cost(grid2, [2, 3], 200, 319) > 1.3  # together: as much as one such rank alone


def test_a_rank_slower_than_its_peers_that_the_job_never_waits_for_gets_no_label():
    """A rank computing 1.5x its peers' time over 60 steps while the job keeps its
    pace (the step is set by other work: the rank had slack) cost the job nothing: no
    label; the same rank in a job that waits for it is a straggler."""
    felt = simulate(n_ranks=4, n_steps=300, noise=0.01, straggler=(1, 120, 180, 1.5), seed=5)
    labels = label(felt)
    assert [c for c in labels["component"]] == ["rank:1"]
    assert json.loads(labels["evidence"].iloc[0])["whatif_slowdown"] >= 1.2
    slack = felt.copy()
    slack["step_s"] = 0.2  # the job's step is set elsewhere
    slack["t_start"] = T0 + 0.2 * slack["step"]
    slack["comm_s"] = slack["step_s"] - slack["compute_s"]
    assert label(slack).empty


def test_whatif_attributes_the_straggler(both):
    w = whatif(both)
    assert w["slowdown"] > 1.15
    top = max(w["per_rank"], key=w["per_rank"].get)
    assert top == "rank:1"
    assert all(v < 1.01 for k, v in w["per_rank"].items() if k != "rank:1")


def test_label_run_writes_labels_and_whatif(tmp_path, both):
    rd = RunDir.create(tmp_path / "run", run_id="run-1", scenario={"name": "t"})
    rd.write_table("steps", both)
    inj = pd.DataFrame([injection("f1", "cpu-contention", "n0", "rank:1", step_time(both, 100), step_time(both, 150))])
    rd.write_table("injections", inj)
    lab = label_run(rd.path)
    back = rd.read_table("labels")
    assert len(back) == len(lab) == 2
    assert back.set_index("component").loc["rank:1", "fault_id"] == "f1"
    assert pd.isna(back.set_index("component").loc["job", "fault_id"])
    wi = json.loads((rd.path / "whatif.json").read_text())
    assert wi["slowdown"] > 1.1 and "rank:1" in wi["per_rank"]
    assert wi["labeler_config"]["temporal_threshold"] == 1.3
    assert any(e["event"] == "labeled" for e in rd.events())


def test_several_runs_are_labeled_separately():
    a = simulate(straggler=(1, 100, 150, 3.0), run_id="a")
    b = simulate(straggler=(3, 50, 90, 3.0), run_id="b", seed=1)
    inj = pd.DataFrame([injection("fb", "cpu-contention", "n1", "rank:3", step_time(b, 50), step_time(b, 90), run_id="b")])
    lab = label(pd.concat([a, b]), inj)
    assert lab[["run_id", "component"]].values.tolist() == [["a", "rank:1"], ["b", "rank:3"]]
    assert lab.fault_id.tolist() == [None, "fb"]


def test_empty_inputs_and_bad_input(both):
    empty = schema.empty("steps")
    assert len(label(empty)) == 0
    inj = pd.DataFrame([injection("f1", "cpu-contention", "n0", "rank:1", T0, T0 + 5)])
    out = label(empty, inj)
    assert out.source.tolist() == ["injected-unmanifested"] and out.slowdown.tolist() == [1.0]
    with pytest.raises(BadInput):
        label(both.drop(columns=["compute_s"]))
    with pytest.raises(BadInput):
        LabelerConfig(peer_threshold=0.9)
    with pytest.raises(BadInput, match="no_such"):
        label(both, config={"no_such": 1})
    # a stricter config: the 2x job-wide slowdown is still found, the threshold is kept in evidence
    lab = label(both, config={"temporal_threshold": 1.5})
    assert json.loads(lab[lab.component == "job"].iloc[0].evidence)["threshold"] == 1.5


# -- onsets and intermittent stragglers --------------------------------------------------
def _retime(s: pd.DataFrame) -> pd.DataFrame:
    """Recompute t_start from step_s (steps back to back) after editing a frame."""
    per = s.groupby("step")["step_s"].max().sort_index()
    t = T0 + np.concatenate([[0.0], np.cumsum(per.to_numpy())[:-1]])
    s["t_start"] = t[s["step"].to_numpy()]
    return s


def paused_rank(rank=2, a=100, b=220, stall=0.25, every=5, in_compute_every=3, seed=0) -> pd.DataFrame:
    """A duty-cycle pause of one rank (SIGSTOP/SIGCONT): every ``every`` steps from ``a``
    to ``b`` a ``stall`` s stop. Every ``in_compute_every``-th stall lands in the rank's
    compute (it arrives late at the all-reduce); the others land inside the all-reduce,
    where every rank waits alike and no per-step timing can tell who stopped."""
    s = simulate(n_steps=320, seed=seed)
    for k, t in enumerate(range(a, b, every)):
        at = s["step"] == t
        if in_compute_every and k % in_compute_every == 0:
            s.loc[at & (s["rank"] == rank), "compute_s"] += stall
        s.loc[at, "step_s"] += stall
    s["comm_s"] = s["step_s"] - s["compute_s"]
    return _retime(s)


def test_intermittent_straggler_is_one_rank_label_from_its_first_stall():
    for seed in range(3):
        lab = label(paused_rank(seed=seed))
        assert lab.component.tolist() == ["rank:2"], lab[["component", "start_step", "end_step"]]
        r = lab.iloc[0]
        assert abs(r.start_step - 100) <= 2 and abs(r.end_step - 215) <= 2
        ev = json.loads(r.evidence)
        assert ev["baseline_kind"] == "intermittent-stalls" and ev["votes"] >= 2
        assert ev["stalls"] >= 20 and ev["stalls_attributed"] < ev["stalls"]
        assert r.slowdown > 1.5  # a 0.25 s stall every 5 steps of ~0.04 s


def test_stalls_nobody_can_be_blamed_for_stay_a_job_label():
    lab = label(paused_rank(in_compute_every=0))  # every stall inside the all-reduce
    assert lab.component.tolist() == ["job"]


@pytest.mark.parametrize("every,stall", [(20, 0.3), (40, 0.6), (60, 0.9)])
def test_sparse_stalls_inside_the_collective_are_one_job_label(every, stall):
    """A pause every 0.8-3 s whose every stall lands inside the all-reduce: nobody is
    late, so no rank can be named, and the stalls are too sparse for a run of job
    flags. Still a 1.4x job slowdown: one job label from the first stall to the last."""
    lab = label(paused_rank(a=60, b=60 + 4 * every + 1, every=every, in_compute_every=0, stall=stall))
    assert lab.component.tolist() == ["job"], lab[["component", "start_step", "end_step", "slowdown"]]
    r = lab.iloc[0]
    ev = json.loads(r.evidence)
    assert ev["baseline_kind"] == "intermittent-stalls" and ev["votes"] == 0 and ev["stalls"] >= 4
    assert abs(r.start_step - 60) <= 1 and abs(r.end_step - (60 + 4 * every)) <= 1
    assert r.slowdown >= 1.2


def test_two_alike_stalls_of_a_long_period_pause_are_one_job_label():
    """A pause of 0.9 s every ~2 s in force for ~4 s stalls the job twice (both inside
    the all-reduce): 2 stalls alike, one gap, are enough for one job label of the
    ~1.9x slowdown (as in s803-000 of the severity sweeps)."""
    lab = label(paused_rank(a=60, b=111, every=50, in_compute_every=0, stall=0.9))
    assert lab.component.tolist() == ["job"], lab[["component", "start_step", "end_step", "slowdown"]]
    r = lab.iloc[0]
    ev = json.loads(r.evidence)
    assert ev["baseline_kind"] == "intermittent-stalls" and ev["stalls"] == 2
    assert abs(r.start_step - 60) <= 1 and abs(r.end_step - 110) <= 1 and r.slowdown > 1.5


def test_lone_stalls_of_different_sizes_are_no_episode():
    """Two stalls 1 s apart, one 3x the other (not the same stall repeated): no label."""
    s = simulate(n_steps=320)
    for t, extra in ((100, 0.1), (125, 0.3)):
        s.loc[s["step"] == t, "step_s"] += extra
    s["comm_s"] = s["step_s"] - s["compute_s"]
    assert label(_retime(s)).empty


def test_slow_link_inside_an_intermittent_episode_keeps_its_job_label():
    """rank:2 paused every 20 steps (half the stalls in its compute) from step 60 to
    260, and a slow link (+60 ms on every all-reduce) over steps 150-190 inside that
    episode: the rank's label does not absorb the link's job label, both stay."""
    s = paused_rank(a=60, b=260, every=20, in_compute_every=2, stall=0.3)
    s.loc[s["step"].between(150, 190), "step_s"] += 0.06
    s["comm_s"] = s["step_s"] - s["compute_s"]
    lab = label(_retime(s))
    assert sorted(lab.component) == ["job", "rank:2"], lab[["component", "start_step", "end_step"]]
    j = lab[lab.component == "job"].iloc[0]
    assert abs(j.start_step - 150) <= 2 and abs(j.end_step - 190) <= 2
    assert json.loads(lab[lab.component == "rank:2"].iloc[0].evidence)["replaces"] == []


def test_job_label_is_located_at_the_one_rank_fault_in_force():
    """The sparse stalls inside the collective above, with the process-pause that made
    them on record: reconciliation names rank:2 (located_by injection). Not when two
    faults are in force, nor when a slow link is (the job label is the link's)."""
    s = paused_rank(a=60, b=221, every=40, in_compute_every=0, stall=0.6)
    t0, t1 = step_time(s, 60) - 0.05, step_end(s, 220) + 0.05
    pause = injection("process-1", "process-pause", "n1", "rank:2", t0, t1)
    lab = label(s, pd.DataFrame([pause]))
    assert lab.component.tolist() == ["rank:2"], lab[["component", "source", "fault_id"]]
    r = lab.iloc[0]
    ev = json.loads(r.evidence)
    assert (r.source, r.fault_id, r.cause, r.component_kind) == ("injected", "process-1", "process-pause", "rank")
    assert ev["located_by"] == "injection" and ev["observed_component"] == "job"

    cpu = injection("cpu-2", "cpu-contention", "n0", "rank:0", t0, t1)
    two = label(s, pd.DataFrame([pause, cpu]))
    assert sorted(zip(two.component, two.source)) == [("job", "observed"), ("rank:0", "injected-unmanifested"),
                                                      ("rank:2", "injected-unmanifested")]
    nic = injection("nic-3", "nic-slow", "n1", "fleth0", t0, t1)
    link = label(s, pd.DataFrame([pause, nic]))
    j = link[link.component == "job"].iloc[0]
    assert (j.source, j.fault_id) == ("injected", "nic-3") and "located_by" not in json.loads(j.evidence)
    # a fault in force for a small part of the label only does not name its rank
    short = injection("process-4", "process-pause", "n1", "rank:2", t0, step_end(s, 100))
    assert sorted(zip(*label(s, pd.DataFrame([short]))[["component", "source"]].T.values)) == [("job", "observed"), ("rank:2", "injected-unmanifested")]


def test_recorded_rate_cap_whose_flags_split_is_one_job_label():
    """A real testbed run (labeler-sweep-long seed 503, run 000; 4 ranks, gloo): a
    448 Mbit/s cap on n1's interface for 5.3 s slowed the job 1.58x, but its steps
    clear the per-step bar only in bursts (the what-if flags of 0.4 s of steps at a
    time, the rest 1.2-1.5x); nothing lasted the 1 s minimum and the fault read
    injected-unmanifested. The sustained rule (the window's median over a second)
    makes it one job label."""
    s = pd.read_csv(DATA / "nic-slow-448mbit.csv.gz")
    s["t_start"] += T0
    nic = injection("nic-1345a2", "nic-slow", "n1", "fleth0", T0 + 26.339, T0 + 31.664, run_id=s.run_id.iloc[0])
    lab = label(s, pd.DataFrame([nic]))
    got = lab[(lab.fault_id == "nic-1345a2") & (lab.source == "injected")]
    assert len(got) and set(got.component) == {"job"}, lab[["component", "source", "start_ts", "slowdown"]]
    assert got.slowdown.max() >= 1.2


@pytest.mark.parametrize("every", [8, 6, 4])
def test_pause_late_at_both_ends_and_inside_the_collective_between_is_one_rank_label(every):
    """A pause on rank:2 that lands in its compute over the episode's first and last
    six stalls and inside the all-reduce between (phase drift). The stalls between
    form a job label with no vote inside; it is the rank's own (its flagged steps are
    the episode's stalls), so one rank label over all of it, never three."""
    s = simulate(n_steps=400)
    n = len(range(100, 300, every))
    late = {k for k in range(n) if k < 6 or k > n - 7}
    for k, t in enumerate(range(100, 300, every)):
        at = s["step"] == t
        if k in late:
            s.loc[at & (s["rank"] == 2), "compute_s"] += 0.25
        s.loc[at, "step_s"] += 0.25
    s["comm_s"] = s["step_s"] - s["compute_s"]
    lab = label(_retime(s))
    assert lab.component.tolist() == ["rank:2"], lab[["component", "start_step", "end_step"]]
    assert lab.iloc[0].start_step <= 102 and lab.iloc[0].end_step >= 290


def test_job_label_is_not_located_by_a_fault_without_end_or_off_the_run():
    """A fault whose revert failed (no end_ts) is not taken as in
    force for the rest of the run, and a target rank the run does not have is never
    named."""
    s = paused_rank(a=60, b=221, every=40, in_compute_every=0, stall=0.6)
    t0, t1 = step_time(s, 60) - 0.05, step_end(s, 220) + 0.05
    no_end = injection("process-1", "process-pause", "n1", "rank:2", t0, float("nan"))
    lab = label(s, pd.DataFrame([no_end]))
    assert "job" in set(lab.component) and "located_by" not in "".join(lab.evidence.fillna(""))
    off = injection("process-2", "process-pause", "n1", "rank:99", t0, t1)
    lab = label(s, pd.DataFrame([off]))
    assert sorted(zip(lab.component, lab.source)) == [("job", "observed"), ("rank:99", "injected-unmanifested")]


def test_blip_before_a_jobwide_slowdown_does_not_set_its_onset():
    s = simulate(jobwide=(200, 240, 0.2))
    at = s["step"].isin([193, 194])  # a 2-step hiccup, joined only through gap_s
    s.loc[at, "step_s"] += 0.05
    s["comm_s"] = s["step_s"] - s["compute_s"]
    s = _retime(s)
    lab = label(s)
    assert lab.component.tolist() == ["job"]
    assert abs(lab.iloc[0].start_step - 200) <= 2


def test_weak_sustained_straggler_onset():
    """1.5x with 10% noise: single steps flag late and sparsely; the label's edges
    come from the smoothed excess and the change point."""
    for seed in range(5):
        lab = label(simulate(straggler=(1, 100, 200, 1.5), noise=0.1, seed=seed))
        r = lab[lab.component == "rank:1"]
        assert len(r) == 1, lab[["component", "start_step", "end_step"]]
        assert abs(r.iloc[0].start_step - 100) <= 2, r.iloc[0].start_step


def test_slow_link_during_a_weak_straggler_is_the_job_label_alone():
    """A rank 1.5x slower and, at the same time, +0.3 s on every all-reduce: the rank
    does not explain a job slowdown ten times its own excess, and made ideal it would
    have saved the job 4% of its time (under ``min_slowdown``): the job label alone."""
    lab = label(simulate(straggler=(1, 100, 150, 1.5), jobwide=(100, 150, 0.3)))
    assert sorted(lab.component) == ["job"]
    j = lab[lab.component == "job"].iloc[0]
    assert abs(j.start_step - 100) <= 2 and abs(j.end_step - 149) <= 2


# -- localization of job-wide slowdowns from per-peer TCP RTT ------------------------------
def _rtt_host(rise: dict, t0: float, t1: float, seed: int = 0) -> pd.DataFrame:
    """A host table of ``tcp_rtt_ms:PEER`` rows, 4 nodes, one sample per second over
    [t0 - 20, t1 + 5): baseline RTT 0.05-0.3 ms per pair (some near-idle pairs at 0.01
    ms); during [t0, t1) the pairs in ``rise`` have that RTT (ms) instead."""
    rng = np.random.default_rng(seed)
    nodes = ["n0", "n1", "n2", "n3"]
    base = {(a, b): (0.01 if (a, b) in {("n1", "n3"), ("n3", "n1")} else rng.uniform(0.05, 0.3)) for a in nodes for b in nodes if a != b}
    rows = []
    for ts in np.arange(t0 - 20, t1 + 5, 1.0):
        for (a, b), v in base.items():
            val = rise.get((a, b), v) if t0 <= ts < t1 else v
            rows.append({"run_id": "run-1", "node": a, "ts": float(ts), "metric": f"tcp_rtt_ms:{b}", "value": val * rng.uniform(0.9, 1.1)})
        rows.append({"run_id": "run-1", "node": "n0", "ts": float(ts), "metric": "tcp_rtt_ms:10.0.0.1", "value": 50.0})  # not a node
    return pd.DataFrame(rows)


def test_localize_names_the_node_behind_a_slow_link():
    from faultlab.labeler.localize import localize

    s = simulate(jobwide=(100, 150, 0.05))
    t0, t1 = step_time(s, 100), step_end(s, 149)
    # n2's link is capped: its connections queue (10-40 ms); the all-reduce ring it
    # paces also raises one pair that does not touch it, and the near-idle pair n1-n3
    # rises from 0.01 to 0.05 ms (a 5x ratio of nothing)
    rise = {("n2", "n0"): 12.0, ("n0", "n2"): 30.0, ("n2", "n1"): 9.0, ("n1", "n2"): 25.0, ("n2", "n3"): 14.0,
            ("n3", "n2"): 40.0, ("n0", "n1"): 8.0, ("n1", "n3"): 0.05, ("n3", "n1"): 0.05}
    lab = label(s, host=_rtt_host(rise, t0, t1))
    j = lab[lab.component == "job"].iloc[0]
    ev = json.loads(j.evidence)
    assert ev["culprit"] == "node:n2", ev
    assert ev["culprit_rtt_ratio"] >= 2 and set(ev["rtt_ratio_by_node"]) == {"n0", "n1", "n2", "n3"}
    # every connection up alike (a slow switch, not one link): nobody is named
    even = {(a, b): 10.0 for a in ["n0", "n1", "n2", "n3"] for b in ["n0", "n1", "n2", "n3"] if a != b}
    ev2 = json.loads(localize(lab, _rtt_host(even, t0, t1)).query("component == 'job'").iloc[0].evidence)
    assert "culprit" not in ev2 and ev2["rtt_ratio_by_node"]
    # no TCP metrics: labels unchanged
    assert localize(lab, pd.DataFrame(columns=["run_id", "node", "ts", "metric", "value"])).equals(lab)


def test_clock_skew_between_hosts_is_removed():
    """One rank's host clock an hour (or 50 s behind, or 0.5 s) off: the same two
    straggler intervals as with synced clocks, and no rank blamed for the skew."""
    base = simulate(n_steps=300)
    sel = (base["rank"] == 1) & (base["step"].between(50, 89) | base["step"].between(250, 289))
    base.loc[sel, "compute_s"] *= 2
    base["step_s"] = base.groupby("step")["compute_s"].transform("max") + 0.01
    base["comm_s"] = base["step_s"] - base["compute_s"]
    base = _retime(base)
    want = [(r.component, r.start_step, r.end_step) for r in label(base).itertuples()]
    assert want == [("rank:1", 50, 89), ("rank:1", 250, 289)]
    for skew in (3600.0, -50.0, 0.5):
        s = base.copy()
        s.loc[s["rank"] == 3, "t_start"] += skew
        got = label(s)
        assert [(r.component, r.start_step, r.end_step) for r in got.itertuples()] == want, skew
    from faultlab.labeler.grid import StepGrid

    s = base.copy()
    s.loc[s["rank"] == 3, "t_start"] += 3600.0
    assert StepGrid.from_steps(s).clock_offsets[3] == pytest.approx(3600.0, abs=0.05)
    assert not StepGrid.from_steps(base).clock_offsets.any()


def test_rank_without_peers_is_labeled_by_its_own_history():
    """Pipeline stages of one rank each, or a one-rank run: no peer view, yet the slow
    rank (not the job) is labeled, and matches the injection on it."""
    s = simulate(groups=["s0", "s1", "s2", "s3"], straggler=(2, 100, 200, 2.0))
    inj = pd.DataFrame([injection("cpu-1", "cpu-contention", "n1", "rank:2", step_time(s, 100), step_end(s, 199))])
    lab = label(s, inj)
    assert lab.component.tolist() == ["rank:2"] and lab.source.tolist() == ["injected"]
    r = lab.iloc[0]
    assert abs(r.start_step - 100) <= 2 and 1.8 < r.slowdown < 2.2 and r.views == "temporal"
    assert json.loads(r.evidence)["share_of_job_excess"] > 0.5
    one = label(simulate(n_ranks=1, straggler=(0, 100, 200, 2.0)))
    assert one.component.tolist() == ["rank:0"]
    # every rank of a group slowed alike is still the job's slowdown
    assert label(simulate(straggler=([0, 1, 2, 3], 100, 200, 2.0))).component.tolist() == ["job"]


def test_a_rank_back_to_normal_after_a_fast_spell_is_not_blamed_for_another_ranks_stall():
    """Rank 1 runs twice as fast for 100 steps, so its trailing baseline is left low and
    every later step of it is flagged (flagged steps do not feed the baseline); rank 0
    stalls 1.5 s a step for 8 steps inside that span. The job felt rank 0's stall, which
    rank 0's own label explains; rank 1 slowed nothing. Judging "the job felt it" over
    all of rank 1's span gave it a 700-step rank label at 2.0x (seed 1701, run 1: a
    37 s cpu-contention label of a 1.04x fault, over another rank's GC stall)."""
    for seed in range(3):
        s = simulate(n_steps=900, seed=seed)
        s.loc[(s["rank"] == 1) & s["step"].between(100, 199), "compute_s"] *= 0.5
        s.loc[(s["rank"] == 0) & s["step"].between(500, 507), "compute_s"] += 1.5
        s["step_s"] = s["step"].map(s.groupby("step")["compute_s"].max()) + 0.01
        s["comm_s"] = s["step_s"] - s["compute_s"]
        lab = label(_retime(s))
        assert lab.component.tolist() == ["rank:0"], lab[["component", "start_step", "end_step", "slowdown"]]
        assert (lab.start_step.iloc[0], lab.end_step.iloc[0]) == (500, 507)


def test_jobwide_slowdown_present_from_the_first_step():
    """Every rank 2x over steps 0-99 of 300: the trailing baseline starts slowed, so the
    temporal view judges those steps against the run's typical step time."""
    for seed in range(3):
        lab = label(simulate(n_steps=300, jobwide=(0, 100, 0.04), seed=seed))
        assert lab.component.tolist() == ["job"], lab[["component", "start_step", "end_step"]]
        assert lab.iloc[0].start_step <= 2 and abs(lab.iloc[0].end_step - 99) <= 2
        assert 1.7 < lab.iloc[0].slowdown < 2.2


def test_every_rank_ramping_up_is_the_jobs_slowdown_and_no_compute_still_labels():
    """All ranks ramp from 1x to 2.5x: the trailing baseline follows the ramp, the
    run's typical step time does not; one job label, no rank blamed. Without any
    compute_s recorded, the step time alone still makes the job label."""
    s = simulate(n_steps=400)
    f = np.ones(400)
    f[100:200] = np.linspace(1.0, 2.5, 100)
    f[200:250] = 2.5
    s["compute_s"] *= f[s["step"].to_numpy()]
    s["step_s"] = s.groupby("step")["compute_s"].transform("max") + 0.01
    s["comm_s"] = s["step_s"] - s["compute_s"]
    lab = label(_retime(s))
    assert lab.component.tolist() == ["job"] and abs(lab.iloc[0].end_step - 249) <= 2
    s2 = simulate(n_steps=300, jobwide=(100, 200, 0.04))
    s2["compute_s"] = np.nan
    lab2 = label(s2)
    assert lab2.component.tolist() == ["job"] and abs(lab2.iloc[0].start_step - 100) <= 2


@pytest.mark.parametrize("groups", [None, ["dp0", "dp0", "dp1", "dp1"]], ids=["two-rank-run", "two-rank-groups"])
def test_two_rank_peer_group_reads_the_full_straggler_factor(groups):
    # a 2x straggler against its one peer: 2x, not the 1.33x of a median that includes it
    n = 2 if groups is None else 4
    steps = simulate(n_ranks=n, n_steps=300, straggler=(1, 0, 300, 2.0), noise=0.02, groups=groups)
    labels = label(steps)
    rank1 = labels[labels.component == "rank:1"]
    assert len(rank1) == 1, labels[["component", "start_step", "end_step", "slowdown"]]
    ev = json.loads(rank1.iloc[0].evidence)
    assert ev["peer_ratio"] == pytest.approx(2.0, rel=0.05)
    assert rank1.iloc[0].slowdown == pytest.approx(2.0, rel=0.05)
    assert set(labels.component) == {"rank:1"}  # the healthy peer is not the slow one


def test_loo_median_matches_the_median_of_the_others():
    from faultlab.labeler.stats import loo_median

    rng = np.random.default_rng(3)
    for width in range(1, 6):
        x = rng.integers(0, 4, size=(60, width)).astype(np.float64)
        x[rng.random(x.shape) < 0.2] = np.nan
        got = loo_median(x)
        for i in range(x.shape[0]):
            for j in range(width):
                rest = np.delete(x[i], j) if not np.isnan(x[i, j]) else x[i]
                rest = rest[~np.isnan(rest)]
                want = np.median(rest) if rest.size else np.nan
                assert np.isnan(got[i, j]) if np.isnan(want) else got[i, j] == want


@pytest.mark.parametrize("nan_share", [0.0, 0.2], ids=["full-rows", "rows-with-nan"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_loo_and_median_give_the_leave_one_out_and_the_row_medians_of_the_two_functions(nan_share, dtype):
    """One partition of the rows gives both peer medians, value for value and count for count."""
    from faultlab.labeler.stats import loo_and_median, loo_median, nanmedian

    rng = np.random.default_rng(7)
    for width in range(0, 9):
        x = rng.lognormal(size=(300, width)).astype(dtype)
        x[rng.random(x.shape) < nan_share] = np.nan
        if width and nan_share:
            x[5] = np.nan  # a row with no value at all
        loo, med, n = loo_and_median(x)
        want_med, want_n = nanmedian(x, axis=1)
        assert loo.dtype == x.dtype and np.array_equal(loo, loo_median(x), equal_nan=True)
        assert np.array_equal(med, want_med, equal_nan=True) and np.array_equal(n, want_n)


@pytest.mark.parametrize("every,in_compute_every,stall", [(5, 3, 0.25), (20, 6, 0.3), (40, 3, 0.6), (75, 2, 0.9)],
                         ids=["period-5-steps", "period-20-steps", "period-40-steps", "period-75-steps"])
def test_intermittent_straggler_at_other_pause_periods(every, in_compute_every, stall):
    # a pause every 0.2 s to 3 s of ~40 ms steps, most stalls inside the all-reduce:
    # the stalls are apart by more than gap_s, yet one episode of one rank
    lab = label(paused_rank(a=60, b=60 + 4 * every + 1, every=every, in_compute_every=in_compute_every, stall=stall))
    assert lab.component.tolist() == ["rank:2"], lab[["component", "start_step", "end_step", "slowdown"]]
    ev = json.loads(lab.iloc[0].evidence)
    assert ev["baseline_kind"] == "intermittent-stalls" and ev["stalls"] >= 4
    r = lab.iloc[0]
    assert r.start_step <= 60 + every and r.end_step >= 60 + 3 * every  # one label over the stalls
    assert r.slowdown >= 1.2


def test_observed_labels_carry_the_host_evidence_of_their_cause():
    from faultlab.labeler.hostcause import attach_host_evidence

    steps = simulate(straggler=(1, 100, 160, 2.0))
    lab = label(steps)
    assert lab.source.tolist() == ["observed"]
    r = lab.iloc[0]
    ts = np.arange(T0 - 5, T0 + 30, 1.0)
    during = (ts >= r.start_ts - 1) & (ts <= r.end_ts + 1)

    def host(busy_during, ranks_during):
        rows = [{"node": f"n{n}", "ts": t, "metric": "cpu_util_pct", "value": busy_during if d else 70.0}
                for n in range(2) for t, d in zip(ts, during)]
        rows += [{"node": f"n{n}", "ts": t, "metric": "proc_cpu_util_pct", "value": (ranks_during if d else 50.0) / 2}
                 for n in range(2) for t, d in zip(ts, during)]
        return pd.DataFrame(rows)

    def cause(h):
        return json.loads(attach_host_evidence(lab, h).iloc[0].evidence)["host"]

    other = cause(host(100.0, 40.0))  # host saturated, ranks starved: someone else's CPU
    assert other["likely_cause"] == "other processes' CPU" and other["host_cpu_busy_pct"] == 100.0
    assert other["ranks_cpu_pct"] == 40.0 and other["ranks_cpu_pct_typical"] == 50.0
    assert cause(host(80.0, 90.0))["likely_cause"] == "the ranks' own CPU work"
    assert cause(host(70.0, 50.0))["likely_cause"] is None  # the host metrics show no cause
    # host as busy as usual, ranks 30% below their usual CPU: the rest went to others
    assert cause(host(72.0, 35.0))["likely_cause"] == "other processes' CPU"
    assert cause(host(60.0, 35.0))["likely_cause"] is None  # host idler, the ranks 0.7x: no cause shown
    assert cause(host(60.0, 20.0))["likely_cause"] == "the ranks waited (their CPU halved)"
    assert attach_host_evidence(lab, None) is lab

    def with_rtt(h, rtt_during, rtt=0.3):  # the worst link's srtt (ms): node n1 toward n0
        rows = [{"node": "n1", "ts": t, "metric": "tcp_rtt_ms:n0", "value": rtt_during if d else rtt}
                for t, d in zip(ts, during)]
        rows += [{"node": "n0", "ts": t, "metric": "tcp_rtt_ms:n1", "value": rtt} for t in ts]
        return pd.concat([h, pd.DataFrame(rows)], ignore_index=True)

    # a rate cap: the ranks wait on a queue TCP sees (30 ms round trips instead of 0.3)
    net = cause(with_rtt(host(60.0, 20.0), 30.0))
    assert net["likely_cause"] == "the network (TCP round trip up)"
    assert (net["tcp_rtt_ms"], net["tcp_rtt_ms_typical"]) == (30.0, 0.3)
    assert cause(with_rtt(host(60.0, 20.0), 1.5))["likely_cause"] == "the ranks waited (their CPU halved)"  # < 2 ms up
    assert cause(with_rtt(host(100.0, 40.0), 30.0))["likely_cause"] == "other processes' CPU"  # CPU first


def slow_loader(rank=1, a=100, b=200, loader=0.003, slow_loader_s=0.12, seed=0) -> pd.DataFrame:
    """Steps of a job with a disk-backed data loader (benchmarks/diskdata.py layout:
    ``dataloader_s`` is the wait for the batch, outside ``compute_s``). Over steps
    ``a <= step < b`` rank ``rank``'s loader waits ``slow_loader_s`` (an io-slow fault
    on its disk); its compute is unchanged and its peers wait in the all-reduce."""
    steps = simulate(n_steps=300, seed=seed)
    rng = np.random.default_rng(seed + 1)
    dl = loader * (1 + 0.05 * rng.standard_normal(len(steps)))
    slow = (steps["rank"] == rank) & (steps["step"] >= a) & (steps["step"] < b)
    dl[slow.to_numpy()] = slow_loader_s * (1 + 0.05 * rng.standard_normal(int(slow.sum())))
    steps["dataloader_s"] = dl
    local = steps["compute_s"] + steps["dataloader_s"]
    arrive = local.groupby(steps["step"]).transform("max")  # every rank waits for the last
    core = steps["step_s"] - steps.groupby("step")["compute_s"].transform("max")
    steps["step_s"] = arrive + core
    steps["comm_s"] = steps["step_s"] - local
    steps["t_start"] = T0 + steps["step"].map(steps.groupby("step")["step_s"].first().cumsum().shift(fill_value=0.0))
    return steps


def test_dataloader_wait_is_the_ranks_local_time():
    # io-slow on rank 1's disk: its compute_s stays, its dataloader_s grows 40x and
    # every peer waits for it in the all-reduce. Counted as local time it is one
    # straggler label (its compute_s alone even falls against its peers', which would
    # read the fault as injected-unmanifested beside an unexplained job label).
    steps = slow_loader()
    inj = pd.DataFrame([injection("io-1", "io-slow", "n0", "rank:1", step_time(steps, 100), step_end(steps, 199))])
    lab = label(steps, inj)
    assert lab.component.tolist() == ["rank:1"], lab[["component", "start_step", "end_step", "slowdown", "source"]]
    r = lab.iloc[0]
    assert r.source == "injected" and r.fault_id == "io-1" and r.views == "temporal+peer"
    assert abs(r.start_step - 100) <= 2 and abs(r.end_step - 199) <= 2
    ev = json.loads(r.evidence)
    assert ev["median_dataloader_s"] == pytest.approx(0.12, rel=0.1)
    assert r.slowdown == pytest.approx((0.03 + 0.12) / 0.033, rel=0.1)  # local time over its own baseline
    # the same run without the column: the labeler sees compute_s only, names no rank
    # from the telemetry, and only the injection record locates the job's slowdown
    plain = label(steps.drop(columns=["dataloader_s"]), inj)
    got = plain[plain.source == "injected"]
    assert len(got) and all(json.loads(e).get("located_by") == "injection" for e in got.evidence)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sustained_straggler_under_per_step_noise(seed):
    # a CPU-throttled rank on a busy host: 1.5x for 100 steps (~5 s), but per-step noise
    # of 25% puts the peer ratio's noise floor (4 robust sigmas) above 2x at one step.
    # Over a second of steps its median is clearly up: one label, from about its onset.
    steps = simulate(n_steps=400, noise=0.25, straggler=(1, 150, 250, 1.5), seed=seed)
    lab = label(steps)
    assert lab.component.tolist() == ["rank:1"], lab[["component", "start_step", "end_step", "slowdown"]]
    r = lab.iloc[0]
    assert abs(r.start_step - 150) <= 10 and abs(r.end_step - 249) <= 10
    assert r.slowdown == pytest.approx(1.5, rel=0.15)
    # the same noise without a straggler: nothing (the window's median, not one step)
    assert label(simulate(n_steps=400, noise=0.25, seed=seed)).empty


@pytest.mark.parametrize("nan_fraction", [0.0, 0.1])
def test_sustained_window_matches_a_brute_force_count(nan_fraction):
    from faultlab.labeler.views.peer import sustained

    rng = np.random.default_rng(5)
    x = (rng.random((50, 300)) * 2).astype(np.float32)
    x[rng.random(x.shape) < nan_fraction] = np.nan
    got = sustained(x, 7, np.full(300, 1.0))
    for i in range(50):
        w = x[max(0, i - 3) : i + 4]
        known = (~np.isnan(w)).sum(axis=0)
        cut = 7 - w.shape[0]  # steps of the window beyond the run's ends
        want = ((w > 1.0).sum(axis=0) * 2 > known + cut) & (known >= 4)
        assert (got[i] == want).all()


# -- recorded runs whose faults are hard to label, cut to the fault and its context --------
#: (fixture, fault_id, the component its injected label must name) and every fault
#: recorded in the fixture's time span (fault_id, type, node, target, start, end; s
#: from the run's first step). Runs of examples/labeler-sweep-*.yaml, seeds 503 and
#: 602-603, 4 ranks on 2 cores (gloo).
RECORDED = {
    # a 385 Mbit/s cap: rank:1's compute noise takes 40% of the job's excess (the rest
    # must stay a job label, not become rank:1's), and the run's other faults widen the
    # spread the sustained rule's level comes from (the lower half's spread keeps it)
    "nic-slow-385mbit": ("nic-00920c", "job", [
        ("nic-278972", "nic-slow", "n3", "fleth0", 10.269, 16.020),
        ("nic-348752", "nic-slow", "n3", "fleth0", 21.110, 26.188),
        ("nic-00920c", "nic-slow", "n0", "fleth0", 30.077, 37.004)]),
    # a 484 Mbit/s cap at 1.44x: the window median of the straggler-free ratio held at
    # 1.2-1.26 for 3 s, under a per-step bar of 1.3 (the bar is the floor min_slowdown)
    "nic-slow-484mbit": ("nic-02cf6a", "job", [("nic-02cf6a", "nic-slow", "n2", "fleth0", 29.310, 34.102)]),
    # 527 ms every 2.5 s: the first pause straddles two steps (about 280 ms each); the
    # stalls are alike and its vote names the rank only when adjacent stall steps are
    # one stall
    "pause-527ms-every-2500ms": ("process-78a7a4", "rank:1", [
        ("process-2fdb90", "process-pause", "n0", "rank:0", 14.510, 18.603),
        ("process-78a7a4", "process-pause", "n1", "rank:1", 23.419, 29.457)]),
    # a GC storm on rank:2 between two cpu faults: one stall episode chains all three,
    # and rank:0's 34 votes would outvote rank:2's 5 (one episode per run of votes)
    "gc-storm-after-rank0-fault": ("gc-ad5f61", "rank:2", [
        ("cpu-aa6ca5", "cpu-contention", "n2", "rank:2", 5.997, 11.050),
        ("gc-ad5f61", "gc-storm", "n2", "rank:2", 14.441, 19.117),
        ("cpu-7ea8eb", "cpu-contention", "n0", "rank:0", 22.731, 28.769)]),
    # 165 ms every 0.6 s after a cap and a cpu fault: the episode chains all three and
    # rank:0's labels from the cap hold half of its stalls once the cap has its job
    # label; a guard for the check that counts only the stalls of the rank's own span
    "pause-165ms-every-603ms": ("process-4c1ced", "rank:0", [
        ("nic-4d5020", "nic-slow", "n2", "fleth0", 10.546, 16.354),
        ("cpu-cdc8b5", "cpu-contention", "n1", "rank:1", 19.940, 24.565),
        ("process-4c1ced", "process-pause", "n0", "rank:0", 28.340, 34.137)]),
}


@pytest.mark.parametrize("fixture", sorted(RECORDED))
def test_recorded_fault_the_labeler_missed_is_labeled(fixture):
    fid, want, faults = RECORDED[fixture]
    s = pd.read_csv(DATA / f"{fixture}.csv.gz")
    s["t_start"] += T0
    inj = pd.DataFrame([injection(f, t, n, tg, T0 + a, T0 + b, run_id=s.run_id.iloc[0]) for f, t, n, tg, a, b in faults])
    lab = label(s, inj)
    got = lab[(lab.fault_id == fid) & (lab.source == "injected")]
    assert set(got.component) == {want}, lab[["component", "source", "fault_id", "start_ts", "slowdown"]]
    assert got.slowdown.max() >= 1.2
    assert "located_by" not in "".join(got.evidence.fillna(""))  # found from the steps, not the record


@pytest.mark.parametrize("first", [0.25, 0.2, 0.3])
def test_a_stall_that_straddles_two_steps_is_one_stall(first):
    """A 0.5 s pause of rank:2 every 60 steps, landing in the all-reduce each time, but
    the first one split over two steps (``first`` s in the rank's compute, the rest
    in the next step) and the rank late for it: the stalls are alike once the two
    steps are one, so the one late arrival names the rank; the vote counts at either
    step (at 0.2/0.3 the larger step holds it)."""
    s = simulate(n_steps=400)
    for k, t in enumerate(range(100, 340, 60)):
        at = s["step"] == t
        if k == 0:
            s.loc[at & (s["rank"] == 2), "compute_s"] += first
            s.loc[at, "step_s"] += first
            s.loc[s["step"] == t + 1, "step_s"] += 0.5 - first
        else:
            s.loc[at, "step_s"] += 0.5
    s["comm_s"] = s["step_s"] - s["compute_s"]
    lab = label(_retime(s))
    assert lab.component.tolist() == ["rank:2"], lab[["component", "start_step", "end_step"]]
    assert lab.iloc[0].start_step <= 101 and lab.iloc[0].end_step >= 279


def test_two_ranks_stalls_chained_into_one_episode_are_two_labels():
    """rank:0 stalled every 10 steps over 60-140, then rank:2 over 165-245 (out of
    step with rank:0's cadence), half of each's stalls in its compute: one band of
    stalls less than a period apart, but two runs of votes, so two rank labels that
    do not overlap (never one label of the majority over all of it)."""
    s = simulate(n_steps=320)
    for rank, a, b in ((0, 60, 141), (2, 165, 246)):
        for k, t in enumerate(range(a, b, 10)):
            at = s["step"] == t
            if k % 2 == 0:
                s.loc[at & (s["rank"] == rank), "compute_s"] += 0.2
            s.loc[at, "step_s"] += 0.2
    s["comm_s"] = s["step_s"] - s["compute_s"]
    lab = label(_retime(s))
    assert sorted(lab.component) == ["rank:0", "rank:2"], lab[["component", "start_step", "end_step"]]
    r0, r2 = (lab[lab.component == c].iloc[0] for c in ("rank:0", "rank:2"))
    assert r0.start_step <= 61 and 139 <= r0.end_step < 165
    assert 140 < r2.start_step <= 166 and r2.end_step >= 244


@pytest.mark.parametrize("k", [4, 5, 6])
def test_a_pause_that_lands_in_its_compute_now_and_then_gets_no_job_twin(k):
    """One rank paused every 5 steps, one stall in ``k`` in its compute
    (the rest inside the all-reduce): its compute explains under half of each
    job-wide interval's excess, but the median straggler-free step is not slowed (no
    slow link): rank labels only, no job label beside them."""
    lab = label(paused_rank(in_compute_every=k, every=5))
    assert set(lab.component) == {"rank:2"}, lab[["component", "start_step", "end_step", "slowdown"]]


def test_a_slow_link_with_a_mild_straggler_is_the_jobs_label():
    """+15 ms on every all-reduce and rank:1 1.2x slower over steps
    100-250: the rank's extra compute is under a third of the job's excess, so the
    job label holds the rest (the rank does not take the whole interval at the job's
    slowdown, and the link has its label)."""
    lab = label(simulate(n_steps=400, jobwide=(100, 250, 0.015), straggler=(1, 100, 250, 1.2)))
    job = lab[lab.component == "job"]
    assert len(job) == 1 and abs(job.iloc[0].start_step - 100) <= 2 and abs(job.iloc[0].end_step - 249) <= 2, lab
    assert 1.25 <= job.iloc[0].slowdown <= 1.45  # the link's +15 ms on ~45 ms steps, less the rank's share


@pytest.mark.parametrize("late", [{270: 1, 280: 1, 290: 1}, {100: 0, 120: 0, 260: 1, 280: 1}])
def test_one_pause_whose_late_arrivals_split_is_not_two_ranks(late):
    """One pause at one period whose late arrivals split between ranks
    (a few stalls where another rank happens to be the late one) keeps its cadence
    across the split: it is one fault, judged whole (the majority's, or a job label
    when no rank has one), never two ranks' labels."""
    s = simulate(n_steps=420)
    every, stall = (5, 0.25) if 270 in late else (20, 0.3)
    for n, t in enumerate(range(100 if every == 5 else 60, 300 if every == 5 else 341, every)):
        at = s["step"] == t
        if t in late:
            s.loc[at & (s["rank"] == late[t]), "compute_s"] += stall
        elif every == 5 and n % 2 == 0:
            s.loc[at & (s["rank"] == 2), "compute_s"] += stall
        s.loc[at, "step_s"] += stall
    s["comm_s"] = s["step_s"] - s["compute_s"]
    lab = label(_retime(s))
    assert len(lab) == 1 and lab.iloc[0].component == ("rank:2" if every == 5 else "job"), \
        lab[["component", "start_step", "end_step"]]


@pytest.mark.parametrize("noise", [0.0, 0.005])
def test_quiet_run_slowed_under_the_floor_has_no_label_and_over_it_one(noise):
    """On a quiet host the sustained rule's spread is 0 (or nearly),
    so its level is the floor ``min_slowdown`` itself: a job 1.1x slower for 100 steps
    gets no label, 1.35x gets one job label over those steps."""
    assert label(simulate(noise=noise, jobwide=(100, 200, 0.004))).empty  # +4 ms on ~40 ms steps
    lab = label(simulate(noise=noise, jobwide=(100, 200, 0.014)))
    assert lab.component.tolist() == ["job"], lab[["component", "start_step", "end_step", "slowdown"]]
    assert abs(lab.iloc[0].start_step - 100) <= 2 and abs(lab.iloc[0].end_step - 199) <= 2


def test_two_faults_of_one_rank_seconds_apart_are_two_labels():
    """rank:2 stalled every 8 steps over 60-140 (an io throttle), then, after two stalls
    inside the all-reduce that nobody is late for, every 8 steps over 230-310 (a
    pause): one episode by the period rule, but its votes are more than
    ``intermittent_period_s`` apart with no other slowdown between, so two labels, not
    one over the clean steps between (dataset hw-v1 run hw-021, re-labeled on
    548a0ba: one rank:3 label 4.5-17.0 s over an io fault and a pause 3 s apart)."""
    s = simulate(n_steps=400)
    stalls = [(t, k % 2 == 0) for k, t in enumerate(range(60, 141, 8))] + [(170, False), (200, False)] + \
             [(t, k % 2 == 0) for k, t in enumerate(range(230, 311, 8))]
    for t, late in stalls:
        at = s["step"] == t
        if late:
            s.loc[at & (s["rank"] == 2), "compute_s"] += 0.25
        s.loc[at, "step_s"] += 0.25
    s["comm_s"] = s["step_s"] - s["compute_s"]
    lab = label(_retime(s))
    r2 = lab[lab.component == "rank:2"].sort_values("start_step")
    assert len(r2) == 2, lab[["component", "start_step", "end_step"]]
    assert r2.iloc[0].start_step <= 61 and 139 <= r2.iloc[0].end_step < 170
    assert 200 < r2.iloc[1].start_step <= 231 and r2.iloc[1].end_step >= 309


def test_one_hiccup_among_a_pauses_stalls_does_not_make_them_unlike():
    """A 0.25 s pause of rank:2 every 20 steps, all inside the all-reduce but one (the
    rank late), with one 0.07 s host hiccup among them: the stalls are still of one
    size (all but one within 2x of their median), so the one late arrival names the
    rank (held-out seed 802 run 5: a 230 ms pause lost its label when two of its
    steps became one stall and one vote, and a 72 ms hiccup made max/min 3.6x)."""
    s = simulate(n_steps=450)
    for k, t in enumerate(range(100, 221, 20)):
        at = s["step"] == t
        if k == 2:
            s.loc[at & (s["rank"] == 2), "compute_s"] += 0.25
        s.loc[at, "step_s"] += 0.25
    s.loc[s["step"] == 170, "step_s"] += 0.07
    # stalls of sizes between, 4 s later (another fault's): one band of sizes from
    # 0.07 to 0.25 s, as on a host with stalls of every size
    for t, extra in ((330, 0.09), (345, 0.12), (360, 0.15), (375, 0.19)):
        s.loc[s["step"] == t, "step_s"] += extra
    s["comm_s"] = s["step_s"] - s["compute_s"]
    lab = label(_retime(s))
    r2 = lab[lab.component == "rank:2"]
    assert len(r2) == 1 and r2.iloc[0].start_step <= 101 and r2.iloc[0].end_step >= 219, \
        lab[["component", "start_step", "end_step"]]


def hiccups_and_pause(seed: int, rank: int = 5, a: int = 600, b: int = 721, n_ranks: int = 64,
                      n_steps: int = 900) -> pd.DataFrame:
    """A job of many ranks where some other rank hiccups at one step in ten (its
    compute 30-200 ms longer: stalls of every size, close enough in time to chain by
    the period rule), and ``rank`` pauses 0.25 s every 5 steps over ``a..b``, every
    3rd stop in its compute (it arrives late), the others inside the all-reduce."""
    s = simulate(n_ranks=n_ranks, n_steps=n_steps, seed=seed)
    rng = np.random.default_rng(100 + seed)
    c = s.pivot(index="step", columns="rank", values="compute_s").to_numpy().copy()
    core = s.groupby("step")["step_s"].first().to_numpy() - c.max(axis=1)
    for t in np.flatnonzero(rng.random(n_steps) < 0.1):
        r = int(rng.integers(0, n_ranks - 1))
        c[t, r + (r >= rank)] += rng.uniform(0.03, 0.2)
    for k, t in enumerate(range(a, b, 5)):
        if k % 3 == 0:
            c[t, rank] += 0.25
        else:
            core[t] += 0.25
    step = c.max(axis=1) + core
    s["compute_s"] = c.ravel()
    s["step_s"] = step[s["step"].to_numpy()]
    s["comm_s"] = s["step_s"] - s["compute_s"]
    return _retime(s)


@pytest.mark.parametrize("seed", [0, 2, 3])
def test_a_pause_among_other_ranks_hiccups_of_every_size_is_its_ranks_label(seed):
    """Other ranks' hiccups of every size, one step in ten, chain the pause's stalls
    into one episode of the whole run, each hiccup voting for another rank, so the
    pause's rank holds no majority of it; among the stalls of its own size, where its
    votes are, it holds them all (as on a job of 1,000 ranks, where one rank-step in
    20,000 hiccups: the planted pause of `faultlab synth` at 9e6 rank-steps)."""
    lab = label(hiccups_and_pause(seed))
    assert lab[["component", "start_step", "end_step"]].values.tolist() == [["rank:5", 600, 720]], lab
    assert lab.iloc[0].slowdown > 2.0


def _with_stalls(s: pd.DataFrame, spec) -> pd.DataFrame:
    """``s`` with stalls ``spec``: ``(step, late rank or None, seconds)`` each, inside
    the all-reduce (every rank waits), or in the late rank's compute."""
    for t, r, x in spec:
        at = s["step"] == t
        if r is not None:
            s.loc[at & (s["rank"] == r), "compute_s"] += x
        s.loc[at, "step_s"] += x
    s["comm_s"] = s["step_s"] - s["compute_s"]
    return _retime(s)


def test_a_labeled_fault_does_not_hide_a_second_fault_of_its_rank():
    """A GC-like storm on rank:2 over 60-120 (labeled by the
    straggler stage), two stalls nobody is late for, then a pause of rank:2 over
    290-470: one episode by the period rule, whose stalls the first label holds in the
    main; the second fault is still labeled."""
    spec = [(t, 2, 0.25) for t in range(60, 121, 3)] + [(170, None, 0.25), (230, None, 0.25)] + \
           [(t, 2, 0.25) for t in range(290, 471, 10)]
    lab = label(_with_stalls(simulate(n_steps=520), spec))
    r2 = lab[lab.component == "rank:2"].sort_values("start_step")
    assert len(r2) == 2 and r2.iloc[1].start_step <= 291 and r2.iloc[1].end_step >= 469, \
        lab[["component", "start_step", "end_step"]]


def test_stalls_alike_allow_one_hiccup_but_not_a_spread_of_sizes():
    """The stalls are alike when 80% of them lie within 2x of each
    other (largest over smallest): one hiccup among five pause stalls does not break
    it, two stalls 3x apart or three spread over 4x are not alike."""
    from faultlab.labeler.intermittent import _alike

    assert _alike(np.array([0.235, 0.256, 0.26, 0.208, 0.072, 0.241]), 2.0)
    assert not _alike(np.array([0.1, 0.3]), 2.0)
    assert not _alike(np.array([0.1, 0.2, 0.4]), 2.0)
    assert not _alike(np.array([0.1, np.nan]), 2.0)


def test_a_job_slowdown_is_a_time_ratio_against_the_expected_step():
    """Steps that skew right (1 step in 3 a 1.25x hiccup, under the per-step bar): the
    expected step is ~1.08x the median, so a time ratio against the trailing *median*
    reads a slowdown of the all-reduce that much high. Against the expected step it
    reads the true time ratio. (Hiccups big enough to be flagged are left out of the
    expectation: the correction never exceeds what the unflagged steps show.)"""
    from faultlab.labeler.analysis import analyze, expected_over_median
    from faultlab.labeler.grid import StepGrid

    s = simulate(n_steps=600, jobwide=(300, 400, 0.03))
    rng = np.random.default_rng(5)
    hic = rng.random(600) < 1 / 3
    s.loc[s["step"].isin(np.flatnonzero(hic)), "step_s"] *= 1.25
    s["comm_s"] = s["step_s"] - s["compute_s"]
    an = analyze(StepGrid.from_steps(_retime(s)))
    x = np.asarray(an.grid.job_step, dtype=np.float64)
    true = x[300:400].mean() / np.r_[x[:290], x[410:]].mean()
    assert 1.04 < an.job_expected == expected_over_median(x, an.temporal.job_base, an.temporal.job_flag) < 1.2
    assert abs(an.job_slowdown(300, 399) / true - 1) < 0.04, (an.job_slowdown(300, 399), true)
    median_only = x[300:400].sum() / np.asarray(an.temporal.job_base[300:400], dtype=np.float64).sum()
    assert median_only / true > 1.05  # what the median alone read


def _starved_run(extra_s: float, delay_target: float, seed: int = 0, scale: float = 1.0, dip_at: int | None = None,
                 hiccup_s: float = 0.0):
    """4 ranks, one per node; the all-reduce of every rank slower by ``extra_s`` over
    steps 300-449 (a quota on rank 2 that gloo's reduction spreads over everyone: no
    rank stands out); a host table with each node's run delay at 1 Hz, 0.5 s/s (four
    ranks on two cores) and ``delay_target`` on n2 while the slowdown lasts; all of it
    times ``scale``; with ``dip_at`` the sample that many seconds into the slowdown
    reads like the others (one noisy sample); with ``hiccup_s`` every 8th step of the
    whole run that much slower (a loaded host's hiccups)."""
    s = simulate(n_steps=700, jobwide=(300, 450, extra_s), seed=seed)
    if hiccup_s:
        hit = (s["step"] % 8 == 3).to_numpy()
        s.loc[hit, "step_s"] += hiccup_s
        s.loc[hit, "comm_s"] += hiccup_s
        per_step = s.groupby("step")["step_s"].first()
        start = T0 + np.concatenate([[0.0], np.cumsum(per_step.to_numpy())[:-1]])
        s["t_start"] = start[s["step"].to_numpy()]
    s["node"] = [f"n{r}" for r in s["rank"]]
    t = s.groupby("step")["t_start"].min()
    rng = np.random.default_rng(seed)
    rows = []
    for ts in np.arange(t.iloc[0] + 1, t.iloc[-1], 1.0):
        on = t.loc[300] <= ts - 0.5 and ts <= t.loc[449]
        dip = dip_at is not None and abs(ts - t.loc[300] - dip_at) < 0.5
        for n in range(4):
            v = delay_target if (on and n == 2 and not dip) else 0.5
            rows.append({"run_id": "run-1", "node": f"n{n}", "ts": float(ts), "metric": "proc_run_delay_s_per_s",
                         "value": scale * v * rng.uniform(0.9, 1.1)})
    return s, pd.DataFrame(rows), (float(t.loc[300]), float(t.loc[449]))


def test_a_rank_that_waits_for_a_cpu_while_the_job_slows_is_its_label():
    """The host peer view (labeler/views/starved.py): a job 1.25x slower with no rank standing
    out in its step timings, and rank 2's threads runnable but waiting 1.0 s/s against
    its peers' 0.5: rank 2's label, and reconciliation names the quota on it."""
    s, host, (t0, t1) = _starved_run(0.01, 1.0)
    assert "rank:2" not in set(label(s).component)  # the steps alone do not name it
    inj = pd.DataFrame([injection("cpu-1", "cpu-contention", "n2", "rank:2", t0, t1)])
    lab = label(s, inj, host=host)
    r = lab[lab.component == "rank:2"]
    assert len(r) == 1 and r.iloc[0].source == "injected" and r.iloc[0].views == "host+temporal", lab
    ev = json.loads(r.iloc[0].evidence)
    assert ev["baseline_kind"] == "held-around" and ev["run_delay_ratio"] > 1.6
    assert abs(r.iloc[0].start_ts - t0) < 1.5 and abs(r.iloc[0].end_ts - t1) < 1.5
    assert 1.15 < r.iloc[0].slowdown < 1.35
    # the temporal view's job label of the onset is that slowdown seen in part: replaced
    assert "job" not in set(lab.component) and ev["replaces"], lab[["component", "start_step", "end_step"]]
    # one noisy sample in the middle does not cut it in two
    s, host, _ = _starved_run(0.01, 1.0, dip_at=2)
    assert (label(s, inj, host=host).component == "rank:2").sum() == 1


def test_a_rank_that_waits_is_judged_against_the_expected_step_hiccups_included():
    """A loaded host: every 8th step 60 ms slower, so the mean step (what a time
    ratio divides by) lies ~1.18x above the median. A quota that slows the job 1.07x
    in time is no label, though against the median of the unflagged steps it reads
    1.26x (a baseline held at that median labels cpu-contention faults of 1.02-1.07x
    as 1.20-1.28x); one that slows it 1.25x is still rank 2's."""
    s, host, (t0, t1) = _starved_run(0.0035, 1.0, hiccup_s=0.06)
    inj = pd.DataFrame([injection("cpu-1", "cpu-contention", "n2", "rank:2", t0, t1)])
    x = s.groupby("step")["step_s"].first().to_numpy()
    true = x[300:450].mean() / np.r_[x[:300], x[450:]].mean()
    assert 1.03 < true < 1.1 and x[300:450].mean() / np.median(np.r_[x[:300], x[450:]]) > 1.2
    lab = label(s, inj, host=host)
    assert lab.source.tolist() == ["injected-unmanifested"], lab  # the injection's record row only
    s, host, (t0, t1) = _starved_run(0.013, 1.0, hiccup_s=0.06)
    x = s.groupby("step")["step_s"].first().to_numpy()
    assert x[300:450].mean() / np.r_[x[:300], x[450:]].mean() > 1.22
    inj = pd.DataFrame([injection("cpu-1", "cpu-contention", "n2", "rank:2", t0, t1)])
    r = label(s, inj, host=host)
    r = r[(r.component == "rank:2") & (r.source == "injected")]
    assert len(r) == 1 and r.iloc[0].fault_id == "cpu-1" and 1.15 < r.iloc[0].slowdown < 1.4, r


def test_a_rank_that_waits_while_the_job_does_not_slow_is_no_label():
    s, host, _ = _starved_run(0.0, 1.0)
    assert label(s, host=host).empty
    s, host, _ = _starved_run(0.01, 0.55)  # the job slowed, but no rank waits more than its peers
    assert "rank:2" not in set(label(s, host=host).component)
    # an idle host: 1 ms/s against 0.5 ms/s is 2x, but no wait that could slow a step
    s, host, _ = _starved_run(0.01, 1.0, scale=1e-3)
    assert "rank:2" not in set(label(s, host=host).component)
