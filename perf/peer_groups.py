"""How far the peer-group rule is from splitting the jobs it must leave whole, and
whether a job of one group labels exactly as it did.

    python3 perf/peer_groups.py [--public DIR]

For every run of the published datasets (``datasets/*/``) and every PAI mini-batch job
(``DIR/alibaba-pai-minibatch``, default ``$FAULTLAB_PUBLIC_DATA`` or
``../shared/datasets/public``): the groups :func:`faultlab.labeler.peergroups.discover`
finds with the defaults, and the *critical* ``group_gap_sigmas``: the largest value at
which the job would still be cut (found by bisection with the rule itself, the wide
cut at ``peer_threshold`` and ``mad_k`` as in the defaults; 0 when no gap passes
``group_min_gap`` at all). A job whose critical value is under the default (6)
stays one group unless a wide cut holds (then it reads 1000). For the published runs it also labels each run with this
checkout and says whether the labels equal the stored ones (a job of one group must
label as before).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from faultlab.datasets.layout import Dataset
from faultlab.datasets.steplabels import with_label_ids
from faultlab.labeler import LabelerConfig, label
from faultlab.labeler.grid import StepGrid
from faultlab.labeler.peergroups import discover

REPO = Path(__file__).resolve().parents[1]


def critical_sigmas(X: np.ndarray, cfg: LabelerConfig) -> float:
    """The largest ``group_gap_sigmas`` at which ``X`` ``(S, C)`` is cut into more than
    one group (bisection to 0.01 over 0..1000; 0.0 when it never is)."""
    decl = np.array(["g"] * X.shape[1], dtype=object)

    def cut(k: float) -> bool:
        g, _, _ = discover(X, decl, replace(cfg, group_gap_sigmas=k))
        return len(set(g.tolist())) > 1

    if not cut(0.0):
        return 0.0
    lo, hi = 0.0, 1000.0
    if cut(hi):
        return hi
    while hi - lo > 0.01:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if cut(mid) else (lo, mid)
    return round(lo, 2)


def _same(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    def norm(df):
        df = df.reset_index(drop=True).astype(object)
        return df.where(pd.notna(df), None)
    return norm(a)[list(b.columns)].equals(norm(b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--public", type=Path, default=Path(os.environ.get("FAULTLAB_PUBLIC_DATA") or REPO.parent / "shared" / "datasets" / "public"))
    a = ap.parse_args()
    cfg = LabelerConfig()
    print(f"defaults: group_gap_sigmas {cfg.group_gap_sigmas}, group_min_gap {cfg.group_min_gap}")
    for ds in sorted((REPO / "datasets").iterdir()):
        if not (ds / "runs.json").is_file():
            continue
        d = Dataset(ds)
        crit, split, differ, n = [], 0, 0, 0
        for rid in d.run_ids("all"):
            run = d.read_run(rid)
            g = StepGrid.from_steps(run.steps)
            crit.append(critical_sigmas(np.asarray(g.compute, dtype=np.float64), cfg))
            new = with_label_ids(label(run.steps, injections=run.injections, host=run.host), rid)
            split += crit[-1] >= cfg.group_gap_sigmas
            differ += not _same(new, run.labels)
            n += 1
        print(f"{ds.name}: {n} runs, {split} cut into groups, {differ} label(s) differ from the stored; "
              f"critical group_gap_sigmas max {max(crit):.2f}, median {np.median(crit):.2f}")
    pai = a.public / "alibaba-pai-minibatch"
    for f in sorted(pai.glob("job_*_norm.csv")) if pai.is_dir() else []:
        df = pd.read_csv(f)
        X = df.pivot_table(index="time", columns="worker", values="batch_time_norm").to_numpy(np.float64)
        g, lv, calm = discover(X, np.array(["job"] * X.shape[1], dtype=object), cfg)
        groups = {k: [j for j in range(X.shape[1]) if g[j] == k] for k in sorted(set(g.tolist()))}
        print(f"PAI {f.stem}: critical group_gap_sigmas {critical_sigmas(X, cfg):.2f}; calm samples {calm[0][0]}-{calm[0][1]} and {len(calm) - 1} block(s) as calm; "
              f"groups (worker columns) {groups}")


if __name__ == "__main__":
    main()
