"""Cross-check faultlab's VUS-PR, AUC-PR and range-based F1 against TSB-AD's own
functions (Liu & Paparrizos, NeurIPS'24 benchmark code) on the same inputs.

TSB-AD pins numpy<2, so it lives in a side venv (default /tmp/tsbad)::

    python3 -m venv /tmp/tsbad && /tmp/tsbad/bin/pip install TSB-AD
    python3 perf/scoring_crosscheck.py [--venv /tmp/tsbad] [--cases 40]

Each case: a random series (length 300..3000) with 1..6 labeled ranges, scores that
are noise plus a bump on part of the ranges (ties included), a binary prediction
from a threshold. faultlab's functions run here; TSB-AD's (``generate_curve`` with
version ``opt``, 250 thresholds, for VUS-PR; ``metric_PR`` for AUC-PR;
``metric_RF1`` with the prediction for range F1) run in the side venv on the same
arrays. Prints the largest absolute difference of each; exit 1 if any exceeds 1e-6.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from faultlab.scoring.metrics import _ranges, auc_pr, f1_of, range_scores, vus_pr

SIDE = r'''
import json, sys
import numpy as np
from TSB_AD.evaluation.basic_metrics import basic_metricor, generate_curve
d = np.load(sys.argv[1])
out = []
for i in range(int(d["n"])):
    y, s, p, w = d[f"y{i}"], d[f"s{i}"], d[f"p{i}"], int(d[f"w{i}"])
    g = basic_metricor()
    vus = generate_curve(y.astype(int), s, w, "opt", 250)[7]
    out.append({"vus_pr": float(vus), "auc_pr": float(g.metric_PR(y, s)), "range_f1": float(g.metric_RF1(y, s, preds=p))})
print(json.dumps(out))
'''


def case(rng: np.random.Generator):
    n = int(rng.integers(300, 3000))
    y = np.zeros(n, np.int64)
    for _ in range(int(rng.integers(1, 7))):
        a = int(rng.integers(0, n - 20))
        y[a : a + int(rng.integers(3, 60))] = 1
    s = rng.normal(size=n)
    s[y == 1] += rng.uniform(0.5, 3.0)
    s = np.round(s, 1)  # ties, as a coarse detector has
    p = (s > np.quantile(s, rng.uniform(0.8, 0.98))).astype(np.int64)
    return y, s, p, int(rng.integers(0, 30))


def ours(y, s, p, w) -> dict:
    real = [(a, b + 1.0) for a, b in _ranges(y)]
    pred = [(a, b + 1.0) for a, b in _ranges(p)]
    R = (np.array([r[0] for r in real], float), np.array([r[1] for r in real], float))
    P = (np.array([r[0] for r in pred], float), np.array([r[1] for r in pred], float))
    rec = float(range_scores(R, P, alpha=0.2).mean()) if len(real) else 0.0
    prec = float(range_scores(P, R, alpha=0.0).mean()) if len(pred) else 0.0
    return {"vus_pr": vus_pr(y, s, window=w), "auc_pr": auc_pr(y, s), "range_f1": float(f1_of(prec, rec))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", default="/tmp/tsbad", help="side venv with TSB-AD installed")
    ap.add_argument("--cases", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    py = Path(a.venv) / "bin" / "python"
    if not py.exists():
        print(f"no side venv at {a.venv}: python3 -m venv {a.venv} && {a.venv}/bin/pip install TSB-AD", file=sys.stderr)
        return 2
    rng = np.random.default_rng(a.seed)
    cases = [case(rng) for _ in range(a.cases)]
    with tempfile.TemporaryDirectory() as td:
        arrs = {"n": np.array(len(cases))}
        for i, (y, s, p, w) in enumerate(cases):
            arrs.update({f"y{i}": y, f"s{i}": s, f"p{i}": p, f"w{i}": np.array(w)})
        np.savez(Path(td) / "in.npz", **arrs)
        (Path(td) / "side.py").write_text(SIDE)
        r = subprocess.run([str(py), str(Path(td) / "side.py"), str(Path(td) / "in.npz")], capture_output=True, text=True, timeout=1800)
        if r.returncode:
            print(r.stderr, file=sys.stderr)
            return 2
        theirs = json.loads(r.stdout.strip().splitlines()[-1])
    mine = [ours(*c) for c in cases]
    worst = {k: max(abs(m[k] - t[k]) for m, t in zip(mine, theirs)) for k in ("vus_pr", "auc_pr", "range_f1")}
    print(f"{len(cases)} cases (length 300..3000, 1..6 ranges, buffer 0..29 points)")
    for k, v in worst.items():
        print(f"  {k:9s} max |faultlab - TSB-AD| = {v:.3e}   (faultlab mean {np.mean([m[k] for m in mine]):.4f})")
    ok = all(v <= 1e-6 for v in worst.values())
    print("agree to 1e-6" if ok else "DISAGREE beyond 1e-6")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
