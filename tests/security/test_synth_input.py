"""``faultlab synth`` refuses what it cannot write in one line naming the option, before
the run folder is made: a negative seed (numpy's generators take none) and more ranks
than a synthetic run holds (their names are made at once). Both ended in a numpy
traceback."""

from __future__ import annotations

import pytest

from tests.helpers import fl


@pytest.mark.parametrize("args, field", [(["--seed", "-1"], "--seed"), (["--ranks", str(10**20)], "--ranks")],
                         ids=["negative-seed", "ranks-past-the-bound"])
def test_synth_refuses_a_seed_or_ranks_it_cannot_write_in_one_line(tmp_path, args, field):
    cp = fl("synth", tmp_path / "run", "--steps", "2", *args)
    err = cp.stderr.strip()
    assert cp.returncode == 2, err[-1500:]
    assert "\n" not in err and "Traceback" not in err and field in err, err[-1500:]
    assert not (tmp_path / "run").exists()
