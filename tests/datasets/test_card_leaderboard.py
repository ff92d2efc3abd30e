"""A dataset card carries its leaderboard: ``faultlab leaderboard --card`` writes each
mode's table into the card's leaderboard section (added before the citation when a
card has none), a later run replaces it, the manifest names the new card and the
dataset's identity (its manifest digest, which leaves the card out) stays the same,
so a scores file made before still verifies."""

from __future__ import annotations

import shutil

import pytest

from faultlab.datasets import cardtable, manifest
from faultlab.datasets.build import build
from faultlab.datasets.synthetic import make_run
from faultlab.scoring.leaderboard import compute, render, verify
from tests.helpers import fl, one_line_error

CARD = "# d\n\ntext\n\n## Uses\n\nuses\n\n## Citation\n\ncite\n"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("cardruns")
    runs = [make_run(root / f"r{i}", f"r{i}", seed=i, factor=1.8) for i in range(4)]
    return build(runs, "tiny-card", tmp_path_factory.mktemp("cardds"), test_fraction=0.5)


def test_a_card_without_the_section_gets_it_before_the_citation_and_tables_are_replaced():
    off1 = cardtable.with_table(CARD, "d", "offline", "| offline 1 |")
    assert off1.index("## Uses") < off1.index("## Leaderboard") < off1.index("| offline 1 |") < off1.index("## Citation")
    assert cardtable.intro("d") in off1
    both = cardtable.with_table(off1, "d", "replay", "| replay 1 |")
    again = cardtable.with_table(both, "d", "offline", "| offline 2 |")
    assert "| offline 1 |" not in again and again.count("## Leaderboard") == 1
    assert again.index("| offline 2 |") < again.index("| replay 1 |") < again.index("## Citation")
    assert cardtable.with_table(again, "d", "offline", "| offline 2 |") == again
    # replay first, then offline: offline still comes first
    r_then_o = cardtable.with_table(cardtable.with_table(CARD, "d", "replay", "| r |"), "d", "offline", "| o |")
    assert r_then_o.index("| o |") < r_then_o.index("| r |") < r_then_o.index("## Citation")
    # a card with no citation heading gets the section at its end
    assert cardtable.with_table("# d\n", "d", "offline", "| t |").endswith("| t |\n<!-- end faultlab leaderboard: offline -->\n")
    with pytest.raises(ValueError):
        cardtable.with_table(CARD, "d", "live", "x")


def test_the_built_card_has_the_section_and_the_table_goes_into_it(dataset, tmp_path):
    ds = tmp_path / dataset.name
    shutil.copytree(dataset, ds)
    card = (ds / "README.md").read_text()
    assert card.count("## Leaderboard") == 1 and cardtable.intro(dataset.name) in card
    digest = manifest.digest(ds)
    board = compute.build([ds], ["peer-median", "constant"], n_boot=50)
    before = tmp_path / "leaderboard.json"
    before.write_text(render.to_json(board))
    cardtable.put_table(ds, "offline", render.card_table(board.datasets[0], board.settings))
    card = (ds / "README.md").read_text()
    assert card.count("## Leaderboard") == 1 and card.count("| peer-median |") == 1
    assert f"From `faultlab leaderboard --dataset datasets/{dataset.name} --boot 50 --card`." in card
    assert str(tmp_path) not in card
    assert manifest.verify(ds) == {"changed": [], "missing": [], "extra": []}
    assert manifest.digest(ds) == digest
    verify.verify(before, [ds])  # the scores file made before the card changed still verifies
    # the digest is the data's: a changed data line in the manifest changes it
    text = (ds / manifest.NAME).read_text().replace("splits.json", "splits.jsonX")
    (ds / manifest.NAME).write_text(text)
    assert manifest.digest(ds) != digest


def test_cli_writes_the_card_and_refuses_a_subset_or_verify(dataset, tmp_path):
    ds = tmp_path / dataset.name
    shutil.copytree(dataset, ds)
    p = fl("leaderboard", "--dataset", ds, "--boot", "20", "--card")
    assert p.returncode == 0, p.stderr
    card = (ds / "README.md").read_text()
    assert "<!-- faultlab leaderboard: offline -->" in card and "offline, 10 s windows" in card and "| random (chance" in card
    assert fl("dataset", "verify", ds).returncode == 0
    one_line_error(fl("leaderboard", "--dataset", ds, "--detector", "constant", "--card"), "--card", "every detector")
    one_line_error(fl("leaderboard", "--verify", tmp_path / "x.json", "--card"), "--verify")


def test_a_card_killed_before_its_manifest_line_stops_neither_scoring_nor_the_next_card(dataset, tmp_path):
    """leaderboard --card writes the card, then the manifest (two files, each atomic): a
    kill between them leaves the card newer than the manifest. The card is never
    scored, so score goes on, and the next --card writes both again: the dataset
    verifies."""
    ds = tmp_path / dataset.name
    shutil.copytree(dataset, ds)
    with open(ds / "README.md", "a") as f:
        f.write("\nthe card as a killed --card left it\n")
    assert fl("score", "--detector", "peer-median", "--boot", "0", "--dataset", ds).returncode == 0
    p = fl("leaderboard", "--dataset", ds, "--boot", "20", "--card")
    assert p.returncode == 0, p.stderr
    assert fl("dataset", "verify", ds).returncode == 0
