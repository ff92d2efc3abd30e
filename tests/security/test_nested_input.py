"""Deeply nested JSON and YAML written by someone else is one line naming the file,
never a RecursionError traceback.

The parsers recurse once per nesting level: ``"[" * 200000`` exhausts Python's
recursion limit. Each reader of a file another user may write (a trusted folder's
JSON, a run folder's meta.json and whatif.json, a scores file, a scenario) reports it
as it reports any other corrupt input.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from faultlab import safefs, yamlsafe
from faultlab.report.synthetic import make_run

FL = [sys.executable, "-m", "faultlab.cli"]
DEEP_JSON = "[" * 200000
#: 1,400 levels of block mappings: too deep for the parser, under inputfile.YAML_BYTES
DEEP_YAML = "name: x\nfaults:\n" + "".join(" " * i + f"k{i}:\n" for i in range(1, 1400))


def one_line(cp: subprocess.CompletedProcess, name: str) -> str:
    """The error line of a failed command: no traceback, the file named."""
    err = cp.stdout + cp.stderr
    assert cp.returncode != 0, err[-2000:]
    assert "Traceback" not in err and "RecursionError" not in err.replace("(RecursionError)", ""), err[-2000:]
    assert name in err and "nested too deeply" in err, err[-2000:]
    return err


def test_read_json_of_a_trusted_folder_says_too_deep(tmp_path):
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    (d / "x.json").write_text(DEEP_JSON)
    with safefs.open_dir(str(d)) as fd, pytest.raises(ValueError, match=r"x\.json: JSON nested too deeply"):
        fd.read_json("x.json")


def test_yaml_loader_and_composer_say_too_deep():
    for f in (yamlsafe.load, yamlsafe.compose):
        with pytest.raises(yamlsafe.TooDeep):
            f(DEEP_YAML)
        with pytest.raises(yamlsafe.TooDeep):
            f(DEEP_JSON)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("nested") / "run", ranks=2, duration_s=60)


@pytest.mark.parametrize("argv", [
    ["report", "{run}", "--out", "{tmp}/r.html"],
    ["export", "--format", "perfetto", "{run}", "--out", "{tmp}/t.json"],
    ["score", "--detector", "peer-median", "--boot", "0", "--run", "{run}", "--out", "{tmp}/s.json"],
    ["label", "{run}"],
])
def test_a_run_folders_nested_meta_json_is_one_line(run, tmp_path, argv):
    meta = run / "meta.json"
    good = meta.read_text()
    meta.write_text(DEEP_JSON)
    try:
        cp = subprocess.run([*FL, *(a.format(run=run, tmp=tmp_path) for a in argv)], capture_output=True, text=True, timeout=300)
    finally:
        meta.write_text(good)
    one_line(cp, "meta.json")


def test_a_run_folders_nested_whatif_json_is_one_line(run, tmp_path):
    (run / "whatif.json").write_text(DEEP_JSON)
    try:
        cp = subprocess.run([*FL, "report", str(run), "--out", str(tmp_path / "r.html")], capture_output=True, text=True, timeout=300)
    finally:
        (run / "whatif.json").unlink()
    one_line(cp, "whatif.json")


def test_a_nested_scores_file_and_baseline_are_one_line(run, tmp_path):
    f = tmp_path / "metrics.json"
    f.write_text(DEEP_JSON)
    one_line(subprocess.run([*FL, "report", str(f)], capture_output=True, text=True, timeout=300), "metrics.json")
    cp = subprocess.run([*FL, "score", "--detector", "peer-median", "--boot", "0", "--run", str(run), "--baseline", str(f)],
                        capture_output=True, text=True, timeout=300)
    one_line(cp, "metrics.json")


def test_a_nested_scenario_is_one_line(tmp_path):
    for i, text in enumerate((DEEP_YAML, DEEP_JSON)):
        f = tmp_path / f"deep{i}.yaml"
        f.write_text(text)
        cp = subprocess.run([*FL, "scenario", "validate", str(f)], capture_output=True, text=True, timeout=120)
        one_line(cp, f.name)
