"""Root reads a dataset's card and manifest as it reads its tables: no link, a regular
file, bounded; and a dataset's page says whether its files match the manifest.

The other user is ``nobody`` (uid 65534, ``setpriv``) owning a copy of faultlab-sw-v1
under the sticky ``/tmp``. Root's real ``report`` and ``dataset verify`` must refuse a
linked card, a FIFO or sparse manifest in one line naming the file, never embed a
root-only file in the page, and say NOT VERIFIED of a dataset whose files changed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import FL, ROOT, SW_DATASET, fl, give_to_nobody, nobody_sh, one_line_error

NOBODY = 65534
MARKER = "8842-ROOTONLY"
pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("setpriv"), reason="needs root (to act as nobody) and setpriv")



@pytest.fixture
def ds(nobody_dir) -> Path:
    d = nobody_dir / "ds"
    shutil.copytree(SW_DATASET, d)
    give_to_nobody(d)
    return d


@pytest.fixture
def secret(tmp_path) -> Path:
    d = tmp_path / "secret"
    d.mkdir(mode=0o700)
    p = d / "notes.md"
    p.write_text(f"# root's notes\n\n{MARKER}\n")
    os.chmod(p, 0o600)
    return p


def test_a_linked_card_is_not_embedded(ds, secret, tmp_path):
    nobody_sh('rm "$1/README.md" && ln -s "$2" "$1/README.md"', ds, secret)
    out = tmp_path / "page.html"
    cp = fl("report", ds, "--out", out)
    err = (cp.stdout + cp.stderr).strip().splitlines()
    assert cp.returncode == 2 and len(err) == 1 and "README.md" in err[0] and "symlink" in err[0], (cp.returncode, cp.stderr[-800:])
    assert not out.exists()


@pytest.mark.parametrize("kind", ["fifo", "sparse"])
def test_a_fifo_or_sparse_manifest_is_refused_unread(ds, kind):
    plant = 'mkfifo "$1/MANIFEST.sha256"' if kind == "fifo" else 'truncate -s 6G "$1/MANIFEST.sha256"'
    nobody_sh('rm "$1/MANIFEST.sha256" && ' + plant, ds)
    cp = fl("dataset", "verify", ds, timeout=90)
    err = (cp.stdout + cp.stderr).strip().splitlines()
    why = "not a regular file" if kind == "fifo" else "6442450944 bytes"
    assert cp.returncode == 2 and len(err) == 1 and "MANIFEST.sha256" in err[0] and why in err[0], (cp.returncode, cp.stderr[-800:])


def test_a_changed_dataset_page_says_not_verified(ds, tmp_path):
    """The card rewritten by its owner (manifest left as it was): the page is written,
    and both it and stderr say NOT VERIFIED naming the card."""
    nobody_sh('echo "extra words" >> "$1/README.md"', ds)
    out = tmp_path / "page.html"
    cp = fl("report", ds, "--out", out)
    assert cp.returncode == 0, cp.stderr[-800:]
    assert "NOT VERIFIED" in cp.stderr and "README.md" in cp.stderr, cp.stderr
    assert "NOT VERIFIED" in out.read_text()
    cp = fl("report", SW_DATASET, "--out", tmp_path / "intact.html")
    assert cp.returncode == 0 and "NOT VERIFIED" not in cp.stderr + (tmp_path / "intact.html").read_text(), cp.stderr[-800:]


def test_a_name_is_not_looked_up_in_another_users_datasets_folder(nobody_dir, tmp_path):
    """Root in nobody's folder asks for ``team-ds``: nobody's ``./datasets/team-ds`` is
    not taken (one line says why ./datasets was left out); the same folder of root's
    own is searched."""
    theirs = nobody_dir / "datasets" / "team-ds"
    shutil.copytree(SW_DATASET, theirs)
    give_to_nobody(nobody_dir)
    env = {"FAULTLAB_DATASETS": ""}
    cp = fl("dataset", "info", "team-ds", env=env, cwd=nobody_dir)
    err = (cp.stdout + cp.stderr).strip().splitlines()
    assert cp.returncode == 2 and len(err) == 1 and "not found" in err[0] and "./datasets is not searched" in err[0], cp.stderr[-800:]
    assert f"owned by uid {NOBODY}" in err[0], err[0]
    cp = fl("dataset", "list", env=env, cwd=nobody_dir)
    assert "team-ds" not in cp.stdout and "./datasets is not searched" in cp.stderr, cp.stdout + cp.stderr
    mine = tmp_path / "work"
    shutil.copytree(SW_DATASET, mine / "datasets" / "team-ds")
    cp = fl("dataset", "info", "team-ds", env=env, cwd=mine)
    assert cp.returncode == 0, cp.stderr[-800:]


def test_a_published_name_is_not_taken_from_a_folder_of_the_working_folder(nobody_dir, tmp_path, monkeypatch):
    """Root in nobody's folder asks for the published ``faultlab-sw-v1`` while nobody has
    put a forged copy of that name there, its manifest rewritten to match: root's page
    and dataset are the published one; ``./faultlab-sw-v1`` still names nobody's."""
    from faultlab.datasets import manifest
    from faultlab.datasets.layout import Dataset

    forged = nobody_dir / "faultlab-sw-v1"
    shutil.copytree(SW_DATASET, forged)
    card = forged / "README.md"
    card.write_text(card.read_text().replace("\n# ", f"\n# {MARKER} ", 1))
    (forged / manifest.NAME).write_text(manifest.text({f.relative_to(forged).as_posix(): manifest.sha256(f, forged)
                                                       for f in manifest._files(forged)}))
    give_to_nobody(nobody_dir)
    env = {"FAULTLAB_DATASETS": ""}
    page = tmp_path / "page.html"
    cp = fl("report", "faultlab-sw-v1", "--out", page, env=env, cwd=nobody_dir)
    assert cp.returncode == 0, cp.stderr[-800:]
    assert MARKER not in page.read_text() and "NOT VERIFIED" not in page.read_text()
    monkeypatch.chdir(nobody_dir)
    monkeypatch.setenv("FAULTLAB_DATASETS", "")
    assert Dataset("faultlab-sw-v1").path.resolve() == Path(SW_DATASET).resolve()
    assert Dataset("./faultlab-sw-v1").path.resolve() == forged


@pytest.mark.parametrize("name", ["splits.json", "runs.json"])
@pytest.mark.parametrize("kind", ["link", "sparse"])
def test_a_datasets_json_file_is_read_with_no_link_and_bounded(ds, secret, name, kind):
    """splits.json and runs.json linked to a root-only file, or sparse past the 16 MiB
    bound: root's ``dataset info`` refuses in one line naming the file, unread."""
    if kind == "link":
        nobody_sh('rm -f "$1/$2" && ln -s "$3" "$1/$2"', ds, name, secret)
    else:
        nobody_sh('truncate -s 64M "$1/$2"', ds, name)
    cp = fl("dataset", "info", ds)
    err = (cp.stdout + cp.stderr).strip().splitlines()
    assert cp.returncode == 2 and len(err) == 1 and name in err[0], (cp.returncode, cp.stdout[-400:], cp.stderr[-800:])
    assert ("symlink" if kind == "link" else "more than") in err[0], err[0]


def test_relabel_copies_only_the_campaign_files_the_manifest_lists(two_runs, nobody_dir, tmp_path):
    """nobody adds to their dataset's campaign/ a link to root's own campaign file (a
    valid scenario holding MARKER) that the manifest does not list: root's relabel
    rebuilds the dataset without it, and no file of it holds MARKER."""
    private = tmp_path / "secret"
    private.mkdir(mode=0o700)
    root_file = private / "private.yaml"
    root_file.write_text(f"# {MARKER}\nname: private\ntestbed: {{backend: netns, nodes: 2}}\nworkload: {{kind: ddp, duration: 5s}}\n")
    os.chmod(root_file, 0o600)
    campaign = SW_DATASET / "campaign" / "gc.yaml"
    cp = fl("dataset", "build", *two_runs, "--name", "ds", "--out", nobody_dir, "--campaign-file", campaign)
    assert cp.returncode == 0, cp.stderr[-800:]
    ds = nobody_dir / "ds"
    give_to_nobody(ds)
    nobody_sh('ln -s "$2" "$1/campaign/zz-extra.yaml"', ds, root_file)
    cp = fl("dataset", "relabel", ds)
    assert cp.returncode == 0, cp.stderr[-800:]
    assert sorted(p.name for p in (ds / "campaign").iterdir()) == ["gc.yaml"]
    assert not [p for p in ds.rglob("*") if p.is_file() and not p.is_symlink() and MARKER.encode() in p.read_bytes()]


def test_a_campaign_file_swapped_for_a_link_after_its_check_is_never_copied(two_runs, nobody_dir, tmp_path):
    """nobody hands root a valid campaign file for ``dataset build --campaign-file``,
    then, once root has checked it and is reading the runs, swaps it for a link to a
    root-only 0600 file (the runs are read lazily, so the swap lands in that window
    every time): the dataset's copy is the text that was checked, never MARKER."""
    from faultlab.datasets.build import build

    private = tmp_path / "secret"
    private.mkdir(mode=0o700)
    root_file = private / "private.yaml"
    root_file.write_text(f"# {MARKER}\n")
    os.chmod(root_file, 0o600)
    camp = nobody_dir / "gc.yaml"
    shutil.copy(SW_DATASET / "campaign" / "gc.yaml", camp)
    give_to_nobody(nobody_dir)
    checked = camp.read_bytes()

    def runs():  # the swap, as nobody, after the check and before the campaign files are written
        nobody_sh('ln -s "$2" "$1.new" && mv -f "$1.new" "$1"', camp, root_file)
        yield from two_runs

    out = tmp_path / "out"
    out.mkdir()
    ds = build(runs(), "ds", out, campaign_files=[camp])
    assert camp.is_symlink()
    assert (ds / "campaign" / "gc.yaml").read_bytes() == checked
    assert not [p for p in ds.rglob("*") if p.is_file() and MARKER.encode() in p.read_bytes()]


def test_a_linked_child_of_a_campaign_folder_is_not_built_into_a_dataset(nobody_dir, tmp_path):
    """nobody hands root their folder of runs for ``dataset build --campaign``: one run
    of theirs and a link to root's private run (in a 0700 folder). The dataset holds
    their run only, and the link is one note line."""
    from faultlab.datasets.synthetic import make_run

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    make_run(private / "r", "ROOTPRIVATE-run", seed=1)
    runs = nobody_dir / "runs"
    runs.mkdir()
    shutil.move(make_run(tmp_path / "mine", "mine", seed=0), runs / "mine")
    give_to_nobody(runs)
    nobody_sh('ln -s "$2" "$1/zz"', runs, private / "r")
    cp = fl("dataset", "build", "--campaign", runs, "--name", "ds", "--out", tmp_path / "out")
    assert cp.returncode == 0, cp.stderr[-800:]
    notes = [x for x in cp.stderr.splitlines() if "zz" in x]
    assert len(notes) == 1 and "symlink" in notes[0], cp.stderr
    ds = tmp_path / "out" / "ds"
    assert json.loads((ds / "splits.json").read_text())["train"] + json.loads((ds / "splits.json").read_text())["test"] == ["mine"]
    assert not [p for p in ds.rglob("*") if p.is_file() and b"ROOTPRIVATE" in p.read_bytes()]


@pytest.mark.parametrize("kind", ["link", "sparse"])
def test_relabel_reads_an_unlisted_card_with_no_link_and_bounded(ds, tmp_path, kind):
    """A dataset with no ``build.json`` (built before it) has its licence read from its
    card. nobody drops ``README.md`` and ``build.json`` from the manifest and makes
    the card a link to root's 0600 file with a YAML header holding MARKER, or a sparse
    6 GB file: root's relabel refuses it in one line naming README.md, and MARKER
    reaches no file of the dataset."""
    private = tmp_path / "secret"
    private.mkdir(mode=0o700)
    root_file = private / "card.md"
    root_file.write_text(f"---\nlicense: {MARKER}\n---\nroot only\n")
    os.chmod(root_file, 0o600)
    make = 'ln -s "$2" README.md' if kind == "link" else "truncate -s 6G README.md"
    nobody_sh('cd "$1" && rm build.json README.md && grep -v " README.md$\\| build.json$" MANIFEST.sha256 > M && mv M MANIFEST.sha256 && '
              + make, ds, root_file)
    cp = subprocess.run(["prlimit", f"--as={3 << 30}", "--", *FL, "dataset", "relabel", str(ds)], capture_output=True, text=True,
                        timeout=300)
    one_line_error(cp, "README.md", "symlink" if kind == "link" else "more than")
    assert not [p for p in ds.rglob("*") if p.is_file() and not p.is_symlink() and p.stat().st_size < 1 << 30
                and MARKER.encode() in p.read_bytes()]


def test_a_leaderboard_of_a_published_name_records_and_cards_the_published_folder(nobody_dir, tmp_path):
    """Root ranks ``--dataset faultlab-sw-v1`` standing in nobody's folder, which holds a
    copy of that name: the published dataset is scored, and the folder the board
    records (what ``--verify`` re-scores) is the published one, never nobody's copy.
    (``--card``, which writes into the folder, takes a path only.)"""
    reg = tmp_path / "registry"
    shutil.copytree(SW_DATASET, reg / SW_DATASET.name)
    shutil.copytree(SW_DATASET, nobody_dir / SW_DATASET.name)
    give_to_nobody(nobody_dir)
    cp = fl("leaderboard", "--dataset", SW_DATASET.name, "--detector", "peer-median", "--boot", "0", "--json",
            env={"FAULTLAB_DATASETS": str(reg)}, cwd=nobody_dir)
    assert cp.returncode == 0, cp.stderr[-800:]
    (board,) = json.loads(cp.stdout)["datasets"]
    assert Path(board["path"]).resolve() == (reg / SW_DATASET.name).resolve()


@pytest.mark.parametrize("cmd", [["dataset", "verify"], ["dataset", "info"], ["score", "--detector", "constant", "--boot", "0", "--dataset"]],
                         ids=["verify", "info", "score"])
def test_a_folder_nested_a_thousand_deep_in_a_dataset_is_one_line(ds, cmd):
    """A folder the manifest does not list, nested 1,200 deep (its maker's inodes, no
    more): every walk of the dataset's files ended in a RecursionError traceback."""
    nobody_sh('cd "$1/data" && i=0 && while [ $i -lt 1200 ]; do mkdir a && cd a; i=$((i+1)); done', ds)
    try:
        one_line_error(fl(*cmd, ds, timeout=300), "folders deep")
    finally:  # shutil.rmtree recurses too: the tree goes before the test's folder is removed
        nobody_sh('rm -rf "$1/data/a"', ds)
