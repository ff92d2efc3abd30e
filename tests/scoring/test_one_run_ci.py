"""A score over one run has no confidence interval over runs: a bootstrap of one run
resamples that run only, and its zero-width "interval" would read as certainty. The
interval is undefined (``[null, null]`` with a ``ci_note`` in JSON), the text table
says ``n/a (1 run)``, the HTML table ``CI n/a: 1 run``; two runs still get one."""

from __future__ import annotations

import json
import re

from faultlab.report import write_report
from faultlab.report.synthetic import make_run
from tests.helpers import fl


def test_one_run_shows_no_interval_in_text_json_and_html(tmp_path):
    runs = [make_run(tmp_path / f"r{i}", ranks=4, duration_s=60, seed=i) for i in range(2)]
    one = fl("score", "--detector", "peer-median", "--run", runs[0], "--json", "--out", tmp_path / "one.json", timeout=300)
    assert one.returncode == 0, one.stderr[-2000:]
    doc = json.loads(one.stdout)
    assert doc["n_runs"] == 1 and "1 run" in doc["ci_note"]
    assert all(m["ci"] == [None, None] for m in doc["metrics"].values()), doc["metrics"]
    assert doc["metrics"]["window_mcc"]["value"] is not None

    text = fl("score", "--detector", "peer-median", "--run", runs[0], timeout=300).stdout
    assert re.search(r"window MCC.*n/a \(1 run\)", text), text

    page = write_report(tmp_path / "one.json", tmp_path / "one.html").read_text()
    assert "CI n/a: 1 run" in page
    assert not re.search(r"(-?\d\.\d+) \[\1, \1\]", page), "a zero-width interval is shown"

    two = json.loads(fl("score", "--detector", "peer-median", "--run", runs[0], "--run", runs[1], "--json", timeout=300).stdout)
    assert two["n_runs"] == 2 and "ci_note" not in two
    lo, hi = two["metrics"]["event_recall"]["ci"]
    assert lo is not None and hi is not None and lo <= two["metrics"]["event_recall"]["value"] <= hi
