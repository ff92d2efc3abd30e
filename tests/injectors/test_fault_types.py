"""A fault type is one module: a module that registers itself (``@register``) shows up
in ``faultlab inject --help``, the scenario JSON Schema, ``faultlab doctor``, the
report's colours and the verify sentence, and is injected and reverted like a built-in.

The toy type is ``tests/injectors/faulttypes/cpu_nice.py``. The CLI runs in a subprocess whose
``faultlab.injectors`` package also searches ``tests/injectors/faulttypes`` (as if the module
had been added to ``injectors/``); in this process it is registered for one test and
removed after it, so no other test sees it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import needs_root
from faultlab.injectors import FAULT_TYPES, apply, build
from faultlab.injectors.registry import unregister
from faultlab.nodes import LocalNode

TOYS = Path(__file__).parent / "faulttypes"

# faultlab's CLI with faultlab.injectors searching TOYS too: its modules are found and
# registered as the package's own are (argv: the CLI's arguments)
RUN = f"""
import importlib.util, sys
spec = importlib.util.find_spec("faultlab.injectors")
spec.submodule_search_locations.append({str(TOYS)!r})
mod = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = mod
spec.loader.exec_module(mod)
from faultlab.cli import main
sys.argv = ["faultlab", *sys.argv[1:]]
main()
"""


def fl_with_toy(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, text=True, timeout=120,
                          env={"COLUMNS": "200", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})


@pytest.fixture
def toy():
    """The toy type registered in this process for one test, removed after it."""
    spec = importlib.util.spec_from_file_location("faultlab_toy_cpu_nice", TOYS / "cpu_nice.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        yield mod.CpuNice
    finally:
        unregister("cpu-nice")


def test_a_new_module_is_in_help_schema_and_doctor():
    cp = fl_with_toy("inject", "--help")
    assert cp.returncode == 0, cp.stderr
    assert "cpu-nice" in cp.stdout and "--niceness" in cp.stdout and "NICE" in cp.stdout
    assert "cpu-nice: nice level of the targets, 1..19" in cp.stdout and "cpu-nice: PIDs 1,2" in cp.stdout

    cp = fl_with_toy("scenario", "schema")
    assert cp.returncode == 0, cp.stderr
    spec = json.loads(cp.stdout)["$defs"]["FaultSpec"]
    assert "cpu-nice" in spec["properties"]["type"]["enum"]
    assert spec["properties"]["params"]["properties"]["niceness"]["maximum"] == 19
    rule = next(r for r in spec["allOf"] if r["if"]["properties"]["type"]["const"] == "cpu-nice")
    assert rule["then"]["properties"]["params"]["propertyNames"]["enum"] == ["niceness"] and rule["then"]["required"] == ["rank"]

    cp = fl_with_toy("doctor", "--json")
    assert cp.returncode == 0, cp.stderr
    assert "cpu-nice" in json.loads(cp.stdout)["types"]


def test_the_module_alone_is_not_seen_elsewhere():
    assert "cpu-nice" not in FAULT_TYPES
    cp = subprocess.run([sys.executable, "-m", "faultlab.cli", "inject", "--help"], capture_output=True, text=True, timeout=120)
    assert "--niceness" not in cp.stdout


def test_scenario_colour_and_sentence_come_from_the_module(toy, tmp_path):
    from faultlab.evidence import verify_text
    from faultlab.report.plots import FAULT_COLORS
    from faultlab.scenario import load

    f = tmp_path / "s.yaml"
    f.write_text("faults:\n  - {type: cpu-nice, rank: 1, at: 5s, duration: 5s, params: {niceness: 25}}\n")
    with pytest.raises(Exception, match=r"s.yaml:2: faults\[0\].params.niceness: '25' is not a nice level"):
        load(f)
    f.write_text("faults:\n  - {type: cpu-nice, rank: 1, at: 5s, duration: 5s, params: {niceness: 10}}\n")
    assert load(f).faults[0].options() == {"--niceness": "10"}
    assert FAULT_COLORS["cpu-nice"] == toy.color
    assert verify_text({"nice": [19], "want": 19, "ok": True}, "cpu-nice") == "verified: nice level read back [19] (checked = 19)"


@needs_root
def test_the_toy_injects_and_reverts_like_a_builtin(toy):
    target = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(0.1)
        inj = build("cpu-nice", LocalNode("local"), target=str(target.pid), duration_s=5, opts={"--niceness": "15"})
        before = inj._nice(target.pid)
        active = apply(inj, 5, grace_s=5)
        assert active.evidence["verify"]["ok"], active.evidence
        assert active.revert() == "reverted"
        time.sleep(0.1)
        assert inj._nice(target.pid) == before
    finally:
        target.kill()
        target.wait()


def test_a_type_that_leaves_a_declaration_out_is_refused_at_registration():
    from faultlab.injectors import Injector, register

    class Half(Injector):
        type = "half-declared"

        @classmethod
        def from_options(cls, node, **kw):
            raise NotImplementedError

    with pytest.raises(ValueError, match="'half-declared' .* does not declare support, verify_sentence"):
        register(Half)
    assert "half-declared" not in FAULT_TYPES
