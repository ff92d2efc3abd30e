"""A submitted leaderboard.json never sizes a built-in detector's arrays: ``leaderboard
--verify`` refuses a parameter outside its bound (faultlab.scoring.lookup.PARAM_BOUNDS)
in one line naming it, before any array is made.

Each verify runs under ``prlimit --as`` (3 GiB of address space), so a parameter that
is not bounded fails there with a MemoryError or a kill, never by filling the host.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from faultlab.datasets.build import build
from faultlab.datasets.synthetic import make_run
from tests.helpers import FL, fl, one_line_error

pytestmark = pytest.mark.skipif(not shutil.which("prlimit"), reason="needs prlimit (util-linux)")


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """A dataset of 4 simulated runs and its leaderboard of temporal-z and random."""
    root = tmp_path_factory.mktemp("lbparams")
    runs = [make_run(root / f"r{i}", f"r{i}", seed=i, n_steps=120) for i in range(4)]
    ds = build(runs, "tiny-params", root / "ds", test_fraction=0.5)
    cp = fl("leaderboard", "--dataset", ds, "--detector", "temporal-z", "--detector", "random", "--boot", "20", "--out", root / "board")
    assert cp.returncode == 0, cp.stderr[-1000:]
    return ds, json.loads((root / "board" / "leaderboard.json").read_text())


@pytest.mark.parametrize("detector,param,value", [
    ("temporal-z", "window", 200_000_000),
    ("temporal-z", "window", 2e8),
    ("random", "seed", -1),
    ("random", "seed", 10**30),
])
def test_verify_refuses_a_parameter_beyond_its_bound(board, tmp_path, detector, param, value):
    ds, sub = board
    bad = json.loads(json.dumps(sub))
    rows = [r for r in bad["datasets"][0]["rows"] if r["detector"] == detector]
    assert rows, bad["datasets"][0]["rows"]
    rows[0]["params"] = {**rows[0].get("params", {}), param: value}
    f = tmp_path / "lb.json"
    f.write_text(json.dumps(bad))
    cp = subprocess.run(["prlimit", f"--as={3 << 30}", "--", *FL, "leaderboard", "--verify", str(f), "--dataset", str(ds)],
                        capture_output=True, text=True, timeout=300)
    line = one_line_error(cp, f"{param}=", "outside")
    assert detector in line


def _verify(sub: dict, ds, tmp_path) -> subprocess.CompletedProcess:
    f = tmp_path / "lb.json"
    f.write_text(json.dumps(sub))
    return subprocess.run(["prlimit", f"--as={3 << 30}", "--", *FL, "leaderboard", "--verify", str(f), "--dataset", str(ds)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("settings,names", [
    ({"window_s": 1e-9}, ("window_s", "windows")),
    ({"window_s": 5e-324}, ("window_s", "windows")),
    ({"mode": "replay", "tick_s": 1e-7}, ("--tick", "ticks")),
    ({"vus_window": 10**9}, ("vus_window", "0..")),
])
def test_verify_refuses_settings_that_cut_a_run_into_too_many_cells(board, tmp_path, settings, names):
    ds, sub = board
    bad = json.loads(json.dumps(sub))
    bad["settings"].update(settings)
    one_line_error(_verify(bad, ds, tmp_path), *names)


@pytest.mark.parametrize("where,value", [("run_ids", 5), ("vs_next", [1])])
def test_verify_refuses_a_file_whose_run_ids_or_vs_next_are_of_another_shape(board, tmp_path, where, value):
    ds, sub = board
    bad = json.loads(json.dumps(sub))
    (bad["datasets"][0] if where == "run_ids" else bad["datasets"][0]["rows"][0])[where] = value
    one_line_error(_verify(bad, ds, tmp_path), "--verify", where)


@pytest.mark.parametrize("seed", [-1, -(2**40)])
def test_verify_refuses_a_bootstrap_seed_numpy_cannot_take(board, tmp_path, seed):
    """The settings' bootstrap seed of a submitted file is bounded as a detector's is:
    one line naming --seed, never a traceback (a negative seed ended in numpy's
    ValueError after every run was scored)."""
    ds, sub = board
    bad = json.loads(json.dumps(sub))
    bad["settings"]["seed"] = seed
    one_line_error(_verify(bad, ds, tmp_path), "--seed", "0..")
    one_line_error(fl("score", "--detector", "random", "--dataset", ds, "--seed", str(seed)), "--seed", "0..")
