"""The reports as a reader sees them, in headless Chromium at 1024 and 1400 px and
at a phone's 390 px: nothing wider than the viewport outside a sideways-scrolling
box, every table in such a box with its first column sticky, every plot's axes
titled (``data-axes``, read from the matplotlib figure itself), the scores page
naming what was scored, the dataset page with its published scores and its whole
card. Screenshots go to ``$FAULTLAB_SCREENS`` when set (else the test's tmp folder).

The run is synthetic (faultlab.report.synthetic: drawn step times, real labels);
the dataset and its scores are the published faultlab-hw-v1 of this repository.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from faultlab.report import plots, write_report
from faultlab.report.synthetic import make_run
from faultlab.scoring.table import metric_title
from tests.browser_check import check_layout
from tests.helpers import REPO

WIDTHS = (1024, 1400, 390)
HW = REPO / "datasets" / "faultlab-hw-v1"
HW_SCORES = REPO / "datasets" / "scores-faultlab-hw-v1.json"


@pytest.fixture
def shots(tmp_path) -> Path:
    return Path(os.environ.get("FAULTLAB_SCREENS") or tmp_path / "screens")


def test_run_report_fits_and_titles_every_axis(tmp_path, shots):
    run = make_run(tmp_path / "syn-run", ranks=4, duration_s=60)
    seen = check_layout(write_report(run), WIDTHS, shots, "run-report")
    text = seen[1024]["text"]
    assert "window MCC" in text and "window F1 point-adjusted (inflated)" in text and "component MCC" in text
    assert re.search(r"run start\s+\S+ \S+ UTC \(-6\.0s\)", text), "the run start is shown beside the time origin"
    axes = {p["id"]: p["axes"] for p in seen[1024]["plots"]}
    assert "window-level score" in axes["plot-scores"] and "0 = S_w 1.0" in axes["plot-whatif"]
    assert "NIC rate (Mbit/s)" in axes["plot-host"] and "step time per rank (ms)" in axes["plot-timeline"]


def test_scores_report_names_what_was_scored(tmp_path, shots):
    seen = check_layout(write_report(HW_SCORES, tmp_path / "scores.html"), WIDTHS, shots, "scores-report")
    text = seen[1024]["text"]
    for name, value in (("dataset", "faultlab-hw-v1"), ("split", "all"), ("mode", "offline, replay"), ("window", "10 s"),
                        ("parameters", "per row")):
        assert re.search(rf"^{name}\s+{re.escape(value)}", text, re.M), (name, value)
    assert "draws=20" in text, "the random detector's parameter is listed"


def test_dataset_report_reads_published_scores_and_shows_the_whole_card(tmp_path, shots):
    seen = check_layout(write_report(HW, tmp_path / "dataset.html"), WIDTHS, shots, "dataset-report")
    text = seen[1024]["text"]
    assert "No scores" not in text and f"read from {HW_SCORES}" in text
    card = (HW / "README.md").read_text()
    heading, body = card.rstrip().rsplit("\n## ", 1)[1].split("\n", 1)  # the card's last section
    assert re.search(rf"^{re.escape(heading)}\n+{re.escape(body.strip())}", text, re.M), "the card's last section is on the page"
    assert re.search(r"^Limits$", text, re.M) and "<!--" not in text and "## " not in text, "the card is rendered, not raw"
    thumbs = [p for p in seen[1024]["plots"] if p["id"].startswith("thumb-")]
    assert len(thumbs) == len(list((HW / "data" / "steps").iterdir()))
    assert "job step time (ms)" in thumbs[0]["axes"]
    for name in ("label: injected", "label: observed", "nic-slow"):
        assert name in text, f"the colour legend names {name}"


def test_layout_check_catches_a_wide_table_and_an_untitled_axis(tmp_path):
    """The check can fail: a table wider than the page and not in a scroll box, and a
    plot whose axes carry no title."""
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    p = plots.png(fig)
    assert p.axes == [{"x": "", "y": ""}]
    from faultlab.report.html import figure

    f = figure(p)
    page = tmp_path / "bad.html"
    row = "".join(f"<td>column-{i}-with-a-long-name</td>" for i in range(40))
    page.write_text(f'<!DOCTYPE html><html><body><table><tr>{row}</tr></table>'
                    f'<img class="plot" id="plot-x" data-axes=\'{f["axes"]}\' src="{f["src"]}"></body></html>')
    with pytest.raises(AssertionError, match="wider than the viewport"):
        check_layout(page, (1024,), tmp_path, "bad")
    page.write_text(page.read_text().replace("<table>", '<div class="scroll" style="overflow-x: auto"><table>')
                    .replace("</table>", "</table></div>").replace("<td>", '<td style="position: sticky; left: 0">', 1))
    with pytest.raises(AssertionError, match="axis titles"):
        check_layout(page, (1024,), tmp_path, "bad")


def test_log_axes_read_in_plain_numbers():
    """No "6x10^2": every tick label of a log axis over 20..700 ms is a plain number."""
    fig, ax = plt.subplots()
    ax.plot([0, 1], [20, 700])
    plots.plain_log(ax)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() + ax.get_yticklabels(minor=True) if t.get_text()]
    plt.close(fig)
    assert labels and all(re.fullmatch(r"\d+(\.\d+)?", lab) for lab in labels), labels


def test_nic_rx_and_tx_are_drawn_apart():
    rx, tx = plots.HOST_STYLES["net_rx_bytes_per_s"], plots.HOST_STYLES["net_tx_bytes_per_s"]
    assert rx[0] != tx[0] and rx[1]["ls"] != tx[1]["ls"] and rx[1]["color"] != tx[1]["color"]


@pytest.mark.parametrize("key,title", [("window_mcc", "window MCC"), ("mcc", "component MCC"), ("event_f1", "event F1"),
                                       ("window_f1_point_adjusted", "window F1 point-adjusted (inflated)"),
                                       ("latency_median_s", "latency median (s)"), ("n_runs", "n_runs")])
def test_metric_titles_name_level_unit_and_inflation(key, title):
    assert metric_title(key) == title


def test_leaderboard_page_fits_and_titles_every_axis(tmp_path, shots):
    """``faultlab leaderboard --out``'s page as the reports: its tables in scroll boxes
    with the detector column sticky, each CI plot's axes titled, the legend's marks as
    code, not backticks."""
    from faultlab.scoring.leaderboard import compute, html

    board = compute.build([HW], ["arrival-late", "peer-median", "constant"], split="test")
    page = tmp_path / "leaderboard.html"
    page.write_text(html.html(board))
    seen = check_layout(page, WIDTHS, shots, "leaderboard")
    text = seen[1024]["text"]
    assert "#1 arrival-late" in text and "`" not in text
    assert "window-level MCC" in seen[1024]["plots"][0]["axes"]
