"""Onsets of intermittent stragglers: a label starts at its fault's first stall,
whether that stall landed in the rank's compute or inside the collective, and never
at the host's own small stalls before it."""

from __future__ import annotations

import json

import pandas as pd

from faultlab.labeler import label
from tests.labeler.test_labeler import _retime, injection, simulate, step_time


def _stalls(s: pd.DataFrame, steps, stall_s: float, rank: int | None) -> pd.DataFrame:
    """``s`` with a ``stall_s`` s stop at each of ``steps``: in rank ``rank``'s compute
    (it arrives late at the all-reduce), or with ``rank=None`` inside the all-reduce
    (every rank waits alike)."""
    for t in steps:
        at = s["step"] == t
        if rank is not None:
            s.loc[at & (s["rank"] == rank), "compute_s"] += stall_s
        s.loc[at, "step_s"] += stall_s
    s["comm_s"] = s["step_s"] - s["compute_s"]
    return s


def test_a_pause_whose_first_stalls_land_in_the_collective_starts_at_its_first_stall():
    """A pause every 5 steps from step 100: its first four stalls land inside the
    all-reduce (nobody late), every later one in rank 2's compute. The peer view
    labels rank 2 from its first late arrival (step 120); the stalls before keep its
    cadence, so the label starts at step 100 and says why."""
    for seed in range(3):
        s = simulate(n_steps=320, seed=seed)
        s = _stalls(s, range(100, 120, 5), 0.25, None)
        s = _retime(_stalls(s, range(120, 220, 5), 0.25, 2))
        lab = label(s)
        assert lab["component"].tolist() == ["rank:2"], lab[["component", "start_step", "end_step"]]
        r = lab.iloc[0]
        assert abs(int(r.start_step) - 100) <= 1 and abs(int(r.end_step) - 215) <= 2
        assert "first stall" in json.loads(r.evidence)["onset"]


def test_the_hosts_own_small_stalls_do_not_move_an_episodes_onset():
    """The host stalls every rank 20 ms every 20 steps (a 1 Hz sampler on 45 ms
    steps: too little to slow the job 1.2x); then a GC storm on rank 2: a stall alike
    in its compute at step 320, a 1 s one over steps 322-323 and one more alike
    inside the all-reduce at 340. The episode's cadence reaches back over the host's
    stalls, but they do not slow the job like a fault: rank 2's label starts at the
    storm (grown over them, its slowdown fell under the floor and it was dropped)."""
    for seed in range(3):
        s = simulate(n_steps=420, seed=seed)
        s = _stalls(s, range(40, 320, 20), 0.02, None)
        s = _stalls(s, [320], 0.022, 2)
        s = _stalls(s, [322, 323], 1.0, 2)
        s = _retime(_stalls(s, [340], 0.022, None))
        lab = label(s)
        mine = lab[lab["component"] == "rank:2"]
        assert len(mine) == 1 and 318 <= int(mine.iloc[0].start_step) <= 322, lab[["component", "start_step", "end_step"]]
        assert mine.iloc[0].slowdown > 2.0


def test_a_label_that_starts_after_its_faults_first_step_says_why():
    """A quota on rank 1 recorded from step 190 whose effect shows from step 200 (its
    first periods left the rank its CPU): the label starts at 200, and its evidence
    says it starts 10 steps after the fault and that nothing had slowed before; one
    that starts with its fault says nothing of the kind."""
    s = simulate(n_steps=320, straggler=(1, 200, 280, 2.5), seed=4)
    t0, t1 = step_time(s, 190), step_time(s, 280)
    lab = label(s, pd.DataFrame([injection("cpu-1", "cpu-contention", "n0", "rank:1", t0, t1)]))
    r = lab[lab["component"] == "rank:1"].iloc[0]
    assert r.source == "injected" and abs(int(r.start_step) - 200) <= 1
    late = json.loads(r.evidence)["onset_after_fault"]
    assert late["fault_first_step"] == 190 and late["steps"] == int(r.start_step) - 190
    assert "had not slowed" in late["why"]
    lab = label(s, pd.DataFrame([injection("cpu-1", "cpu-contention", "n0", "rank:1", step_time(s, 200), t1)]))
    assert "onset_after_fault" not in json.loads(lab[lab["component"] == "rank:1"].iloc[0].evidence)


def test_a_late_arrival_inside_another_ranks_slowdown_votes_for_no_one():
    """Rank 1 computes 2x over steps 100-199 (its label); at step 195, inside it,
    rank 2 arrives late once (the host's hiccup); stalls alike inside the all-reduce
    at 215 and 235 chain it to a GC storm of rank 2 from step 255 (a stall alike, then
    a 1 s one). The late arrival inside rank 1's slowdown is no vote: rank 2's label
    starts at its storm, not 60 steps before it."""
    for seed in range(3):
        s = simulate(n_steps=320, straggler=(1, 100, 200, 2.0), seed=seed)
        s = _stalls(s, [195, 255], 0.1, 2)
        s = _stalls(s, [215, 235], 0.1, None)
        s = _retime(_stalls(s, [257, 258], 1.0, 2))
        lab = label(s)
        mine = lab[lab["component"] == "rank:2"]
        assert len(mine) == 1 and 253 <= int(mine.iloc[0].start_step) <= 257, lab[["component", "start_step", "end_step"]]
        assert lab.loc[lab["component"] == "rank:1", "start_step"].tolist() == [100]
