"""A run's steps table is bounded in rank-steps by the files that are read, not by a
count taken before the read: ``score --run`` (and a dataset build) read a run whole
only up to ``rundata.MAX_RUN_ROWS``, and ``label`` labels in memory only a run under
``outofcore.IN_MEMORY_ROWS``; both counted the table's footers and then listed and
opened its files again to read them. The run folder's owner can put a larger table at
the name in between (inotify tells them when root's count has closed the last file),
and root read it whole: the bound meant to keep a run in memory held no more.

The swap is made deterministic: root's real command runs with ``steptable.count_rows``
wrapped so that, once it has counted, a steps file of more rows is renamed over the
counted one. The bounds are set low in that process so the files stay small.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from faultlab import steptable
from faultlab.report.synthetic import make_run

#: root's ``faultlab ARGS`` (argv[4:]) with both bounds set to argv[3] rank-steps, and the
#: run's steps file argv[1] replaced by argv[2] (more rows) once it has been counted
_SWAP_AFTER_COUNT = r"""
import os, sys
from faultlab import cli, rundata, steptable
from faultlab.labeler import outofcore

target, bigger, bound = sys.argv[1], sys.argv[2], int(sys.argv[3])
rundata.MAX_RUN_ROWS = outofcore.IN_MEMORY_ROWS = bound
count, done = steptable.count_rows, []

def counted(path):
    n = count(path)
    if not done:
        done.append(n)
        os.replace(bigger, target)
    return n

steptable.count_rows = counted
sys.argv = ["faultlab", *sys.argv[4:]]
cli.main()
"""


@pytest.mark.parametrize("command", ["score-run", "label"])
def test_a_steps_table_grown_after_its_count_is_not_read_whole(tmp_path, command):
    run = make_run(tmp_path / "run", ranks=2, duration_s=20, label=command == "score-run")
    bigger = make_run(tmp_path / "other" / "run", ranks=2, duration_s=60, label=False) / steptable.STEPS_FILE
    counted, grown = steptable.count_rows(run / steptable.STEPS_FILE), steptable.count_rows(bigger)
    bound = (counted + grown) // 2
    argv = ["score", "--detector", "peer-median", "--boot", "20", "--run", str(run)] if command == "score-run" else ["label", str(run)]
    cp = subprocess.run([sys.executable, "-P", "-c", _SWAP_AFTER_COUNT, str(run / steptable.STEPS_FILE), str(bigger), str(bound), *argv],
                        capture_output=True, text=True, timeout=300)
    assert not bigger.exists(), "the larger steps file was not swapped in after the count"
    out = (cp.stdout + cp.stderr).strip()
    assert cp.returncode == 2 and "Traceback" not in out and len(cp.stderr.strip().splitlines()) == 1, (cp.returncode, out[-1500:])
    assert "rank-steps" in cp.stderr and f"{bound:,}" in cp.stderr, cp.stderr


def test_an_out_of_core_block_grown_after_its_check_is_not_read_by_a_worker(tmp_path, monkeypatch):
    """The labeler checks each stored block's rows from its footers before a worker
    reads it (``outofcore.check_blocks``); a worker opens the block's files again, so
    it reads at most that bound of the files it opens."""
    from faultlab.errors import BadInput
    from faultlab.labeler import outofcore

    run = make_run(tmp_path / "run", ranks=2, duration_s=20, label=False)
    files = [str(f) for f in steptable.files(run / steptable.STEPS_FILE)]
    monkeypatch.setattr(outofcore, "BLOCK_MAX_ROWS", steptable.count_rows(run / steptable.STEPS_FILE) - 1)
    with pytest.raises(BadInput, match="rank-steps"):
        outofcore._scan_block(files)
