"""Root's per-step labels of a run someone else made (``dataset export`` of their
dataset, ``dataset build`` of their runs: :func:`faultlab.datasets.steplabels.step_labels`)
cost the run's labels and steps, never their product: each label paints the steps of
its range not painted yet, never tests every step.

The dataset is a copy of the published one, one run's steps and labels rewritten (a few
MB) and its manifest rewritten to match, as anyone handing over a dataset may. Root's
export runs under a CPU-time limit (the work done, not wall time on a loaded host).
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

#: steps a rank, and labels (each on one of the two ranks): 200,000 of each
STEPS = 100_000
LABELS = 200_000


def _rewrite(part: Path, frame_of) -> None:
    old = pq.read_table(part)
    pq.write_table(pa.Table.from_pandas(frame_of(old.to_pandas()), preserve_index=False, schema=old.schema), part)


def test_a_dataset_run_of_many_labels_and_steps_is_exported_by_its_rows_not_their_product(tmp_path):
    """2 ranks x 100,000 steps and 200,000 labels: a test of every step row against
    every label is 4e10 compares (without the bound: past the 120 CPU seconds the export may use;
    some 5 after)."""
    ds = tmp_path / "ds"
    shutil.copytree(SW_DATASET, ds)
    rid = json.loads((ds / "splits.json").read_text())["test"][0]

    def steps(df):
        out = df.iloc[np.zeros(2 * STEPS, int)].reset_index(drop=True)
        out["rank"] = np.tile([0, 1], STEPS).astype(out["rank"].dtype)
        out["step"] = np.repeat(np.arange(STEPS), 2).astype(out["step"].dtype)
        out["t_start"] = 1.8e9 + out["step"].to_numpy(np.float64)
        return out

    def labels(df):
        out = df.iloc[np.zeros(LABELS, int)].reset_index(drop=True)
        out["component"] = np.where(np.arange(LABELS) % 2 == 0, "rank:0", "rank:1")
        out["start_ts"] = 1.8e9 + np.arange(LABELS) / 2.0
        out["end_ts"] = out["start_ts"] + 0.25
        out["start_step"] = None
        out["end_step"] = None
        out["label_id"] = [f"{rid}#{k}" for k in range(LABELS)]
        return out

    _rewrite(ds / "data" / "steps" / f"run={rid}" / "part-0.parquet", steps)
    _rewrite(ds / "data" / "labels" / f"run={rid}" / "part-0.parquet", labels)
    listed = manifest.read(ds)
    (ds / manifest.NAME).write_text(manifest.text({rel: hashlib.sha256((ds / rel).read_bytes()).hexdigest() for rel in listed}))
    give_to_nobody(ds)
    cp = subprocess.run(["prlimit", "--cpu=120", f"--as={3 << 30}", "--", *FL, "dataset", "export", str(ds), "--out", str(tmp_path / "out")],
                        capture_output=True, text=True, timeout=900, cwd=tmp_path)
    err = cp.stderr.strip()
    assert cp.returncode == 0 and "Traceback" not in err, (cp.returncode, err[-2000:])
    series = tmp_path / "out" / "multivariate" / f"{rid}-rank0.test.csv"
    assert series.is_file(), sorted(p.name for p in (tmp_path / "out" / "multivariate").iterdir())[:10]
