"""faultlab leaderboard and the gate's comparability check, on small datasets built
from simulated runs labeled by the real labeler (scoring reads only tables: the same
code path as measured runs), through the real CLI where it matters."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from faultlab.datasets.build import build
from faultlab.datasets.synthetic import make_run
from faultlab.errors import BadInput
from faultlab.rundata import iter_run_dirs
from faultlab.scoring.api import score_runs
from faultlab.scoring.leaderboard.compute import rank
from faultlab.scoring.leaderboard.paired import paired_difference
from faultlab.scoring.metrics import COUNT_KEYS
from tests.helpers import fl, fl_many, one_line_error, write_plugin_package


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lbruns")
    return [make_run(root / f"r{i}", f"r{i}", seed=i, factor=1.6 + 0.2 * (i % 4)) for i in range(12)]


@pytest.fixture(scope="module")
def datasets(runs, tmp_path_factory):
    """Two datasets of other runs: ``a`` (8 runs) and ``b`` (the other 4)."""
    root = tmp_path_factory.mktemp("lbds")
    return build(runs[:8], "tiny-a", root, test_fraction=0.5), build(runs[8:], "tiny-b", root, test_fraction=0.5)


# -- the paired bootstrap ------------------------------------------------------------------


def test_paired_bootstrap_marks_a_clearly_better_detector_and_not_two_equal_ones(runs):
    rs = list(iter_run_dirs(runs))
    good, chance, same = (score_runs(d, rs, n_boot=0, by=None) for d in ("peer-median", "random", "faultlab.scoring.baselines:PeerMedianDetector"))
    d = paired_difference(good.run_counts, chance.run_counts, n_boot=500)
    assert d["better"] and d["diff"] > 0.3 and d["ci"][0] > 0
    d = paired_difference(good.run_counts, same.run_counts, n_boot=500)
    assert not d["better"] and d["diff"] == 0 and d["ci"] == [0.0, 0.0]
    # the worse one is not better than the better one, and ranking puts the better first
    assert not paired_difference(chance.run_counts, good.run_counts, n_boot=500)["better"]
    rows = rank([chance, good], n_boot=500, seed=0, k=3)
    assert [r.detector for r in rows] == ["peer-median", "random"] and rows[0].vs_next["better"] and rows[1].vs_next is None


def test_paired_bootstrap_sees_a_difference_the_two_separate_intervals_hide():
    # per run, B = A minus a steady 10 of 100 true positives: the runs' spread (hard and
    # easy runs alike for both) widens each interval, not the difference
    rng = np.random.default_rng(0)
    n = 12
    a = np.zeros((n, len(COUNT_KEYS)))
    i = {k: j for j, k in enumerate(COUNT_KEYS)}
    tp = rng.integers(20, 100, n)
    a[:, i["win_tp"]], a[:, i["win_fn"]], a[:, i["win_fp"]], a[:, i["win_tn"]] = tp, 100 - tp, 10, 900
    b = a.copy()
    b[:, i["win_tp"]] -= 10
    b[:, i["win_fn"]] += 10
    d = paired_difference(a, b, n_boot=1000)
    assert d["better"]
    with pytest.raises(BadInput, match="cannot be paired"):
        paired_difference(a, b[:-1])


# -- the leaderboard through the CLI --------------------------------------------------------

@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory):
    """The environment of a process that has a detector package installed from a
    separate source folder: pip installs it (its entry point in group
    faultlab.detectors) into a folder of its own on PYTHONPATH, so nothing lands in
    this environment even if the test dies."""
    tmp = tmp_path_factory.mktemp("plugin")
    pkg = write_plugin_package(tmp / "pkg", "tmpboarddet", "faultlab-tmp-board-plugin", "tmp-board-slow", 1.3)
    site = tmp / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "install", "--no-deps", "--target", str(site), str(pkg)], capture_output=True, text=True, timeout=600, cwd=tmp)
    assert r.returncode == 0, r.stderr
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


@pytest.mark.slow
def test_an_installed_plugin_is_ranked_and_its_scores_file_verified(datasets, plugin_env, tmp_path):
    a, _ = datasets
    out = tmp_path / "board"
    p = fl("leaderboard", "--dataset", a, "--split", "all", "--boot", "300", "--out", out, env=plugin_env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    board = json.loads((out / "leaderboard.json").read_text())
    rows = board["datasets"][0]["rows"]
    names = [r["detector"] for r in rows]
    for name in ("tmp-board-slow", "peer-median", "temporal-z", "arrival-late", "random", "constant"):
        assert name in names and name in p.stdout and name in (out / "leaderboard.md").read_text()
    assert board["datasets"][0]["digest"] and board["settings"]["split"] == "all" and board["datasets"][0]["n_runs"] == 8
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    mccs = [r["metrics"]["window_mcc"]["value"] for r in rows]
    assert mccs == sorted(mccs, reverse=True)
    slow = rows[names.index("tmp-board-slow")]
    assert slow["metrics"]["window_mcc"]["value"] > 0.5 and len(slow["metrics"]["window_mcc"]["ci"]) == 2
    page = (out / "leaderboard.html").read_text()
    assert "tmp-board-slow" in page and "data:image/svg+xml;base64," in page and "http" not in page.split("<body>")[1].replace("http://www.w3.org", "")

    # the honest file is reproduced; an edited number or mark is refused in one line
    p = fl("leaderboard", "--verify", out / "leaderboard.json", env=plugin_env, cwd=tmp_path)
    assert p.returncode == 0 and "reproduced" in p.stdout, p.stderr
    for edit in ("value", "mark"):
        d = json.loads((out / "leaderboard.json").read_text())
        r = d["datasets"][0]["rows"][names.index("tmp-board-slow")]
        if edit == "value":
            r["metrics"]["event_f1"]["value"] += 0.05
        else:
            r["vs_next"]["better"] = not r["vs_next"]["better"]
        (tmp_path / "edited.json").write_text(json.dumps(d))
        line = one_line_error(fl("leaderboard", "--verify", tmp_path / "edited.json", env=plugin_env, cwd=tmp_path), "does not reproduce", code=1)
        assert "tmp-board-slow" in line
    # without the package installed, its rows cannot be re-scored: a settings failure, exit 2
    one_line_error(fl("leaderboard", "--verify", out / "leaderboard.json", cwd=tmp_path), "tmp-board-slow")


def test_verify_refuses_another_dataset_and_a_malformed_file(datasets, tmp_path):
    a, b = datasets
    out = tmp_path / "board"
    assert fl("leaderboard", "--dataset", a, "--detector", "peer-median", "--detector", "constant", "--boot", "100", "--out", out).returncode == 0
    other = tmp_path / "elsewhere" / a.name
    other.parent.mkdir()
    other.symlink_to(b, target_is_directory=True)  # another dataset under the recorded name
    (tmp_path / "bad.json").write_text(json.dumps({"format": "faultlab-leaderboard/1", "settings": {}}))
    argvs, words = [["leaderboard", "--verify", out / "leaderboard.json", "--dataset", other],
                    ["leaderboard", "--verify", tmp_path / "bad.json"]], [("manifest digest", "tiny-a"), ("--verify", "settings")]
    sub = json.loads((out / "leaderboard.json").read_text())
    for i, (edit, word) in enumerate(((lambda d: d["datasets"][0].update(rows=[]), "--verify"),
                                      (lambda d: d["settings"].update(n_boot=1e9), "n_boot"),
                                      (lambda d: d["settings"].update(n_boot="many"), "settings"))):
        bad = json.loads(json.dumps(sub))
        edit(bad)
        (tmp_path / f"bad{i}.json").write_text(json.dumps(bad))
        argvs.append(["leaderboard", "--verify", tmp_path / f"bad{i}.json", "--dataset", a])
        words.append((word,))
    for cp, names in zip(fl_many(argvs), words, strict=True):
        one_line_error(cp, *names)


def test_verify_runs_no_code_a_scores_file_names(datasets, tmp_path):
    """A scores file whose row names ``subprocess:Popen`` with parameters that would
    run a command is refused in one line before anything it names is imported or
    constructed: only built-in and installed detectors are re-scored."""
    a, _ = datasets
    out = tmp_path / "board"
    assert fl("leaderboard", "--dataset", a, "--detector", "constant", "--boot", "100", "--out", out).returncode == 0
    sub = json.loads((out / "leaderboard.json").read_text())
    marker = tmp_path / "ran"
    sub["datasets"][0]["rows"][0].update(detector="subprocess:Popen", params={"args": ["touch", str(marker)]})
    (tmp_path / "evil.json").write_text(json.dumps(sub))
    one_line_error(fl("leaderboard", "--verify", tmp_path / "evil.json", "--dataset", a), "subprocess:Popen", "neither built in nor installed")
    assert not marker.exists(), "verifying a scores file ran a command it named"


def test_leaderboard_refuses_bad_input_in_one_line(datasets, tmp_path):
    a, _ = datasets
    cases = [([], "--dataset"), (["--dataset", a, "--detector", "no-such"], "unknown detector"),
             (["--dataset", a, "--split", "half"], "--split"), (["--dataset", a, "--mode", "live"], "--mode")]
    for cp, (_, field) in zip(fl_many([["leaderboard", *args] for args, _ in cases]), cases, strict=True):
        one_line_error(cp, field)


def test_replay_board_has_latency_and_json_output(datasets):
    a, _ = datasets
    p = fl("leaderboard", "--dataset", a, "--detector", "peer-median", "--detector", "random", "--mode", "replay", "--boot", "100", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    rows = d["datasets"][0]["rows"]
    assert d["settings"]["mode"] == "replay" and rows[0]["detector"] == "peer-median"
    assert rows[0]["metrics"]["latency_median_s"]["value"] is not None
    assert rows[1]["label"] == "random (chance: mean of 20 draws)"


# -- the gate checks what it compares -------------------------------------------------------


def test_gate_refuses_another_dataset_split_or_window_and_judges_the_same_settings(datasets, tmp_path):
    a, b = datasets
    base = tmp_path / "base.json"
    assert fl("score", "--detector", "peer-median", "--dataset", a, "--split", "all", "--boot", "200", "--out", base).returncode == 0
    same = ["--dataset", a, "--split", "all", "--boot", "200", "--baseline", base]
    # every comparison against the baseline, each a command of its own (one child process)
    other, split, window, mode, p, worse, allowed = fl_many([
        ["score", "--detector", "peer-median", "--dataset", b, "--split", "all", "--boot", "200", "--baseline", base],
        ["score", "--detector", "peer-median", "--dataset", a, "--boot", "200", "--baseline", base],
        ["score", "--detector", "peer-median", *same, "--window", "5s"],
        ["score", "--detector", "peer-median", *same, "--mode", "replay"],
        ["score", "--detector", "peer-median", *same, "--json"],
        ["score", "--detector", "random", *same, "--json"],
        ["score", "--detector", "peer-median", "--dataset", b, "--split", "all", "--boot", "200", "--baseline", base, "--allow-mismatch", "--json"]])
    one_line_error(other, "--baseline", "dataset", "tiny-a", "tiny-b")
    one_line_error(split, "split: baseline all, this test")
    one_line_error(window, "window_s: baseline 10.0, this 5.0")
    one_line_error(mode, "mode: baseline offline, this replay")
    # the same detector passes; a worse one fails; --json holds the verdict
    assert p.returncode == 0 and "gate passed" in p.stderr
    g = json.loads(p.stdout)["gate"]
    assert g["verdict"] == "passed" and g["mismatches_allowed"] == [] and {m["status"] for m in g["metrics"]} == {"same"}
    m = {x["metric"]: x for x in g["metrics"]}["window_mcc"]
    assert m["before"] == m["after"] and len(m["ci_before"]) == 2 and len(m["ci_after"]) == 2
    p = worse
    assert p.returncode == 1 and "gate FAILED" in p.stderr
    g = json.loads(p.stdout)["gate"]
    assert g["verdict"] == "failed" and {x["metric"]: x["status"] for x in g["metrics"]}["window_mcc"] == "dropped"
    # --allow-mismatch compares anyway and says so, in the text and in the JSON
    p = allowed
    assert p.returncode in (0, 1) and "compared despite a mismatch" in p.stderr
    assert json.loads(p.stdout)["gate"]["mismatches_allowed"][0].startswith("dataset:")


def test_brief_table_has_a_row_per_detector_and_a_column_per_dataset(datasets):
    from faultlab.scoring.leaderboard import compute, render

    board = compute.build(list(datasets), ["peer-median", "constant"], split="all", n_boot=100)
    lines = render.brief_markdown(board).splitlines()
    assert lines[0] == "| detector | tiny-a (8 runs) | tiny-b (4 runs) |" and len(lines) == 4
    assert lines[2].startswith("| peer-median | #1 ") and lines[3].startswith("| constant (alarms everything) | #2 0.00 [0.00, 0.00] |")
    assert all(board.datasets[i].rows[0].vs_next["better"] for i in range(2)) and " > |" in lines[2]
    md = render.markdown(board)
    assert md.count("| rank | detector | window MCC | vs next (paired) |") == 2 and "tiny-b: 4 runs (all split), offline" in md


class _Fits:
    """Records the run ids ``fit`` was given and alarms on nothing."""

    def __init__(self):
        self.seen = []

    def fit(self, train_runs):
        self.seen = [r.run_id for r in train_runs]

    def detect(self, steps, host=None):
        return None


def test_every_fitting_detector_reads_the_train_split_afresh_and_never_a_test_run(datasets):
    from faultlab.datasets.layout import Dataset
    from faultlab.scoring.api import score_dataset

    a, _ = datasets
    ds = Dataset(a)
    one, two = _Fits(), _Fits()
    res = score_dataset([one, two], a, n_boot=0, by=None)
    assert one.seen == two.seen == ds.run_ids("train") and not set(one.seen) & set(ds.run_ids("test"))
    assert res[0].n_runs == len(ds.run_ids("test")) and res[0].dataset_digest
