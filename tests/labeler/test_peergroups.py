"""Peer groups: discovered from the ranks' typical local time, declared groups and a
mapping win, and the peer view judges a rank only within its own group."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from faultlab.errors import BadInput
from faultlab.labeler import LabelerConfig, label, label_run
from faultlab.labeler.analysis import analyze
from faultlab.labeler.grid import StepGrid
from faultlab.labeler.importers import import_path, label_long_components
from faultlab.labeler.peergroups import calm_rows, read_mapping, split_levels
from faultlab.rundir import RunDir
from tests.helpers import fl, one_line_error
from tests.labeler.test_importers import PUBLIC
from tests.labeler.test_labeler import simulate


def _groups(steps: pd.DataFrame) -> list[list[str]]:
    """The members of each peer group the labeler uses, fastest group first."""
    an = analyze(StepGrid.from_steps(steps))
    return [g["members"] for g in an.groups.summary([an.grid.component(j) for j in range(an.grid.R)])]


#: every rank in one peer group: the peer view of a labeler without peer groups
ONE_GROUP = {str(r): "all" for r in range(8)}


def test_two_groups_4x_apart_only_the_rank_that_slows_in_its_group_is_labeled():
    """Ranks 4-7 compute 4x ranks 0-3 the whole run (an older GPU generation), and
    rank 6 slows 4x against its own group over steps 200-299: only rank 6 is labeled,
    only over its slow stretch; the groups found are the groups made. Judged against
    all eight ranks, the slower group is four stragglers for the whole run."""
    kw = dict(n_ranks=8, n_steps=300, scale=[1] * 4 + [4] * 4, seed=3)
    assert _groups(simulate(**kw)) == [[f"rank:{r}" for r in range(4)], [f"rank:{r}" for r in range(4, 8)]]
    assert len(label(simulate(**kw))) == 0  # the slower group is no straggler
    s = simulate(straggler=(6, 200, 300, 4.0), **kw)
    lab = label(s)
    assert lab["component"].tolist() == ["rank:6"]
    r = lab.iloc[0]
    assert abs(int(r.start_step) - 200) <= 2 and int(r.end_step) >= 297
    assert 3.0 < r.slowdown < 5.0
    flat = label(s, peer_groups=ONE_GROUP)
    assert sorted(flat["component"]) == [f"rank:{r}" for r in range(4, 8)] and (flat["start_step"] == 0).all()


@pytest.mark.parametrize("factor, seed", [(1.10, 1), (1.10, 2), (1.10, 3), (1.15, 1)])
def test_one_rank_slower_all_run_is_persistent_not_a_group(factor, seed):
    """One rank of eight 10% (or 15%) slower from the first step to the last stays in
    the one peer group: two ranks that far off are a group of their own, but a group
    needs two ranks a side, so a lone slow rank never is. The component verdict calls
    it persistently slow: its level (about 1.10) clears ``min_level`` (1.08) by far
    more than a level's noise (the seeds are ones whose level reads just under 1.10)."""
    kw = dict(n_ranks=8, n_steps=400, noise=0.02, seed=seed)
    s = simulate(scale=[1] * 7 + [factor], **kw)
    assert _groups(s) == [[f"rank:{r}" for r in range(8)]]
    pair = simulate(scale=[1] * 6 + [factor] * 2, **kw)  # the same gap with two ranks on the slow side
    assert _groups(pair) == [[f"rank:{r}" for r in range(6)], ["rank:6", "rank:7"]]
    long = pd.DataFrame({"component": "rank:" + s["rank"].astype(str), "peer_group": s["peer_group"],
                         "timestamp": s["t_start"], "metric": "compute_s", "value": s["compute_s"]})
    _, comps = label_long_components(long)
    assert comps.loc[comps["persistent"], "component"].tolist() == ["rank:7"]
    lv = comps.set_index("component")["level"]
    assert abs(lv["rank:7"] / factor - 1) < 0.01 and (lv.drop("rank:7") < 1.02).all()
    assert set(comps["group_source"]) == {"one"} and set(comps["group_vs_fastest"]) == {1.0}


@pytest.mark.parametrize("stages", [2, 4])
def test_pipeline_stages_differing_2x_are_groups_and_no_stage_is_labeled(stages):
    """A pipeline whose stages differ up to 2x in compute, with no stage index in the
    trace: each stage is found as a group and no stage is labeled for being one; a
    straggler inside a stage still is. Judged against all eight ranks, the last stage
    is labeled for being slower."""
    per = 8 // stages
    scale = np.repeat(np.linspace(1.0, 2.0, stages), per).tolist()
    kw = dict(n_ranks=8, n_steps=300, scale=scale, seed=5)
    assert _groups(simulate(**kw)) == [[f"rank:{r}" for r in range(k * per, (k + 1) * per)] for k in range(stages)]
    assert len(label(simulate(**kw))) == 0
    assert {f"rank:{r}" for r in range(8 - per, 8)} <= set(label(simulate(**kw), peer_groups=ONE_GROUP)["component"])
    lab = label(simulate(straggler=(per, 150, 250, 3.0), **kw))
    assert lab["component"].tolist() == [f"rank:{per}"]


@pytest.mark.parametrize("onset", [200, 100])
def test_temporary_slowness_of_two_ranks_makes_no_group(onset):
    """Two ranks slowed 2x from ``onset`` to the end (a third, two thirds of the run):
    the calm stretch is before it, so they are stragglers in their one group, not a
    group of their own."""
    s = simulate(n_ranks=8, n_steps=300, straggler=([1, 2], onset, 300, 2.0), seed=2)
    assert len(_groups(s)) == 1
    lab = label(s)
    assert sorted(lab["component"]) == ["rank:1", "rank:2"]
    assert (abs(lab["start_step"] - onset) <= 2).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n_steps, block", [(150, 25)])
def test_a_fast_spell_of_one_rank_in_the_calmest_block_hides_no_group(seed, n_steps, block):
    """2 + 2 ranks 1.5x apart on a noisy host (10% step noise), and one rank of the
    slower kind 20% faster than its usual over steps 50-99: the block of 50 that
    holds it is the calmest, and its levels alone (1.0, 1.0, 1.2, 1.5) hold no cut; a
    run of 150 steps (three blocks of 50, too few to measure the noise on) is cut
    into six blocks of 25, and the levels from every block as calm within the
    scores' noise find the two groups made. (In a run of 650 steps with the spell
    over one whole block of 50 the rank's level is still that block's in 2 of 3
    seeds: its other blocks read as slowed against it.)"""
    a = 200 if n_steps == 650 else 50
    s = simulate(n_ranks=4, n_steps=n_steps, scale=[1, 1, 1.5, 1.5], straggler=(3, a, a + 50, 0.8), noise=0.1, seed=seed)
    assert _groups(s) == [["rank:0", "rank:1"], ["rank:2", "rank:3"]]
    grid = StepGrid.from_steps(s)
    blocks = calm_rows(grid.compute, LabelerConfig().temporal_window_steps)
    assert len(blocks) >= 3 and all(i1 - i0 == block - 1 for i0, i1 in blocks)


def test_declared_groups_and_a_mapping_win_and_a_lone_rank_says_so(tmp_path):
    """Declared peer groups are used as given (no discovery inside them); a mapping
    overrides them; a rank alone in its group has only its own history, and its label
    says so."""
    kw = dict(n_ranks=6, n_steps=300, scale=[1, 1, 1, 4, 4, 4], seed=4)
    s = simulate(groups=["a", "a", "a", "a", "b", "b"], **kw)
    assert _groups(s) == [["rank:0", "rank:1", "rank:2", "rank:3"], ["rank:4", "rank:5"]]  # as declared
    s = simulate(straggler=(0, 150, 250, 6.0), **kw)  # 6x: the job feels it (the 4x ranks set its pace)
    mapping = {"0": "solo", "rank:1": "x", "2": "x", "3": "y", "4": "y", "5": "y"}
    lab = label(s, peer_groups=mapping)
    assert lab["component"].tolist() == ["rank:0"]
    ev = json.loads(lab.iloc[0].evidence)
    assert ev["peers"].startswith("none: alone") and ev["peer_group"] == "solo"
    with pytest.raises(BadInput) as e:
        label(s, peer_groups={"rank:99": "x"})
    assert e.value.field == "--peer-groups"


def test_split_levels_rule():
    """The cut, on log levels: far beyond the spread within the sides, at least
    group_min_gap; a gap of peer_threshold or more at mad_k sigmas; two values a
    side, never a group of one."""
    cfg = LabelerConfig()

    def cut(levels):
        return split_levels(np.log(levels), sigmas=cfg.group_gap_sigmas, min_step=np.log(cfg.group_min_gap),
                            wide=(np.log(cfg.peer_threshold), cfg.mad_k)).tolist()

    assert cut([1.0, 1.01, 0.99, 1.0, 2.0, 2.02, 1.98]) == [0, 0, 0, 0, 1, 1, 1]
    assert cut([1.0, 1.01, 0.99, 1.0, 1.0, 3.0]) == [0] * 6  # one rank far off: no group of one
    assert cut([1.0, 1.001, 1.03, 1.031]) == [0] * 4  # precise levels, 3% apart: under group_min_gap
    assert cut(np.linspace(1.0, 1.4, 10)) == [0] * 10  # a continuum: no gap far beyond the spread
    # 2 + 2 ranks 20% apart within each kind: 1.15x apart is no group, 1.9x is
    assert cut([1.0, 1.2, 1.38, 1.65]) == [0] * 4
    assert cut([1.0, 1.2, 2.28, 2.74]) == [0, 0, 1, 1]


def test_label_run_records_the_groups_and_the_cli_prints_them(tmp_path):
    """whatif.json holds the peer groups and each one's level against the fastest
    group's; a --peer-groups file is read (JSON or CSV) and a bad one is refused."""
    s = simulate(n_ranks=8, n_steps=200, scale=[1] * 4 + [2] * 4, seed=6)
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    (rd.path / "meta.json").write_text(json.dumps({"run_id": "run-1"}))
    s.to_parquet(rd.path / "steps.parquet")
    label_run(rd.path)
    g = json.loads((rd.path / "whatif.json").read_text())["peer_groups"]
    assert [x["size"] for x in g] == [4, 4] and 1.9 < g[1]["vs_fastest"] < 2.1 and g[0]["source"] == "discovered"
    (tmp_path / "m.json").write_text(json.dumps({str(r): "a" if r < 4 else "b" for r in range(8)}))
    cp = fl("label", str(rd.path), "--peer-groups", str(tmp_path / "m.json"))
    assert cp.returncode == 0, cp.stderr
    assert "peer group a (mapping, 4): 1.00x the fastest; rank:0, rank:1, rank:2, rank:3" in cp.stdout
    assert "peer group b (mapping, 4): 2.0" in cp.stdout
    (tmp_path / "none.json").write_text(json.dumps({"rank:99": "a"}))
    one_line_error(fl("label", str(rd.path), "--peer-groups", str(tmp_path / "none.json")), "--peer-groups")
    (tmp_path / "m.csv").write_text("component,group\nrank:0,a\nrank:1,b\n")
    assert read_mapping(tmp_path / "m.csv") == {"rank:0": "a", "rank:1": "b"}
    (tmp_path / "m.json").write_text("[1, 2]")
    with pytest.raises(BadInput):
        read_mapping(tmp_path / "m.json")


PAI_DIR = PUBLIC / "alibaba-pai-minibatch"


@pytest.mark.skipif(not (PAI_DIR / "job_3_norm.csv").exists(), reason="public PAI data not present")
def test_pai_job_3_slow_workers_are_a_group_and_no_label_spans_the_run():
    """PAI job 3's workers 0 and 1 run about 10% slower than the others from the first
    sample to the last: a group of their own (reported with its level against the
    fastest group's), never a label; no label of jobs 2 and 3 spans the whole run."""
    res = import_path("pai-minibatch", PAI_DIR)
    c = res.components
    c3 = c[c["run_id"] == "job_3"]
    slow = c3[c3["group_vs_fastest"] > 1.05]
    assert sorted(slow["component"]) == ["job_3/worker:0", "job_3/worker:1"]
    assert (slow["group_source"] == "discovered").all() and not slow["persistent"].any()
    assert set(c[c["run_id"] == "job_2"]["group_source"]) == {"one"}
    lab = res.labels
    span = (lab["end_ts"] - lab["start_ts"]).max() if len(lab) else 0.0
    assert span < 0.25 * (c["observed_s"].max())
