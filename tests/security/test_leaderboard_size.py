"""Root's page of a leaderboard.json someone else submitted (``faultlab report FILE``;
``leaderboard --verify`` reads it through the same check) costs at most a bounded number
of datasets and rows: the page draws a figure a dataset and a CI bar a row and panel,
so a file of many rows is refused in one line, before anything is drawn.

The file is nobody's, 2.5 MB (the input bound is 16 MiB). Root's command runs under an
address-space and a CPU-time limit, so a miss fails here instead of holding the host.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from faultlab.scoring.leaderboard.compute import FORMAT, RANK_BY, settings_of
from faultlab.scoring.leaderboard import verify
from tests.helpers import FL, ROOT, give_to_nobody

pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("prlimit"), reason="needs root (the file is nobody's) and prlimit")

ROWS = 20_000


def _board(n: int) -> dict:
    ci = {"value": 0.5, "ci": [0.4, 0.6]}
    rows = [{"detector": f"d{k}", "params": {}, "metrics": {"window_mcc": ci, "event_f1": ci}} for k in range(n)]
    return {"format": FORMAT, "rank_by": RANK_BY, "settings": settings_of(),
            "datasets": [{"name": "x", "path": "x", "digest": "0", "run_ids": [], "rows": rows}]}


def test_a_leaderboard_of_twenty_thousand_rows_is_refused_before_its_page_is_drawn(tmp_path):
    """20,000 rows (without the bound: the page drew 40,000 CI bars, a MemoryError under the
    3 GiB limit, then killed at the 60 CPU seconds)."""
    src = tmp_path / "sub"
    src.mkdir()
    f = src / "leaderboard.json"
    f.write_text(json.dumps(_board(ROWS), separators=(",", ":")))
    give_to_nobody(src)
    cp = subprocess.run(["prlimit", "--cpu=60", f"--as={3 << 30}", "--", *FL, "report", str(f), "--out", str(tmp_path / "page.html")],
                        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    err = cp.stderr.strip()
    assert cp.returncode == 2, (cp.returncode, err[-2000:])
    assert "Traceback" not in err and len(err.splitlines()) == 1, err[-2000:]
    assert f"{ROWS} row(s)" in err and "at most" in err, err
    assert not (tmp_path / "page.html").exists()


def test_a_leaderboard_of_as_many_rows_as_it_may_hold_is_drawn(tmp_path):
    """The bound is no limit on an honest board: as many rows as it may hold make a page."""
    f = tmp_path / "leaderboard.json"
    f.write_text(json.dumps(_board(verify.MAX_ROWS), separators=(",", ":")))
    cp = subprocess.run([*FL, "report", str(f), "--out", str(tmp_path / "page.html")], capture_output=True, text=True,
                        timeout=600, cwd=tmp_path)
    assert cp.returncode == 0, cp.stderr[-2000:]
    assert (tmp_path / "page.html").stat().st_size > 0
