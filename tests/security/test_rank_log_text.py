"""A rank's log is its node's output (a container's root may write anything into it):
when a rank fails at the run's end, ``faultlab run`` quotes its log's tail in one line
with no escape sequence, never raw in a traceback.

Real ranks stand in for failed training processes: ``sh`` processes started as
``launch_ranks`` starts them (their output to their log), one printing an OSC title
sequence, a screen clear and a forged ``faultlab: error`` line and exiting 3, one
still running past the wait.
"""

from __future__ import annotations

import subprocess

import pytest

from faultlab.benchmarks.launch import RankProc
from faultlab.errors import FaultlabError
from faultlab.nodes.local import LocalNode
from faultlab.runner import wait_ranks_done

FORGED = "\x1b]0;PWNED\x07\x1b[2J\nfaultlab: error: forged line\n"


def _rank(tmp_path, rank: int, script: str) -> RankProc:
    log = tmp_path / f"rank{rank}.log"
    with open(log, "wb") as out:
        p = subprocess.Popen(["sh", "-c", script], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return RankProc(rank=rank, node=LocalNode(name="local"), popen=p, log_path=log)


@pytest.mark.parametrize("case", ["exits non-zero", "still running"])
def test_a_failed_ranks_log_reaches_the_error_as_one_printable_line(tmp_path, case):
    script = f"printf '{FORGED}'; " + ("exit 3" if case == "exits non-zero" else "exec sleep 60")
    ranks = [_rank(tmp_path, 0, "exit 0"), _rank(tmp_path, 1, script)]
    try:
        with pytest.raises(FaultlabError) as e:
            wait_ranks_done(ranks, timeout_s=5)
    finally:
        for r in ranks:
            r.popen.kill()
            r.popen.wait()
    msg = str(e.value)
    assert "\n" not in msg and "\x1b" not in msg and "\x07" not in msg, repr(msg)
    assert "forged line" in msg and "workload" in msg
