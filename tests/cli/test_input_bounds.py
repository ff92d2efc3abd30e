"""Input out of bounds or ambiguous is a one-line error naming the field and the fix,
exit 2, nothing applied:

- a scenario or inventory YAML with a key written twice (``seed: 0`` then
  ``seed: 5``) is refused, never read with the last one winning;
- durations are >= 1 ms, a pause >= 10 ms, a period >= 100 ms (``--duration
  0.00001ms``, a 10 ns fault, is refused);
- durations and rates speak one vocabulary: a space before the unit (``"10 ms"``,
  ``"100 mbit"``) is refused in both;
- ``testbed up --nodes 0`` is bad input (exit 2);
- a value out of its bounds (``rank: -1``) names the fix, not only pydantic's bound;
  ``testbed.nodes: true`` is not read as 1.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from faultlab.errors import BadInput
from faultlab.units import parse_duration, parse_rate
from faultlab.yamlsafe import DuplicateKey, load as load_yaml
from tests.helpers import EXAMPLES, fl, fl_many, one_line_error

SCENARIO = """name: t
seed: 0
testbed: {backend: local, nodes: 2}
workload: {duration: 30s}
faults:
  - {type: process-pause, rank: 1, at: 5s, duration: 5s, params: {pause: 100ms, period: 500ms}}
"""




def _leases() -> set[str]:
    d = Path(os.environ["FAULTLAB_LEASE_DIR"])
    return {p.name for p in d.iterdir()} if d.is_dir() else set()


# -- duplicated keys ------------------------------------------------------------------------


def test_scenario_with_a_duplicated_key_is_refused_naming_it(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SCENARIO.replace("seed: 0\n", "seed: 0\nseed: 5\n"))
    out = one_line_error(fl("scenario", "validate", str(p)), "duplicated key 'seed'", f"{p}:3", "line 2", "keep one")
    assert "valid scenario" not in out
    p.write_text(SCENARIO)  # the same file without the duplicate is valid
    assert fl("scenario", "validate", str(p)).returncode == 0


def test_duplicated_key_deep_inside_a_fault_and_in_a_campaign(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SCENARIO.replace("params: {pause: 100ms, period: 500ms}", "params: {pause: 100ms, period: 500ms, pause: 300ms}"))
    one_line_error(fl("scenario", "validate", str(p)), "duplicated key 'pause'", f"{p}:6")
    c = tmp_path / "c.yaml"
    c.write_text("name: c\nseed: 1\nruns: 2\nruns: 3\nbase: {testbed: {backend: local, nodes: 2}, workload: {duration: 20s}}\n")
    one_line_error(fl("campaign", str(c), "--dry-run"), "duplicated key 'runs'", f"{c}:4")


def test_inventory_with_a_duplicated_node_is_refused(tmp_path):
    p = tmp_path / "inv.yaml"
    p.write_text("nodes:\n  a: {address: 10.0.0.1}\n  a: {address: 10.0.0.2}\n")
    one_line_error(fl("doctor", "--inventory", str(p), "--node", "a"), "--inventory", "duplicated key 'a'", "line 2")


def test_yaml_merge_keys_may_still_be_overridden():
    assert load_yaml("base: &b {a: 1, c: 3}\nx:\n  <<: *b\n  a: 2\n") == {"base": {"a": 1, "c": 3}, "x": {"a": 2, "c": 3}}
    with pytest.raises(DuplicateKey):
        load_yaml("x: {a: 1, a: 1}\n")
    with pytest.raises(Exception):  # still safe_load: no Python objects
        load_yaml("x: !!python/object/apply:os.system [true]\n")


# -- durations: a minimum, and one vocabulary with rates ----------------------------------


@pytest.mark.parametrize("text,why", [("0.00001ms", "below 1ms"), ("0.5ms", "below 1ms"), ("10 ms", "space before its unit"),
                                      ("1 h", "space before its unit"), ("10", "no unit")])
def test_duration_minimum_and_no_space(text, why):
    with pytest.raises(BadInput, match=why) as e:
        parse_duration(text, "--duration")
    assert str(e.value).startswith("--duration: ") and "(" in str(e.value)  # the field and a fix


def test_duration_and_rate_speak_one_vocabulary():
    assert parse_duration("10ms", "--duration") == pytest.approx(0.01)
    assert parse_rate("100mbit", "--rate") == pytest.approx(1e8)
    for bad, parse in (("10 ms", parse_duration), ("100 mbit", parse_rate)):
        with pytest.raises(BadInput, match="space before its unit"):
            parse(bad, "--x")
    assert parse_duration("1ms", "--duration") == pytest.approx(1e-3)  # the minimum itself
    assert parse_duration("0s", "--grace", allow_zero=True) == 0.0


TINY = [
    (["--duration", "0.00001ms"], "--duration"),
    (["--duration", "10 ms"], "--duration"),
    (["--pause", "0.001ms", "--period", "0.002ms"], "--pause"),
    (["--pause", "5ms", "--period", "500ms"], "--pause"),
    (["--pause", "20ms", "--period", "50ms"], "--period"),
]


def _tiny_argv(args: list[str]) -> list[str]:
    """``faultlab inject`` of a process-pause on this process, ``args`` overriding the defaults."""
    base = {"--pause": "100ms", "--period": "500ms", "--duration": "5s"}
    for k, v in zip(args[::2], args[1::2]):
        base[k] = v
    return ["inject", "--type", "process-pause", "--target", str(os.getpid())] + [x for kv in base.items() for x in kv]


@pytest.fixture(scope="module")
def tiny_refusals() -> tuple[list, set[str], set[str]]:
    """Each inject of TINY run once through faultlab's entry point (one child process),
    with the lease files before and after them."""
    before = _leases()
    done = fl_many([_tiny_argv(args) for args, _ in TINY])
    return done, before, _leases()


@pytest.mark.parametrize("i", range(len(TINY)), ids=[" ".join(a) for a, _ in TINY])
def test_inject_refuses_tiny_durations_and_applies_nothing(tiny_refusals, i):
    done, before, after = tiny_refusals
    one_line_error(done[i], TINY[i][1])
    assert after == before


def test_scenario_pause_below_the_minimum_names_the_param(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SCENARIO.replace("pause: 100ms, period: 500ms", "pause: 2ms, period: 500ms"))
    one_line_error(fl("scenario", "validate", str(p)), "faults[0].params.pause", "10ms")
    p.write_text(SCENARIO.replace("duration: 30s", "duration: 30 s"))
    one_line_error(fl("scenario", "validate", str(p)), "workload.duration", "space before its unit")


# -- testbed up --nodes 0; pydantic messages with their fix --------------------------------


NO_NODES = [(backend, n) for n in ("0", "-3") for backend in ("netns", "docker", "ssh")]


@pytest.fixture(scope="module")
def no_nodes_refusals() -> list:
    """``testbed up`` of each (backend, count) of NO_NODES, run once (one child process)."""
    return fl_many([["testbed", "up", "--backend", backend, "--nodes", n] for backend, n in NO_NODES])


@pytest.mark.parametrize("i", range(len(NO_NODES)), ids=[f"{b}-{n}" for b, n in NO_NODES])
def test_testbed_up_with_no_nodes_is_bad_input(no_nodes_refusals, i):
    one_line_error(no_nodes_refusals[i], "--nodes", "give 1 to")


OUT_OF_BOUNDS = [
    ("rank: 1,", "rank: -1,", "faults[0].rank", "give a value >= 0"),
    ("nodes: 2}", "nodes: 1}", "testbed.nodes", "give a value >= 2"),
    ("nodes: 2}", "nodes: 99}", "testbed.nodes", "give a value <= 64"),
    ("nodes: 2}", "nodes: true}", "testbed.nodes", "whole number"),
    ("rank: 1,", "rank: true,", "faults[0].rank", "whole number"),
    ("backend: local", "backend: lokal", "testbed.backend", "use one of"),
]


@pytest.fixture(scope="module")
def out_of_bounds_refusals(tmp_path_factory) -> list:
    """``scenario validate`` of SCENARIO with each edit of OUT_OF_BOUNDS, run once (one child process)."""
    d = tmp_path_factory.mktemp("bounds")
    files = []
    for i, (old, new, _, _) in enumerate(OUT_OF_BOUNDS):
        files.append(d / f"s{i}.yaml")
        files[-1].write_text(SCENARIO.replace(old, new))
    return fl_many([["scenario", "validate", str(f)] for f in files])


@pytest.mark.parametrize("i", range(len(OUT_OF_BOUNDS)), ids=[new for _, new, _, _ in OUT_OF_BOUNDS])
def test_pydantic_errors_name_their_fix(out_of_bounds_refusals, i):
    _, _, field, fix = OUT_OF_BOUNDS[i]
    one_line_error(out_of_bounds_refusals[i], field, fix)


def test_a_yaml_alias_bomb_is_refused_in_one_line_at_once(tmp_path):
    """A scenario whose one parameter is nine levels of aliases (9^9 values from a few
    hundred bytes) is refused by ``scenario validate`` in one line, exit 2, at once."""
    inner = "&a0 [1,1,1,1,1,1,1,1,1]"
    for i in range(1, 9):
        inner = f"&a{i} [{inner}, " + ", ".join([f"*a{i - 1}"] * 8) + "]"
    src = (EXAMPLES / "quickstart.yaml").read_text()
    assert "params: {rate: 50mbit}" in src
    f = tmp_path / "bomb.yaml"
    f.write_text(src.replace("params: {rate: 50mbit}", "params: {rate: " + inner + "}"))
    cp = fl("scenario", "validate", str(f), timeout=60)
    assert cp.returncode == 2 and "aliases" in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, cp.stderr
