"""A dataset argument keeps the text the user typed: ``./NAME`` is the folder of that
name in the working folder, a bare ``NAME`` the published dataset (registry), and a
command that writes into a dataset folder never reaches the published one through a
bare name.

Each test stands in a working folder holding ``./NAME`` (5 runs, ids ``w0..w4``) while
``$FAULTLAB_DATASETS`` is a registry folder holding another dataset of the same name
(3 runs, ids ``r0..r2``): what a command reports tells which of the two it reached. The
registry is a temporary folder, so the checkout's own datasets are never in reach.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from faultlab.datasets.build import build, collect_runs
from faultlab.datasets.layout import Dataset
from faultlab.datasets.synthetic import make_run
from faultlab.errors import BadInput
from faultlab.scoring.pytest_plugin import _Scorer, find_dataset
from tests.helpers import fl, one_line_error

NAME = "paths-v1"


def _built(root: Path, prefix: str, n: int) -> Path:
    """A dataset ``root/NAME`` of ``n`` synthetic runs with ids ``PREFIX0..``."""
    camp = root / "runs"
    for i in range(n):
        make_run(camp / f"run-{i}", f"{prefix}{i}", seed=i, n_steps=120)
    return build(collect_runs([], [camp]), NAME, root / "out", test_fraction=0.4, seed=0)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """The working folder's dataset and the registry's, built once."""
    return {"work": _built(tmp_path_factory.mktemp("w"), "w", 5), "registry": _built(tmp_path_factory.mktemp("r"), "r", 3)}


@pytest.fixture
def where(built, tmp_path, monkeypatch) -> dict[str, Path]:
    """Fresh copies: ``work/NAME`` (the working folder, the cwd of this test) and
    ``registry/NAME`` (``$FAULTLAB_DATASETS``)."""
    out = {}
    for k, src in built.items():
        out[k] = tmp_path / k / NAME
        shutil.copytree(src, out[k])
    monkeypatch.setenv("FAULTLAB_DATASETS", str(tmp_path / "registry"))
    monkeypatch.chdir(tmp_path / "work")
    return out


def _state(d: Path) -> tuple:
    """What a rewrite of the folder changes: its inode (a relabel swaps a new folder
    in) and its manifest's bytes."""
    return d.stat().st_ino, (d / "MANIFEST.sha256").read_bytes()


def test_relabel_of_dot_name_rewrites_the_working_folders_dataset_not_the_published_one(where):
    before = {k: _state(d) for k, d in where.items()}
    cp = fl("dataset", "relabel", f"./{NAME}", "--json", cwd=where["work"].parent)
    assert cp.returncode == 0, cp.stderr[-2000:]
    assert _state(where["registry"]) == before["registry"]
    assert _state(where["work"])[0] != before["work"][0]
    assert json.loads(cp.stdout)[0]["runs"] == 5


def test_relabel_refuses_a_bare_name_and_writes_no_dataset(where):
    """A bare name means the published dataset to every reader: relabel refuses it in
    one line naming the path to give, before any dataset it is given is rewritten
    (``./NAME`` first included), and neither folder of that name is touched."""
    before = {k: _state(d) for k, d in where.items()}
    err = one_line_error(fl("dataset", "relabel", f"./{NAME}", NAME, cwd=where["work"].parent), "DATASET", f"./{NAME}", str(where["registry"]))
    assert "bare name" in err
    assert {k: _state(d) for k, d in where.items()} == before
    assert sorted(p.name for p in where["registry"].parent.iterdir()) == [NAME]  # no building folder left beside it


def test_leaderboard_card_refuses_a_bare_name_before_scoring(where):
    before = {k: _state(d) for k, d in where.items()}
    one_line_error(fl("leaderboard", "--dataset", NAME, "--card", "--boot", "0", cwd=where["work"].parent), "--dataset", f"./{NAME}")
    assert {k: _state(d) for k, d in where.items()} == before


#: how each reader tells which dataset it read (the working folder's: 5 runs, ids w*;
#: the registry's: 3 runs, ids r*), from its output and the test's tmp_path
READERS = {
    "verify": (["dataset", "verify"], lambda cp, tmp, files: f"its {files} table files" in cp.stdout),
    "info": (["dataset", "info", "--json"], lambda cp, tmp, files: json.loads(cp.stdout)["runs"]),
    "export": (["dataset", "export", "--out", "{tmp}/exp"],
               lambda cp, tmp, files: sorted({line.split(",")[1][0] for line in (tmp / "exp" / "datasets.csv").read_text().splitlines()[1:]})),
    "score": (["score", "--detector", "constant", "--split", "all", "--boot", "0", "--json", "--dataset"],
              lambda cp, tmp, files: json.loads(cp.stdout)["n_runs"]),
}
#: what each reader's check gives for the working folder's dataset and for the registry's
EXPECT = {"verify": (True, False), "info": (5, 3), "export": (["w"], ["r"]), "score": (5, 3)}


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("given", ["dot", "bare"])
def test_dot_name_reaches_the_working_folders_dataset_and_a_bare_name_the_published_one(where, tmp_path, reader, given):
    """verify, info, export and score --dataset given ``./NAME`` read the working
    folder's dataset; given ``NAME``, the published one of the registry."""
    args, seen = READERS[reader]
    files = Dataset(where["work"]).check()  # the working folder's table files (verify names their count)
    assert files != Dataset(where["registry"]).check()
    cp = fl(*(a.format(tmp=tmp_path) for a in args), f"./{NAME}" if given == "dot" else NAME, cwd=where["work"].parent)
    assert cp.returncode == 0, cp.stderr[-2000:]
    assert seen(cp, tmp_path, files) == EXPECT[reader][0 if given == "dot" else 1], cp.stdout[-2000:]


def test_dot_name_of_a_missing_folder_is_no_published_dataset(where):
    """``./NAME`` where the working folder has none is refused, not looked up by name."""
    shutil.rmtree(where["work"])
    with pytest.raises(BadInput, match="not a faultlab dataset"):
        Dataset(f"./{NAME}")
    one_line_error(fl("dataset", "info", f"./{NAME}", cwd=where["work"].parent), "--dataset", "not a faultlab dataset")


def test_the_pytest_plugin_takes_dot_name_as_the_folder(where):
    """``faultlab_score(det, "./NAME")`` with ``--faultlab-datasets`` holding NAME scores
    the working folder's; the bare name is the one of ``--faultlab-datasets``."""
    extra = str(where["registry"].parent)
    assert find_dataset(f"./{NAME}", extra).resolve() == where["work"].resolve()
    assert find_dataset(NAME, extra).resolve() == where["registry"].resolve()
    score = _Scorer(SimpleNamespace(getoption=lambda name: extra))
    assert score("constant", f"./{NAME}", split="all", n_boot=0).n_runs == 5
    assert score("constant", NAME, split="all", n_boot=0).n_runs == 3


@pytest.mark.parametrize("given", ["dot", "bare"])
def test_report_of_dot_name_shows_the_working_folders_runs(where, tmp_path, given):
    """``faultlab report ./NAME`` is the page of the working folder's dataset (runs
    w*), every part of it; ``report NAME`` the published one's (runs r*)."""
    page = tmp_path / "page.html"
    cp = fl("report", f"./{NAME}" if given == "dot" else NAME, "--out", page, cwd=where["work"].parent)
    assert cp.returncode == 0, cp.stderr[-2000:]
    html = page.read_text()
    mine, other = ("w", "r") if given == "dot" else ("r", "w")
    assert f'alt="{mine}0"' in html and f'alt="{other}0"' not in html and "NOT VERIFIED" not in html  # alt: a run's thumbnail
