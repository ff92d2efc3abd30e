"""Software stragglers as ground truth (faultlab.knobfaults): every workload knob is a
``kind=workload`` row of the run's injections, with its window and value, and labels
reconcile to it as to an injected fault.

Real runs: two 2-rank jobs on loopback (ddp with a sequence-length window and a slow
shard; a pipeline with uneven stages) through ``faultlab.runner.run``. The reconcile
rules are checked on simulated steps (tests.labeler.test_labeler.simulate), where the
slow stretch is known exactly.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from faultlab import schema
from faultlab.benchmarks.knobs import GcKnob, in_window, parse_window
from faultlab.errors import BadInput
from faultlab.knobfaults import window_steps, workload_injections
from faultlab.labeler import label, label_run
from faultlab.labeler.reconcile import candidates, target_ranks
from faultlab.runner import run
from faultlab.scenario import Scenario, load
from tests.labeler.test_labeler import simulate


def scenario(**workload) -> Scenario:
    return Scenario.model_validate({"name": "knobs", "seed": 5, "testbed": {"backend": "local", "nodes": 2},
                                    "workload": {"kind": "ddp", "steps": 300, **workload}})


# -- windows ----------------------------------------------------------------------------


def test_window_parse_and_membership():
    assert parse_window("100:300") == (100, 300)
    assert parse_window("7:") == (7, None)
    for bad in ("5", "a:b", "300:100", "-1:4", "4:4"):
        with pytest.raises(ValueError):
            parse_window(bad)
    assert [s for s in range(10) if in_window(s, (3, 6))] == [3, 4, 5]
    assert in_window(10**6, (3, None)) and not in_window(2, (3, None))


def test_gc_knob_makes_no_garbage_outside_its_window():
    knob = GcKnob("planned", 2, 1.0, window=(4, 6))
    draws = []
    knob.rng.uniform = lambda a, b: draws.append(1) or 1.0  # count the steps that made garbage
    for s in range(10):
        knob.step(s)
    assert len(draws) == 2


def test_scenario_refuses_bad_windows_and_shards(tmp_path):
    def err(workload: str) -> str:
        p = tmp_path / "s.yaml"
        p.write_text(f"testbed: {{backend: local, nodes: 2}}\nworkload:\n{workload}")
        with pytest.raises(BadInput) as e:
            load(p)
        return str(e.value)

    assert "to_step 5 is not after from_step 9" in err("  stragglers:\n    gc: {from_step: 9, to_step: 5}\n")
    assert "rank 2 does not exist" in err("  stragglers:\n    slow_shard: {rank: 2, factor: 2.0}\n")
    assert "slow_shard needs kind ddp" in err("  kind: pipeline\n  stages: 2\n  stragglers:\n    slow_shard: {rank: 1, factor: 2.0}\n")
    assert "factor" in err("  stragglers:\n    slow_shard: {rank: 1, factor: 1.0}\n")


# -- rows and reconciling, on simulated steps -------------------------------------------


def test_rows_carry_kind_window_and_value():
    steps = simulate(n_ranks=4, n_steps=300, run_id="r")
    sc = Scenario.model_validate({"testbed": {"backend": "local", "nodes": 4}, "workload": {
        "steps": 300, "stragglers": {"gc": {"mode": "uncoordinated", "every_steps": 40, "from_step": 50, "to_step": 120},
                                     "slow_shard": {"rank": 3, "factor": 2.5, "from_step": 200}}}})
    rows = workload_injections(sc, steps, "r")
    gc, shard = rows
    assert schema.to_table("injections", pd.DataFrame(rows)).num_rows == 2
    assert (gc["kind"], gc["fault_type"], gc["target"], gc["status"], gc["severity"]) == (
        "workload", "gc-uncoordinated", "ranks:0,1,2,3", "reverted", 40.0)
    p = json.loads(gc["params"])
    assert (p["from_step"], p["to_step"], p["value"], p["every_steps"]) == (50, 120, 40.0, 40)
    win = steps[(steps.step >= 50) & (steps.step < 120)]
    assert gc["start_ts"] == win.t_start.min()
    assert gc["end_ts"] == pytest.approx((win.t_start + win.step_s).max())
    assert (shard["fault_type"], shard["target"], shard["node"], shard["status"], shard["severity"]) == (
        "slow-shard", "rank:3", "n1", "run-end", 2.5)
    assert json.loads(shard["params"])["to_step"] is None
    assert len({gc["fault_id"], shard["fault_id"]}) == 2
    assert workload_injections(sc, steps, "r") == rows  # the same ids on a rebuild


def test_a_window_the_run_never_reached_gets_no_row():
    steps = simulate(n_ranks=2, n_steps=100)
    sc = Scenario.model_validate({"testbed": {"backend": "local", "nodes": 2},
                                  "workload": {"stragglers": {"gc": {"from_step": 500}}}})
    assert workload_injections(sc, steps, "run-1") == []
    assert len(window_steps(steps, sc.workload.stragglers.gc)) == 0


def test_several_rank_target_matches_any_of_them_and_the_job():
    assert target_ranks("ranks:2, 0,1") == [0, 1, 2] and target_ranks("rank:4") == [4] and target_ranks("eth0") == []
    nodes = {0: "n0", 1: "n0", 2: "n1"}
    assert candidates({"fault_type": "seq-imbalance", "target": "ranks:0,1,2"}, nodes, ()) == (
        {"rank:0", "rank:1", "rank:2", "job"}, "job", "job")
    assert candidates({"fault_type": "stage-imbalance", "target": "ranks:1,2"}, nodes, ()) == (
        {"rank:1", "rank:2"}, "rank:1", "rank")


def test_labels_reconcile_to_knobs_and_a_knob_that_slows_nothing_is_unmanifested():
    """rank 1 computes 3x over steps 100-149 (its slow shard); the GC knob's window
    (200-249) slowed nothing."""
    steps = simulate(n_ranks=4, n_steps=300, straggler=(1, 100, 150, 3.0))
    sc = Scenario.model_validate({"testbed": {"backend": "local", "nodes": 4}, "workload": {"stragglers": {
        "slow_shard": {"rank": 1, "factor": 3.0, "from_step": 100, "to_step": 150},
        "gc": {"mode": "planned", "every_steps": 50, "from_step": 200, "to_step": 250}}}})
    inj = pd.DataFrame(workload_injections(sc, steps, "run-1"))
    lab = label(steps, inj)
    shard_id, gc_id = inj.set_index("fault_type").loc[["slow-shard", "gc-planned"], "fault_id"]
    hit = lab[lab.fault_id == shard_id]
    assert list(hit.source) == ["injected"] and list(hit.cause) == ["slow-shard"] and list(hit.component) == ["rank:1"]
    miss = lab[lab.fault_id == gc_id]
    assert list(miss.source) == ["injected-unmanifested"] and list(miss.cause) == ["gc-planned"]
    assert list(miss.component) == ["job"] and miss.slowdown.iloc[0] == pytest.approx(1.0, abs=0.1)
    assert (lab.source == "observed").sum() == 0


# -- real runs --------------------------------------------------------------------------


def test_real_ddp_run_records_its_knobs_and_labels_reconcile(tmp_path):
    """Sequence-length imbalance in force over steps 120-239 only, a 4x slow shard on
    rank 1 over 300-419: each is one workload row with its window, and some label of the
    run names each as its cause."""
    sc = scenario(steps=450, hidden=256, stragglers={
        "seq_len": {"tokens": 512, "sigma": 1.5, "from_step": 120, "to_step": 240},
        "slow_shard": {"rank": 1, "factor": 4.0, "from_step": 300, "to_step": 420}})
    res = run(sc, tmp_path / "run", console=Console(quiet=True), progress=False)
    assert res.code == 0
    inj = res.rundir.read_table("injections")
    steps = res.rundir.read_table("steps")
    assert list(inj.kind) == ["workload", "workload"]
    seq, shard = (inj[inj.fault_type == t].iloc[0] for t in ("seq-imbalance", "slow-shard"))
    for row, (a, b) in ((seq, (120, 240)), (shard, (300, 420))):
        p = json.loads(row.params)
        assert (p["from_step"], p["to_step"], row.status, row.verified) == (a, b, "reverted", True)
        win = steps[(steps.step >= a) & (steps.step < b)]
        assert row.start_ts == win.t_start.min()
        assert row.end_ts == pytest.approx((win.t_start + win.step_s).max())
    # the measured imbalance: the recorded tokens of the window, and balanced outside it
    win = steps[(steps.step >= 120) & (steps.step < 240)].groupby("step").tokens.agg(["max", "mean"])
    assert seq.severity == pytest.approx(float((win["max"] / win["mean"]).mean()))
    assert seq.severity > 1.2
    clean = steps[(steps.step < 120) | ((steps.step >= 240) & (steps.step < 300))].groupby("step").tokens
    assert float((clean.max() - clean.min()).max()) <= 512 * 16 / 8  # within one sequence: rebalanced
    in_shard = steps[(steps.step >= 300) & (steps.step < 420)].pivot(index="step", columns="rank", values="tokens")
    assert np.all(in_shard[1] > 2.5 * in_shard[0])
    lab = label_run(res.rundir.path)
    for fid in (seq.fault_id, shard.fault_id):
        mine = lab[lab.fault_id == fid]
        assert (mine.source == "injected").any(), (fid, lab[["component", "start_step", "end_step", "source", "cause"]])
    assert set(lab[lab.fault_id == shard.fault_id].component) <= {"rank:1"}


def test_real_pipeline_run_records_its_stage_imbalance(tmp_path):
    """Stage 1 holds 4 layers, stage 0 one: one stage-imbalance row on rank 1 over the
    whole run, value 4 / 2.5; the labels hold it once, as a cause or unmanifested."""
    sc = Scenario.model_validate({"name": "stages", "seed": 1, "testbed": {"backend": "local", "nodes": 2},
                                  "workload": {"kind": "pipeline", "steps": 120, "hidden": 128, "stages": 2,
                                               "layers_per_stage": [1, 4]}})
    res = run(sc, tmp_path / "run", console=Console(quiet=True), progress=False)
    assert res.code == 0
    inj = res.rundir.read_table("injections")
    assert list(inj.fault_type) == ["stage-imbalance"]
    row = inj.iloc[0]
    assert (row.kind, row.target, row.status, row.severity) == ("workload", "rank:1", "run-end", pytest.approx(1.6))
    steps = res.rundir.read_table("steps")
    assert row.start_ts == steps.t_start.min()
    lab = label_run(res.rundir.path)
    assert set(lab[lab.fault_id == row.fault_id].source) in ({"injected"}, {"injected-unmanifested"})


# -- campaigns draw knobs ----------------------------------------------------------------


def test_campaign_draws_knobs_with_windows_and_controls(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(
        "name: k\nseed: 4\nruns: 60\ncontrols: 0.2\n"
        "base: {testbed: {backend: local, nodes: 4}, workload: {kind: ddp, duration: 30s}}\n"
        "faults_per_run: [1, 1]\nstart: [2s, 10s]\nduration: [2s, 4s]\n"
        "types: {cpu-contention: {params: {cpu_fraction: {low: 0.1, high: 0.9}}}}\n"
        "knobs:\n"
        "  slow_shard: {p: 0.5, params: {rank: [0, 3], factor: {low: 1.05, high: 10.0}}, from_step: [10, 20], steps: [5, 8]}\n"
        "  gc: {p: 0.5, params: {every_steps: [20]}, from_step: [0, 0]}\n")
    camp = load(p)
    runs = camp.scenarios()
    assert [s.model_dump() for s in runs] == [s.model_dump() for s in load(p).scenarios()]  # seeded
    controls = [s for s in runs if not s.faults]
    assert 0 < len(controls) < 30
    for s in controls:
        assert s.workload.stragglers.slow_shard is None and s.workload.stragglers.gc is None
    shards = [s.workload.stragglers.slow_shard for s in runs if s.workload.stragglers.slow_shard]
    assert 5 < len(shards) < 45
    for sh in shards:
        assert sh.rank in (0, 3) and 1.05 <= sh.factor <= 10.0
        assert 10 <= sh.from_step <= 20 and 5 <= sh.to_step - sh.from_step <= 8
    gcs = [s.workload.stragglers.gc for s in runs if s.workload.stragglers.gc]
    assert gcs and all(g.from_step == 0 and g.to_step is None and g.every_steps == 20 for g in gcs)
    p.write_text(p.read_text().replace("slow_shard:", "slow_shards:"))
    with pytest.raises(BadInput, match="knobs"):
        load(p)


def test_a_campaign_without_knobs_draws_what_it_drew_before():
    """The knob and control draws come after a run's faults: the campaign file of the
    published faultlab-hw-v1 still draws the fault types its runs recorded."""
    from tests.helpers import REPO

    ds = REPO / "datasets" / "faultlab-hw-v1"
    camp = load(ds / "campaign" / "hardware.yaml")
    drawn = {s.name: sorted({f.type for f in s.faults}) for s in camp.scenarios()}
    runs = json.loads((ds / "runs.json").read_text())
    assert runs and all(drawn[r["scenario"]] == sorted(r["fault_types"]) for r in runs)
