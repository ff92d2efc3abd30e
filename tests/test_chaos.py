"""A short chaos run: random inject/verify/revert cycles through the CLI over every
fault type this machine can run, some controllers SIGKILLed, some signal storms,
lease records deleted or truncated, a full lease folder; every exit code matches the
state left, zero residue after.
(perf/chaos.py runs the 200-cycle version.)"""

from __future__ import annotations

from conftest import needs_root


@needs_root
def test_chaos_short_run_leaves_zero_residue():
    from faultlab.chaos import run_chaos

    rep = run_chaos(cycles=16, kills=3, seed=7, storms=5, damaged=3, full=2, log=lambda *_: None)
    assert rep["cycles"] >= 14 and rep["killed"] == 3 and rep["storms"] == 5 and rep["full_folder"] == 2
    assert rep["residue"] == [], rep["residue"]
    assert rep["mismatches"] == [], rep["mismatches"]
    assert rep["errors"] == [], rep["errors"]
