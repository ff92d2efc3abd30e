"""The labeler's campaign evaluation (perf/labeler_campaign.py): how a fault's impact is
measured and how labels are counted against injections. Synthetic step tables (the
evaluation reads tables only; the campaigns themselves run on the real testbed)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd

from tests.helpers import REPO



_spec = importlib.util.spec_from_file_location("labeler_campaign", REPO / "perf" / "labeler_campaign.py")
lc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lc)

T0 = 1_700_000_000.0
STEP = 0.03  # s, the normal job step


def _steps(n: int = 1400, *, slow: dict[int, tuple[int, int, float]] | None = None,
           host: tuple[int, int, float] | None = None, seed: int = 0) -> pd.DataFrame:
    """4 ranks, one peer group; compute 0.015 s, all-reduce 0.015 s. ``slow={rank: (a,
    b, factor)}`` multiplies a rank's compute over steps a..b-1; ``host=(a, b, factor)``
    multiplies every rank's compute and the all-reduce (a burst of load on the host)."""
    rng = np.random.default_rng(seed)
    rows, t = [], T0
    for s in range(n):
        comp = 0.015 * (1 + 0.02 * rng.standard_normal(4))
        comm = 0.015
        if host and host[0] <= s < host[1]:
            comp, comm = comp * host[2], comm * host[2]
        for r, (a, b, f) in (slow or {}).items():
            if a <= s < b:
                comp[r] *= f
        step_s = float(comp.max() + comm)
        for r in range(4):
            rows.append({"rank": r, "peer_group": "dp", "step": s, "t_start": t, "compute_s": float(comp[r]),
                         "step_s": step_s})
        t += step_s
    return pd.DataFrame(rows)


def _inj(fid: str, target: str, t0: float, t1: float, ftype: str = "cpu-contention") -> dict:
    return {"fault_id": fid, "fault_type": ftype, "node": "n2", "target": target, "start_ts": t0, "end_ts": t1}


def test_a_burst_of_host_load_before_a_fault_does_not_read_as_a_speed_up():
    # steps 300-399 (~3 s) every rank 1.4x slower (no fault); then rank 2 slowed 1.5x for
    # ~4 s: the job ~1.25x. The 10 s before alone (the former measure) reads the fault
    # against the burst; both sides read it against the fault-free time around it.
    steps = _steps(slow={2: (400, 530, 1.5)}, host=(300, 400, 1.4))
    js = lc._job_step(steps)
    t = js.set_index("step").t
    inj = pd.DataFrame([_inj("cpu-1", "rank:2", t[400], t[530]), _inj("cpu-0", "rank:1", t[0], t[290])])
    r = next(inj.itertuples())
    impact, pre10, _ = lc.job_impact(js, inj, r)
    assert abs(impact - 1.25) < 0.05
    assert pre10 < 1.1  # the contaminated baseline (only the burst is clear of cpu-0)
    assert abs(lc.target_impact(steps, js, inj, r) - 1.5) < 0.05


def _hiccups(n: int = 4000, seed: int = 1) -> pd.DataFrame:
    """Fault-free job steps skewed right as on a busy host: 0.03 s, 1 step in 12 a
    hiccup of 1.5-3x (one row per step, the shape of ``_job_step``)."""
    rng = np.random.default_rng(seed)
    x = STEP * (1 + 0.03 * rng.standard_normal(n))
    hic = rng.random(n) < 1 / 12
    x[hic] *= rng.uniform(1.5, 3.0, hic.sum())
    return pd.DataFrame({"step": np.arange(n), "t": T0 + np.cumsum(x) - x, "step_s": x})


def test_a_window_with_no_fault_reads_no_impact_on_a_skewed_host():
    # the mean step over a window against the *median* step reads ~1.08x here (the
    # former measure); against the expected mean it reads 1.0
    js = _hiccups()
    reads, former = [], []
    for a in range(600, 3000, 300):
        inj = pd.DataFrame([_inj("none", "rank:1", js.t[a], js.t[a + 150])])
        impact, _, median = lc.job_impact(js, inj, next(inj.itertuples()))
        reads.append(impact)
        former.append(median)
    assert abs(np.mean(reads) - 1.0) < 0.03, reads
    assert np.mean(former) > 1.05, former


def test_a_claim_is_measured_over_the_labels_span_only():
    # stalls in the first third of a fault's window: the window reads ~1.19x (under
    # the floor), the span the label claims ~1.57x; a claim over clear steps ~1.0
    x = np.full(3000, STEP)
    x[1000:1100:10] = 0.2  # 10 stalls of 0.2 s
    js = pd.DataFrame({"step": np.arange(3000), "t": T0 + np.cumsum(x) - x, "step_s": x})
    inj = pd.DataFrame([_inj("p-1", "rank:1", js.t[1000], js.t[1300], "process-pause")])
    r = next(inj.itertuples())
    impact, _, _ = lc.job_impact(js, inj, r)
    on = pd.DataFrame({"start_ts": [js.t[1000]], "end_ts": [js.t[1100]]})
    off = pd.DataFrame({"start_ts": [js.t[1150]], "end_ts": [js.t[1300]]})
    assert 1.15 < impact < 1.2
    assert lc.claim_impact(js, inj, r, on) > 1.5
    assert abs(lc.claim_impact(js, inj, r, off) - 1.0) < 0.02


def test_a_label_over_a_slowdown_outside_the_faults_window_claims_nothing_of_it():
    # a 1.6x burst of host load ending 2 steps before a fault with no effect; a label
    # over the burst, matched to the fault through reconciliation's slack, reads no
    # claim (NaN: no claimed step inside the window), and one running 2 steps into the
    # window reads none either (under 3 steps)
    x = np.full(3000, STEP)
    x[900:998] *= 1.6
    js = pd.DataFrame({"step": np.arange(3000), "t": T0 + np.cumsum(x) - x, "step_s": x})
    inj = pd.DataFrame([_inj("c-1", "rank:1", js.t[1000], js.t[1300])])
    r = next(inj.itertuples())
    assert abs(lc.job_impact(js, inj, r)[0] - 1.0) < 0.02
    before = pd.DataFrame({"start_ts": [js.t[900]], "end_ts": [js.t[998]]})
    into = pd.DataFrame({"start_ts": [js.t[900]], "end_ts": [js.t[1002]]})
    assert np.isnan(lc.claim_impact(js, inj, r, before))
    assert np.isnan(lc.claim_impact(js, inj, r, into))
    got = lc._score_events(_labels(("c-1", "job")), [_i("c-1", 1.0, 1.0)],
                           {("c-1", "job"): lc.claim_impact(js, inj, r, before)})
    assert got["event_fp"] == 1


def test_a_fault_with_no_end_is_in_force_to_the_end_of_the_run():
    # a failed revert (end_ts NaN): its steps are no baseline of another fault
    js = _hiccups(n=1000)
    inj = pd.DataFrame([_inj("a", "rank:1", js.t[100], float("nan")), _inj("b", "rank:2", js.t[500], js.t[600])])
    assert lc._in_force(js, inj, skip="b")[100:].all() and not lc._in_force(js, inj, skip="b")[:100].any()


def test_baseline_blocks_hold_many_steps_when_steps_are_long():
    # 0.5 s steps with hiccups: 1 s blocks would hold 2 steps (a median again); blocks
    # of >= 20 steps hold the hiccups' share, so the baseline is the mean within 3%
    rng = np.random.default_rng(2)
    x = 0.5 * (1 + 0.03 * rng.standard_normal(4000))
    hic = rng.random(4000) < 1 / 12
    x[hic] *= rng.uniform(1.5, 3.0, hic.sum())
    t = T0 + np.cumsum(x) - x
    assert abs(lc.time_baseline(t, x) / x.mean() - 1.0) < 0.03
    assert np.median(x) / x.mean() < 0.93  # what a median would read


def test_a_ranks_steady_offset_from_its_peers_is_no_slowdown():
    steps = _steps(slow={2: (0, 1400, 1.3), 3: (600, 700, 1.0)})
    js = lc._job_step(steps)
    t = js.set_index("step").t
    inj = pd.DataFrame([_inj("cpu-1", "rank:2", t[600], t[700])])
    assert abs(lc.target_impact(steps, js, inj, next(inj.itertuples())) - 1.0) < 0.03


def _labels(*rows: tuple[str, str]) -> pd.DataFrame:
    return pd.DataFrame([{"fault_id": f, "component": c, "source": "injected", "evidence": "{}"} for f, c in rows])


def _i(fid: str, impact: float, target: float) -> dict:
    return {"fault_id": fid, "impact": impact, "target_impact": target, "confounded": False}


def test_two_labels_of_one_slowdown_are_one_event():
    got = lc._score_events(_labels(("cpu-1", "rank:2"), ("cpu-1", "rank:2")), [_i("cpu-1", 1.5, 1.6)])
    assert (got["event_tp"], got["event_fp"], got["events"], got["labels"]) == (1, 0, 1, 2)
    got = lc._score_events(_labels(("cpu-1", "rank:2"), ("cpu-1", "rank:2")), [_i("cpu-1", 1.05, 1.05)])
    assert (got["event_tp"], got["event_fp"], got["label_fp"]) == (0, 1, 2)
    assert got["fp_events"] == ["cpu-1@rank:2"]


def test_a_label_whose_own_span_was_slowed_is_neither():
    # the fault's whole window read 1.1x, the label's span 1.5x: a true claim, though
    # the fault as a whole stayed under the floor; a claim the telemetry does not show is a fp
    got = lc._score_events(_labels(("p-1", "rank:2")), [_i("p-1", 1.1, 1.0)], {("p-1", "rank:2"): 1.5})
    assert (got["event_tp"], got["event_fp"], got["event_claim_only"]) == (0, 0, 1)
    got = lc._score_events(_labels(("p-1", "rank:2")), [_i("p-1", 1.1, 1.0)], {("p-1", "rank:2"): 1.1})
    assert (got["event_fp"], got["event_claim_only"]) == (1, 0)
    # each event by its own labels: a true job label does not lend its claim to a rank label
    got = lc._score_events(_labels(("p-1", "job"), ("p-1", "rank:3")), [_i("p-1", 1.1, 1.0)], {("p-1", "job"): 1.5})
    assert (got["event_fp"], got["event_claim_only"], got["fp_events"]) == (1, 1, ["p-1@rank:3"])


def test_a_rank_slowed_by_its_fault_while_the_job_had_slack_is_neither():
    got = lc._score_events(_labels(("cpu-1", "rank:2")), [_i("cpu-1", 1.08, 1.36)])
    assert (got["event_tp"], got["event_fp"], got["event_component_only"]) == (0, 0, 1)
    # the floor is the labeler's min_slowdown, the same for both measures
    got = lc._score_events(_labels(("cpu-1", "rank:2")), [_i("cpu-1", 1.08, lc.SLOWED - 0.01)])
    assert got["event_fp"] == 1


def test_bootstrap_interval_over_runs_holds_the_figure_and_widens_with_spread():
    def run(tp, fp, hits):
        return {"event_tp": tp, "event_fp": fp,
                "injections": [{"impact": 1.5, "labeled": h} for h in hits]}
    same = [run(2, 0, [True, True]) for _ in range(6)]
    assert lc.bootstrap_ci(same) == {"precision": [1.0, 1.0], "recall": [1.0, 1.0]}
    mixed = [run(2, 0, [True, True]) for _ in range(5)] + [run(0, 2, [False, False]) for _ in range(5)]
    lo, hi = lc.bootstrap_ci(mixed)["recall"]
    assert lo < 0.5 < hi and hi - lo > 0.3


def test_a_chunk_keeps_ctrl_c_a_keyboard_interrupt():
    # importing faultlab.cli sets SIGINT to SIG_DFL; a chunk must restore Python's
    # handler, or a Ctrl-C kills the controller with its faults still applied
    import signal
    import subprocess
    import sys

    code = ("import importlib.util, signal, sys\n"
            f"spec = importlib.util.spec_from_file_location('lc', {str(REPO / 'perf' / 'labeler_campaign.py')!r})\n"
            "lc = importlib.util.module_from_spec(spec); spec.loader.exec_module(lc)\n"
            "import faultlab.cli\n"
            "assert signal.getsignal(signal.SIGINT) is signal.SIG_DFL\n"
            "lc._run_one()\n"
            "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert got.stdout.strip() == "True", got.stderr


def test_a_knob_on_several_ranks_is_located_by_one_of_them_or_the_job_and_a_rank_fault_by_its_rank():
    row = lambda target, node="n2": pd.Series({"target": target, "node": node})  # noqa: E731
    assert lc.wanted_component(row("rank:2")) == "rank:2"  # a fault or a slow shard on one rank
    assert lc.wanted_component(row("fleth0")) == "node:n2"  # a link fault names the interface
    want = lc.wanted_component(row("ranks:0,1,2,3"))  # sequence-length imbalance, uncoordinated GC
    assert all(lc.located(c, want) for c in ["job", "rank:0", "rank:3"])
    assert not lc.located("rank:4", want) and not lc.located("node:n2", want)
    assert lc.located("rank:2", "rank:2") and not lc.located("job", "rank:2") and not lc.located("rank:1", "rank:2")
