"""Root's commands that write into a dataset folder (``dataset relabel``, ``leaderboard
--card``) read every file of it below the folder they opened, never again by its name.

The folder holding the dataset is ``nobody``'s, who may rename the dataset away and put
something else at its name between two of root's reads:

- relabel opens nobody's dataset once (``Dataset.fd``) and reads its tables, manifest and
  campaign files below that descriptor; between its check and the reading of the card
  texts (``build.json``: description, licence, note) nobody puts a link to a dataset of
  root's at its name, and puts theirs back before the rebuild. Root's dataset's card
  texts must not reach the rebuilt dataset, which nobody reads;
- ``--card`` writes a table into the card of a dataset of root's (here one in nobody's
  folder) and the card's digest into its manifest; between reading the card and the
  manifest nobody puts a folder of theirs at its name, whose manifest lists a file of
  their choosing. Root's dataset's manifest must not take nobody's lines.
"""

from __future__ import annotations

import shutil

import pytest

from faultlab import workdirs
from faultlab.datasets import build, cardtable, layout
from tests.helpers import ROOT, fl, give_to_nobody, nobody_sh

MARKER = "ROOT-PRIVATE-DESCRIPTION-5521"
pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("setpriv"), reason="needs root (to act as nobody) and setpriv")


def test_relabel_takes_the_card_texts_from_the_dataset_it_holds_not_from_a_link_put_in_its_place(two_runs, nobody_dir, tmp_path, monkeypatch):
    cp = fl("dataset", "build", *two_runs, "--name", "ds", "--out", nobody_dir, "--description", "nobody's runs")
    assert cp.returncode == 0, cp.stderr[-800:]
    ds = nobody_dir / "ds"
    give_to_nobody(ds)
    private = tmp_path / "secret"
    private.mkdir(mode=0o700)
    cp = fl("dataset", "build", *two_runs, "--name", "mine", "--out", private, "--description", MARKER)
    assert cp.returncode == 0, cp.stderr[-800:]

    checked, made = layout.Dataset.check, workdirs.private

    def check_then_link(self):
        n = checked(self)
        monkeypatch.setattr(layout.Dataset, "check", checked)
        nobody_sh('mv "$1" "$1.held" && ln -s "$2" "$1"', ds, private / "mine")
        return n

    def put_back_then_private(*a, **kw):
        monkeypatch.setattr(workdirs, "private", made)
        nobody_sh('rm "$1" && mv "$1.held" "$1"', ds)
        return made(*a, **kw)

    monkeypatch.setattr(layout.Dataset, "check", check_then_link)
    monkeypatch.setattr(workdirs, "private", put_back_then_private)
    build.relabel(str(ds))
    assert workdirs.private is made, "the relabel never reached its rebuild"
    leaked = sorted(str(p.relative_to(ds)) for p in ds.rglob("*") if p.is_file() and not p.is_symlink() and MARKER.encode() in p.read_bytes())
    assert not leaked, f"root's dataset's description reached nobody's relabeled dataset: {leaked}"


def test_a_card_table_goes_with_the_manifest_of_the_folder_whose_card_it_is(two_runs, nobody_dir, monkeypatch):
    cp = fl("dataset", "build", *two_runs, "--name", "ds", "--out", nobody_dir)
    assert cp.returncode == 0, cp.stderr[-800:]
    ds = nobody_dir / "ds"
    nobody_sh('mkdir "$1" && echo "# decoy" > "$1/README.md" && printf "%064d  NOBODY-LISTED\\n" 0 > "$1/MANIFEST.sha256"', nobody_dir / "decoy")
    made = cardtable.with_table

    def table_then_swap(*a, **kw):
        out = made(*a, **kw)
        nobody_sh('mv "$1" "$1.held" && mv "$2" "$1"', ds, nobody_dir / "decoy")
        return out

    monkeypatch.setattr(cardtable, "with_table", table_then_swap)
    try:
        cardtable.put_table(ds, "offline", "| detector | F1 |\n|---|---|\n| constant | 0.0 |")
    finally:
        nobody_sh('mv "$1" "$2" && mv "$1.held" "$1"', ds, nobody_dir / "decoy")
    text = (ds / "MANIFEST.sha256").read_text()
    assert "NOBODY-LISTED" not in text, "root wrote nobody's manifest lines into its own dataset's"
    assert "| constant | 0.0 |" in (ds / "README.md").read_text()
