"""A scenario or campaign that validates can be run, and one that cannot is refused in
one line: every example with each of its keys removed in turn (a fault's or a drawn
type's parameter, a target, a start...) either validates, and then every run it draws
validates too, or is refused with one line (BadInput) naming the field, never a
traceback; a campaign whose io-slow draws lack ``path`` is refused by ``scenario
validate`` and ``campaign --dry-run`` naming the type and the parameter, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from faultlab.errors import BadInput
from faultlab.scenario import Campaign, load
from tests.helpers import REPO, fl, fl_many, one_line_error

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def _without_each_key(node, path=()):
    """(path, a copy of ``node`` with the key at path removed) for every mapping key at
    any depth."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield path + (k,), {kk: vv for kk, vv in node.items() if kk != k}
            for sub, changed in _without_each_key(v, path + (k,)):
                yield sub, {**node, k: changed}
    elif isinstance(node, list):
        for i, v in enumerate(node):
            for sub, changed in _without_each_key(v, path + (i,)):
                yield sub, [*node[:i], changed, *node[i + 1:]]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_each_key_removed_validates_fully_or_is_one_line(example, tmp_path):
    data = yaml.safe_load(example.read_text())
    variants = list(_without_each_key(data))
    assert len(variants) > 5
    refused = 0
    for i, (path, changed) in enumerate(variants):
        f = tmp_path / f"{i}.yaml"
        f.write_text(yaml.safe_dump(changed, sort_keys=False))
        try:
            sc = load(f)
            if isinstance(sc, Campaign):  # validated: every run it draws must validate too
                assert len(sc.scenarios()) == sc.runs
        except BadInput as e:
            refused += 1
            assert "\n" not in str(e) and str(f) in str(e), (path, str(e))
    assert refused or not any(p[-1] in ("type", "duration") for p, _ in variants), example


def _smoke_without_io_path(tmp_path: Path) -> Path:
    data = yaml.safe_load((REPO / "examples" / "smoke-campaign.yaml").read_text())
    assert "path" in data["types"]["io-slow"]["params"]
    del data["types"]["io-slow"]["params"]["path"]
    f = tmp_path / "no-path.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    return f


def test_campaign_missing_a_required_parameter_is_refused_by_validate(tmp_path):
    f = _smoke_without_io_path(tmp_path)
    line = one_line_error(fl("scenario", "validate", f), "types.io-slow.params.path", "io-slow needs path")
    assert str(f) in line
    one_line_error(fl("campaign", f, "--dry-run"), "types.io-slow.params.path")


def test_scenario_missing_a_required_parameter_is_one_line(tmp_path):
    data = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
    del data["faults"][1]["params"]["cpu_fraction"]
    f = tmp_path / "no-fraction.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    for args in (("scenario", "validate", f), ("run", f, "--out", tmp_path / "run")):
        one_line_error(fl(*args), "faults[1].params", "cpu-contention")
    assert not (tmp_path / "run").exists()


#: campaigns whose draws cannot be made: (id, the lines after name and runs, the field named)
UNDRAWABLE = [
    ("inverted-faults-per-run", "faults_per_run: [5, 1]\ntypes: {cpu-contention: {params: {cpu_fraction: [0.5]}}}", "faults_per_run"),
    ("1000-faults-a-run", "faults_per_run: [1000, 1000]\ntypes: {cpu-contention: {params: {cpu_fraction: [0.5]}}}", "faults_per_run"),
    ("no-types", "types: {}", "types"),
    ("26-digit-seed", "seed: 12345678901234567890123456\ntypes: {cpu-contention: {params: {cpu_fraction: [0.5]}}}", "seed"),
    ("negative-seed", "seed: -1\ntypes: {cpu-contention: {params: {cpu_fraction: [0.5]}}}", "seed"),
]


@pytest.fixture(scope="module")
def undrawable_refusals(tmp_path_factory) -> dict[str, tuple]:
    """For each campaign of UNDRAWABLE: what ``scenario validate`` and ``campaign
    --dry-run`` of it did (all in one child process)."""
    d = tmp_path_factory.mktemp("undrawable")
    argvs = []
    for name, text, _ in UNDRAWABLE:
        f = d / f"{name}.yaml"
        f.write_text(f"name: c\nruns: 2\n{text}\n")
        argvs += [["scenario", "validate", f], ["campaign", f, "--dry-run"]]
    done = fl_many(argvs)
    return {name: (done[2 * i], done[2 * i + 1]) for i, (name, _, _) in enumerate(UNDRAWABLE)}


@pytest.mark.parametrize("name,field", [(n, f) for n, _, f in UNDRAWABLE], ids=[n for n, _, _ in UNDRAWABLE])
def test_a_campaign_that_cannot_be_drawn_is_refused_in_one_line(undrawable_refusals, name, field):
    """A campaign whose draws cannot be made (an inverted or huge faults_per_run, no
    fault type, a seed out of range) is refused by validate and by a dry run, in one
    line naming the field, never a traceback from the draw."""
    validate, dry_run = undrawable_refusals[name]
    one_line_error(validate, field)
    one_line_error(dry_run, field)
