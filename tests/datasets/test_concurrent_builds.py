"""Two builds (or relabels) of one dataset name at once each write a folder of their own
and swap it in whole: the later one wins, the first is never cut short nor swapped in
with files the other removed. Both had written into ``.NAME.building``, and each
started by removing it: run side by side, one build said it had built a dataset of 12
files fewer than its manifest lists.

The second build runs whole inside the first, while the first reads its runs (they
are handed over as a generator), so the overlap is the same every time.
"""

from __future__ import annotations

import json
import os

from faultlab.datasets import manifest
from faultlab.datasets.build import build


def test_a_second_build_of_the_same_name_while_the_first_writes_leaves_both_whole(tmp_path, two_runs):
    out = tmp_path / "out"
    out.mkdir()
    build(two_runs, "ds", out, description="old")

    def first_runs():
        yield two_runs[0]
        build(two_runs, "ds", out, description="second", force=True)  # whole, between the first's runs
        assert json.loads((out / "ds" / "build.json").read_text())["description"] == "second"
        yield two_runs[1]

    build(first_runs(), "ds", out, description="first", force=True)
    assert json.loads((out / "ds" / "build.json").read_text())["description"] == "first"
    r = manifest.verify(out / "ds")
    assert not r["changed"] and not r["missing"], r
    assert sorted(os.listdir(out)) == ["ds"]
