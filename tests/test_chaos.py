"""A short chaos run: random inject/verify/revert cycles through the CLI over every
fault type this machine can run, some controllers SIGKILLed; zero residue after.
(perf/chaos.py runs the 200-cycle version.)"""

from __future__ import annotations

from conftest import needs_root


@needs_root
def test_chaos_short_run_leaves_zero_residue():
    from faultlab.chaos import run_chaos

    rep = run_chaos(cycles=12, kills=4, seed=7, log=lambda *_: None)
    assert rep["cycles"] >= 10 and rep["killed"] == 4
    assert rep["residue"] == [], rep["residue"]
    assert rep["errors"] == [], rep["errors"]
