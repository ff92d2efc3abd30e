"""Root's scoring of a dataset someone else handed over (``faultlab score --dataset``)
pools its runs' figures at the cost of its labels, never their product with the
bootstrap's resamples: the latencies' weighted quantiles take the resamples a block at
a time (not a resamples x latencies matrix at once), and a breakdown (``--by``) may
have at most ``aggregate.MAX_GROUPS`` groups (a run's labels name their own fault
types: each label's cause), else one line naming ``--by``, exit 2.

The dataset is a copy of the published one, one test run's labels rewritten (a few
MB) and its manifest rewritten to match, as anyone handing over a dataset may. Root's
command runs under an address-space limit and a CPU-time limit (the work done, not
wall time on a loaded host).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faultlab.datasets import manifest
from tests.helpers import FL, ROOT, SW_DATASET, give_to_nobody

pytestmark = [pytest.mark.skipif(not ROOT or not shutil.which("prlimit"), reason="needs root (the dataset is nobody's) and prlimit"),
              pytest.mark.skipif(not (SW_DATASET / "splits.json").is_file(), reason="no published dataset")]

#: labels in the rewritten run: 200,000 (some 2 MB of parquet)
LABELS = 200_000


def _dataset(tmp_path: Path, *, own_causes: bool) -> Path:
    """The published dataset with its first test run's labels made ``LABELS`` copies of
    its first label, each a millisecond (mod 1 s) later, so the constant detector finds
    every one; ``own_causes``: each label an unknown fault of a cause of its own."""
    ds = tmp_path / "ds"
    shutil.copytree(SW_DATASET, ds)
    rid = json.loads((ds / "splits.json").read_text())["test"][0]
    part = ds / "data" / "labels" / f"run={rid}" / "part-0.parquet"
    old = pq.read_table(part)
    df = old.to_pandas()
    out = df.iloc[np.zeros(LABELS, int)].reset_index(drop=True)
    out["start_ts"] = out["start_ts"].to_numpy() + (np.arange(LABELS) % 1000) * 1e-3
    out["label_id"] = [f"{rid}#{k}" for k in range(LABELS)]
    if own_causes:
        out["fault_id"] = [f"unknown-{k}" for k in range(LABELS)]
        out["cause"] = [f"cause-{k}" for k in range(LABELS)]
    pq.write_table(pa.Table.from_pandas(out, preserve_index=False, schema=old.schema), part)
    listed = manifest.read(ds)
    (ds / manifest.NAME).write_text(manifest.text({rel: hashlib.sha256((ds / rel).read_bytes()).hexdigest() for rel in listed}))
    give_to_nobody(ds)
    return ds


def _score(ds: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["prlimit", "--cpu=120", f"--as={3 << 30}", "--", *FL, "score", "--detector", "constant", "--dataset", str(ds), *args],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)


def test_a_dataset_of_many_detected_labels_is_bootstrapped_for_latency_a_block_of_resamples_at_a_time(tmp_path):
    """200,000 labels the constant detector finds, scored in replay mode with 1,000
    resamples: the latencies' running weights were one 1,000 x 200,015 matrix (1.5
    GiB) and its running sum another (without the bound: numpy's ``Unable to allocate``, a
    traceback, under the 3 GiB limit)."""
    cp = _score(_dataset(tmp_path, own_causes=False), tmp_path, "--mode", "replay", "--by", "none")
    err = cp.stderr.strip()
    assert cp.returncode == 0 and "Traceback" not in err, (cp.returncode, err[-2000:])
    assert "latency median" in cp.stdout, cp.stdout[-2000:]


def test_a_dataset_whose_every_label_names_a_fault_type_of_its_own_is_refused_a_breakdown_in_one_line(tmp_path):
    """200,000 labels, each an unknown fault of a cause of its own: the default
    breakdown by fault type was a bootstrap and a table row for each (without the bound: past the
    120 CPU seconds the scoring may use); now one line naming ``--by``, and ``--by
    none`` scores them."""
    ds = _dataset(tmp_path, own_causes=True)
    cp = _score(ds, tmp_path)
    err = cp.stderr.strip()
    assert cp.returncode == 2, (cp.returncode, err[-2000:])
    assert "Traceback" not in err and len(err.splitlines()) == 1 and "--by" in err and "--by none" in err, err[-2000:]
    cp = _score(ds, tmp_path, "--by", "none")
    assert cp.returncode == 0 and "Traceback" not in cp.stderr, (cp.returncode, cp.stderr[-2000:])
