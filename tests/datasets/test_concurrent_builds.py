"""Two builds (or relabels) of one dataset name at once each write a folder of their own
and swap it in whole: the later one wins, the first is never cut short nor swapped in
with files the other removed. A folder shared by both, each build removing it first,
would have one build say it built a dataset some files short of its manifest.

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


def test_an_export_while_a_build_swaps_the_dataset_in_reads_one_dataset_or_stops_in_one_line(tmp_path, two_runs):
    """A ``dataset export`` (as a ``score``) reads the dataset run by run after checking
    its manifest; a build of the same name swaps another dataset in after its first
    run. Reading by name, the export would read its other runs from the new dataset
    and write a mix of two datasets, exit 0: it reads the folder it checked, and, that
    one removed under it, stops in one line saying so."""
    from faultlab.datasets.export import export
    from faultlab.datasets.layout import Dataset
    from faultlab.errors import BadInput

    out = tmp_path / "out"
    out.mkdir()
    build(two_runs, "ds", out, description="old")

    class SwappedAfterItsFirstRun(Dataset):
        swapped = False

        def read_run(self, run_id):
            run = super().read_run(run_id)
            if not self.swapped:
                self.swapped = True
                build(list(reversed(two_runs)), "ds", out, description="new", force=True)
            return run

    try:
        export(SwappedAfterItsFirstRun(out / "ds"), tmp_path / "exp", "timeeval")
    except BadInput as e:
        assert "was replaced or removed while it was read" in str(e) and "\n" not in str(e), e
    else:
        raise AssertionError("the export read a run of the dataset swapped in under it")
