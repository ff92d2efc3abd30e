"""A steps writer SIGKILLed mid-write leaves its temporaries in the run folder (the
block folder ``.steps-*/`` of ``steptable.BlockWriter``, the staged ``.steps-*.parquet``
of a single-file table); the next steps write in that folder removes them, named as
they are for their maker's PID and start time (``faultlab.workdirs``). It never
touches a live writer's, another user's, or a link of such a name.

The kill is made at a fixed point, not timed: a child Python SIGKILLs itself once the
writer has made its temporary.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from faultlab import steptable, workdirs
from faultlab.report.synthetic import make_run
from tests.helpers import ROOT

NOBODY = 65534
#: the prefix of a steps writer's temporaries in a run folder
PREFIX = ".steps-"

#: the child: a block writer of the run folder argv[1], SIGKILLed once its folder is made
KILLED_IN_BLOCK_WRITE = """
import os, signal, sys
from faultlab import steptable
steptable.BlockWriter(sys.argv[1], block_steps=1).__enter__()
os.kill(os.getpid(), signal.SIGKILL)
"""

#: the child: a single-file steps write of the run folder argv[1], SIGKILLed once its file is staged
KILLED_IN_FILE_WRITE = """
import os, signal, sys
import pandas as pd
from faultlab import steptable
steptable.pq.write_table = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
steptable.write_steps(sys.argv[1], pd.read_parquet(os.path.join(sys.argv[1], "steps.parquet")))
"""


def _killed(script: str, run: Path) -> None:
    cp = subprocess.run([sys.executable, "-P", "-c", script, str(run)], capture_output=True, text=True, timeout=120)
    assert cp.returncode == -9, (cp.returncode, cp.stderr[-1500:])


def _left(run: Path) -> list[str]:
    return sorted(n for n in os.listdir(run) if n.startswith(PREFIX))


@pytest.fixture
def run(tmp_path) -> Path:
    d = tmp_path / "run"
    make_run(d, ranks=2, duration_s=5, label=False)
    return d


def test_a_killed_block_writers_folder_is_removed_by_the_next_write_and_nothing_else(run, tmp_path):
    _killed(KILLED_IN_BLOCK_WRITE, run)
    [killed] = _left(run)
    maker = re.fullmatch(r"\.steps-([0-9]+-[0-9]+-).*", killed)
    assert maker, f"{killed} is not named for its maker"
    live = Path(workdirs.make(run, PREFIX)).name  # this process's: alive
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("x")
    link = f"{PREFIX}{maker.group(1)}linkxxxx"
    os.symlink(target, run / link)
    kept = [live, link]
    if ROOT:
        other = f"{PREFIX}{maker.group(1)}otherusr"
        (run / other).mkdir()
        os.chown(run / other, NOBODY, NOBODY)
        kept.append(other)
    steptable.write_steps(run, pd.read_parquet(run / "steps.parquet"), partition_rows=1)
    assert _left(run) == sorted(kept)
    assert (target / "keep").exists()
    assert steptable.count_rows(run / steptable.STEPS_DIR) > 0


def test_a_killed_file_writers_staged_file_is_removed_by_the_next_write(run):
    _killed(KILLED_IN_FILE_WRITE, run)
    [killed] = _left(run)
    assert re.fullmatch(r"\.steps-[0-9]+-[0-9]+-[0-9a-f]{12}\.parquet", killed), f"{killed} is not named for its maker"
    steptable.write_steps(run, pd.read_parquet(run / "steps.parquet"))
    assert _left(run) == []
