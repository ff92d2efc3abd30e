"""A gate's baseline (``faultlab score --baseline FILE``) is a scores file someone kept
or handed over: a metric of another shape is one line naming it (it ended in an
AttributeError traceback), and what differs from it (``--allow-mismatch``), which
quotes its fields, reaches the terminal printable."""

from __future__ import annotations

import json

import pytest

from tests.helpers import fl


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    d = tmp_path_factory.mktemp("gate")
    cp = fl("score", "--detector", "peer-median", "--dataset", "faultlab-sw-v1", "--boot", "20", "--out", d / "base.json", timeout=300)
    assert cp.returncode == 0, cp.stderr[-800:]
    return d / "base.json"


@pytest.mark.parametrize("metric", [[1, 2], {"value": "high"}, {"value": 0.5, "ci": "wide"}, {"value": 0.5, "ci": [0, 1, 2]}, {"value": True}])
def test_a_baseline_metric_of_another_shape_is_one_line_naming_it(baseline, tmp_path, metric):
    d = json.loads(baseline.read_text())
    d["metrics"]["event_f1"] = metric
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    cp = fl("score", "--detector", "peer-median", "--dataset", "faultlab-sw-v1", "--boot", "20", "--baseline", bad, timeout=300)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr, cp.stderr[-1500:]
    assert cp.stderr.count("\n") == 1 and "--baseline" in cp.stderr and "event_f1" in cp.stderr, cp.stderr


def test_an_allowed_mismatch_quotes_the_baselines_fields_printable(baseline, tmp_path):
    d = json.loads(baseline.read_text())
    d["split"] = "test\x1b]0;title\x07\nforged: gate passed"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(d))
    cp = fl("score", "--detector", "peer-median", "--dataset", "faultlab-sw-v1", "--boot", "20", "--baseline", other,
            "--allow-mismatch", timeout=300)
    assert "compared despite a mismatch" in cp.stderr, cp.stderr[-1500:]
    assert "\x1b" not in cp.stderr and "\x07" not in cp.stderr and "\nforged:" not in cp.stderr, cp.stderr
