"""The README's score table: every baseline and both example plugins on each
published dataset, with 95% bootstrap CIs over runs.

    python3 perf/dataset_table.py [datasets/faultlab-hw-v1 datasets/faultlab-sw-v1] [--split all|test]

The columns are those of :mod:`faultlab.scoring.table` (the demo's summary uses the
same): event F1, window F1 and the point-adjusted window F1 beside it (inflated, for
comparison with papers only), window-level MCC and VUS-PR offline; an online replay
(1 s clock) gives the detection latency (and its own, online VUS-PR, in the JSON). The example plugins are loaded from
``examples/detectors/`` by ``module:Class`` (no install needed). No baseline trains,
so ``--split all`` (the default) scores every run; ``test`` scores the test split only.
``random`` is the mean of 20 independent draws (its chance level: one draw of a few
hundred cells spreads by about 0.06 of MCC from seed to seed).
Prints a Markdown table and writes ``scores-<dataset>.json`` beside each dataset.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DETECTORS = [("peer-median", "peer-median"), ("temporal-z", "temporal-z"), ("arrival-late", "arrival-late"),
             ("random", ("random", {"draws": 20})), ("constant", "constant"),
             ("pyod-iforest (example)", "faultlab_iforest:IForestDetector"), ("ruptures-pelt (example)", "faultlab_pelt:PeltDetector")]


def _published(result: dict) -> dict:
    """A score result as a published file holds it: its ``source`` relative to the
    repository (``datasets/NAME``), never this machine's absolute path."""
    src = Path(result.get("source") or "")
    if src.is_absolute() and src.resolve().is_relative_to(ROOT):
        result["source"] = str(src.resolve().relative_to(ROOT))
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("datasets", nargs="*", default=[str(ROOT / "datasets" / "faultlab-hw-v1"), str(ROOT / "datasets" / "faultlab-sw-v1")])
    ap.add_argument("--split", default="all", choices=["all", "test"])
    a = ap.parse_args()
    sys.path[:0] = [str(ROOT / "examples" / "detectors" / "pyod-iforest"), str(ROOT / "examples" / "detectors" / "ruptures-pelt")]
    from faultlab.scoring import table
    from faultlab.scoring.api import score_dataset

    specs = [s if isinstance(s, tuple) else (s, None) for _, s in DETECTORS]
    labels = [lab for lab, _ in DETECTORS]
    header = True
    for ds in a.datasets:
        off = score_dataset(specs, ds, split=a.split, n_boot=1000, by="fault_type")
        rep = score_dataset(specs, ds, split=a.split, n_boot=1000, mode="replay", by=None)
        lines = table.markdown(table.rows(labels, off, rep), dataset=Path(ds).name)
        print("\n".join(lines if header else lines[2:]), flush=True)
        header = False
        dump = {lab: {"offline": _published(o.to_dict()), "replay": _published(r.to_dict())} for lab, o, r in zip(labels, off, rep)}
        (Path(ds).parent / f"scores-{Path(ds).name}.json").write_text(json.dumps(dump, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
