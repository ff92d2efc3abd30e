"""faultlab report: the HTML page of a run, a folder of runs and a scores file.

A synthetic run (faultlab.report.synthetic: drawn step times, real labels) keeps these
fast and root-free; tests/runner/test_demo.py opens the report of a real demo run in
Chromium. Render time and size of a 4-rank 5-minute run: perf/report_render.py.
"""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess

import numpy as np
import pytest
from PIL import Image

from tests.browser_check import check_report
from faultlab.report import write_report
from faultlab.report.synthetic import make_run
from tests.helpers import FL


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("rep") / "syn-run", ranks=4, duration_s=60)


def _images(html: str) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in re.findall(r'id="plot-(\w+)"[^>]*src="data:image/png;base64,([^"]+)"', html)}


def test_run_report_is_self_contained_with_plots_and_tables(run):
    out = write_report(run)
    assert out == run / "report.html"
    html = out.read_text()
    imgs = _images(html)
    assert set(imgs) == {"timeline", "whatif", "host", "scores"}
    for name, png in imgs.items():
        a = np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=float)
        assert a.shape[0] > 100 and a.std() > 5, name
    assert "<script" not in html and not re.search(r'(src|href)="(https?:)?//', html), "nothing loaded from the network"
    for fid in ("nic-000001", "cpu-000002"):  # the faults table
        assert fid in html
    assert "S_w rank:1" in html and "peer-median" in html
    # the labels table: the injected job slowdown and rank 1's straggling, with their slowdown
    assert re.search(r"<td>job</td>.*?<td class=\"num\">\d+\.\d\dx</td>.*?<td>injected</td>", html)
    assert re.search(r"<td>rank:1</td>.*?<td class=\"num\">\d+\.\d\dx</td>.*?<td>injected</td>", html)


def test_report_cli_prints_path_and_refuses_bad_input_in_one_line(run, tmp_path):
    cp = subprocess.run([*FL, "report", str(run), "--out", str(tmp_path / "r.html")],
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0 and f"report -> {tmp_path / 'r.html'}" in cp.stdout, cp.stderr
    for bad in (tmp_path / "missing", tmp_path):
        cp = subprocess.run([*FL, "report", str(bad)], capture_output=True, text=True, timeout=60)
        assert cp.returncode == 2 and cp.stderr.count("\n") == 1 and "PATH:" in cp.stderr, cp.stderr
    junk = tmp_path / "junk.json"
    junk.write_text('{"nothing": 1}')
    cp = subprocess.run([*FL, "report", str(junk)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2 and "holds no score rows" in cp.stderr


def test_folder_of_runs_gets_thumbnails_and_pooled_scores_with_ci(tmp_path):
    for i in range(3):
        make_run(tmp_path / f"run-{i:03d}", ranks=3, duration_s=40, seed=i)
    html = write_report(tmp_path).read_text()
    assert html.count('class="plot thumb"') == 3
    assert "bootstrap 95% CI" in html
    # peer-median's precision is 0.9 in every synthetic run: mean 0.900, CI [0.900, 0.900]
    assert "0.900 [0.900, 0.900]" in html


def test_scores_file_report(run, tmp_path):
    out = write_report(run / "metrics.json", tmp_path / "scores.html")
    html = out.read_text()
    assert "peer-median" in html and "random" in html and "constant" in html and "plot-scores" in html


def test_report_in_headless_chromium(run, tmp_path):
    res = check_report(write_report(run), tmp_path / "shot.png")
    assert len([i for i in res["images"] if "plot" in i["cls"]]) == 4


def test_browser_check_catches_a_blank_plot_and_a_network_request(tmp_path):
    """The browser check can fail: a blank image, and a page that fetches a URL."""
    buf = io.BytesIO()
    Image.new("RGB", (400, 300), "white").save(buf, format="PNG")
    uri = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    blank = tmp_path / "blank.html"
    blank.write_text(f'<!DOCTYPE html><html><body><h1>x</h1><img class="plot" id="plot-x" src="{uri}"></body></html>')
    with pytest.raises(AssertionError, match="blank"):
        check_report(blank, tmp_path / "b.png")
    fetch = tmp_path / "fetch.html"
    fetch.write_text('<!DOCTYPE html><html><body><h1>x</h1><img class="plot" src="http://127.0.0.1:65500/x.png"></body></html>')
    with pytest.raises(AssertionError, match="network requests"):
        check_report(fetch, tmp_path / "f.png")


def test_report_of_a_run_without_labels_or_host_metrics(tmp_path):
    p = make_run(tmp_path / "bare", ranks=2, duration_s=30, label=False)
    (p / "host.parquet").unlink()
    (p / "metrics.json").unlink()
    html = write_report(p).read_text()
    assert "No labels" in html and "No scores" in html and "plot-timeline" in html and "plot-host" not in html
    assert json.loads((p / "meta.json").read_text())["complete"] is True


def test_scores_file_of_faultlab_score_shape(tmp_path):
    """The JSON `faultlab score --out` writes: flat `rows` with METRIC_ci, and `by` groups."""
    doc = {"detector": "peer-median", "n_runs": 5, "by_key": "cause",
           "metrics": {"precision": {"value": 0.8, "ci": [0.7, 0.9]}},
           "rows": [{"detector": "peer-median", "precision": 0.8, "precision_ci": [0.7, 0.9], "recall": 0.5, "recall_ci": [0.4, 0.6]}],
           "by": {"nic-slow": {"n_labels": 4, "metrics": {"recall": {"value": 0.75, "ci": [0.5, 1.0]}}}}}
    f = tmp_path / "score.json"
    f.write_text(json.dumps(doc))
    html = write_report(f).read_text()
    assert "0.800 [0.700, 0.900]" in html and "0.500 [0.400, 0.600]" in html
    assert "by cause" in html and "<th>cause</th>" in html and "0.750 [0.500, 1.000]" in html


def test_dataset_folder_gets_a_thumbnail_per_run_and_its_card(tmp_path):
    """A dataset folder (data/<table>/run=<id>/part-0.parquet, README.md card, the
    layout of faultlab.datasets), as faultlab dataset build writes it."""
    from faultlab.datasets.build import build, collect_runs

    runs = [make_run(tmp_path / f"r{i}", ranks=2, duration_s=30, seed=i) for i in range(2)]
    ds = build(collect_runs(runs, []), "ds", tmp_path / "out", test_fraction=0.5)
    (ds / "README.md").write_text("---\nlicense: cc-by-4.0\n---\n# A test dataset\nTwo synthetic runs.\n")
    html = write_report(ds, tmp_path / "ds.html").read_text()
    assert html.count('class="plot thumb"') == 2 and "A test dataset" in html and "license: cc-by-4.0" not in html


def test_dataset_card_is_rendered_as_html_without_its_comments(tmp_path):
    """The card's markdown on the dataset page is HTML: headings, a table in a scroll
    box, code; the HTML comments that delimit the leaderboard block are not on the
    page, neither as comments nor as escaped text; other raw HTML is shown as text,
    never run."""
    from faultlab.datasets.build import build, collect_runs

    runs = [make_run(tmp_path / f"r{i}", ranks=2, duration_s=30, seed=i) for i in range(2)]
    ds = build(collect_runs(runs, []), "ds", tmp_path / "out", test_fraction=0.5)
    (ds / "README.md").write_text(
        "---\nlicense: cc-by-4.0\n---\n# A test dataset\n\n## Leaderboard\n\n<!-- faultlab leaderboard: offline -->\n"
        "| rank | detector |\n|---|---|\n| 1 | `peer-median` |\n<!-- end faultlab leaderboard: offline -->\n\n"
        "<script>alert(1)</script>\n")
    html = write_report(ds, tmp_path / "ds.html").read_text()
    card = html[html.index('id="card-text"'):]
    assert "<h2>Leaderboard</h2>" in card and "<td><code>peer-median</code></td>" in card, card
    assert '<div class="scroll"><table>' in card, "the card's table scrolls sideways like the page's own"
    for raw in ("<!--", "-->", "&lt;!--", "faultlab leaderboard: offline", "## ", "| rank |"):
        assert raw not in card, f"raw markdown or a comment marker on the page: {raw!r}"
    assert "<script>" not in html and "&lt;script&gt;" in card


@pytest.mark.parametrize("kind", ["dataset", "folder of runs"])
def test_collection_with_no_readable_run_is_refused_not_an_empty_page(tmp_path, kind):
    """Every run unreadable (a junk steps partition; a truncated steps.parquet): one
    line naming PATH and the run, exit 2, no report.html (never an empty page and exit
    0). A collection with some readable runs still lists the others as
    problems on its page."""
    p = tmp_path / "c"
    if kind == "dataset":  # a dataset is one whole: its unreadable table file is named
        d = p / "data" / "steps" / "run=r0"
        d.mkdir(parents=True)
        (d / "part-0.parquet").write_bytes(b"junk")
        (p / "splits.json").write_text('{"seed": 0, "test_fraction": 1.0, "train": [], "test": ["r0"]}')
    else:
        run = make_run(p / "r0", ranks=2, duration_s=30, seed=0)
        (run / "steps.parquet").write_bytes((run / "steps.parquet").read_bytes()[:100])
    cp = subprocess.run([*FL, "report", str(p)], capture_output=True, text=True, timeout=60)
    lines = [l for l in cp.stderr.splitlines() if l.strip()]
    field = "data/steps/run=r0/part-0.parquet: " if kind == "dataset" else "PATH: "
    assert cp.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"faultlab: error: {field}") and "r0" in lines[0], cp.stderr
    assert not (p / "report.html").exists() and not list(p.glob("*.tmp"))


def test_time_origin_row_shows_no_made_up_figure(run):
    """The run page's time-origin row shows no fixed example such as "... since the
    first training step (+12.3s)", which would read as a measured offset."""
    html = write_report(run).read_text()
    row = re.search(r"<dt>time origin</dt><dd>(.*?)</dd>", html).group(1)
    assert "(+12.3s)" not in row and "since the first training step" in row, row


def test_a_faultlab_score_file_names_dataset_split_mode_window_and_parameters(run, tmp_path):
    """The file `faultlab score --out` writes: its page says what was scored."""
    out = tmp_path / "score.json"
    cp = subprocess.run([*FL, "score", "--detector", "random", "--param", "draws=3", "--run", str(run), "--window", "5s",
                         "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    html = write_report(out).read_text()
    kv = dict(re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", html))
    assert kv["mode"] == "offline" and kv["window"] == "5 s" and kv["parameters"] == "draws=3", kv
    assert kv["runs"] == "1" and kv["split"] and kv["dataset"], kv
    assert "random (offline)" in html and "window MCC" in html


def test_report_of_a_published_dataset_by_name_goes_to_the_current_folder(tmp_path):
    """``faultlab report NAME`` finds a published dataset as ``score --dataset NAME``
    does, and writes ``./NAME-report.html``: nothing lands inside the dataset (its
    MANIFEST.sha256 still verifies)."""
    from tests.helpers import REPO, fl

    cp = fl("report", "faultlab-hw-v1", "--json", cwd=tmp_path, timeout=300)
    assert cp.returncode == 0, cp.stderr[-2000:]
    assert json.loads(cp.stdout)["report"] == "faultlab-hw-v1-report.html"
    page = (tmp_path / "faultlab-hw-v1-report.html").read_text()
    assert "faultlab dataset faultlab-hw-v1" in page and "No scores" not in page
    assert not (REPO / "datasets" / "faultlab-hw-v1" / "report.html").exists()
    assert fl("dataset", "verify", REPO / "datasets" / "faultlab-hw-v1").returncode == 0
    cp = fl("report", "no-such-dataset", cwd=tmp_path)
    assert cp.returncode == 2 and "no-such-dataset does not exist" in cp.stderr and "Traceback" not in cp.stderr


def test_a_leaderboard_json_renders_as_the_leaderboard_page(tmp_path):
    """``faultlab report leaderboard.json`` gives the page ``faultlab leaderboard --out``
    writes from the same board (the same text; only the SVG plots' generated ids
    differ); a leaderboard.json that is not whole is one line naming PATH."""
    from faultlab.scoring.leaderboard import compute, html, render
    from tests.helpers import REPO, fl

    board = compute.build([REPO / "datasets" / "faultlab-hw-v1"], ["constant", "arrival-late"], split="test", n_boot=50)
    f = tmp_path / "leaderboard.json"
    f.write_text(render.to_json(board))
    page = write_report(f, tmp_path / "lb.html").read_text()

    def text(h: str) -> str:
        return re.sub(r'data:image/svg\+xml;base64,[^"]+', "SVG", h)

    assert "#1 " in page and text(page) == text(html.html(board))
    doc = json.loads(f.read_text())
    del doc["settings"]
    f.write_text(json.dumps(doc))
    cp = fl("report", f)
    assert cp.returncode == 2 and cp.stderr.startswith("faultlab: error: PATH: ") and "settings" in cp.stderr, cp.stderr
    assert len(cp.stderr.strip().splitlines()) == 1


def test_a_runs_metrics_json_says_what_it_was_scored_with(run, tmp_path):
    """A run's metrics.json (faultlab.scoring.runmetrics) names its window, mode and
    parameters: its scores page and the run page say them; a bare list of rows (an
    older run's) still reads."""
    doc = json.loads((run / "metrics.json").read_text())
    assert doc["format"] == "faultlab-run-metrics/1" and doc["rows"]

    def text(f) -> str:
        return " ".join(re.sub(r"<[^>]+>", " ", f.read_text()).split())

    page = text(write_report(run / "metrics.json", tmp_path / "m.html"))
    for want in ("window 10 s", "mode offline (latency: replay)", "draws=20", f"run {doc['run_id']}"):
        assert want in page, want
    run_page = text(write_report(run, tmp_path / "run.html"))
    assert "scored on this run: window 10 s, offline (latency: replay)" in run_page and "n/a: 1 run" in run_page
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(doc["rows"]))
    assert "peer-median" in text(write_report(bare, tmp_path / "bare.html"))
