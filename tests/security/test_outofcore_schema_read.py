"""The out-of-core labeler reads the first steps file's schema (whether it has a
``dataloader_s`` column) as it reads every steps file: below the run folder with no
link followed, a regular file only, its footer bounded. The run folder's owner may
swap that file for a FIFO or a link between the scan, which read it, and that read:
root's labeler must stop in one line naming the file (BadInput, exit 2), never wait on
the FIFO for good.

The swap is made deterministic: root's real ``label --out-of-core`` runs with the
grid check that comes right after the scan wrapped so that, the first time, it puts
a FIFO at the steps file's name.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from faultlab.report.synthetic import make_run

pytest.importorskip("distributed", reason="dask.distributed is the 'scale' extra: pip install -e '.[scale]'")

#: root's label --out-of-core of argv[1], the steps file argv[2] made a FIFO after the scan
_FIFO_AFTER_SCAN = r"""
import os, sys
from faultlab import cli
from faultlab.labeler import outofcore

target, check, done = sys.argv[2], outofcore.check_grid_size, []

def swapped(*a, **k):
    if not done:
        done.append(1)
        os.rename(target, target + ".kept")
        os.mkfifo(target)
    return check(*a, **k)

outofcore.check_grid_size = swapped
sys.argv = ["faultlab", "label", sys.argv[1], "--out-of-core"]
cli.main()
"""


def test_a_steps_file_swapped_for_a_fifo_after_the_scan_stops_the_labeler_in_one_line(tmp_path):
    run = make_run(tmp_path / "run", ranks=2, duration_s=20, label=False)
    try:
        cp = subprocess.run([sys.executable, "-P", "-c", _FIFO_AFTER_SCAN, str(run), str(run / "steps.parquet")],
                            capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("root's labeler waited on the FIFO put at the steps file's name")
    err = cp.stderr.strip().splitlines()
    assert (run / "steps.parquet.kept").exists(), "the steps file was not swapped after the scan"
    assert cp.returncode == 2 and len(err) == 1 and "steps.parquet" in err[-1], (cp.returncode, cp.stderr[-1500:])
