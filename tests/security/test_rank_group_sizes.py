"""Root's labeling of a run someone else made (``faultlab label RUN``) costs its ranks,
never their square when each rank names a peer group of its own: the step grid finds
each group's ranks by one sort (``peergroups.group_columns``), not by a pass over every
rank for each group.

The run folder is nobody's, its steps table rewritten to 150,000 ranks of two steps,
each rank its own peer group (a few MB). Root's label runs under a CPU-time limit (the
work done, not wall time on a loaded host).
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faultlab import schema
from faultlab.report.synthetic import make_run
from tests.helpers import FL, ROOT, give_to_nobody

pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("prlimit"), reason="needs root (the run is nobody's) and prlimit")

RANKS = 150_000


def test_a_run_whose_every_rank_is_its_own_peer_group_is_labeled_by_its_ranks_not_their_square(tmp_path):
    """150,000 ranks, each its own group: 2.25e10 compares by a pass per group (without the bound:
    past the 120 CPU seconds the labeler may use; some 30 after)."""
    run = make_run(tmp_path / "run", ranks=2, duration_s=20, label=False)
    for p in run.glob("steps*"):
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    n = 2 * RANKS
    rank = np.tile(np.arange(RANKS), 2)
    step = np.repeat(np.arange(2), RANKS)
    nan = np.full(n, np.nan)
    t = pa.table({"run_id": pa.array([run.name] * n), "rank": pa.array(rank, pa.int32()), "node": pa.array(["n0"] * n),
                  "peer_group": pa.array([f"g{r}" for r in rank]), "step": pa.array(step, pa.int64()),
                  "t_start": pa.array(1.8e9 + step * 0.1), "compute_s": pa.array(np.full(n, 0.05)),
                  "comm_s": pa.array(np.full(n, 0.01)), "step_s": pa.array(np.full(n, 0.1)),
                  "gc_s": pa.array(nan), "tokens": pa.array(nan), "dataloader_s": pa.array(nan)}, schema=schema.STEPS)
    pq.write_table(t, run / "steps.parquet")
    give_to_nobody(run)
    cp = subprocess.run(["prlimit", "--cpu=120", f"--as={3 << 30}", "--", *FL, "label", str(run)], capture_output=True, text=True,
                        timeout=900, cwd=tmp_path)
    err = cp.stderr.strip()
    assert cp.returncode == 0 and "Traceback" not in err, (cp.returncode, err[-2000:])
    assert (run / "labels.parquet").is_file()
