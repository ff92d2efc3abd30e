"""The README's score table: every baseline and both example plugins on each
published dataset, with 95% bootstrap CIs over runs.

    python3 perf/dataset_table.py [datasets/faultlab-hw-v1 datasets/faultlab-sw-v1] [--split all|test]

Offline scoring gives event F1, window-level MCC and VUS-PR; an online replay (1 s
clock) gives the detection latency. The example plugins are loaded from
``examples/detectors/`` by ``module:Class`` (no install needed). No baseline trains,
so ``--split all`` (the default) scores every run; ``test`` scores the test split only.
Prints a Markdown table and writes ``scores-<dataset>.json`` beside each dataset.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DETECTORS = [("peer-median", "peer-median"), ("temporal-z", "temporal-z"), ("arrival-late", "arrival-late"),
             ("random", "random"), ("constant", "constant"),
             ("pyod-iforest (example)", "faultlab_iforest:IForestDetector"), ("ruptures-pelt (example)", "faultlab_pelt:PeltDetector")]


def cell(m: dict, key: str, digits: int = 2) -> str:
    v, ci = m[key]["value"], m[key]["ci"]
    if v is None or v != v:
        return "-"
    lo, hi = ci
    return f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]" if lo == lo else f"{v:.{digits}f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("datasets", nargs="*", default=[str(ROOT / "datasets" / "faultlab-hw-v1"), str(ROOT / "datasets" / "faultlab-sw-v1")])
    ap.add_argument("--split", default="all", choices=["all", "test"])
    a = ap.parse_args()
    sys.path[:0] = [str(ROOT / "examples" / "detectors" / "pyod-iforest"), str(ROOT / "examples" / "detectors" / "ruptures-pelt")]
    from faultlab.scoring.api import score_dataset

    specs = [s for _, s in DETECTORS]
    print("| dataset | detector | event F1 | window MCC | VUS-PR | latency median (s, replay) |")
    print("|---|---|---|---|---|---|")
    for ds in a.datasets:
        off = score_dataset(specs, ds, split=a.split, n_boot=1000, by="fault_type")
        rep = score_dataset(specs, ds, split=a.split, n_boot=1000, mode="replay", by=None)
        dump = {}
        for (label, _), o, r in zip(DETECTORS, off, rep):
            print(f"| {Path(ds).name} ({o.n_runs} runs) | {label} | {cell(o.metrics, 'event_f1')} | {cell(o.metrics, 'window_mcc')} | "
                  f"{cell(o.metrics, 'vus_pr')} | {cell(r.metrics, 'latency_median_s', 1)} |", flush=True)
            dump[label] = {"offline": o.to_dict(), "replay": r.to_dict()}
        (Path(ds).parent / f"scores-{Path(ds).name}.json").write_text(json.dumps(dump, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
