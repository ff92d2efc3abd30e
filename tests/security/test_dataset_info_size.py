"""``dataset info`` (and the lines of ``dataset build`` and ``relabel``) counts the
dataset's size over its regular files only: a link another user leaves in a dataset
to a root-only file was followed, and the size root printed told them that file's."""

from __future__ import annotations

import json
import os
import shutil

from tests.helpers import SW_DATASET, fl


def test_dataset_info_counts_no_linked_files_size(tmp_path):
    ds = tmp_path / "ds"
    shutil.copytree(SW_DATASET, ds)
    cp = fl("dataset", "info", ds, "--json")
    assert cp.returncode == 0, cp.stderr[-800:]
    before = json.loads(cp.stdout)["size_mb"]
    secret = tmp_path / "secret.bin"
    with open(secret, "wb") as f:
        f.truncate(77_777_777)  # sparse: a size to notice
    os.chmod(secret, 0o600)
    (ds / "data" / "link.bin").symlink_to(secret)
    cp = fl("dataset", "info", ds, "--json")
    assert cp.returncode == 0, cp.stderr[-800:]
    assert json.loads(cp.stdout)["size_mb"] == before
