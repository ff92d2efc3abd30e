"""faultlab score on run directories and datasets: replay (no peeking, latency), the
CI gate, detector plugins by entry point and by module:Class, the pytest plugin.

Runs are simulated step tables (faultlab.datasets.synthetic) labeled by the real
labeler: scoring reads only tables, so this is the same code path as measured runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from faultlab.datasets.synthetic import make_run
from faultlab.errors import BadInput
from faultlab.scoring import Detector, replay, score_runs
from faultlab.scoring.detectors import as_alarms, empty_alarms
from faultlab.scoring.lookup import load_detector
from faultlab.rundata import iter_run_dirs, read_run_dir
from tests.helpers import REPO, fl, fl_many, ratio_plugin, write_plugin_package

PY = sys.executable


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return [make_run(root / f"r{i}", f"r{i}", seed=i) for i in range(6)]


# -- replay ------------------------------------------------------------------------------


class Peeker(Detector):
    """Tries to see the future: records the latest timestamp of every row it is given
    against the replay clock, keeps references to the chunks (and changes them), and
    alarms on the run's last step it can find."""

    name = "peeker"

    def start(self, info):
        self.seen = []
        self.chunks = []

    def update(self, steps, host, now):
        if len(steps):
            self.seen.append((float((steps.t_start + steps.step_s).max()), now))
            steps["t_start"] = steps["t_start"] + 1e6  # mutate what it was given
        self.chunks.append(steps)
        every = pd.concat(self.chunks)
        last = every.step.max() if len(every) else 0
        return as_alarms(pd.DataFrame([{"component": "rank:0", "start_ts": now, "end_ts": now, "score": float(last)}]))

    def detect(self, steps, host):
        return empty_alarms()


def test_replay_shows_no_row_past_the_clock_and_copies_chunks(runs):
    run = read_run_dir(runs[0])
    det = Peeker()
    before = run.steps.copy()
    replay(det, run, tick_s=0.5)
    assert det.seen and all(t_end <= now + 1e-9 for t_end, now in det.seen)
    pd.testing.assert_frame_equal(run.steps, before)  # its mutation did not reach the run
    # the number of steps it could know grows with the clock, never the run's last at once
    n_steps = run.steps.step.max()
    assert det.chunks[0].step.max() < n_steps / 4


class AtOnset(Detector):
    """Alarms the moment it sees the labeled rank's first slow step (compute > 1.5x its
    running median)."""

    name = "at-onset"

    def start(self, info):
        self.buf = []

    def update(self, steps, host, now):
        self.buf.append(steps)
        s = pd.concat(self.buf)
        out = []
        for r, g in s.groupby("rank"):
            slow = g[g.compute_s > 1.5 * g.compute_s.median()]
            if len(slow):
                out.append({"component": f"rank:{r}", "start_ts": slow.t_start.min(), "end_ts": now, "score": 1.0})
        return as_alarms(pd.DataFrame(out))

    def detect(self, steps, host):
        return empty_alarms()


class AfterWhole(AtOnset):
    """Alarms only once the slowdown is over (a slow stretch followed by >= 10 normal steps)."""

    name = "after-whole"

    def update(self, steps, host, now):
        self.buf.append(steps)
        s = pd.concat(self.buf)
        out = []
        for r, g in s.groupby("rank"):
            g = g.sort_values("step")
            slow = g.compute_s.to_numpy() > 1.5 * g.compute_s.median()
            if slow.any() and len(slow) - 1 - np.flatnonzero(slow)[-1] >= 10:
                out.append({"component": f"rank:{r}", "start_ts": g.t_start.to_numpy()[slow].min(), "end_ts": now, "score": 1.0})
        return as_alarms(pd.DataFrame(out))


def test_latency_a_late_detector_is_later_than_an_onset_one(runs):
    rs = list(iter_run_dirs(runs))
    early = score_runs(AtOnset(), rs, mode="replay", n_boot=200)
    late = score_runs(AfterWhole(), rs, mode="replay", n_boot=200)
    assert early.event_recall == 1.0 and late.event_recall == 1.0
    lab = pd.concat([r.labels for r in rs])
    mean_len = float((lab.end_ts - lab.start_ts).mean())
    assert early.latency_median_s < 1.0  # within about one replay tick of the onset
    assert late.latency_median_s > early.latency_median_s + 0.5 * mean_len
    off = score_runs(AtOnset(), rs, mode="offline", n_boot=0)
    assert np.isnan(off.latency_median_s)  # latency is measured only in replay


class Prophet(Detector):
    """Claims to see the future: at every tick it alarms rank:0 from 5 s after the clock."""

    name = "prophet"

    def update(self, steps, host, now):
        return as_alarms(pd.DataFrame([{"component": "rank:0", "start_ts": now + 5.0, "end_ts": now + 10.0, "score": 1.0}]))

    def detect(self, steps, host):
        return empty_alarms()


class Forecaster(Detector):
    """Alarms rank:0 once, at the first tick, from that moment to 1e6 s ahead."""

    name = "forecaster"

    def start(self, info):
        self.done = False

    def update(self, steps, host, now):
        if self.done:
            return empty_alarms()
        self.done = True
        return as_alarms(pd.DataFrame([{"component": "rank:0", "start_ts": now, "end_ts": now + 1e6, "score": 1.0}]))

    def detect(self, steps, host):
        return empty_alarms()


def test_replay_refuses_an_alarm_dated_past_the_clock_and_clips_its_end(runs):
    rs = list(iter_run_dirs(runs[:1]))
    with pytest.raises(BadInput, match=r"prophet.*update\(\).*alarms\.start_ts.*start after the replay clock now=.*5\.000 s ahead"):
        score_runs(Prophet(), rs, mode="replay", n_boot=0)
    alarms = replay(Forecaster(), rs[0], tick_s=1.0)
    assert len(alarms) == 1 and alarms.end_ts[0] == alarms.raised_ts[0]  # stands up to the clock it was raised at, not 1e6 s on


class Endless(Detector):
    """Offline: one alarm per run on the labeled rank from its label's start, ending
    ``extra`` s after the run; with ``after`` > 0 the alarm lies wholly after the run."""

    name = "endless"

    def __init__(self, extra=1e12, after=0.0):
        self.extra, self.after = extra, after

    def detect(self, steps, host):
        t1 = float((steps.t_start + steps.step_s).max())
        lab = read_run_dir(self.run_dir).labels.iloc[0]
        start = float(lab.start_ts) if not self.after else t1 + self.after
        return pd.DataFrame([{"component": lab.component, "start_ts": start, "end_ts": t1 + self.extra + self.after, "score": 1.0}])


def test_alarms_are_clipped_to_the_run_and_refused_wholly_outside_it(runs):
    run = read_run_dir(runs[0])
    kept = []
    far = Endless(extra=1e12)
    far.run_dir = runs[0]
    res = score_runs(far, [run], n_boot=0, keep_alarms=kept)
    exact = Endless(extra=0.0)
    exact.run_dir = runs[0]
    ref = score_runs(exact, [run], n_boot=0)
    assert kept[0][2].end_ts[0] == run.span()[1]  # clipped to the run's last step end
    assert res.range_precision == ref.range_precision > 0.01  # unclipped, 1e12 s of alarm made it ~1e-10
    out = Endless(extra=10.0, after=1000.0)
    out.run_dir = runs[0]
    with pytest.raises(BadInput, match=r"endless.*detect\(\).*alarms\.start_ts.*wholly outside the run"):
        score_runs(out, [run], n_boot=0)


def test_replay_of_a_plain_detect_detector_matches_offline_cells(runs):
    rs = list(iter_run_dirs(runs[:3]))
    on = score_runs("peer-median", rs, mode="replay", n_boot=0)
    off = score_runs("peer-median", rs, mode="offline", n_boot=0)
    assert on.event_recall == off.event_recall == 1.0
    assert on.window_recall <= off.window_recall  # replay alarms start only when raised
    assert on.latency_median_s >= 0


class Hindsight(Detector):
    """Scores each step by its compute over the largest compute seen so far: on the
    whole run (offline) the slowed steps are the largest, so they rank first; online,
    the steps before the slowdown were each the largest seen when they appeared."""

    name = "hindsight"

    def detect(self, steps, host):
        return empty_alarms()

    def scores(self, steps, host):
        return pd.DataFrame({"component": "rank:" + steps["rank"].astype(str), "ts": steps["t_start"],
                             "score": steps["compute_s"] / steps["compute_s"].max()})


def test_replay_curves_use_the_scores_given_online_not_in_hindsight(runs):
    rs = list(iter_run_dirs(runs[:3]))
    off = score_runs(Hindsight(), rs, mode="offline", n_boot=0)
    on = score_runs(Hindsight(), rs, mode="replay", n_boot=0)
    assert off.auc_pr > 0.9 and off.vus_pr > 0.5  # hindsight knows the run's maximum
    assert on.auc_pr < off.auc_pr - 0.3 and on.vus_pr < off.vus_pr - 0.2
    # each point keeps the score it had when first seen: before the slowdown some step
    # was the largest seen (score 1); in hindsight every step before it is < 1/2 (3x slowdown)
    from faultlab.scoring import replay_run

    _, sc = replay_run(Hindsight(), rs[0])
    onset = float(rs[0].labels.start_ts.min())
    hind = Hindsight().scores(rs[0].steps, None)
    assert len(sc) == len(rs[0].steps) and sc[sc.ts < onset].score.max() == 1.0
    assert hind[hind.ts < onset].score.max() < 0.5
    # a causal detector's online scores are its offline ones: same curves
    pm_on, pm_off = (score_runs("peer-median", rs, mode=m, n_boot=0) for m in ("replay", "offline"))
    assert pm_on.vus_pr == pytest.approx(pm_off.vus_pr, abs=1e-12) and pm_on.auc_pr == pytest.approx(pm_off.auc_pr, abs=1e-12)
    # a detector with its own update and no online_scores gets no curve in replay, never its offline one
    assert np.isnan(score_runs(AtOnset(), rs, mode="replay", n_boot=0).vus_pr)


# -- honest metrics on many runs ------------------------------------------------------------


def test_random_and_constant_are_near_chance_and_peer_median_is_clear(runs):
    rs = list(iter_run_dirs(runs))
    pm = score_runs("peer-median", rs, n_boot=500)
    for name in ("random", "constant"):
        b = score_runs(name, rs, n_boot=500)
        assert abs(b.window_mcc) < 0.2
        assert b.ci("window_mcc")[1] < pm.ci("window_mcc")[0]
    assert score_runs("constant", rs, n_boot=0).window_mcc == 0.0
    assert pm.window_mcc > 0.9 and pm.metrics["window_mcc"]["ci"][0] <= pm.window_mcc <= pm.metrics["window_mcc"]["ci"][1]


def test_random_draws_score_the_mean_of_independent_seeds(runs):
    from faultlab.scoring.metrics import COUNT_KEYS

    rs = list(iter_run_dirs(runs))
    mean = score_runs("random", rs, params={"draws": 5, "seed": 3}, n_boot=200)
    singles = [score_runs("random", rs, params={"seed": 3 + j}, n_boot=0) for j in range(5)]
    for key in COUNT_KEYS:
        if key not in ("curve_runs", "auc_pr_sum", "vus_pr_sum"):
            assert mean.counts[key] == pytest.approx(np.mean([s.counts[key] for s in singles]))
    assert mean.vus_pr == singles[0].vus_pr  # continuous scores: the first draw's
    # the mean of draws sits closer to chance than the typical single draw
    assert abs(mean.window_mcc) <= np.mean([abs(s.window_mcc) for s in singles]) + 1e-9
    assert mean.ci("window_mcc")[0] <= 0 <= mean.ci("window_mcc")[1]
    with pytest.raises(BadInput, match="draws"):
        load_detector("random", draws=0)


def test_breakdown_by_fault_type_and_source(runs, tmp_path):
    extra = make_run(tmp_path / "io", "io", seed=9, fault_type="io-slow")
    rs = list(iter_run_dirs(runs[:3] + [extra]))
    res = score_runs("peer-median", rs, by="fault_type", n_boot=100)
    assert set(res.by) == {"cpu-contention", "io-slow"}
    assert res.by["io-slow"]["n_labels"] == 1 and res.by["cpu-contention"]["n_labels"] == 3
    assert set(score_runs("peer-median", rs, by="source", n_boot=0).by) == {"injected"}
    with pytest.raises(BadInput, match="--by"):
        score_runs("peer-median", rs, by="weather")


# -- the CLI and the gate ------------------------------------------------------------------


def test_cli_json_out_and_unknown_detector(runs, tmp_path):
    args = [a for r in runs for a in ("--run", r)]
    p, unknown, bare_param = fl_many([["score", "--detector", "peer-median", *args, "--out", tmp_path / "s.json", "--json", "--boot", "200"],
                                      ["score", "--detector", "no-such", *args],
                                      ["score", "--detector", "peer-median", "--param", "threshold", *args]])
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["n_runs"] == 6 and d["metrics"]["event_f1"]["value"] == 1.0 and len(d["metrics"]["event_f1"]["ci"]) == 2
    assert json.loads((tmp_path / "s.json").read_text())["metrics"] == d["metrics"]
    p = unknown
    assert p.returncode == 2 and "unknown detector 'no-such'" in p.stderr
    for name in ("peer-median", "temporal-z", "arrival-late", "random", "constant"):
        assert name in p.stderr
    p = bare_param
    assert p.returncode == 2 and "--param" in p.stderr


def test_gate_fails_on_a_worse_threshold_passes_on_itself_and_on_improvement(runs, tmp_path):
    args = [a for r in runs for a in ("--run", r)]
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    # the baseline, and a threshold far too high that misses the 3x stragglers
    assert [p.returncode for p in fl_many([["score", "--detector", "peer-median", *args, "--out", good, "--boot", "200"],
                                           ["score", "--detector", "peer-median", "--param", "threshold=4", *args, "--out", bad, "--boot", "200"]])] == [0, 0]
    # each comparison with them a command of its own (one child process)
    other_params, allowed, itself, improved, missing = fl_many([
        ["score", "--detector", "peer-median", "--param", "threshold=4", *args, "--baseline", good, "--boot", "200"],
        ["score", "--detector", "peer-median", "--param", "threshold=4", *args, "--baseline", good, "--boot", "200", "--allow-mismatch"],
        ["score", "--detector", "peer-median", *args, "--baseline", good, "--boot", "200"],
        ["score", "--detector", "peer-median", *args, "--baseline", bad, "--boot", "200", "--metric", "event_f1", "--allow-mismatch"],
        ["score", "--detector", "peer-median", *args, "--baseline", tmp_path / "nope.json"]])
    # other parameters of the same detector: refused unless the mismatch is allowed, then said
    p = other_params
    assert p.returncode == 2 and "peer-median parameters" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = allowed
    assert p.returncode == 1
    assert "gate FAILED" in p.stderr and "dropped  event_f1" in p.stderr and "[" in p.stderr  # each metric with its CI
    assert "compared despite a mismatch" in p.stderr and "threshold" in p.stderr
    p = itself
    assert p.returncode == 0 and "gate passed" in p.stderr
    p = improved
    assert p.returncode == 0 and "improved: event_f1" in p.stderr
    p = missing
    assert p.returncode == 2 and "--baseline" in p.stderr


# -- plugins --------------------------------------------------------------------------------

PLUGIN = ratio_plugin("tmp-slow", 1.4)


def test_module_class_without_installing(runs, tmp_path):
    (tmp_path / "mydet.py").write_text(PLUGIN)
    p = fl("score", "--detector", "mydet:Slow", "--param", "ratio=1.5", "--run", runs[0], "--json", "--boot", "0", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["metrics"]["event_recall"]["value"] == 1.0


@pytest.mark.slow
def test_a_plugin_package_is_found_by_its_entry_point_name(runs, tmp_path):
    pkg = write_plugin_package(tmp_path / "pkg", "tmpslowdet", "faultlab-tmp-slow-plugin", "tmp-slow", 1.4)
    # installed with pip into a folder of its own (nothing lands in this environment even
    # if the test dies); the scoring processes get it on PYTHONPATH, where
    # importlib.metadata finds its entry point
    site = tmp_path / "site"
    examples = REPO / "examples" / "detectors"
    pip = [PY, "-m", "pip", "--disable-pip-version-check", "-q", "install", "--no-deps", "--target", str(site)]
    r = subprocess.run(pip + [str(src) for src in (pkg, examples / "pyod-iforest", examples / "ruptures-pelt")],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)  # one pip for the three
    assert r.returncode == 0, r.stderr
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    p = fl("score", "--detector", "nope", "--run", runs[0], env=env)
    for name in ("tmp-slow", "pyod-iforest", "ruptures-pelt"):
        assert name in p.stderr  # listed among the known detectors
    p = fl("score", "--detector", "tmp-slow", "--run", runs[0], "--run", runs[1], "--json", "--boot", "0", cwd=runs[0].parent, env=env)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["detector"] == "tmp-slow" and d["metrics"]["event_recall"]["value"] == 1.0
    p = fl("score", "--detector", "ruptures-pelt", "--run", runs[0], "--json", "--boot", "0", cwd=tmp_path, env=env)
    assert p.returncode == 0 and json.loads(p.stdout)["metrics"]["event_recall"]["value"] == 1.0, p.stderr
    p = fl("score", "--detector", "tmp-slow", "--run", runs[0], cwd=tmp_path)
    assert p.returncode == 2  # not installed here: unknown


def test_example_plugins_score(runs):
    root = REPO / "examples" / "detectors"
    sys.path[:0] = [str(root / "pyod-iforest"), str(root / "ruptures-pelt")]
    try:
        rs = list(iter_run_dirs(runs[:3]))
        for spec in ("faultlab_iforest:IForestDetector", "faultlab_pelt:PeltDetector"):
            res = score_runs(spec, rs, n_boot=0)
            assert res.event_recall == 1.0 and res.window_mcc > 0.5 and res.vus_pr > 0.5, spec
    finally:
        del sys.path[:2]
    for f in root.glob("*/*.py"):
        assert len(f.read_text().splitlines()) < 40, f


# -- the pytest plugin ----------------------------------------------------------------------


def test_pytest_plugin_fixture_and_floor(runs, tmp_path):
    from faultlab.datasets.build import build

    build(runs, "tiny-ds", tmp_path / "datasets")
    build(runs, "changed-ds", tmp_path / "datasets")
    (tmp_path / "datasets" / "changed-ds" / "schema.json").write_text("{}")  # still decodes; differs from the manifest
    (tmp_path / "test_det.py").write_text(textwrap.dedent('''
        import pytest
        from faultlab.errors import BadInput

        def test_good(faultlab_score):
            assert faultlab_score("peer-median", "tiny-ds").event_f1 >= 0.8

        def test_floor_fails(faultlab_score):
            res = faultlab_score("constant", "tiny-ds")
            faultlab_score.require(res, "window_mcc", 0.5)

        def test_changed_dataset_is_refused(faultlab_score):
            with pytest.raises(BadInput, match="schema.json is changed since MANIFEST.sha256"):
                faultlab_score("peer-median", "changed-ds")

        def test_changed_dataset_without_verify(faultlab_score):
            assert faultlab_score("peer-median", "changed-ds", verify=False).n_runs > 0
    '''))
    env = {**os.environ, "FAULTLAB_DATASETS": str(tmp_path / "datasets")}
    r = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_det.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert "1 failed, 3 passed" in r.stdout, r.stdout + r.stderr
    assert "window_mcc = 0.0" in r.stdout and "below the floor 0.5" in r.stdout


def test_load_detector_params_are_checked():
    with pytest.raises(BadInput, match="--param"):
        load_detector("peer-median", nonsense=1)


class Recorder(Detector):
    """Remembers which runs it was fitted on and which it was asked to detect on."""

    name = "recorder"
    fitted: list = []
    detected: list = []

    def fit(self, train_runs):
        Recorder.fitted = [(r.run_id, len(r.labels)) for r in train_runs]
        return self

    def detect(self, steps, host):
        Recorder.detected.append(str(steps.run_id.iloc[0]))
        return empty_alarms()


def test_a_training_detector_is_fitted_on_the_train_split_only(runs, tmp_path):
    from faultlab.datasets.build import build
    from faultlab.datasets.layout import Dataset
    from faultlab.scoring import score_dataset

    ds = Dataset(build(runs, "split-ds", tmp_path))
    res = score_dataset(Recorder(), ds, split="test", n_boot=0)
    assert sorted(r for r, _ in Recorder.fitted) == sorted(ds.splits["train"])
    assert all(n > 0 for _, n in Recorder.fitted)  # train labels may be used
    assert sorted(Recorder.detected) == sorted(ds.splits["test"]) and res.n_runs == len(ds.splits["test"])
    assert not set(Recorder.detected) & set(ds.splits["train"])


def test_replay_of_a_run_whose_steps_take_no_time_is_one_tick(runs):
    """Every step ends where it starts (step_s 0 at one t_start): the clock still ticks
    once and every step is delivered (never no tick and an IndexError)."""
    import dataclasses

    from faultlab.scoring import replay_run

    r = next(iter(iter_run_dirs(runs[:1])))
    flat = r.steps.assign(t_start=float(r.steps.t_start.min()), step_s=0.0)
    _, sc = replay_run(Hindsight(), dataclasses.replace(r, steps=flat, host=r.host.iloc[:0]))
    assert len(sc) == len(flat)


class _Counts:
    """An online detector that only counts the step rows it is handed."""

    name = "counts"

    def __init__(self):
        self.rows = 0

    def start(self, info):
        self.rows = 0

    def update(self, steps, host, now):
        self.rows += len(steps)
        return empty_alarms()


def test_replay_hands_out_a_step_with_no_step_time_or_no_start(runs):
    """A step row with step_s NaN ends at its t_start; one with no t_start either comes
    at the last tick: every row is handed out once (no ValueError, no NaN end)."""
    import dataclasses

    from faultlab.scoring import replay_run

    r = next(iter(iter_run_dirs(runs[:1])))
    steps = r.steps.copy()
    steps.loc[steps.index[5], "step_s"] = np.nan
    steps.loc[steps.index[9], ["t_start", "step_s"]] = np.nan
    det = _Counts()
    alarms, _ = replay_run(det, dataclasses.replace(r, steps=steps))
    assert det.rows == len(steps) and alarms.empty
