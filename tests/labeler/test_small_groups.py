"""Peer groups of two or three ranks (two GPU generations of two ranks each on a
shared host): a peer that runs fast for a while, the rest of the job slowing with a
rank, a whole group slowing together and a slower kind's longer CPU waits are no
straggler; a rank that slows against its own group still is."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from faultlab.labeler import label
from tests.labeler.test_labeler import simulate

#: 2 + 2 ranks, the second kind computing twice as long per step
KINDS = dict(n_ranks=4, n_steps=500, scale=[1, 1, 2, 2], noise=0.05)


def _scaled(s: pd.DataFrame, ranks: list[int], a: int, b: int, factor: float) -> pd.DataFrame:
    """``s`` with the local time of ``ranks`` times ``factor`` over steps ``a <= step <
    b``, the step time following the slowest rank (the all-reduce part kept)."""
    s = s.copy()
    top = s.groupby("step")["compute_s"].transform("max")
    hit = s["rank"].isin(ranks) & (s["step"] >= a) & (s["step"] < b)
    s.loc[hit, "compute_s"] *= factor
    s["step_s"] = s["step_s"] - top + s.groupby("step")["compute_s"].transform("max")
    s["comm_s"] = s["step_s"] - s["compute_s"]
    per = s.groupby("step")["step_s"].first().sort_index()
    s["t_start"] = s["t_start"].min() + np.concatenate([[0.0], np.cumsum(per.to_numpy())[:-1]])[s["step"].to_numpy()]
    return s


def _rank_labels(lab: pd.DataFrame) -> list[str]:
    return sorted(lab.loc[lab["component"] != "job", "component"])


def test_a_peers_fast_spell_in_a_group_of_two_labels_no_rank():
    """Rank 3 runs 40% faster for 60 steps (it got the CPU another rank lost): rank 2,
    at its own usual pace, reads 1.7x against its one peer at every step of it. A
    peer counts at no less than its own usual level, so rank 2 is no straggler; a
    rank that does slow 1.8x against its group still is, from its first slow step."""
    for seed in range(3):
        fast = _scaled(simulate(seed=seed, **KINDS), [3], 200, 260, 0.6)
        assert _rank_labels(label(fast)) == [], label(fast)[["component", "start_step", "end_step", "slowdown"]]
        slow = _scaled(simulate(seed=seed, **KINDS), [2], 200, 260, 1.8)
        lab = label(slow)
        assert _rank_labels(lab) == ["rank:2"]
        r = lab[lab["component"] == "rank:2"].iloc[0]
        assert abs(int(r.start_step) - 200) <= 2 and abs(int(r.end_step) - 259) <= 2 and 1.6 < r.slowdown < 2.0


def test_a_rank_slowed_no_more_than_the_other_kind_is_no_straggler_of_its_group():
    """A busy host slows ranks 0-2 by 1.4x for 60 steps while rank 3 keeps its pace:
    rank 2 reads 1.4x against its one peer, but the other kind slowed as much, each
    against its own level before: a slowdown of the job, not rank 2's."""
    for seed in range(3):
        s = _scaled(simulate(seed=seed, **KINDS), [0, 1, 2], 200, 260, 1.4)
        lab = label(s)
        assert "rank:2" not in _rank_labels(lab), lab[["component", "start_step", "end_step", "slowdown", "views"]]


def _wandering(s: pd.DataFrame, amp_s: float, period: int, seed: int) -> pd.DataFrame:
    """``s`` with every step's all-reduce longer by ``amp_s`` x (1 + sin) over a
    ``period`` of steps (a busy host's load coming and going): the job's step time
    wanders too much for a flag of its own, the ranks' local times do not."""
    s = s.copy()
    n = int(s["step"].max()) + 1
    phase = np.random.default_rng(seed).uniform(0, 6)
    extra = (amp_s * (1 + np.sin(2 * np.pi * np.arange(n) / period + phase)))[s["step"].to_numpy()]
    s["step_s"] += extra
    s["comm_s"] += extra
    per = s.groupby("step")["step_s"].first().sort_index()
    s["t_start"] = s["t_start"].min() + np.concatenate([[0.0], np.cumsum(per.to_numpy())[:-1]])[s["step"].to_numpy()]
    return s


def test_a_whole_group_slowed_together_is_no_rank_label():
    """Three kinds of two ranks on a host whose load comes and goes (the job's step
    time wanders too much for a flag of its own); both ranks of the slowest kind
    1.6x slower for 60 steps (their host was busy): neither is slower than its
    group, and the slowdown is common to the group: no rank label (with seed 0 one
    job label naming both, where each rank was labeled on its own history)."""
    kw = dict(n_ranks=6, n_steps=500, scale=[1, 1, 1.5, 1.5, 2.2, 2.2], noise=0.05)
    for seed in range(3):
        lab = label(_wandering(_scaled(simulate(seed=seed, **kw), [4, 5], 200, 260, 1.6), 0.02, 60, seed))
        assert _rank_labels(lab) == [], lab[["component", "start_step", "end_step", "slowdown", "views"]]
        if seed == 0:
            job = lab[lab["component"] == "job"]
            assert len(job) == 1 and abs(int(job.iloc[0].start_step) - 200) <= 3
            assert {"rank:4", "rank:5"} <= set(json.loads(job.iloc[0].evidence)["ranks_compute_up"])


def _host(s: pd.DataFrame, usual: dict, spells: dict, during: tuple[float, float], seed: int = 0) -> pd.DataFrame:
    """A host table at 1 Hz: node ``nK``'s run delay per rank (s/s) ``usual[K]``,
    ``spells[K]`` over the unix times ``during`` (each x 0.9-1.1)."""
    t = s.groupby("step")["t_start"].min()
    rng = np.random.default_rng(seed)
    rows = []
    for ts in np.arange(t.iloc[0] + 1, t.iloc[-1], 1.0):
        for n, v in usual.items():
            v = spells.get(n, v) if during[0] <= ts <= during[1] else v
            rows.append({"run_id": "run-1", "node": f"n{n}", "ts": float(ts), "metric": "proc_run_delay_s_per_s",
                         "value": v * rng.uniform(0.9, 1.1)})
    return pd.DataFrame(rows)


def test_a_slower_kinds_longer_cpu_waits_make_no_starved_rank():
    """The host peer view within peer kinds. While the job slows 1.4x (steps
    300-419) the slower kind's ranks, with twice the work, wait for a CPU twice as
    long as the faster kind's (1.0 vs 0.5 s/s): against every node they would read
    starved, against their own kind they are not. Nor is rank 2 when its kind waits
    1.0 s/s the whole run and rank 3 alone got the CPU (0.3 s/s) while the job
    slowed: a peer counts at no less than its usual wait. A rank of the slower kind
    that waits 2x its own kind's while the job slows is still that rank's label."""
    for seed in range(2):
        s = simulate(jobwide=(300, 420, 0.03), seed=seed, **KINDS)
        s["node"] = [f"n{r}" for r in s["rank"]]
        t = s.groupby("step")["t_start"].min()
        slowed = (t.loc[300], t.loc[419])
        even = {0: 0.5, 1: 0.5, 2: 0.5, 3: 0.5}
        kinds = {0: 0.5, 1: 0.5, 2: 1.0, 3: 1.0}
        for usual, spells in ((even, {2: 1.0, 3: 1.0}), (kinds, {3: 0.3})):
            lab = label(s, host=_host(s, usual, spells, slowed, seed=seed))
            assert not (lab["views"] == "host+temporal").any(), lab[["component", "start_step", "end_step", "views"]]
        lab = label(s, host=_host(s, kinds, {2: 2.0}, slowed, seed=seed))
        assert lab.loc[lab["views"] == "host+temporal", "component"].tolist() == ["rank:2"]


def test_a_job_wide_slowdown_while_a_peer_runs_fast_names_no_rank_of_its_group():
    """The all-reduce slows every step by 40 ms for 60 steps (a job-wide slowdown)
    while rank 3 runs 40% fast: over the interval rank 2 computes 1.7x its one peer,
    and that excess would explain the job's; at its peer's usual pace it explains
    nothing, so the slowdown stays the job's."""
    for seed in range(3):
        s = _scaled(simulate(jobwide=(200, 260, 0.04), seed=seed, **KINDS), [3], 200, 260, 0.6)
        lab = label(s)
        assert _rank_labels(lab) == [], lab[["component", "start_step", "end_step", "slowdown", "views"]]
        assert (lab["component"] == "job").any()
