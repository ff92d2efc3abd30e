"""The published detectors are built-ins: found by name through the one lookup,
listed among the available detectors, their parameters declared once (the module
docstring lists each with its default, unit and source; ``--param`` strings are
cast and checked against the declaration)."""

from __future__ import annotations

import sys

import pytest

from faultlab.errors import BadInput
from faultlab.scoring.lookup import available_detectors, builtin_detectors, load_detector
from faultlab.scoring.published import BUILTIN


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_found_by_name_with_its_parameters_documented(name):
    assert name in builtin_detectors() and name in available_detectors()
    det = load_detector(name)
    assert det.name == name
    doc = sys.modules[type(det).__module__].__doc__
    for p in type(det)._all_params():
        assert f"``{p.name}`` = {p.default!r}" in doc, p.name
        assert getattr(det, p.name) == det.settings()[p.name]


def test_param_strings_are_cast_and_checked():
    assert load_detector("falcon", shift="0.2").shift == 0.2
    assert load_detector("minder", continuity="4").continuity == 4
    with pytest.raises(BadInput, match="continuity"):
        load_detector("minder", continuity="1.5")
    with pytest.raises(BadInput, match="duration_bins"):
        load_detector("perseus", duration_bins="0.6,0.3")
