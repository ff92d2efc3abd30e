"""The names a report draws are whoever made the run's, the dataset's or the
leaderboard's: a fault type, a node, a detector, a submitted detector's label. They are
drawn as written. matplotlib parsed text between two ``$`` as TeX math, so one name
holding ``$\\undefined$`` (or ``${$``) ended ``faultlab report`` in the math
parser's traceback, exit 1, with no page.
"""

from __future__ import annotations

import json
import re

import pytest

from faultlab.report.html import write_report
from faultlab.report.synthetic import make_run
from faultlab.scoring.leaderboard import compute, render
from tests.helpers import REPO

import pyarrow as pa
import pyarrow.parquet as pq

#: text the math parser refuses: an unknown command, an unclosed brace
PAYLOADS = {"unknown-command": "$\\undefined$", "unclosed-brace": "${$"}


def _with(path, column: str, suffix: str) -> None:
    t = pq.read_table(path)
    i = t.schema.get_field_index(column)
    t = t.set_column(i, column, pa.array([f"{v}{suffix}" for v in t.column(column).to_pylist()], pa.string()))
    pq.write_table(t, path)


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_a_runs_fault_types_and_nodes_holding_dollar_signs_are_drawn_as_text(tmp_path, payload):
    run = make_run(tmp_path / "run", ranks=2, duration_s=10)
    _with(run / "injections.parquet", "fault_type", payload)
    _with(run / "host.parquet", "node", payload)
    doc = json.loads((run / "metrics.json").read_text())
    doc["rows"][0]["detector"] += payload
    (run / "metrics.json").write_text(json.dumps(doc))
    page = write_report(run, tmp_path / "page.html").read_text()
    assert payload in page and re.search(r'<img[^>]+src="data:image/png;base64,', page)


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_a_submitted_leaderboards_detector_label_holding_dollar_signs_is_drawn_as_text(tmp_path, payload):
    board = compute.build([REPO / "datasets" / "faultlab-hw-v1"], ["constant"], split="test", n_boot=20)
    doc = json.loads(render.to_json(board))
    doc["datasets"][0]["rows"][0]["detector"] = payload
    f = tmp_path / "leaderboard.json"
    f.write_text(json.dumps(doc))
    assert payload in write_report(f, tmp_path / "lb.html").read_text()
