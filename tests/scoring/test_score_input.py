"""Bad detectors and bad score input are one line naming the detector or option, never a
traceback: a detector that raises (in ``__init__``, ``detect()`` or ``update()``) or
returns garbage alarms, an unknown parameter told apart from a refused value, an
unwritable ``--out``."""

from __future__ import annotations

import subprocess

import pytest

from faultlab.datasets.synthetic import make_run
from tests.helpers import FL, SW_DATASET, fl, fl_many, one_line_error


BADDET = '''
import pandas as pd

COLS = ["component", "start_ts", "end_ts", "score"]


class Raises:
    def detect(self, steps, host):
        raise RuntimeError("boom inside the detector")


class UpdateRaises:
    def start(self, info):
        pass

    def update(self, steps_chunk, host_chunk, now):
        raise ValueError("update blew up")

    def detect(self, steps, host):
        return None


class Garbage:
    def __init__(self, kind="neg"):
        self.kind = kind

    def detect(self, steps, host):
        t0 = float(steps.t_start.min())
        rows = {
            "neg": [("rank:0", -5.0, -1.0, 1.0)],
            "nan": [("rank:0", float("nan"), t0 + 5, 1.0)],
            "inf": [("rank:0", t0, float("inf"), 1.0)],
            "unknown": [("gpu:99", t0, t0 + 5, 1.0)],
            "reversed": [("rank:0", t0 + 10, t0 + 1, 1.0)],
            "nanscore": [("rank:0", t0, t0 + 5, float("nan"))],
            "strscore": [("rank:0", t0, t0 + 5, "high")],
        }.get(self.kind)
        if rows is None:
            return {"list": [1, 2, 3], "dict": {"component": ["rank:0"]}}[self.kind]
        return pd.DataFrame(rows, columns=COLS)
'''


def score_in(tmp_path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "bad_detectors.py").write_text(BADDET)
    return subprocess.run([*FL, "score", "--split", "all", "--dataset", str(SW_DATASET), *args], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)


@pytest.mark.skipif(not (SW_DATASET / "splits.json").is_file(), reason="no published dataset")
@pytest.mark.parametrize("det,mode,method", [("bad_detectors:Raises", "offline", "detect()"), ("bad_detectors:UpdateRaises", "replay", "update()")])
def test_detector_that_raises_is_one_line_naming_it(tmp_path, det, mode, method):
    one_line_error(score_in(tmp_path, "--detector", det, "--mode", mode), det, method, "run ", code=1)


#: each kind of garbage alarms bad_detectors:Garbage returns, and the field its refusal names
GARBAGE = [("neg", "alarms.start_ts"), ("nan", "alarms.start_ts"), ("inf", "alarms.end_ts"), ("unknown", "alarms.component"),
           ("reversed", "alarms.end_ts"), ("nanscore", "alarms.score"), ("strscore", "alarms.score"), ("list", "DataFrame"),
           ("dict", "DataFrame")]


@pytest.fixture(scope="module")
def garbage_scores(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """For each kind of GARBAGE: ``faultlab score`` of the published dataset with
    bad_detectors:Garbage returning it, all in one child process through faultlab's
    entry point (in a folder holding bad_detectors.py)."""
    d = tmp_path_factory.mktemp("garbage")
    (d / "bad_detectors.py").write_text(BADDET)
    kinds = [kind for kind, _ in GARBAGE]
    done = fl_many([["score", "--split", "all", "--dataset", str(SW_DATASET), "--detector", "bad_detectors:Garbage", "--param", f"kind={kind}"]
                    for kind in kinds], timeout=300 * len(kinds), cwd=d)
    return dict(zip(kinds, done))


@pytest.mark.skipif(not (SW_DATASET / "splits.json").is_file(), reason="no published dataset")
@pytest.mark.parametrize("kind,field", GARBAGE)
def test_garbage_alarms_are_refused_not_scored(garbage_scores, kind, field):
    one_line_error(garbage_scores[kind], field, "bad_detectors:Garbage")


def test_score_out_unwritable_is_one_line(tmp_path):
    """`--out` under a regular file: one line naming --out, exit 2 (no FileExistsError
    or FileNotFoundError traceback)."""
    run = make_run(tmp_path / "r0", "r0", seed=0)
    (tmp_path / "afile").write_text("x")
    cp = fl("score", "--detector", "constant", "--run", str(run), "--out", str(tmp_path / "afile" / "scores.json"))
    one_line_error(cp, "--out")


@pytest.mark.parametrize("param,want,not_want", [("threshold=abc", "refused the value(s) threshold='abc'", "does not take"),
                                                 ("bogus=1", "does not take these parameters", "refused")])
def test_param_unknown_told_apart_from_a_refused_value(tmp_path, param, want, not_want):
    """A parameter the detector does not have reads "does not take these parameters";
    a parameter it has with a value it cannot use (``threshold=abc``) reads "refused
    the value(s)": the signature is bound before the detector is made."""
    run = make_run(tmp_path / "r0", "r0", seed=0)
    cp = fl("score", "--detector", "peer-median", "--param", param, "--run", str(run))
    one_line_error(cp, "--param", "peer-median", want)
    assert not_want not in cp.stderr


def test_detector_init_that_raises_is_one_line(tmp_path):
    (tmp_path / "init_raises.py").write_text("class Boom:\n    def __init__(self, k=1):\n        raise RuntimeError('no GPU here')\n"
                                             "    def detect(self, steps, host):\n        return None\n")
    run = make_run(tmp_path / "r0", "r0", seed=0)
    cp = subprocess.run([*FL, "score", "--detector", "init_raises:Boom", "--run", str(run)], capture_output=True, text=True,
                        timeout=120, cwd=tmp_path)
    one_line_error(cp, "init_raises:Boom", "__init__", "no GPU here", code=1)


STRDET = '''
import pandas as pd

from faultlab.detectors import Detector


class Typed(Detector):
    """Refuses a parameter of the wrong type; its alarms name the values it got."""

    def __init__(self, label: str = "x", factor: float = 1.0, free=3):
        if not isinstance(label, str) or not isinstance(factor, float):
            raise TypeError(f"label {type(label).__name__}, factor {type(factor).__name__}")
        self.got = f"{label!r} {factor!r} {free!r}"

    def detect(self, steps, host=None):
        raise RuntimeError(self.got)
'''


def test_param_is_typed_by_the_detectors_declaration(tmp_path):
    """``--param label=7`` stays the text "7" for ``label: str``; ``factor=2`` is 2.0
    for ``factor: float``; an unannotated ``free=5`` reads as YAML (5); a value the
    declared type refuses is one line naming it."""
    (tmp_path / "typed_det.py").write_text(STRDET)
    run = make_run(tmp_path / "r0", "r0", seed=0)
    cp = subprocess.run([*FL, "score", "--detector", "typed_det:Typed", "--param", "label=7", "--param", "factor=2", "--param", "free=5",
                         "--run", str(run), "--boot", "0"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    line = one_line_error(cp, "typed_det:Typed", code=1)
    assert "'7' 2.0 5" in line, line
    cp = subprocess.run([*FL, "score", "--detector", "typed_det:Typed", "--param", "factor=fast", "--run", str(run)],
                        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    one_line_error(cp, "--param", "factor='fast'", "float")
