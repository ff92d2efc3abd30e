"""Options that contradict each other, given together, are refused in one line naming
both (exit 2), never settled by which came last: a flag and its opposite are two
options of every command (``--in-memory``/``--out-of-core``, ``--label``/``--no-label``,
``--verify``/``--no-verify``), and ``--scheduler`` labels out of core, so it
contradicts ``--in-memory``."""

from __future__ import annotations

import pytest
import typer

from faultlab.cli import app
from tests.helpers import fl_many, one_line_error

CONTRADICTIONS = {
    "label-in-memory-out-of-core": (["label", "RUN", "--in-memory", "--out-of-core"], ("--in-memory", "--out-of-core")),
    "label-out-of-core-in-memory": (["label", "RUN", "--out-of-core", "--in-memory"], ("--in-memory", "--out-of-core")),
    "label-in-memory-scheduler": (["label", "RUN", "--in-memory", "--scheduler", "tcp://127.0.0.1:1"], ("--in-memory", "--scheduler")),
    "run-label-no-label": (["run", "RUN/none.yaml", "--label", "--no-label"], ("--label", "--no-label")),
    "campaign-no-label-label": (["campaign", "RUN/none.yaml", "--no-label", "--label"], ("--label", "--no-label")),
    "score-verify-no-verify": (["score", "--detector", "constant", "--dataset", "RUN", "--verify", "--no-verify"], ("--verify", "--no-verify")),
}


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    # an empty folder and a scenario that is not there: the flags are refused before
    # either is read, and a command that let them pass fails on its input, never runs
    run = tmp_path_factory.mktemp("run")
    argvs = [[a.replace("RUN", str(run)) for a in argv] for argv, _ in CONTRADICTIONS.values()]
    return dict(zip(CONTRADICTIONS, fl_many(argvs, cwd=run)))


@pytest.mark.parametrize("case", list(CONTRADICTIONS))
def test_contradictory_options_together_are_one_line_naming_both(refusals, case):
    line = one_line_error(refusals[case], *CONTRADICTIONS[case][1])
    assert "contradicts" in line, line


def _options(cmd, path=()):
    for p in getattr(cmd, "params", []):
        yield path, p
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _options(sub, path + (name,))


def test_no_option_is_a_flag_pair_whose_last_spelling_wins_in_silence():
    """A ``--x/--no-x`` option takes whichever of its spellings came last; every command
    (found by walking the tree, so one added later is checked too) has two options
    instead, checked against each other."""
    pairs = [(" ".join(path), p.opts + p.secondary_opts) for path, p in _options(typer.main.get_command(app))
             if getattr(p, "secondary_opts", None)]
    assert not pairs, pairs
