"""Every page faultlab writes shows text others wrote (run, fault, detector and dataset
names, a submitted leaderboard.json's) and is opened in a browser: each forbids every
script and every request but its own ``data:`` images (Content-Security-Policy
``default-src 'none'``), so text that escaped the templates' escaping still could not
run or call out.
"""

from __future__ import annotations

import re

from faultlab.report.html import write_report
from faultlab.report.synthetic import make_run
from faultlab.scoring.leaderboard import compute, render
from tests.helpers import REPO

POLICY = """<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'">"""


def _policy_first(page: str) -> bool:
    """The policy is in the head before anything another party wrote (the title on)."""
    head = re.search(r"<head>(.*?)<title>", page, re.S | re.I)
    return head is not None and POLICY in head.group(1)


def test_the_run_and_leaderboard_pages_forbid_scripts_and_requests(tmp_path):
    run = make_run(tmp_path / "run", ranks=2, duration_s=10)
    assert _policy_first(write_report(run, tmp_path / "run.html").read_text())
    board = compute.build([REPO / "datasets" / "faultlab-hw-v1"], ["constant"], split="test", n_boot=20)
    f = tmp_path / "leaderboard.json"
    f.write_text(render.to_json(board))
    assert _policy_first(write_report(f, tmp_path / "lb.html").read_text())
