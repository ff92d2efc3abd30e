"""Every command that reads a YAML, JSON or CSV input file the user names refuses a
FIFO, a device and a file over its size limit in one line naming the option, exit
2, before reading any of it (``faultlab.inputfile``): a FIFO with no writer would
block the command for ever, ``/dev/zero`` never ends, and a sparse 4 GiB file costs
no disk while its YAML parse would take hours and gigabytes. YAML alias bombs stay
refused by every YAML reader (``faultlab.yamlsafe``).

Real files: a FIFO made with ``mkfifo`` (no writer), the kernel's ``/dev/zero``, and
a sparse file over the limit made with ``truncate``."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from faultlab import inputfile
from faultlab.datasets.synthetic import make_run
from tests.helpers import EXAMPLES, fl, fl_many, one_line_error

#: a command that hangs on a FIFO is killed after this and the test fails
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A labeled run directory (synthetic steps, real labeler)."""
    return make_run(tmp_path_factory.mktemp("inputs") / "run", "in1", seed=1)


#: per reader: (argv with {f} the input file, {run} a run folder, {tmp} a scratch
#: folder; the option the error names; the input's limit)
READERS = {
    "scenario validate": (["scenario", "validate", "{f}"], "SCENARIO", inputfile.YAML_BYTES),
    "run": (["run", "{f}", "--out", "{tmp}/runs"], "SCENARIO", inputfile.YAML_BYTES),
    "campaign": (["campaign", "{f}", "--dry-run"], "SCENARIO", inputfile.YAML_BYTES),
    "status --inventory": (["status", "--inventory", "{f}", "--all-nodes"], "--inventory", inputfile.YAML_BYTES),
    "dataset build --campaign-file": (["dataset", "build", "{run}", "--name", "d", "--out", "{tmp}/ds", "--campaign-file", "{f}"],
                                      "--campaign-file", inputfile.YAML_BYTES),
    "label --peer-groups": (["label", "{run}", "--peer-groups", "{f}"], "--peer-groups", inputfile.JSON_BYTES),
    "score --baseline": (["score", "--run", "{run}", "--detector", "constant", "--boot", "0", "--baseline", "{f}"],
                         "--baseline", inputfile.JSON_BYTES),
    "leaderboard --verify": (["leaderboard", "--verify", "{f}"], "--verify", inputfile.JSON_BYTES),
    "report SCORES.json": (["report", "{f}", "--out", "{tmp}/r.html"], "PATH", inputfile.JSON_BYTES),
}


def _argv(reader: str, f: Path, run: Path, tmp: Path) -> list[str]:
    return [a.format(f=f, run=run, tmp=tmp) for a in READERS[reader][0]]


def _refused_at_once(reader, f, run, tmp_path, *names, option: bool = True) -> str:
    """The one error line of ``reader`` given ``f``, naming ``names`` (and the option,
    unless ``option`` is false: a YAML error names the file and line instead)."""
    t = time.monotonic()
    try:
        cp = fl(*_argv(reader, f, run, tmp_path), timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{reader} still read {f} after {TIMEOUT_S} s")
    line = _refusal(reader, cp, *names, option=option)
    assert time.monotonic() - t < TIMEOUT_S
    return line


def _refusal(reader, cp: subprocess.CompletedProcess, *names, option: bool = True) -> str:
    """The one error line of ``reader``'s run ``cp``, naming ``names`` (and the option,
    unless ``option`` is false)."""
    return one_line_error(cp, *([READERS[reader][1]] if option else []), *names)


def _many_at_once(argvs: list[list[str]]) -> list[subprocess.CompletedProcess]:
    """``argvs`` run in one child process (``fl_many``); a command still reading after
    TIMEOUT_S s each on average fails the tests that use them."""
    try:
        return fl_many(argvs, timeout=TIMEOUT_S * len(argvs))
    except subprocess.TimeoutExpired:
        pytest.fail(f"{len(argvs)} commands still read their inputs after {TIMEOUT_S * len(argvs)} s")


@pytest.mark.parametrize("reader", list(READERS))
def test_a_fifo_is_refused_before_it_is_opened_for_reading(reader, run, tmp_path):
    f = tmp_path / "in.json" if READERS[reader][2] == inputfile.JSON_BYTES else tmp_path / "in.yaml"
    os.mkfifo(f)
    _refused_at_once(reader, f, run, tmp_path, str(f), "a FIFO, not a regular file")


@pytest.mark.parametrize("reader", ["scenario validate", "status --inventory", "label --peer-groups", "leaderboard --verify"])
def test_a_device_is_refused(reader, run, tmp_path):
    _refused_at_once(reader, Path("/dev/zero"), run, tmp_path, "/dev/zero", "a character device")


#: the sizes each reader is given: one byte over its limit and 4 GiB (both sparse), and
#: exactly its limit (NUL bytes: read, then refused as no YAML/JSON, not for its size)
SIZES = {"over": lambda limit: limit + 1, "huge": lambda limit: 4 << 30, "at": lambda limit: limit}


@pytest.fixture(scope="module")
def sized_inputs(run, tmp_path_factory) -> dict[tuple[str, str], tuple[Path, subprocess.CompletedProcess]]:
    """For each reader of READERS and each size of SIZES: the input file of that size
    and the reader run on it (its outputs in the file's folder), all in one child
    process through faultlab's entry point."""
    made, argvs = [], []
    for i, (reader, (_, _, limit)) in enumerate(READERS.items()):
        for size, of in SIZES.items():
            d = tmp_path_factory.mktemp(f"sized-{i}-{size}")
            f = d / ("in.json" if limit == inputfile.JSON_BYTES else "in.yaml")
            with open(f, "wb") as out:
                out.truncate(of(limit))
            made.append(((reader, size), f))
            argvs.append(_argv(reader, f, run, d))
    return {key: (f, cp) for (key, f), cp in zip(made, _many_at_once(argvs))}


@pytest.mark.parametrize("reader", list(READERS))
def test_a_file_over_the_limit_is_refused_unread(sized_inputs, reader):
    """A sparse file one byte over the limit (and one of 4 GiB) is refused naming its
    size; a file of the limit's size is read (and refused for what it holds)."""
    limit = READERS[reader][2]
    f, cp = sized_inputs[(reader, "over")]
    line = _refusal(reader, cp, str(f), f"{limit + 1} bytes, over the")
    assert f"{limit >> 20} MiB" in line
    _refusal(reader, sized_inputs[(reader, "huge")][1], str(limit >> 20) + " MiB")
    cp = sized_inputs[(reader, "at")][1]
    assert cp.returncode != 0 and "over the" not in cp.stderr and "Traceback" not in cp.stderr, cp.stderr[-2000:]


def _alias_bomb() -> str:
    """Nine levels of aliases: 9^9 values from a few hundred bytes."""
    inner = "&a0 [1,1,1,1,1,1,1,1,1]"
    for i in range(1, 9):
        inner = f"&a{i} [{inner}, " + ", ".join([f"*a{i - 1}"] * 8) + "]"
    return inner


#: the readers of YAML files, each given an alias bomb
YAML_READERS = ["scenario validate", "run", "campaign", "status --inventory", "dataset build --campaign-file"]


def _write_bomb(reader: str, f: Path) -> None:
    """``f``: a file ``reader`` takes (inventory, campaign or scenario) with an alias bomb in it."""
    if reader == "status --inventory":
        f.write_text("nodes:\n  a: {host: 10.0.0.1, labels: {x: " + _alias_bomb() + "}}\n")
    elif reader == "campaign":
        f.write_text("name: c\nruns: 2\nbase: {workload: {duration: 20s}}\ntypes: {nic-slow: {params: {rate: " + _alias_bomb() + "}}}\n")
    else:
        src = (EXAMPLES / "quickstart.yaml").read_text()
        assert "params: {rate: 50mbit}" in src
        f.write_text(src.replace("params: {rate: 50mbit}", "params: {rate: " + _alias_bomb() + "}"))


@pytest.fixture(scope="module")
def bombs(run, tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Each reader of YAML_READERS run on its alias bomb (outputs in the bomb's folder),
    all in one child process through faultlab's entry point."""
    argvs = []
    for i, reader in enumerate(YAML_READERS):
        d = tmp_path_factory.mktemp(f"bomb-{i}")
        _write_bomb(reader, d / "bomb.yaml")
        argvs.append(_argv(reader, d / "bomb.yaml", run, d))
    return dict(zip(YAML_READERS, _many_at_once(argvs)))


@pytest.mark.parametrize("reader", YAML_READERS)
def test_every_yaml_reader_refuses_an_alias_bomb(bombs, reader):
    _refusal(reader, bombs[reader], "bomb.yaml", "aliases", option=False)


def test_a_good_input_is_still_read(run, tmp_path):
    """The bound refuses only what it should: the examples and a peer-group mapping read."""
    assert fl("scenario", "validate", EXAMPLES / "quickstart.yaml").returncode == 0
    m = tmp_path / "groups.json"
    m.write_text(json.dumps({"rank:0": "a", "rank:1": "a", "rank:2": "b", "rank:3": "b"}))
    cp = fl("label", run, "--peer-groups", m)
    assert cp.returncode == 0, cp.stderr
