"""The software-straggler knobs of the benchmark workloads: sequence-length imbalance
and Python GC in faultlab.benchmarks.ddp, stage imbalance in faultlab.benchmarks.pipeline.

Real processes: 2 gloo ranks (LocalNode) on 127.0.0.1, short runs, one job per
configuration (module-scoped fixtures share a job among the tests that read it). The
machine has 2 cores and other jobs share it, so every timing bound is loose and
relative (a ratio between ranks, steps or runs of the same test), never absolute.
"""

from __future__ import annotations

import json
import signal
import statistics
import time
from pathlib import Path

import numpy as np
import pytest
from faultlab.benchmarks import ddp, knobs, pipeline, steplog
from faultlab.benchmarks.launch import free_port, launch_ranks, stop_ranks, wait_ranks

from faultlab.nodes import LocalNode

KEYS = {"run_id", "rank", "node", "peer_group", "step", "t_start", "compute_s", "comm_s", "step_s", "gc_s"}
SEQ_KEYS = KEYS | {"tokens", "dataloader_s"}
TOL_S = 1e-4
#: a step with a full (generation-2) collection: >= ~50 ms here (the torch heap alone is
#: ~1.7e5 objects); young collections take < 2 ms
GC_STEP_S = 0.02
WARMUP = 2  # first steps (allocator and thread-pool warm-up) left out of timing checks


def read_steps(tel: Path, world: int) -> dict[int, list[dict]]:
    recs = {r: [json.loads(line) for line in (tel / f"steps-rank{r}.jsonl").read_text().splitlines()] for r in range(world)}
    counts = {r: len(v) for r, v in recs.items()}
    assert len(set(counts.values())) == 1, f"ranks stopped at different steps: {counts}"
    for r, rows in recs.items():
        assert [row["step"] for row in rows] == list(range(len(rows)))
        for row in rows:
            assert row["rank"] == r
            assert row["compute_s"] > 0 and row["comm_s"] >= 0 and row["step_s"] > 0
            assert row["compute_s"] + row["comm_s"] + row.get("dataloader_s", 0.0) <= row["step_s"] + TOL_S
    return recs


def run_job(tmp: Path, args: list[str], *, world: int = 2, module: str = "faultlab.benchmarks.ddp",
            sigterm_rank_after: int | None = None) -> dict[int, list[dict]]:
    """Run a job of ``world`` local ranks to the end; return its records per rank.
    With ``sigterm_rank_after`` N: SIGTERM the last rank once rank 0 recorded N steps."""
    tel = tmp / "tel"
    procs = launch_ranks(
        [(LocalNode(name=f"n{r}"), r) for r in range(world)],
        telemetry_dir=tel, run_id=tmp.name, master_addr="127.0.0.1", master_port=free_port(),
        duration_s=None if sigterm_rank_after is None else 600, extra_args=args, log_dir=tmp / "logs", module=module,
    )  # fmt: skip
    try:
        if sigterm_rank_after is not None:
            path = tel / "steps-rank0.jsonl"
            deadline = time.monotonic() + 120
            while not (path.exists() and len(path.read_text().splitlines()) >= sigterm_rank_after):
                if any(p.popen.poll() not in (None, 0) for p in procs):
                    wait_ranks(procs, timeout_s=1)
                assert time.monotonic() < deadline, "the job did not reach the step to stop at"
                time.sleep(0.05)
            procs[-1].popen.send_signal(signal.SIGTERM)
        assert wait_ranks(procs, timeout_s=150) == dict.fromkeys(range(world), 0)
    finally:
        stop_ranks(procs, grace_s=1)
    return read_steps(tel, world)


def spearman(x, y) -> float:
    rx = np.argsort(np.argsort(np.asarray(x, dtype=float)))
    ry = np.argsort(np.argsort(np.asarray(y, dtype=float)))
    return float(np.corrcoef(rx, ry)[0, 1])


def med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows[WARMUP:])


# -- pure helpers ----------------------------------------------------------------------
def test_draw_sequences_is_deterministic_lognormal_and_clipped():
    a = knobs.draw_sequences(3, 7, 4, 512, 0.8, 8)
    assert a == knobs.draw_sequences(3, 7, 4, 512, 0.8, 8)  # every rank computes the same
    assert a != knobs.draw_sequences(3, 8, 4, 512, 0.8, 8) and a != knobs.draw_sequences(4, 7, 4, 512, 0.8, 8)
    assert len(a) == 4 and all(len(s) == 8 and min(s) >= 1 for s in a)
    totals = [t for step in range(400) for t in knobs.step_tokens(0, step, 2, 512, 0.8)]
    assert 0.85 * 512 < statistics.median(totals) < 1.15 * 512
    logs = np.log(totals)
    assert 0.7 < float(np.std(logs)) < 0.9  # the lognormal's shape
    assert max(totals) <= 16 * 512 and min(totals) >= 8
    assert knobs.step_tokens(0, 5, 3, 300, 0.0) == [300, 300, 300]
    assert knobs.draw_sequences(0, 0, 2, 1, 0.0, 1) == [[1], [1]]
    for bad in ((0, 512, 0.8, 8), (2, 0, 0.8, 8), (2, 512, -0.1, 8), (2, 512, 0.8, 0)):
        with pytest.raises(ValueError):
            knobs.draw_sequences(0, 0, *bad)


def test_rebalance_is_greedy_and_keeps_every_sequence():
    seqs = knobs.draw_sequences(1, 2, 4, 1024, 1.0, 8)
    out = knobs.rebalance(seqs)
    assert sorted(n for s in out for n in s) == sorted(n for s in seqs for n in s)
    loads = [sum(s) for s in out]
    assert max(loads) - min(loads) <= max(n for s in seqs for n in s)
    assert max(loads) / min(loads) < max(map(sum, seqs)) / min(map(sum, seqs))
    assert knobs.rebalance([[5, 1], [1, 1]]) == [[5], [1, 1, 1]]
    spread = [max(t) / min(t) for t in (knobs.step_tokens(0, s, 2, 1024, 0.8, 8, rebalanced=True) for s in range(200))]
    assert statistics.mean(spread) < 1.15


def test_gc_knob_rank_periods_differ_and_planned_steps_align():
    gcs = [knobs.GcKnob("uncoordinated", 50, 20, seed=0, rank=r) for r in range(8)]
    factors = [k.period_factor for k in gcs]
    assert all(0.6 <= f <= 1.4 for f in factors)
    assert min(abs(a - b) for i, a in enumerate(factors) for b in factors[i + 1:]) > 0.02
    assert len({k.gen2_threshold for k in gcs}) == 8
    p = knobs.GcKnob("planned", 5, 1, seed=0, rank=3)
    assert [s for s in range(20) if p.planned_step(s)] == [4, 9, 14, 19]
    assert not gcs[0].planned_step(49)
    for bad in (("sometimes", 5, 1), ("planned", 0, 1), ("planned", 5, 0), ("planned", 5, 5000)):
        with pytest.raises(ValueError):
            knobs.GcKnob(*bad)


def test_steplog_writes_the_first_record_at_once_then_batches(tmp_path):
    path = tmp_path / "s.jsonl"
    with steplog.StepLog(path, flush_s=3600) as log:
        log.add({"step": 0, "x": 1.5})
        assert path.read_text() == '{"step": 0, "x": 1.5}\n'  # a watcher sees training start
        log.add({"step": 1})
        log.add({"step": 2})
        assert len(path.read_text().splitlines()) == 1  # buffered
        log.flush()
        assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [0, 1, 2]
        log.add({"step": 3})
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [0, 1, 2, 3]  # close flushes
    with steplog.StepLog(path, flush_s=0) as log:
        log.add({"step": 4})
        assert path.read_text().endswith('{"step": 4}\n')
    with pytest.raises(ValueError):
        steplog.StepLog(path, flush_s=-1)


def test_bad_knob_arguments_exit_2(capsys):
    base = ["--rank", "0", "--world-size", "2", "--master-addr", "127.0.0.1", "--master-port", "1", "--out", "x", "--run-id", "r"]
    for mod, extra, msg in (
        (ddp, ["--rebalance"], "--rebalance needs --seq-len-tokens"),
        (ddp, ["--seq-len-tokens", "0"], "--seq-len-tokens must be >= 1"),
        (ddp, ["--gc-mode", "planned", "--gc-every", "0"], "--gc-every must be >= 1"),
        (ddp, ["--gc-garbage-mb", "0"], "--gc-garbage-mb"),
        (pipeline, ["--stages", "3"], "--stages 3 must equal --world-size 2"),
        (pipeline, ["--layers", "1,2,3"], "--layers has 3 entries for 2 stages"),
        (pipeline, ["--layers", "1,0"], "at least 1 layer"),
        (pipeline, ["--batch", "2", "--microbatches", "4"], "smaller than --microbatches"),
    ):
        with pytest.raises(SystemExit) as ei:
            mod.parse_args(base + extra)
        assert ei.value.code == 2
        assert msg in capsys.readouterr().err
    # the flags the runner passes to a pipeline job (faultlab.runner.workload_args)
    a = pipeline.parse_args(base + ["--hidden", "64", "--batch", "8", "--threads", "1", "--seed", "3", "--stages", "2",
                                    "--layers", "1,4", "--seq-len-tokens", "64", "--seq-len-sigma", "0.5", "--rebalance",
                                    "--gc-mode", "planned", "--gc-every", "10", "--gc-garbage-mb", "1"])
    assert a.layer_counts == [1, 4] and a.peer_group == "pp"
    assert pipeline.microbatch_rows(a, 0) == knobs.step_tokens(3, 0, 4, 64, 0.5, 8, rebalanced=True)
    assert ddp.parse_args(base).peer_group == "dp"


def test_launch_ranks_refuses_a_bad_module(tmp_path):
    with pytest.raises(ValueError, match="not a dotted Python module name"):
        launch_ranks([(LocalNode(name="x"), 0)], telemetry_dir=tmp_path, run_id="x", master_addr="127.0.0.1",
                     master_port=1, duration_s=1, log_dir=tmp_path, module="faultlab.benchmarks.ddp; rm -rf /")  # fmt: skip


# -- sequence-length imbalance ---------------------------------------------------------
SEQ_ARGS = ["--steps", "60", "--hidden", "256", "--seq-len-tokens", "1024", "--seq-len-sigma", "0.8", "--seed", "5"]


@pytest.fixture(scope="module")
def seqlen_runs(tmp_path_factory):
    plain = run_job(tmp_path_factory.mktemp("seq-plain"), SEQ_ARGS)
    balanced = run_job(tmp_path_factory.mktemp("seq-rebal"), SEQ_ARGS + ["--rebalance"])
    return plain, balanced


def per_step_spread(recs: dict[int, list[dict]], key: str) -> list[float]:
    """Per step, max / median over ranks of ``key``."""
    n = len(recs[0])
    return [max(v) / statistics.median(v) for v in ([recs[r][i][key] for r in recs] for i in range(WARMUP, n))]


def test_seq_len_tokens_are_the_shared_draw_and_drive_compute(seqlen_runs):
    plain, balanced = seqlen_runs
    for recs, reb in ((plain, False), (balanced, True)):
        for r, rows in recs.items():
            for row in rows:
                assert set(row) == SEQ_KEYS
                assert row["tokens"] == knobs.step_tokens(5, row["step"], 2, 1024, 0.8, 8, rebalanced=reb)[r]
                assert 0 <= row["dataloader_s"] < row["step_s"]
    toks = [row["tokens"] for rows in plain.values() for row in rows[WARMUP:]]
    comp = [row["compute_s"] for rows in plain.values() for row in rows[WARMUP:]]
    rho = spearman(toks, comp)
    print(f"seq-len sigma 0.8: Spearman(tokens, compute_s) = {rho:.3f}")
    assert rho > 0.6


def test_rebalance_shrinks_the_compute_spread(seqlen_runs):
    plain, balanced = seqlen_runs
    tok_plain, tok_bal = per_step_spread(plain, "tokens"), per_step_spread(balanced, "tokens")
    sp_plain, sp_bal = per_step_spread(plain, "compute_s"), per_step_spread(balanced, "compute_s")
    print(f"per-step max/median: tokens {statistics.mean(tok_plain):.3f} -> {statistics.mean(tok_bal):.3f}, "
          f"compute_s {statistics.mean(sp_plain):.3f} -> {statistics.mean(sp_bal):.3f} (mean), "
          f"{statistics.median(sp_plain):.3f} -> {statistics.median(sp_bal):.3f} (median); "
          f"median step_s {med(plain[0], 'step_s') * 1e3:.1f} -> {med(balanced[0], 'step_s') * 1e3:.1f} ms")
    assert statistics.mean(tok_bal) < 1.1 < statistics.mean(tok_plain)
    assert statistics.median(sp_bal) < statistics.median(sp_plain)
    assert statistics.mean(sp_bal) < statistics.mean(sp_plain)


# -- Python GC -------------------------------------------------------------------------
GC_ARGS = ["--steps", "60", "--hidden", "256", "--batch", "64", "--gc-every", "6", "--gc-garbage-mb", "2", "--seed", "0"]


def gc_steps(rows: list[dict]) -> set[int]:
    return {row["step"] for row in rows if row["gc_s"] > GC_STEP_S}


@pytest.fixture(scope="module")
def gc_runs(tmp_path_factory):
    unco = run_job(tmp_path_factory.mktemp("gc-unco"), GC_ARGS + ["--gc-mode", "uncoordinated"])
    planned = run_job(tmp_path_factory.mktemp("gc-planned"), GC_ARGS + ["--gc-mode", "planned"])
    return unco, planned


def test_uncoordinated_gc_collects_at_different_steps_and_stalls_every_rank(gc_runs):
    recs = gc_runs[0]
    assert all(set(row) == KEYS for rows in recs.values() for row in rows)
    mine = {r: gc_steps(rows) for r, rows in recs.items()}
    print("uncoordinated GC steps per rank:", {r: sorted(s) for r, s in mine.items()})
    assert all(len(s) >= 3 for s in mine.values()), mine
    union = set().union(*mine.values())
    jaccard = len(set.intersection(*mine.values())) / len(union)
    assert jaccard < 0.5, mine  # ranks collect at different steps
    for r, rows in recs.items():
        steps = [row for row in rows if row["step"] >= WARMUP]
        clean = [row["step_s"] for row in steps if row["step"] not in union and row["step"] - 1 not in union]
        others = [row["step_s"] for row in steps if row["step"] in union and row["step"] not in mine[r]]
        assert clean and others
        slow = statistics.median(others) / statistics.median(clean)
        print(f"rank {r}: median step_s {statistics.median(clean) * 1e3:.1f} ms without GC, "
              f"{statistics.median(others) * 1e3:.1f} ms when only another rank collects (x{slow:.1f})")
        assert slow > 2.0  # another rank's pause stalls this rank too


def test_planned_gc_collects_on_the_same_steps_everywhere(gc_runs):
    recs = gc_runs[1]
    n = len(recs[0])
    planned = {s for s in range(n) if s % 6 == 5}
    for r, rows in recs.items():
        assert gc_steps(rows) == planned, (r, sorted(gc_steps(rows)))
        assert all(row["gc_s"] < 0.005 for row in rows if row["step"] not in planned)  # gc disabled in between
    pauses = [row["gc_s"] for rows in recs.values() for row in rows if row["step"] in planned]
    print(f"planned GC: {len(planned)} steps, median pause {statistics.median(pauses) * 1e3:.0f} ms")


def test_planned_gc_stalls_fewer_steps_than_uncoordinated(gc_runs):
    unco = gc_runs[0]
    stalled = [set().union(*(gc_steps(rows) for rows in recs.values())) for recs in gc_runs]
    total = [sum(row["step_s"] for row in recs[0][WARMUP:]) for recs in gc_runs]
    print(f"steps stalled by some rank's GC: uncoordinated {len(stalled[0])}, planned {len(stalled[1])} "
          f"of {len(unco[0])}; job time after warm-up {total[0]:.2f} s vs {total[1]:.2f} s")
    assert len(stalled[0]) > len(stalled[1])


# -- pipeline stage imbalance ----------------------------------------------------------
PP_ARGS = ["--hidden", "512", "--batch", "512", "--microbatches", "4", "--flush-s", "0"]


@pytest.fixture(scope="module")
def pipeline_runs(tmp_path_factory):
    heavy = run_job(tmp_path_factory.mktemp("pp-1-5"), PP_ARGS + ["--steps", "20", "--layers", "1,5"], module="faultlab.benchmarks.pipeline")
    # the even run is stopped by SIGTERM to its last stage: the stop vote ends every stage at one step
    even = run_job(tmp_path_factory.mktemp("pp-3-3"), PP_ARGS + ["--layers", "3,3"], module="faultlab.benchmarks.pipeline",
                   sigterm_rank_after=14)
    return heavy, even


def test_pipeline_records_and_stops_every_stage_together(pipeline_runs):
    heavy, even = pipeline_runs
    assert len(heavy[0]) == 20 and len(even[0]) >= 14
    for recs in (heavy, even):
        for rows in recs.values():
            assert all(set(row) == KEYS and row["peer_group"] == "pp" for row in rows)


def test_heavy_stage_sets_the_pipeline_pace(pipeline_runs):
    heavy, even = pipeline_runs
    c0, c1 = med(heavy[0], "compute_s"), med(heavy[1], "compute_s")
    s0, s1 = med(heavy[0], "step_s"), med(heavy[1], "step_s")
    w0, w1 = med(heavy[0], "comm_s") / s0, med(heavy[1], "comm_s") / s1
    e0, e1 = med(even[0], "compute_s"), med(even[1], "compute_s")
    es = med(even[0], "step_s")
    ew0 = med(even[0], "comm_s") / es
    print(f"layers 1,5: compute_s {c0 * 1e3:.1f} / {c1 * 1e3:.1f} ms, step_s {s1 * 1e3:.1f} ms "
          f"(heavy compute / step {c1 / s1:.2f}), waiting share {w0:.2f} / {w1:.2f}; "
          f"layers 3,3: compute_s {e0 * 1e3:.1f} / {e1 * 1e3:.1f} ms, step_s {es * 1e3:.1f} ms, waiting share of stage 0 {ew0:.2f}")
    assert c1 > 2.5 * c0  # the heavy stage computes most
    assert 0.8 < s0 / s1 < 1.25  # one pace for the whole pipeline...
    assert c1 / s1 > 0.4  # ...set by the heavy stage, busy most of the step
    assert w0 > 0.5 and w0 > w1  # the light stage waits for it
    # even layers: even compute (loose: two busy stages share 2 cores with other jobs)
    even_ratio = max(e0 / e1, e1 / e0)
    assert even_ratio < 2.2 and c1 / c0 > 1.5 * even_ratio
    assert w0 > ew0 + 0.15  # the light stage waits more than the same stage with even layers


# -- batched telemetry -----------------------------------------------------------------
def test_sigkilled_rank_leaves_whole_records_up_to_its_last_batch(tmp_path):
    tel = tmp_path / "tel"
    procs = launch_ranks(
        [(LocalNode(name="n0"), 0), (LocalNode(name="n1"), 1)],
        telemetry_dir=tel, run_id="kill", master_addr="127.0.0.1", master_port=free_port(), duration_s=600,
        extra_args=["--hidden", "64", "--batch", "8", "--flush-s", "0.2", "--agent-dir", "none"], log_dir=tmp_path / "logs",
    )  # fmt: skip
    try:
        path = tel / "steps-rank0.jsonl"
        deadline = time.monotonic() + 120
        while not (path.exists() and len(path.read_text().splitlines()) > 1):  # past the first (immediate) batch
            assert time.monotonic() < deadline and all(p.popen.poll() is None for p in procs)
            time.sleep(0.02)
        time.sleep(0.3)
        for p in procs:
            p.popen.kill()
            p.popen.wait(timeout=10)
    finally:
        stop_ranks(procs, grace_s=0)
    for r in range(2):
        text = (tel / f"steps-rank{r}.jsonl").read_text()
        assert text.endswith("\n")
        rows = [json.loads(line) for line in text.splitlines()]
        assert len(rows) > 1 and [row["step"] for row in rows] == list(range(len(rows)))


def test_compute_repeat_makes_one_rank_slower_by_design(tmp_path):
    """launch_ranks' rank_args reach one rank alone: with --compute-repeat 3 its
    compute is about three times its peer's (more than 1.5x here, on a shared host),
    and --compute-repeat out of 1..16 is refused."""
    tel = tmp_path / "tel"
    procs = launch_ranks([(LocalNode(name=f"n{r}"), r) for r in range(2)], telemetry_dir=tel, run_id="rep",
                         master_addr="127.0.0.1", master_port=free_port(), duration_s=None,
                         extra_args=["--steps", "40", "--hidden", "512", "--batch", "256"], log_dir=tmp_path / "logs",
                         rank_args={1: ["--compute-repeat", "3", "--peer-group", "older"]})
    try:
        assert wait_ranks(procs, timeout_s=150) == {0: 0, 1: 0}
    finally:
        stop_ranks(procs, grace_s=1)
    recs = read_steps(tel, 2)
    c0 = statistics.median(r["compute_s"] for r in recs[0][WARMUP:])
    c1 = statistics.median(r["compute_s"] for r in recs[1][WARMUP:])
    assert c1 > 1.5 * c0, (c0, c1)
    assert {r["peer_group"] for r in recs[1]} == {"older"} and {r["peer_group"] for r in recs[0]} == {"dp"}
    base = ["--rank", "0", "--world-size", "2", "--master-addr", "127.0.0.1", "--master-port", "1", "--out", "x", "--run-id", "r"]
    with pytest.raises(SystemExit):
        ddp.parse_args(base + ["--compute-repeat", "0"])
