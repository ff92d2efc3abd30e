"""Fixtures of the dataset tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import SW_DATASET


@pytest.fixture
def dataset(tmp_path) -> Path:
    """A copy of the published faultlab-sw-v1 to change freely (skips without it)."""
    if not (SW_DATASET / "splits.json").is_file():
        pytest.skip(f"no published dataset at {SW_DATASET}")
    d = tmp_path / "ds"
    shutil.copytree(SW_DATASET, d)
    return d
