"""Fixtures of the dataset tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from faultlab.datasets.synthetic import make_run
from tests.helpers import PUBLIC, PUBLIC_BUILD, PUBLIC_COLLECTIONS, PUBLIC_HINT, PUBLISHED, REPO, SW_DATASET, fl, public_sources_present


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


@pytest.fixture(scope="session")
def public_datasets(tmp_path_factory) -> Path:
    """The folder of the public collections (:data:`PUBLIC_COLLECTIONS`), built once a
    session by ``examples/public/build.sh`` from the public traces, as a user builds them
    (the repository commits none); skips without the traces."""
    if not public_sources_present():
        pytest.skip(f"public traces not found at {PUBLIC}: {PUBLIC_HINT}")
    out = tmp_path_factory.mktemp("public")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}  # this venv's faultlab
    p = subprocess.run(["bash", PUBLIC_BUILD, PUBLIC, out], capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert sorted(d.name for d in out.iterdir()) == sorted(PUBLIC_COLLECTIONS)
    return out


@pytest.fixture(params=PUBLISHED)
def published(request) -> Path:
    """The folder of one published dataset (:data:`PUBLISHED`): a public collection is
    the session's build of it (:func:`public_datasets`)."""
    if request.param in PUBLIC_COLLECTIONS:
        return request.getfixturevalue("public_datasets") / request.param
    return REPO / "datasets" / request.param
