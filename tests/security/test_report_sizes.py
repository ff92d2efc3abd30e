"""Root's page of a run someone else made (``faultlab report RUN``) costs what the run's
tables cost, never the square of the nodes its host table names: the host figure draws
at most ``plots.MAX_HOST_NODES`` nodes and ``plots.MAX_RTT_PEERS`` peers' RTT (its title
says how many are left out), and finds each node's series once; the lane chart draws
at most ``plots.MAX_LANE_BARS`` faults, labels and alarms each (its title says how many
are left out). The page of a scores file someone handed over (``faultlab report
FILE``) draws at most ``plots.MAX_BAR_ROWS`` rows' bars.

The run folder is nobody's, its host table rewritten to 600 rows, each a node of its
own (a few KB), or its labels table to 100,000 rows (some 2 MB). Root's report runs under a CPU-time limit (the work done, not wall time
on a loaded host).
"""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faultlab.report.synthetic import make_run
from tests.helpers import FL, ROOT, give_to_nobody

pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("prlimit"), reason="needs root (the run is nobody's) and prlimit")

NODES = 600
#: labels of the run whose lane chart is drawn
LABELS = 100_000
#: rows of the scores file whose bars are drawn (some 2.8 MB of JSON)
SCORE_ROWS = 20_000


def _report_within_bounds(src, page, cwd) -> None:
    """``faultlab report SRC --out PAGE`` within 60 CPU seconds and 3 GiB of address
    space: exit 0, no traceback."""
    cp = subprocess.run(["prlimit", "--cpu=60", f"--as={3 << 30}", "--", *FL, "report", str(src), "--out", str(page)],
                        capture_output=True, text=True, timeout=900, cwd=cwd)
    err = cp.stderr.strip()
    assert cp.returncode == 0 and "Traceback" not in err, (cp.returncode, err[-2000:])


def test_a_run_whose_host_table_names_hundreds_of_nodes_is_reported_in_bounded_time(tmp_path):
    """600 host rows, each on a node of its own, and 600 peers' RTT: a column of three
    panels a node, each panel a pass over the table per line (without the bound: past the 60 CPU
    seconds the report may use; 400 nodes took 80; some 3 after)."""
    run = make_run(tmp_path / "run", ranks=2, duration_s=20)
    host = pq.read_table(run / "host.parquet")
    df = host.to_pandas().iloc[np.zeros(2 * NODES, int)].reset_index(drop=True)
    df["node"] = [f"n{k % NODES}" for k in range(2 * NODES)]
    df["metric"] = ["cpu_util_pct" if k < NODES else f"tcp_rtt_ms:n{k - NODES}" for k in range(2 * NODES)]
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False, schema=host.schema), run / "host.parquet")
    give_to_nobody(run)
    page = tmp_path / "page.html"
    _report_within_bounds(run, page, tmp_path)
    assert page.stat().st_size > 0


def test_a_run_of_a_hundred_thousand_labels_is_reported_with_a_bounded_lane_chart(tmp_path):
    """100,000 labels on the run's two ranks: a bar and a text a label in the lane
    chart (without the bound: past the 60 CPU seconds the report may use; 20,000 took 34); the
    page's label table still lists every label."""
    run = make_run(tmp_path / "run", ranks=2, duration_s=20)
    lab = pq.read_table(run / "labels.parquet")
    rng = np.random.default_rng(0)
    df = lab.to_pandas().iloc[np.zeros(LABELS, int)].reset_index(drop=True)
    df["component"] = np.where(np.arange(LABELS) % 2 == 0, "rank:0", "rank:1")
    df["start_ts"] = df["start_ts"].to_numpy() + rng.uniform(0, 1, LABELS)
    df["slowdown"] = rng.uniform(1, 9, LABELS)
    df["evidence"] = "{}"
    df["label_id"] = [f"l{k}" for k in range(LABELS)]
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False, schema=lab.schema), run / "labels.parquet")
    give_to_nobody(run)
    page = tmp_path / "page.html"
    _report_within_bounds(run, page, tmp_path)
    assert page.stat().st_size > 0


def test_a_scores_file_of_twenty_thousand_rows_is_reported_with_bounded_bars(tmp_path):
    """20,000 score rows with window figures: a group of bars and a legend entry a row
    (without the bound: past the 60 CPU seconds the report may use; 4,000 took 26 and 785 MB);
    the page's score table still lists every row."""
    rows = [{"detector": f"d{k}", "window_precision": 0.5, "window_recall": 0.5, "window_f1": 0.5, "window_mcc": 0.1,
             "window_precision_ci": [0.1, 0.9]} for k in range(SCORE_ROWS)]
    f = tmp_path / "scores.json"
    f.write_text(json.dumps(rows))
    give_to_nobody(f)
    page = tmp_path / "scores.html"
    _report_within_bounds(f, page, tmp_path)
    assert f"d{SCORE_ROWS - 1}" in page.read_text()
