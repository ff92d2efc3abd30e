"""Instrumentation overhead of the benchmark workload: instrumented vs uninstrumented
median step time, measured side by side in one run, three ways (this machine is
noisy: other jobs share its 2 cores, and a job's speed drifts by ±10% within a minute).

The figure of a step is its *period*: from the start of one step to the start of the
next, so the bookkeeping and record writing between steps is counted.

1. In-process A/B (the gate): jobs of ``--world`` ranks run ``--ab-steps`` steps with
   ``--telemetry-ab 1``: recorded steps (timestamps, GC-timer reads, a JSON record per
   step, batched writes) and unrecorded ones alternate, in the same processes, so load
   drift cancels. Per rank the overhead is the median over step pairs of (recorded
   period - unrecorded period), over the median unrecorded period; the ratio is 1 plus
   that, and the result is the median over ranks and jobs. (Comparing the two
   medians instead swings by ±2% with the load on this machine.)
2. Cross-process A/B: ``faultlab.benchmarks.ddp`` as the runner starts it
   (instrumented: records, GC timer, the in-workload agent) against the same job with
   ``--no-telemetry --agent-dir none`` (uninstrumented: no records, no file, no GC
   timer, no agent), as separate jobs interleaved (I U, U I, I U, ...) for
   ``--rounds`` rounds; per round the ratio of the mean over ranks of the median
   periods. This also covers the agent thread and the GC timer, but a single round
   swings by several percent with the load.
3. The per-step bookkeeping alone, timed in-process over many iterations without
   torch: a noise-free estimate of what the records add.

    python perf/instrumentation_overhead.py [--rounds 4] [--ab-jobs 3] [--ab-steps 3000] [--steps 600]
        [--world 2] [--hidden 512] [--batch 64] [--flush-s 0.5] [--target 1.01]

Exits 1 when the in-process A/B ratio is above ``--target``.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from faultlab.benchmarks.launch import free_port, launch_ranks, wait_ranks

from faultlab.nodes import LocalNode

PERIOD_RE = re.compile(r"median period ([0-9.]+) ms")
AB_RE = re.compile(r"telemetry A/B: median period recorded ([0-9.]+) ms .* unrecorded ([0-9.]+) ms .* paired difference (-?[0-9.]+) us")


def run_job(world: int, args: list[str], workdir: Path, tag: str) -> list[str]:
    """Run one job; return the text of each rank's log."""
    d = workdir / tag
    procs = launch_ranks(
        [(LocalNode(name=f"n{r}"), r) for r in range(world)],
        telemetry_dir=d / "telemetry",
        run_id=tag,
        master_addr="127.0.0.1",
        master_port=free_port(),
        duration_s=None,
        extra_args=args,
        log_dir=d / "logs",
    )
    wait_ranks(procs, timeout_s=300)
    return [(d / "logs" / f"rank{r}.log").read_text() for r in range(world)]


def mean_period_s(logs: list[str]) -> float:
    """The mean over ranks of their median step period (s)."""
    periods = []
    for r, text in enumerate(logs):
        m = PERIOD_RE.findall(text)
        if not m:
            raise RuntimeError(f"rank {r} printed no median period")
        periods.append(float(m[-1]) / 1e3)
    return statistics.mean(periods)


def bookkeeping_cost_s(n: int = 20000, flush_s: float = 0.5) -> float:
    """Seconds per step of the instrumented loop's bookkeeping (timestamps, GC timer
    reads, the record, its share of the batched encoding and write), without torch."""
    from faultlab.benchmarks import agent
    from faultlab.benchmarks.steplog import StepLog

    agent.install_gc_timer()
    with tempfile.TemporaryDirectory() as tmp:
        log = StepLog(Path(tmp) / "steps.jsonl", flush_s)
        t0 = time.perf_counter()
        for step in range(n):
            t_start = time.time()
            g0 = agent.gc_seconds()
            a, b, c, e = time.perf_counter(), time.perf_counter(), time.perf_counter(), time.perf_counter()
            log.add({
                "run_id": "overhead", "rank": 0, "node": "local", "peer_group": "dp", "step": step,
                "t_start": t_start, "compute_s": (b - a) + (e - c), "comm_s": c - b, "step_s": e - a,
                "gc_s": agent.gc_seconds() - g0,
            })
        log.close()  # the encoding and writing of the batched records, amortized
        return (time.perf_counter() - t0) / n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4, help="cross-process rounds (each runs both variants)")
    ap.add_argument("--ab-jobs", type=int, default=3, help="in-process A/B jobs")
    ap.add_argument("--steps", type=int, default=600, help="steps per cross-process job")
    ap.add_argument("--ab-steps", type=int, default=3000, help="steps per in-process A/B job")
    ap.add_argument("--world", type=int, default=2, help="ranks per job")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--flush-s", type=float, default=0.5, help="the instrumented ranks' --flush-s")
    ap.add_argument("--target", type=float, default=1.01, help="largest acceptable in-process ratio")
    a = ap.parse_args()
    if a.rounds < 0 or a.ab_jobs < 1 or a.steps < 40 or a.ab_steps < 40 or a.world < 1:
        ap.error("--rounds >= 0, --ab-jobs >= 1, --steps >= 40, --ab-steps >= 40, --world >= 1")

    base = ["--hidden", str(a.hidden), "--batch", str(a.batch)]
    per_step = bookkeeping_cost_s(flush_s=a.flush_s)
    print(f"jobs of {a.world} ranks, {a.steps} steps, hidden {a.hidden}, batch {a.batch}, --flush-s {a.flush_s:g}")
    with tempfile.TemporaryDirectory(prefix="fl-overhead-") as tmp:
        work = Path(tmp)
        agent_dir = work / "agents"
        inst = [*base, "--flush-s", f"{a.flush_s:g}", "--agent-dir", str(agent_dir)]
        bare = [*base, "--no-telemetry", "--agent-dir", "none"]

        print("\n1. in-process A/B (recorded and unrecorded steps alternate)")
        ab_ratios, unrec = [], []
        for j in range(a.ab_jobs):
            logs = run_job(a.world, [*inst, "--steps", str(a.ab_steps), "--telemetry-ab", "1"], work, f"ab{j}")
            for r, text in enumerate(logs):
                m = AB_RE.findall(text)
                if not m:
                    raise RuntimeError(f"rank {r} of job ab{j} printed no A/B line")
                on, off, diff_us = (float(x) for x in m[-1])
                ratio = 1 + diff_us / 1e3 / off
                ab_ratios.append(ratio)
                unrec.append(off / 1e3)
                print(f"   job {j} rank {r}: median period recorded {on:.4f} ms, unrecorded {off:.4f} ms; "
                      f"paired difference {diff_us:+.2f} us, ratio {ratio:.4f}", flush=True)
        ab = statistics.median(ab_ratios)

        ratios = []
        if a.rounds:
            print("\n2. cross-process A/B (instrumented vs --no-telemetry --agent-dir none, interleaved)")
            print(f"   {'round':>5} {'order':<6} {'instrumented ms':>16} {'uninstrumented ms':>18} {'ratio':>7}")
        for i in range(a.rounds):
            order = ["I", "U"] if i % 2 == 0 else ["U", "I"]
            steps = ["--steps", str(a.steps)]
            got = {v: mean_period_s(run_job(a.world, [*(inst if v == "I" else bare), *steps], work, f"r{i}-{v}")) for v in order}
            ratios.append(got["I"] / got["U"])
            print(f"   {i:>5} {','.join(order):<6} {got['I'] * 1e3:>16.3f} {got['U'] * 1e3:>18.3f} {ratios[-1]:>7.4f}", flush=True)

    print(f"\n3. bookkeeping per step (in-process, no torch): {per_step * 1e6:.1f} us "
          f"= {per_step / statistics.median(unrec) * 100:.3f}% of the median unrecorded period")
    print(f"\nin-process A/B ratio recorded/unrecorded (paired): median {ab:.4f} (min {min(ab_ratios):.4f}, max {max(ab_ratios):.4f}); target <= {a.target:g}")
    if ratios:
        print(f"cross-process ratio instrumented/uninstrumented: median of {len(ratios)} rounds {statistics.median(ratios):.4f} "
              f"(min {min(ratios):.4f}, max {max(ratios):.4f})")
    if ab > a.target:
        print("ABOVE TARGET")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
