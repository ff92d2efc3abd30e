"""Root never hashes more of a dataset someone handed it than a dataset holds: each
file its manifest lists is bounded (4 GiB), and so is their sum, checked from their
sizes before any is hashed. Sparse files cost their maker no disk: a manifest listing
20 of them, just under 4 GiB each, had ``dataset verify`` (and ``score``, ``report``,
``export``, ``relabel``, which check the manifest first) hash 80 GiB of zeros, and any
number of them would be hashed for as long.
"""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from faultlab.datasets import manifest
from tests.helpers import FL, REPO, ROOT, give_to_nobody

FILES = 20
pytestmark = pytest.mark.skipif(not ROOT, reason="needs root (the dataset is nobody's)")


def test_a_manifest_of_many_sparse_files_is_refused_before_any_is_hashed(tmp_path):
    ds = tmp_path / "ds"
    shutil.copytree(REPO / "datasets" / "faultlab-sw-v1", ds)
    pad = ds / "data" / "pad"
    pad.mkdir()
    digests = {f.relative_to(ds).as_posix(): manifest.sha256(f, ds) for f in manifest._files(ds)}
    for i in range(FILES):
        with open(pad / f"{i}.bin", "wb") as f:
            f.truncate(manifest.MAX_FILE_BYTES - 1)
        digests[f"data/pad/{i}.bin"] = "0" * 64
    (ds / manifest.NAME).write_text(manifest.text(digests))
    give_to_nobody(ds)
    t0 = time.monotonic()
    cp = subprocess.run([*FL, "dataset", "verify", str(ds)], capture_output=True, text=True, timeout=60)
    err = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(err) == 1 and manifest.NAME in err[0] and "all together" in err[0], cp.stderr[-800:]
    assert time.monotonic() - t0 < 30
