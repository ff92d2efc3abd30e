"""The disk-backed data path never lets another user steer where root writes:
``benchmarks/diskdata.py`` opens its folders through ``faultlab.safefs``.

Real folders, real owners: a shared sticky folder like ``/var/tmp`` (root, 1777) in
which user ``nobody`` (65534) planted the data folder, a symlink to a victim folder,
or the run's subfolder; the rank (this root process) must refuse each before writing
anything, and leave the victim untouched."""

from __future__ import annotations

import os

import numpy as np
import pytest

from faultlab.benchmarks.diskdata import DiskData
from faultlab.safefs import UntrustedPath
from tests.helpers import needs_root

NOBODY = 65534
SHARDS = [(np.ones((4, 2), np.float32), np.zeros((4, 1), np.float32))]


@pytest.fixture
def shared(tmp_path):
    """A root-owned sticky world-writable folder (what /var/tmp is)."""
    d = tmp_path / "vartmp"
    d.mkdir()
    os.chmod(d, 0o1777)
    os.chmod(tmp_path, 0o755)
    return d


@needs_root
def test_a_data_folder_planted_by_another_user_is_refused(shared):
    planted = shared / "faultlab-data"
    planted.mkdir(mode=0o755)
    os.chown(planted, NOBODY, NOBODY)
    with pytest.raises(UntrustedPath, match="owned by uid 65534"):
        DiskData(planted, "run1", 0, SHARDS)
    assert list(planted.iterdir()) == [], "root wrote into another user's folder"


@needs_root
def test_a_symlinked_data_folder_is_refused_and_its_target_untouched(shared, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    os.symlink(victim, shared / "faultlab-data")
    with pytest.raises(UntrustedPath, match="symlink"):
        DiskData(shared / "faultlab-data", "run1", 0, SHARDS)
    assert list(victim.iterdir()) == [], "root wrote through a planted link"


@needs_root
def test_a_run_folder_planted_by_another_user_is_refused(shared):
    data = shared / "faultlab-data"
    data.mkdir(mode=0o755)  # ours (root), as a previous run made it
    planted = data / "run1"
    planted.mkdir(mode=0o777)
    os.chown(planted, NOBODY, NOBODY)
    os.symlink("/etc/faultlab-victim-never-made", planted / "rank0")
    with pytest.raises(UntrustedPath):
        DiskData(data, "run1", 0, SHARDS)
    assert not os.path.lexists("/etc/faultlab-victim-never-made")


def test_the_ranks_folders_are_private_and_removed(tmp_path):
    d = DiskData(tmp_path / "data", "run1", 3, SHARDS)
    try:
        assert oct(os.stat(tmp_path / "data" / "run1").st_mode & 0o777) == "0o700"
        assert oct(os.stat(d.dir).st_mode & 0o777) == "0o700"
        assert oct(os.stat(d.dir / "shard-0.bin").st_mode & 0o777) == "0o600"
        d.checkpoint(b"x" * 100)
    finally:
        d.close()
    d.close()  # twice: no error
    assert not (tmp_path / "data" / "run1").exists() and (tmp_path / "data").is_dir()
