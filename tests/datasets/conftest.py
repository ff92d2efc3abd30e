"""Fixtures of the dataset tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from faultlab.datasets.synthetic import make_run
from tests.helpers import SW_DATASET, fl


@pytest.fixture
def dataset(tmp_path) -> Path:
    """A copy of the published faultlab-sw-v1 to change freely (skips without it)."""
    if not (SW_DATASET / "splits.json").is_file():
        pytest.skip(f"no published dataset at {SW_DATASET}")
    d = tmp_path / "ds"
    shutil.copytree(SW_DATASET, d)
    return d


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    root = tmp_path_factory.mktemp("camp")
    for i in range(5):
        make_run(root / f"run-{i}", f"c{i}", seed=i, fault_type=["cpu-contention", "io-slow"][i % 2])
    return root


@pytest.fixture()
def ds(campaign, tmp_path):
    camp_file = tmp_path / "c.yaml"
    camp_file.write_text("name: c\nruns: 5\ntypes: {cpu-contention: {params: {cpu_fraction: [0.25]}}}\n")  # a valid campaign: build checks it
    p = fl("dataset", "build", "--campaign", campaign, "--name", "t-v1", "--split", "test=0.4", "--seed", "3",
                 "--out", tmp_path, "--campaign-file", camp_file)
    assert p.returncode == 0, p.stderr
    return tmp_path / "t-v1"
