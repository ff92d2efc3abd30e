"""Every published detector scores the two published datasets end to end, offline
and in replay, without error (a few runs each, to stay fast); its alarms name only
the runs' components."""

from __future__ import annotations

import math

import pytest

from faultlab.datasets.layout import Dataset
from faultlab.scoring.api import score_runs
from faultlab.scoring.published import BUILTIN
from tests.helpers import REPO

DATASETS = [REPO / "datasets" / "faultlab-hw-v1", REPO / "datasets" / "faultlab-sw-v1"]


@pytest.mark.parametrize("mode", ["offline", "replay"])
@pytest.mark.parametrize("path", DATASETS, ids=lambda p: p.name)
@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_scores_published_dataset(name, path, mode):
    if not (path / "splits.json").is_file():
        pytest.skip(f"no published dataset at {path}")
    ds = Dataset(path)
    runs = [ds.read_run(rid) for rid in ds.run_ids("test")[:2]]
    train = [ds.read_run(rid) for rid in ds.run_ids("train")[:3]]
    kept: list = []
    res = score_runs(name, runs, mode=mode, train_runs=train, keep_alarms=kept, n_boot=50)
    assert res.metrics["window_mcc"]["value"] is None or not math.isnan(res.metrics["window_mcc"]["value"])
    comps = {c for run in runs for c in ["job", *(f"rank:{r}" for r in run.steps["rank"].unique())]}
    for _, _, alarms in kept:
        assert set(alarms["component"]) <= comps
