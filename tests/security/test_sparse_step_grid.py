"""Root never sizes a run's step x rank grid by the product of what a small steps table
names: a table whose rows each name a new step and a new rank (a diagonal) is one
line naming ``steps``, before any array of the grid is made.

60,000 such rows (1 MB of Parquet, nobody's run folder) would have ``label``, ``score
--run`` and ``report`` ask for 27 GiB a column. Root's commands run under an address-space
limit (``prlimit``), so a miss fails here instead of filling the host.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faultlab import schema
from faultlab.report.synthetic import make_run
from tests.helpers import FL, ROOT, give_to_nobody

LIMIT = ["prlimit", f"--as={3 << 30}", "--"]
#: rows of the diagonal: a grid of ROWS**2 cells (3.6e9), 27 GiB of float64
ROWS = 60_000
pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("prlimit"), reason="needs root (the run is nobody's) and prlimit")


def _diagonal_run(tmp_path: Path) -> Path:
    """A labeled run folder of nobody's whose steps table is then ROWS rows, row i rank i at step i."""
    run = make_run(tmp_path / "run", ranks=2, duration_s=20)
    for p in run.glob("steps*"):
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    i = np.arange(ROWS)
    nan = np.full(ROWS, np.nan)
    t = pa.table({"run_id": pa.array([run.name] * ROWS), "rank": pa.array(i, pa.int32()), "node": pa.array(["n0"] * ROWS),
                  "peer_group": pa.array(["g"] * ROWS), "step": pa.array(i, pa.int64()),
                  "t_start": pa.array(1.8e9 + i * 0.1), "compute_s": pa.array(np.full(ROWS, 0.05)),
                  "comm_s": pa.array(np.full(ROWS, 0.01)), "step_s": pa.array(np.full(ROWS, 0.1)),
                  "gc_s": pa.array(nan), "tokens": pa.array(nan), "dataloader_s": pa.array(nan)}, schema=schema.STEPS)
    pq.write_table(t, run / "steps.parquet")
    give_to_nobody(run)
    return run


@pytest.mark.parametrize("args", [["label"], ["label", "--out-of-core"], ["score", "--detector", "peer-median", "--run"],
                                  ["report", "--out", "{out}"]],
                         ids=["label", "label-out-of-core", "score-run", "report"])
def test_a_steps_table_naming_a_new_step_and_rank_each_row_is_refused_before_its_grid_is_made(tmp_path, args):
    run = _diagonal_run(tmp_path)
    argv = [a.replace("{out}", str(tmp_path / "page.html")) for a in args]
    cp = subprocess.run([*LIMIT, *FL, *argv, str(run)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    err = cp.stderr.strip()
    assert cp.returncode == 2, err[-2000:]
    assert "Traceback" not in err and "allocate" not in err, err[-2000:]
    assert "distinct steps" in err and "distinct ranks" in err and "steps" in err, err[-2000:]
    assert not (tmp_path / "page.html").exists()
