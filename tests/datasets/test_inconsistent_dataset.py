"""A dataset whose files each parse but do not fit together, with MANIFEST.sha256
rewritten to match them (so no digest gives it away): a run's labels file swapped
for its injections file, two runs' labels files exchanged, a run in both splits or
twice in one, a run twice in runs.json. Every command that reads a dataset refuses
it in one line naming the file (and the table, column or run) and the fix, exit 2,
no traceback, nothing written."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from faultlab.datasets import manifest
from tests.helpers import SW_DATASET, fl, fl_many, one_line_error

#: every command that reads a dataset's splits, runs or tables
COMMANDS = {
    "verify": ["dataset", "verify"],
    "info": ["dataset", "info"],
    "score": ["score", "--detector", "peer-median", "--dataset"],
    "score-all-no-verify": ["score", "--detector", "constant", "--split", "all", "--no-verify", "--dataset"],
    "leaderboard": ["leaderboard", "--detector", "constant", "--out", "{out}/lb", "--dataset"],
    "report": ["report", "--out", "{out}/r.html"],
    "export": ["dataset", "export", "--format", "tsb-ad", "--out", "{out}/x"],
    "relabel": ["dataset", "relabel"],
}


def _splits(ds: Path) -> dict:
    return json.loads((ds / "splits.json").read_text())


def _exchange(a: Path, b: Path) -> None:
    tmp = a.with_name("swap.tmp")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)


def _part(ds: Path, table: str, rid: str) -> Path:
    return ds / "data" / table / f"run={rid}" / "part-0.parquet"


def swap_tables(ds: Path) -> list[str]:
    """A test run's labels file is its injections file and the other way round."""
    rid = _splits(ds)["test"][0]
    _exchange(_part(ds, "labels", rid), _part(ds, "injections", rid))
    return ["data/injections/run=", "injections table", "column 'fault_type' is missing"]


def cross_runs(ds: Path) -> list[str]:
    """A train run's labels file and a test run's are exchanged (same columns)."""
    sp = _splits(ds)
    a, b = sp["train"][0], sp["test"][0]
    _exchange(_part(ds, "labels", a), _part(ds, "labels", b))
    return ["data/labels/run=", "labels table", "rows are of run", a, b]


def both_splits(ds: Path) -> list[str]:
    sp = _splits(ds)
    sp["test"].append(sp["train"][0])
    (ds / "splits.json").write_text(json.dumps(sp))
    return ["splits.json", sp["train"][0], "in both train and test"]


def twice_in_split(ds: Path) -> list[str]:
    sp = _splits(ds)
    sp["test"].insert(1, sp["test"][0])
    (ds / "splits.json").write_text(json.dumps(sp))
    return ["splits.json", sp["test"][0], "twice in test"]


def twice_in_runs(ds: Path) -> list[str]:
    runs = json.loads((ds / "runs.json").read_text())
    runs.append(runs[0])
    (ds / "runs.json").write_text(json.dumps(runs))
    return ["runs.json", runs[0]["run_id"], "twice"]


CHANGES = {f.__name__: f for f in (swap_tables, cross_runs, both_splits, twice_in_split, twice_in_runs)}


def _rewrite_manifest(ds: Path) -> None:
    files = [p for p in ds.rglob("*") if p.is_file() and p.name != manifest.NAME]
    (ds / manifest.NAME).write_text(manifest.text({p.relative_to(ds).as_posix(): manifest.sha256(p) for p in files}))


def _digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module", params=list(CHANGES))
def changed(request, tmp_path_factory):
    """(dataset folder, what its error line must name) for each change."""
    if not (SW_DATASET / "splits.json").is_file():
        pytest.skip(f"no published dataset at {SW_DATASET}")
    ds = tmp_path_factory.mktemp(request.param) / "ds"
    shutil.copytree(SW_DATASET, ds)
    names = CHANGES[request.param](ds)
    _rewrite_manifest(ds)
    assert manifest.verify(ds) == {"changed": [], "missing": [], "extra": []}  # no digest gives it away
    return ds, names


@pytest.fixture(scope="module")
def refusals(changed, tmp_path_factory) -> tuple[dict, dict[str, Path], dict[str, str], dict[str, str]]:
    """Every command of COMMANDS run once on the changed dataset, each writing under an
    empty folder of its own, all in one child process through faultlab's entry point:
    (command -> its run, command -> its folder, the dataset's file digests before, after)."""
    ds, _ = changed
    before = _digests(ds)
    outs = {c: tmp_path_factory.mktemp(f"out-{c}") for c in COMMANDS}
    done = fl_many([[*(a.format(out=outs[c]) for a in args), ds] for c, args in COMMANDS.items()], timeout=600)
    return dict(zip(COMMANDS, done)), outs, before, _digests(ds)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_files_that_do_not_fit_together_are_refused_in_one_line(changed, refusals, command):
    _, names = changed
    done, outs, before, after = refusals
    line = one_line_error(done[command], *names)
    assert "rebuild the dataset" in line, line  # the fix
    assert after == before  # no command changed the dataset
    assert list(outs[command].iterdir()) == []  # nothing written


def test_the_published_datasets_fit_together(tmp_path):
    """The check refuses only what does not fit: each published dataset passes it."""
    for name in ("faultlab-sw-v1", "faultlab-hw-v1"):
        d = SW_DATASET.parent / name
        if not (d / "splits.json").is_file():
            pytest.skip(f"no published dataset at {d}")
        cp = fl("dataset", "verify", d)
        assert cp.returncode == 0, cp.stderr
        assert "table files are its runs' tables" in cp.stdout
