"""`faultlab synth --help` states the bounds the generator enforces, from the constants
it checks (faultlab.synthlimits), and a value one past each bound is refused in one
line naming the option, before anything is written."""

from __future__ import annotations

import re

import pytest

from faultlab import synthlimits
from tests.helpers import fl_many, one_line_error

PAST = {
    "ranks-below": (["--ranks", str(synthlimits.MIN_RANKS - 1)], "--ranks"),
    "ranks-above": (["--ranks", str(synthlimits.MAX_RANKS + 1)], "--ranks"),
    "steps-below": (["--steps", str(synthlimits.MIN_STEPS - 1)], "--steps"),
    "seed-below": (["--seed", "-1"], "--seed"),
    "seed-above": (["--seed", str(synthlimits.MAX_SEED + 1)], "--seed"),
}


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth")
    argvs = [["synth", "--help"]] + [["synth", str(d / "run"), *args] for args, _ in PAST.values()]
    help_, *refused = fl_many(argvs)
    assert not (d / "run").exists()
    return " ".join(help_.stdout.replace("│", " ").split()), dict(zip(PAST, refused))


def test_synth_help_states_every_bound_the_generator_enforces(answers):
    text, _ = answers
    for option, bound in (("--ranks", f"{synthlimits.MIN_RANKS}..{synthlimits.MAX_RANKS}"), ("--steps", f"at least {synthlimits.MIN_STEPS}"),
                          ("--seed", f"0..{synthlimits.MAX_SEED}")):
        own = re.search(re.escape(option) + r" (.*?) --[a-z]", text)  # the option's own help, up to the next option
        assert own and bound in own.group(1), (option, bound, text)


@pytest.mark.parametrize("case", list(PAST))
def test_a_value_past_a_stated_bound_is_one_line_naming_its_option(answers, case):
    _, refused = answers
    one_line_error(refused[case], PAST[case][1])
