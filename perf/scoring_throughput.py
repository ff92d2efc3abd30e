"""Scoring speed and memory: the five baselines on a 100-run dataset, and peak memory
of 10 vs 100 runs (scoring streams run by run, so it must not grow).

    python3 perf/scoring_throughput.py [--steps 500] [--ranks 4] [--keep DIR]

Builds two datasets of simulated runs (faultlab.datasets.synthetic: ``--ranks`` DP
ranks x ``--steps`` steps, one straggler each, labeled by the labeler), then, each in
a fresh process, scores every baseline on all runs in one pass (each run read once; offline, 1,000 bootstrap
resamples, VUS-PR included) and reports the wall time and the process's peak RSS
(``ru_maxrss``). Budget: 100 runs in at most 10 s; peak RSS of 100 runs within 10% of
10 runs'.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASELINES = ("peer-median", "temporal-z", "arrival-late", "random", "constant")

CHILD = r'''
import json, resource, sys, time
from faultlab.scoring.api import score_dataset
t = time.perf_counter()
rs = score_dataset(sys.argv[2].split(","), sys.argv[1], split="all", n_boot=1000)  # one pass, each run read once
out = {r.detector: {"window_mcc": r.window_mcc, "event_f1": r.event_f1, "vus_pr": r.vus_pr} for r in rs}
print(json.dumps({"total_s": time.perf_counter() - t, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "by": out}))
'''


def make_dataset(root: Path, n: int, steps: int, ranks: int) -> Path:
    from faultlab.datasets.build import build
    from faultlab.datasets.synthetic import make_run

    runs = [make_run(root / f"runs{n}" / f"r{i:03d}", f"r{i:03d}", seed=i, n_steps=steps, n_ranks=ranks,
                     fault_type=["cpu-contention", "io-slow", "gc-storm"][i % 3]) for i in range(n)]
    return build(runs, f"synthetic-{n}", root)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--keep", default=None, help="build the datasets here and keep them")
    a = ap.parse_args()
    root = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="faultlab-perf-score-"))
    try:
        t = time.perf_counter()
        ds = {n: make_dataset(root, n, a.steps, a.ranks) for n in (10, 100)}
        print(f"built 10- and 100-run datasets ({a.ranks} ranks x {a.steps} steps a run) in {time.perf_counter() - t:.1f}s")
        res = {}
        for n, p in ds.items():
            r = subprocess.run([sys.executable, "-c", CHILD, str(p), ",".join(BASELINES)], capture_output=True, text=True, timeout=900)
            if r.returncode:
                print(r.stderr, file=sys.stderr)
                return 2
            res[n] = json.loads(r.stdout.strip().splitlines()[-1])
        for n in (10, 100):
            by = ", ".join(f"{k} MCC {v['window_mcc']:.2f}" for k, v in res[n]["by"].items())
            print(f"{n:4d} runs: {res[n]['total_s']:.2f}s for {len(BASELINES)} baselines ({by}); peak RSS {res[n]['peak_rss_mb']:.0f} MB")
        ratio = res[100]["peak_rss_mb"] / res[10]["peak_rss_mb"]
        print(f"peak RSS 100 runs / 10 runs = {ratio:.3f}; time per run-detector {res[100]['total_s'] / (100 * len(BASELINES)) * 1e3:.1f} ms")
        ok = res[100]["total_s"] <= 10.0 and ratio <= 1.10
        print("within budget (<= 10 s, memory flat)" if ok else "OVER BUDGET")
        return 0 if ok else 1
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
