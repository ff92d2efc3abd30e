"""`faultlab dataset list` names each dataset folder once, whatever paths reach it (the
package data and ./datasets are one folder in a checkout's root; a link in
FAULTLAB_DATASETS), in search order, and still lists two different folders of one name,
saying which one a name finds."""

from __future__ import annotations

import json

from tests.helpers import REPO, fl


def _dataset(root, name):
    (root / name).mkdir(parents=True)
    (root / name / "splits.json").write_text("{}")


def test_dataset_list_from_the_checkout_root_names_each_dataset_once():
    p = fl("dataset", "list", "--json", cwd=REPO, env={"FAULTLAB_DATASETS": ""})
    assert p.returncode == 0, p.stderr
    names = [d["name"] for d in json.loads(p.stdout)]
    assert "faultlab-hw-v2" in names and len(names) == len(set(names)), names
    text = fl("dataset", "list", cwd=REPO, env={"FAULTLAB_DATASETS": ""}).stdout
    assert "shadowed" not in text


def test_a_folder_named_twice_in_faultlab_datasets_is_listed_once_at_its_first_place(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _dataset(a, "x")
    _dataset(b, "y")
    (tmp_path / "a-link").symlink_to(a)
    env = {"FAULTLAB_DATASETS": f"{b}:{tmp_path / 'a-link'}:{a}"}
    found = json.loads(fl("dataset", "list", "--json", env=env, cwd=tmp_path).stdout)
    assert [(d["name"], d["root"]) for d in found] == [("y", str(b)), ("x", str(tmp_path / "a-link"))]
    assert not any(d["shadowed"] for d in found)


def test_two_different_folders_of_one_name_are_both_listed_and_the_first_wins(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _dataset(a, "x")
    _dataset(b, "x")
    env = {"FAULTLAB_DATASETS": f"{b}:{a}"}
    found = json.loads(fl("dataset", "list", "--json", env=env, cwd=tmp_path).stdout)
    assert [(d["path"], d["shadowed"], d["shadowed_by"]) for d in found] == [(str(b / "x"), False, None), (str(a / "x"), True, str(b / "x"))]
    line = fl("dataset", "list", env=env, cwd=tmp_path).stdout.splitlines()[1]
    assert line.endswith(f"(shadowed: x is {b / 'x'}, found first)"), line
