"""A dataset folder handed over by someone else (downloaded, another user's) whose
``splits.json``, ``runs.json`` or ``build.json`` nests 200,000 deep or has the wrong
type: every dataset command that reads the file refuses it in one line naming it,
exit 2, no traceback, nothing written; a ``--campaign-file`` of deeply nested YAML
likewise."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from tests.helpers import SW_DATASET, fl, fl_many, one_line_error

NESTED = b"[" * 200_000

#: per file, its contents to try: nested too deeply, a list where an object is
#: expected, a number where a list (or a string) is
CONTENTS = {
    "splits.json": {"nested": NESTED, "list-for-object": b'[1, "x", null]', "number-for-list": b'{"seed": 0, "train": 5, "test": []}'},
    "runs.json": {"nested": NESTED, "list-for-object": b"[[1, 2]]",
                  "number-for-list": b'[{"run_id": "x", "fault_types": 3}]'},
    "build.json": {"nested": NESTED, "list-for-object": b'[1, "x", null]', "number-for-string": b'{"description": 5}'},
}

#: the commands that read each file (info and export read no build.json; score and
#: relabel verify the manifest first, which names the changed file)
COMMANDS = {
    "info": ["dataset", "info"],
    "score": ["score", "--detector", "constant", "--split", "all", "--dataset"],
    "score-no-verify": ["score", "--detector", "constant", "--split", "all", "--no-verify", "--dataset"],
    "relabel": ["dataset", "relabel"],
    "export": ["dataset", "export", "--format", "timeeval", "--out", "{out}"],
}
READS = {"splits.json": list(COMMANDS), "runs.json": list(COMMANDS), "build.json": ["score", "relabel"]}

CASES = [(f, kind, cmd) for f, kinds in CONTENTS.items() for kind in kinds for cmd in READS[f]]


def _digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def corrupt_refusals(tmp_path_factory) -> list[tuple[Path, dict[str, str], object]]:
    """For each case of CASES: a folder holding only ``ds``, a copy of the published
    faultlab-sw-v1 with the case's file corrupted, the digests of that folder, and the
    case's command on it, run once (all commands in one child process)."""
    if not (SW_DATASET / "splits.json").is_file():
        pytest.skip(f"no published dataset at {SW_DATASET}")
    folders, digests, argvs = [], [], []
    for name, kind, command in CASES:
        folders.append(tmp_path_factory.mktemp(f"{name}-{kind}-{command}"))
        dataset = folders[-1] / "ds"
        shutil.copytree(SW_DATASET, dataset)
        (dataset / name).write_bytes(CONTENTS[name][kind])
        digests.append(_digests(folders[-1]))
        argvs.append([*(a.format(out=folders[-1] / "export") for a in COMMANDS[command]), dataset])
    return list(zip(folders, digests, fl_many(argvs)))


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{f}-{k}-{c}" for f, k, c in CASES])
def test_corrupt_dataset_file_is_one_line(corrupt_refusals, i):
    name, kind, command = CASES[i]
    folder, before, cp = corrupt_refusals[i]
    line = one_line_error(cp, name)
    if kind == "nested" and command not in ("score", "relabel"):  # the manifest names the file first
        assert "nested too deeply" in line, line
    assert _digests(folder) == before  # nothing written, nothing removed
    assert sorted(p.name for p in folder.iterdir()) == ["ds"]


@pytest.fixture
def one_run(tmp_path) -> Path:
    from faultlab.datasets.synthetic import make_run

    return make_run(tmp_path / "runs" / "r1", "r1", seed=1)


@pytest.mark.parametrize("text", ["[" * 200_000, "name: x\nruns: 2\nbase: " + "{a: " * 200_000], ids=["top", "in-a-field"])
def test_campaign_file_nested_too_deeply_is_one_line(tmp_path, one_run, text):
    f = tmp_path / "camp.yaml"
    f.write_text(text)
    cp = fl("dataset", "build", one_run, "--name", "ds", "--out", tmp_path / "out", "--campaign-file", f)
    line = one_line_error(cp, "--campaign-file", "camp.yaml")
    assert "nested too deeply" in line, line
    assert not (tmp_path / "out").exists()
