"""Importers of public fail-slow data (``faultlab label --import FORMAT PATH --out DIR``).

End to end on the real public datasets in ``$FAULTLAB_PUBLIC_DATA`` (default
``../shared/datasets/public/`` relative to the project root; skipped with the reason,
shown in the summary, when absent): the upstream answer files
(``slow_drives.csv``, ``result-ST.json``) are read here only, to check against. Plus
small synthetic cases: a generic long-format table, Perseus-like drives, and 1F1B
pipeline traces from an independent little scheduler below.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from faultlab import schema
from faultlab.errors import BadInput
from faultlab.labeler import importers
from faultlab.labeler.config import make_config
from faultlab.labeler.importers import perseus, trace
from faultlab.labeler.importers.long.grid import _auto_align
from faultlab.schema import json_safe
from tests.helpers import FL, PUBLIC, PUBLIC_HINT, fl, fl_many

PERSEUS_DIR = PUBLIC / "perseus-cluster_A"
ST_DIR = PUBLIC / "straggler-trace-ST"
_WHERE = PUBLIC_HINT
needs_perseus = pytest.mark.skipif(not (PERSEUS_DIR / "metrics.parquet").exists(),
                                   reason=f"public Perseus data not found at {PERSEUS_DIR}: {_WHERE}")
needs_st = pytest.mark.skipif(not (ST_DIR / "trace-ST.parquet").exists(),
                              reason=f"public StragglerAnalysis trace not found at {ST_DIR}: {_WHERE}")
LABEL_COLS = [f.name for f in schema.LABELS]


def drives_of(labels: pd.DataFrame) -> set[str]:
    return {c.split(":", 1)[1] for c in labels["component"]}


# -- the real public data ------------------------------------------------------------


@pytest.fixture(scope="module")
def perseus_result():
    t0 = time.perf_counter()
    res = importers.import_path("perseus", PERSEUS_DIR)
    res.info["test_runtime_s"] = time.perf_counter() - t0
    return res


@needs_perseus
def test_perseus_finds_both_confirmed_slow_drives(perseus_result):
    confirmed = pd.read_csv(PERSEUS_DIR / "slow_drives.csv")
    truth = {f"{h}/{d}" for h, d in zip(confirmed["host_name"], confirmed["disk_id"])}
    assert len(truth) == 2
    labels = perseus_result.labels
    assert list(labels.columns) == LABEL_COLS
    found = drives_of(labels)
    assert truth <= found, f"confirmed {sorted(truth)}, labeled {sorted(found)}"
    precision = len(found & truth) / len(found)
    print(f"perseus cluster_A: {len(found)} drive(s) labeled, precision {precision:.2f}")
    assert precision >= 0.5, f"drive-level precision {precision:.2f}: labeled {sorted(found)}"
    assert (labels["component_kind"] == "drive").all()
    assert (labels["source"] == "observed").all() and (labels["cause"] == "unknown").all()
    assert (labels["end_ts"] > labels["start_ts"]).all()
    assert (labels["slowdown"] >= 1.1).all()
    # the ranking puts the confirmed drives first
    ranking = perseus_result.extra["drives.json"]["drives"]
    assert {d["drive"] for d in ranking[:2]} == truth
    # 3.6M rows: well under a minute (the machine may be shared)
    assert perseus_result.info["test_runtime_s"] < 60


@needs_perseus
def test_long_on_real_drive_latency(tmp_path):
    """The generic importer on two real hosts' drive latency (peer group = host): both
    confirmed drives are labeled and hold the most labeled time."""
    t = pq.read_table(PERSEUS_DIR / "metrics.parquet", columns=["host", "ts", "disk_id", "latency"],
                      filters=[("host", "in", ["host_22", "host_25"])]).to_pandas()
    df = pd.DataFrame({"component": "drive:" + t["host"].astype(str) + "/" + t["disk_id"].astype(str),
                       "peer_group": t["host"].astype(str), "timestamp": t["ts"].astype(float),
                       "metric": "latency", "value": t["latency"]})
    df.to_parquet(tmp_path / "drives-long.parquet")
    lab = importers.import_path("long", tmp_path / "drives-long.parquet").labels
    span = (lab["end_ts"] - lab["start_ts"]).groupby(lab["component"]).sum().sort_values(ascending=False)
    assert set(span.index[:2]) == {"drive:host_22/disk11", "drive:host_25/disk8"}, span.head()


@needs_perseus
def test_long_never_reads_answer_files(tmp_path):
    with pytest.raises(BadInput) as ei:
        importers.import_path("long", PERSEUS_DIR / "slow_drives.csv")
    assert "answer" in str(ei.value)


@needs_perseus
def test_perseus_finds_a_mild_slowdown_too():
    """A drive 1.2x its peers is as real as one at 2x: scale one healthy drive's latency."""
    s = perseus.read_samples(PERSEUS_DIR)
    victim = s.drive_names.index("host_5/disk3")
    s.latency[s.drive == victim] *= 1.2
    drives, _p, _ = perseus.analyze(s)
    flagged = set(drives.loc[drives["failslow"], "drive"])
    assert "host_5/disk3" in flagged
    assert {"host_22/disk11", "host_25/disk8"} <= flagged
    assert len(flagged) == 3, sorted(flagged)


#: S of the ST trace by the upstream analyzer: ``blocking_slowdown`` of
#: ``data/result-ST.json`` in ByteDance-Seed/StragglerAnalysis (commit cc8af9f2, the
#: artifact's own output for ``trace-ST.parquet``; the same file is in ST_DIR), and its
#: M_S and M_W (``data/ms-ST.json``, ``data/mw-ST.json``)
UPSTREAM_ST_S = 1.1787021836556841
UPSTREAM_ST_MS = 1.2193563788811714
UPSTREAM_ST_MW = 0.031404269124045224


@needs_st
def test_straggler_trace_matches_upstream_whatif():
    upstream = json.loads((ST_DIR / "result-ST.json").read_text())
    assert upstream["blocking_slowdown"] == UPSTREAM_ST_S
    res = importers.import_path("straggler-trace", ST_DIR)
    wi = res.whatif
    err = abs(wi["slowdown"] / UPSTREAM_ST_S - 1)
    print(f"ST: S={wi['slowdown']:.7f} upstream={UPSTREAM_ST_S:.7f} error={err:.1e}")
    assert err < 1e-4
    assert abs(wi["ms"]["share"] / UPSTREAM_ST_MS - 1) < 1e-4 and abs(wi["mw"]["share"] / UPSTREAM_ST_MW - 1) < 1e-4
    assert abs(wi["launch_slowdown"] / upstream["launch_slowdown"] - 1) < 1e-4
    for dim, key in (("stage", "blocking_decompose_by_stage"), ("dp_rank", "blocking_decompose_by_dp_rank"),
                     ("optype", "blocking_decompose_by_optype")):
        for k, v in upstream[key].items():
            assert abs(wi["decomposition"][dim][k] / v - 1) < 1e-4, (dim, k, wi["decomposition"][dim][k], v)
    for s, v in upstream["step_t_nodelay"].items():
        assert abs(wi["step_time_s"]["replay"][s] / v - 1) < 1e-4, s
    stage = max(wi["decomposition"]["stage"], key=wi["decomposition"]["stage"].get)
    assert stage == "3"
    assert set(wi["decomposition"]) == {"rank", "dp_rank", "stage", "optype"}
    assert len(wi["decomposition"]["rank"]) == 8
    assert list(res.labels["component"]) == ["stage:3"]
    row = res.labels.iloc[0]
    assert row["component_kind"] == "stage" and row["slowdown"] > 1.15
    assert row["start_step"] == min(wi["steps"]) and row["end_step"] == max(wi["steps"])
    assert not res.labels["run_id"].isna().any()


@needs_st
def test_straggler_trace_stream_recv_model_is_an_option():
    """The stricter recv model (posted after the compute just before in the stream)
    stays available; it holds the recvs back, so S moves off the artifact's."""
    S = {o: importers.import_path("straggler-trace", ST_DIR, {"recv_posted_after": o}).whatif["slowdown"]
         for o in ("same-direction", "stream")}
    assert abs(S["same-direction"] / UPSTREAM_ST_S - 1) < 1e-4
    assert abs(S["stream"] / UPSTREAM_ST_S - 1) > 1e-4
    with pytest.raises(BadInput) as ei:
        importers.import_path("straggler-trace", ST_DIR, {"recv_posted_after": "never"})
    assert ei.value.field == "recv_posted_after"


@needs_st
def test_cli_import_writes_labels_and_whatif(tmp_path):
    cp = fl("label", "--import", "straggler-trace", str(ST_DIR), "--out", str(tmp_path / "st"))
    assert cp.returncode == 0, cp.stderr
    assert "stage:3" in cp.stdout
    labels = pq.read_table(tmp_path / "st" / "labels.parquet").to_pandas()
    assert list(labels["component"]) == ["stage:3"]
    assert pq.read_schema(tmp_path / "st" / "labels.parquet").names == LABEL_COLS
    wi = json.loads((tmp_path / "st" / "whatif.json").read_text())
    assert abs(wi["slowdown"] / UPSTREAM_ST_S - 1) < 1e-4
    for dim in ("rank", "dp_rank", "stage", "optype"):
        assert wi["decomposition"][dim]


# -- errors --------------------------------------------------------------------------


def test_unknown_format_names_import_and_the_formats(tmp_path):
    with pytest.raises(BadInput) as ei:
        importers.import_path("csv-thing", tmp_path)
    msg = str(ei.value)
    assert ei.value.field == "--import"
    for f in ("long", "perseus", "straggler-trace"):
        assert f in msg
    cp = fl("label", "--import", "csv-thing", str(tmp_path), "--out", str(tmp_path / "o"))
    assert cp.returncode == 2
    assert "--import" in cp.stderr and "straggler-trace" in cp.stderr
    assert not (tmp_path / "o").exists()


def test_cli_import_needs_out(tmp_path):
    f = tmp_path / "x.csv"
    long_frame().to_csv(f, index=False)
    cp = fl("label", "--import", "long", str(f))
    assert cp.returncode == 2 and "--out" in cp.stderr


@pytest.mark.parametrize("fmt,col", [("long", "peer_group"), ("perseus", "latency"), ("straggler-trace", "seq_id")])
def test_missing_column_is_named(tmp_path, fmt, col):
    if fmt == "long":
        df = long_frame().drop(columns=[col])
        path = tmp_path / "data.parquet"
    elif fmt == "perseus":
        df = perseus_frame(hosts=1, drives=3, hours=1).drop(columns=[col])
        path = tmp_path / "metrics.parquet"
    else:
        df = pipeline_trace(steps=1).drop(columns=[col])
        path = tmp_path / "trace-X.parquet"
    df.to_parquet(path)
    with pytest.raises(BadInput) as ei:
        importers.import_path(fmt, path)
    assert col in str(ei.value)
    cp = fl("label", "--import", fmt, str(path), "--out", str(tmp_path / "o"))
    assert cp.returncode == 2 and col in cp.stderr


@pytest.mark.parametrize("fmt,needs", [("long", ".parquet or .csv"), ("perseus", "metrics.parquet"),
                                       ("straggler-trace", "trace*.parquet")])
def test_folder_without_the_expected_files(tmp_path, fmt, needs):
    (tmp_path / "README.md").write_text("nothing here\n")
    with pytest.raises(BadInput) as ei:
        importers.import_path(fmt, tmp_path)
    assert needs in str(ei.value)
    with pytest.raises(BadInput):
        importers.import_path(fmt, tmp_path / "no-such-folder")


def test_trace_folder_without_meta(tmp_path):
    pipeline_trace(steps=2).to_parquet(tmp_path / "trace-X.parquet")
    with pytest.raises(BadInput) as ei:
        importers.import_path("straggler-trace", tmp_path)
    assert "meta" in str(ei.value)
    # the Parquet file alone: sizes are inferred from the trace
    res = importers.import_path("straggler-trace", tmp_path / "trace-X.parquet")
    assert res.whatif["job_meta"]["inferred"] is True


def test_bad_config_field_is_named():
    with pytest.raises(BadInput) as ei:
        make_config(perseus.PerseusConfig, {"window_secs": 60})
    assert "window_secs" in str(ei.value)
    with pytest.raises(BadInput) as ei:
        perseus.PerseusConfig(min_slowdown=0.9)
    assert ei.value.field == "min_slowdown"


# -- the generic long format -----------------------------------------------------------


def long_frame(n: int = 300, comps: int = 5, slow: tuple[int, int, int, float] | None = (2, 120, 180, 2.0),
               groupwide: tuple[int, int, float] | None = None, seed: int = 0) -> pd.DataFrame:
    """``comps`` components of one peer group sampled every 10 s (value ~1.0, noise 3%);
    ``slow`` = (component, first, last+1 sample, factor); ``groupwide`` = (first, last+1, factor)."""
    rng = np.random.default_rng(seed)
    t = 1_700_000_000.0 + 10.0 * np.arange(n)
    rows = []
    for c in range(comps):
        v = 1.0 + 0.03 * rng.standard_normal(n)
        if slow and c == slow[0]:
            v[slow[1]:slow[2]] *= slow[3]
        if groupwide:
            v[groupwide[0]:groupwide[1]] *= groupwide[2]
        rows.append(pd.DataFrame({"component": f"c{c}", "peer_group": "g", "timestamp": t, "metric": "latency_ms",
                                  "value": v}))
    return pd.concat(rows, ignore_index=True)


def test_long_labels_the_slow_component(tmp_path):
    f = tmp_path / "telemetry.csv"
    long_frame().to_csv(f, index=False)
    res = importers.import_path("long", f)
    lab = res.labels
    assert list(lab.columns) == LABEL_COLS
    assert list(lab["component"]) == ["c2"]
    row = lab.iloc[0]
    assert row["views"] in ("peer", "temporal+peer")
    assert 1.8 < row["slowdown"] < 2.2
    t0 = 1_700_000_000.0
    assert abs(row["start_ts"] - (t0 + 1200)) <= 20 and abs(row["end_ts"] - (t0 + 1800)) <= 20
    assert row["run_id"] == "telemetry"
    assert res.whatif is None


def test_long_parquet_and_csv_agree_and_are_deterministic(tmp_path):
    df = long_frame(seed=3)
    df.to_csv(tmp_path / "a.csv", index=False)
    df.to_parquet(tmp_path / "a.parquet")
    a = importers.import_path("long", tmp_path / "a.csv").labels
    b = importers.import_path("long", tmp_path / "a.parquet").labels
    c = importers.label_long(df.sample(frac=1.0, random_state=1), run_id="a")  # row order does not matter
    assert len(a) > 0  # equal frames, not two empty ones
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(a, c)


def test_long_clean_data_gives_no_labels():
    assert len(importers.label_long(long_frame(slow=None))) == 0


def test_long_groupwide_slowdown_is_a_group_label():
    lab = importers.label_long(long_frame(slow=None, groupwide=(150, 200, 1.8)))
    assert list(lab["component"]) == ["group:g"]
    assert lab.iloc[0]["component_kind"] == "peer_group" and lab.iloc[0]["views"] == "temporal"
    assert 1.6 < lab.iloc[0]["slowdown"] < 2.0


def test_long_higher_is_better_metric_is_inverted():
    df = long_frame(slow=(1, 100, 160, 0.5))  # a throughput halved
    df["metric"] = "throughput_bytes_per_s"
    assert len(importers.label_long(df)) == 0  # by default larger means slower: a drop is no slowdown
    lab = importers.label_long(df, {"higher_is_better": ("throughput_bytes_per_s",)})
    assert list(lab["component"]) == ["c1"] and 1.8 < lab.iloc[0]["slowdown"] < 2.2


def test_long_non_numeric_value_is_bad_input():
    df = long_frame()
    df["value"] = df["value"].astype(str)
    df.loc[3, "value"] = "fast"
    with pytest.raises(BadInput) as ei:
        importers.label_long(df)
    assert "numeric" in str(ei.value) and "'fast'" in str(ei.value) and "row 3" in str(ei.value)
    assert ei.value.field == "value"


# -- the long importer's component-level judgement (persistent components) -------------


def persistent_frame(healthy: int = 20, n: int = 600, factor: float = 1.3, share: float = 0.7, noise: float = 0.05,
                     seed: int = 0) -> pd.DataFrame:
    """One peer group ``g``: ``slow`` is ``factor`` x slower for ``share`` of its samples
    (one stretch in the middle: most of its time), ``episodic`` 1.8x for a quarter of
    its samples (a hard negative: a slow episode, not a fail-slow component), ``blip``
    2x for 8 samples (80 s of 6000 s), and ``healthy`` components ``h00..``; every 10
    s, value ~1.0 with ``noise`` relative noise."""
    rng = np.random.default_rng(seed)
    t = 1_700_000_000.0 + 10.0 * np.arange(n)
    names = ["slow", "episodic", "blip"] + [f"h{k:02d}" for k in range(healthy)]
    rows = []
    for name in names:
        v = 1.0 + noise * rng.standard_normal(n)
        if name == "slow":
            a = int(n * (0.5 - share / 2))
            v[a:a + int(n * share)] *= factor
        elif name == "episodic":
            v[n // 8 : n // 8 + n // 4] *= 1.8
        elif name == "blip":
            v[200:208] *= 2.0
        rows.append(pd.DataFrame({"component": name, "peer_group": "g", "timestamp": t, "metric": "latency_ms",
                                  "value": v}))
    return pd.concat(rows, ignore_index=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_long_persistent_component_among_noisy_peers(seed):
    lab, comps = importers.label_long_components(persistent_frame(seed=seed))
    assert list(comps.columns) == list(importers.COMPONENT_COLUMNS)
    assert len(comps) == 23 and comps["component"].is_unique
    assert sorted(comps.loc[comps["persistent"], "component"]) == ["slow"], comps.head()
    assert (comps["persistent"] == comps["failslow"]).all()
    by = comps.set_index("component")
    # the blip and the episode are labeled, but a slow episode is no fail-slow component
    assert by.loc["blip", "n_labels"] >= 1 and not by.loc["blip", "persistent"]
    assert 0 < by.loc["blip", "labeled_fraction"] < 0.05
    assert by.loc["episodic", "n_labels"] >= 1 and 0.15 < by.loc["episodic", "labeled_fraction"] < 0.3
    assert by.loc["episodic", "level"] < 1.05 and by.loc["episodic", "share_z"] >= 3.5
    assert by.loc["slow", "labeled_fraction"] > 0.4 and by.loc["slow", "n_labels"] >= 1
    assert 1.2 < by.loc["slow", "median_slowdown"] < 1.6
    assert 1.2 < by.loc["slow", "level"] < 1.4 and by.loc["slow", "level_z"] >= 3.5 and by.loc["slow", "group_size"] == 23
    assert by.loc["slow", "observed_s"] == pytest.approx(6000.0)
    # labeled time is the slow component's own labels, within its data
    own = lab[lab["component"] == "slow"]
    assert by.loc["slow", "labeled_s"] <= float((own["end_ts"] - own["start_ts"]).sum()) + 1e-6
    healthy = comps[comps["component"].str.startswith("h")]
    assert not healthy["persistent"].any() and (healthy["labeled_fraction"] < 0.05).all()
    # the ranking: the fail-slow one first, then the episode; rank is 1..n in row order
    assert list(comps["component"][:2]) == ["slow", "episodic"]
    assert list(comps["rank"]) == list(range(1, 24))


def test_long_nothing_labeled_flags_nothing():
    _, comps = importers.label_long_components(long_frame(slow=None))
    assert len(comps) == 5 and not comps["persistent"].any()
    assert (comps["labeled_fraction"] == 0).all() and (comps["share_z"] == 0).all()
    assert (comps["level"] - 1).abs().max() < 0.1 and comps["median_slowdown"].isna().all()


def test_judge_verdict_rule():
    from faultlab.labeler.verdict import judge

    def flagged(levels, shares=None, **cfg):
        df = pd.DataFrame({"component": [f"c{k:02d}" for k in range(len(levels))], "level": levels,
                           "share": shares if shares is not None else [0.0] * len(levels)})
        out = judge(df, cfg or None)
        return sorted(out.loc[out["failslow"], "component"])

    rng = np.random.default_rng(0)
    bulk = list(np.exp(0.03 * rng.standard_normal(40)))  # healthy drives: 3% apart
    assert flagged(bulk) == []
    assert flagged([1.5] + bulk) == ["c00"]
    assert flagged([1.06] + bulk) == []  # within the bulk's spread (z ~2.8)
    assert flagged([1.06] + bulk, min_level=1.05, z=2.0) == ["c00"]
    assert flagged([1.075] + [1.0] * 20) == []  # an outlier, but a steady offset under min_level
    assert flagged([1.10] + [1.0] * 20) == ["c00"]  # 10% slower all along: persistently slow
    # slow episodes for a quarter of the time at 1.8x leave the level at ~1.0: no verdict,
    # however much its share stands out
    assert flagged([1.02] + bulk, [0.25] + [0.0] * 40) == []
    # 30% of a cluster slow: its bulk is still the healthy drives
    many = [1.6] * 12 + bulk[:28]
    assert flagged(many) == [f"c{k:02d}" for k in range(12)]
    # a cluster of identical drives (MAD 0): the floor keeps 1% from being an outlier
    assert flagged([1.01] + [1.0] * 20) == []
    # clusters are judged against their own bulk
    df = pd.DataFrame({"component": ["a0", "a1", "a2", "a3", "a4", "b0", "b1", "b2", "b3", "b4"],
                       "cluster": ["a"] * 5 + ["b"] * 5,
                       "level": [1.3, 1.0, 1.01, 0.99, 1.0, 1.3, 1.3, 1.31, 1.29, 1.3], "share": 0.0})
    out = judge(df, cluster="cluster")
    assert sorted(out.loc[out["failslow"], "component"]) == ["a0"]
    assert out["rank"].tolist() == list(range(1, 11)) and out.iloc[0]["component"] == "a0"


def test_long_components_deterministic():
    df = persistent_frame(healthy=8, seed=5)
    _, a = importers.label_long_components(df, run_id="x")
    _, b = importers.label_long_components(df.sample(frac=1.0, random_state=2), run_id="x")
    _, c = importers.label_long_components(df, run_id="x")
    assert len(a) > 0  # equal frames, not two empty ones
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(a, c)


def test_long_labeled_time_is_not_double_counted_across_metrics():
    one = persistent_frame(healthy=8, seed=1)
    two = pd.concat([one, one.assign(metric="latency_p99_ms")], ignore_index=True)
    _, a = importers.label_long_components(one)
    lab, b = importers.label_long_components(two)
    assert set(lab["evidence"].map(lambda e: json.loads(e)["metric"])) == {"latency_ms", "latency_p99_ms"}
    cols = ["component", "observed_s", "labeled_s", "labeled_fraction", "persistent", "rank"]
    pd.testing.assert_frame_equal(a[cols], b[cols])
    assert (b["labeled_fraction"] <= 1.0).all()


def test_verdict_config_is_checked():
    for name, bad in (("z", 0), ("min_level", 0.9), ("level_sigma_floor", -0.1), ("share_sigma_floor", 0)):
        with pytest.raises(BadInput) as ei:
            importers.LongConfig(verdict={name: bad})
        assert ei.value.field == name
        with pytest.raises(BadInput):
            perseus.PerseusConfig(verdict={name: bad})
    cfg = importers.LongConfig(verdict={"z": 5.0}).to_dict()
    assert cfg["verdict"]["z"] == 5.0 and cfg["verdict"]["min_level"] == 1.08
    # one rule, one set of defaults for both importers
    assert perseus.PerseusConfig().verdict == importers.LongConfig().verdict


def test_cli_long_writes_components(tmp_path):
    df = persistent_frame(healthy=10, seed=3)
    f = tmp_path / "drives.parquet"
    df.to_parquet(f)
    cp = fl("label", "--import", "long", str(f), "--out", str(tmp_path / "o"))
    assert cp.returncode == 0, cp.stderr
    assert "persistently slow: slow" in cp.stdout and "components.parquet" in cp.stdout
    comps = pq.read_table(tmp_path / "o" / "components.parquet").to_pandas()
    assert list(comps.columns) == list(importers.COMPONENT_COLUMNS)
    assert list(comps.loc[comps["persistent"], "component"]) == ["slow"]
    assert comps["rank"].tolist() == list(range(1, len(comps) + 1))
    # labels.parquet is what label_long gives, unchanged by the judgement
    labels = pq.read_table(tmp_path / "o" / "labels.parquet").to_pandas()
    assert pq.read_schema(tmp_path / "o" / "labels.parquet").names == LABEL_COLS
    want = schema.to_table("labels", importers.label_long(df, run_id="drives")).to_pandas()
    pd.testing.assert_frame_equal(labels, want)
    res = importers.import_path("long", f)
    _, direct = importers.label_long_components(df, run_id="drives")
    pd.testing.assert_frame_equal(res.components, direct)
    assert res.info["persistent"] == ["slow"]


# -- Perseus-like synthetic drives -----------------------------------------------------


def perseus_frame(hosts: int = 2, drives: int = 8, hours: float = 3.0, days: int = 2,
                  slow: dict[tuple[int, int], tuple[float, int | None]] | None = None, seed: int = 0) -> pd.DataFrame:
    """Drives sampled every 15 s for ``hours`` a day over ``days`` days; latency grows with
    throughput (40 + 2 per MB/s) with correlated 8% noise; ``slow[(host, drive)] =
    (factor, day or None for every day)``."""
    rng = np.random.default_rng(seed)
    n_day = int(hours * 240)
    rows = []
    for d in range(days):
        ts = 1_658_102_400 + d * 86400 + 15 * np.arange(n_day)
        for h in range(hosts):
            load = np.exp(0.3 * np.cumsum(rng.standard_normal(n_day)) / np.sqrt(n_day) * 4)  # the host's workload
            for k in range(drives):
                tp = 15e6 * load * np.exp(0.25 * rng.standard_normal(n_day))
                e = np.zeros(n_day)
                z = rng.standard_normal(n_day)
                for i in range(1, n_day):
                    e[i] = 0.7 * e[i - 1] + z[i] * 0.08 * np.sqrt(1 - 0.49)
                lat = (40.0 + 2.0 * tp / 1e6) * np.exp(e)
                f, only = (slow or {}).get((h, k), (1.0, None))
                if only is None or only == d:
                    lat = lat * f
                rows.append(pd.DataFrame({"cluster": "cluster_X", "host": f"host_{h}", "ts": ts,
                                          "disk_id": f"disk{k}", "throughput": tp, "latency": lat}))
    return pd.concat(rows, ignore_index=True)


def test_perseus_synthetic_mild_and_one_day_faults(tmp_path):
    # host_0/disk3 1.2x all the time, host_1/disk5 2x on two days of three (fail-slow);
    # host_1/disk2 2x on one day of three: a slow episode, no fail-slow drive
    days = [{(0, 3): (1.2, None), (1, 2): (2.0, None)}, {(0, 3): (1.2, None), (1, 5): (2.0, None)},
            {(0, 3): (1.2, None), (1, 5): (2.0, None)}]
    df = pd.concat([perseus_frame(days=1, slow=slow, seed=d).assign(ts=lambda x, d=d: x["ts"] + d * 86400)
                    for d, slow in enumerate(days)], ignore_index=True)
    df.to_parquet(tmp_path / "metrics.parquet")
    res = importers.import_path("perseus", tmp_path)
    assert drives_of(res.labels) == {"host_0/disk3", "host_1/disk5"}
    two_days = res.labels[res.labels["component"] == "drive:host_1/disk5"]
    assert (two_days["start_ts"] >= 1_658_102_400 + 86400).all()
    assert (two_days["slowdown"] > 1.6).all()
    assert (res.labels.loc[res.labels["component"] == "drive:host_0/disk3", "slowdown"] < 1.4).all()
    assert res.labels["run_id"].unique().tolist() == ["cluster_X"]
    ranking = res.extra["drives.json"]
    assert set(ranking["failslow"]) == {"host_1/disk5", "host_0/disk3"}
    by = {d["drive"]: d for d in ranking["drives"]}
    assert 0.25 < by["host_1/disk2"]["share"] < 0.4 and by["host_1/disk2"]["level"] < 1.1  # the episode: evidence, no verdict
    ev = json.loads(two_days.iloc[0]["evidence"])
    assert ev["drive_level_z"] >= 3.5 and ev["drive_level"] > 1.5 and 0.5 < ev["drive_share"] < 0.8
    # a throughput burst alone is no slowdown: latency follows the regression
    df2 = perseus_frame(seed=1)
    df2.loc[(df2["host"] == "host_0") & (df2["disk_id"] == "disk1"), "throughput"] *= 1.8
    m = (df2["host"] == "host_0") & (df2["disk_id"] == "disk1")
    df2.loc[m, "latency"] = (40.0 + 2.0 * df2.loc[m, "throughput"] / 1e6) * np.exp(0.02 * np.sin(np.arange(m.sum())))
    df2.to_parquet(tmp_path / "b.parquet")
    assert len(importers.import_path("perseus", tmp_path / "b.parquet").labels) == 0


def test_perseus_deterministic_and_nan_rows_skipped(tmp_path):
    df = perseus_frame(hosts=1, slow={(0, 2): (1.5, None)}, seed=4)
    df.loc[::97, "latency"] = np.nan
    df.to_parquet(tmp_path / "a.parquet")
    df.sample(frac=1.0, random_state=0).to_parquet(tmp_path / "b.parquet")
    a = importers.import_path("perseus", tmp_path / "a.parquet")
    b = importers.import_path("perseus", tmp_path / "b.parquet")
    pd.testing.assert_frame_equal(a.labels, b.labels)
    assert drives_of(a.labels) == {"host_0/disk2"}
    assert a.info["n_rows"] == len(df) and a.info["n_samples"] < len(df)


# -- 1F1B pipeline traces from an independent scheduler -------------------------------


def pipeline_trace(pp: int = 4, dp: int = 2, mbs: int = 4, steps: int = 4, fwd: float = 0.06, bwd: float = 0.12,
                   slow: dict[tuple[int, int], float] | None = None, lat: float = 0.002, seed: int = 0) -> pd.DataFrame:
    """A StragglerAnalysis-format trace of a 1F1B pipeline (blocking send/recv, DP
    collectives, grad-norm all-reduce), made by a small event scheduler written for this
    test. ``slow[(dp_rank, stage)]`` multiplies that worker's compute durations."""
    rng = np.random.default_rng(seed)
    rows = []

    def op(d, s, step, optype, start, dur, seq, mb=-1, mc=-1, gmc=-1):
        rows.append(dict(dp_rank=d, stage=s, rank=s * dp + d, step=step, optype=optype, start_ts=float(start),
                         duration=float(max(dur, 0.0)), seq_id=seq, mc=mc, gmc=gmc, mb_id=mb))

    for step in range(steps):
        jit = lambda: float(np.exp(0.01 * rng.standard_normal()))  # noqa: E731
        ag_end = 0.02
        post_start = {}
        for d in range(dp):
            for s in range(pp):
                op(d, s, step, "params-all-gather", 0.0, ag_end, 0, mc=0)
            f_end = {}
            b_end = {}
            order = {}
            for s in range(pp):
                w = min(pp - s - 1, mbs)
                seq = [("F", k) for k in range(w)]
                for i in range(mbs - w):
                    seq += [("F", w + i), ("B", i)]
                seq += [("B", k) for k in range(mbs - w, mbs)]
                order[s] = seq
            pos = {s: 0 for s in range(pp)}
            free = {s: ag_end for s in range(pp)}
            last_end = {s: 0.0 for s in range(pp)}
            recv_rows = []
            while any(pos[s] < len(order[s]) for s in range(pp)):
                progressed = False
                for s in range(pp):
                    if pos[s] >= len(order[s]):
                        continue
                    kind, k = order[s][pos[s]]
                    if kind == "F":
                        src = (s - 1, k) if s > 0 else None
                        if src and src not in f_end:
                            continue
                        ready = f_end[src] + lat if src else ag_end
                    else:
                        src = (s + 1, k) if s < pp - 1 else None
                        if src and src not in b_end:
                            continue
                        ready = b_end[src] + lat if src else f_end[(s, k)]
                    posted = last_end[s]
                    if src:  # the recv was posted after the previous compute and ends when the data arrives
                        recv_rows.append((s, "forward-recv" if kind == "F" else "backward-recv", k, posted,
                                          max(ready, posted + lat) - posted))
                        ready = max(ready, posted + lat)
                    start = max(free[s], ready)
                    mult = (slow or {}).get((d, s), 1.0)
                    dur = (fwd if kind == "F" else bwd) * mult * jit() * (1.0 if s < pp - 1 else 1.0)
                    op(d, s, step, "forward-compute" if kind == "F" else "backward-compute", start, dur, k, mb=k, mc=0, gmc=s)
                    end = start + dur
                    (f_end if kind == "F" else b_end)[(s, k)] = end
                    if kind == "F" and s < pp - 1:
                        op(d, s, step, "forward-send", end, lat, k)
                    if kind == "B" and s > 0:
                        op(d, s, step, "backward-send", end, lat, k)
                    free[s] = end
                    last_end[s] = end
                    pos[s] += 1
                    progressed = True
                assert progressed, "the 1F1B scheduler deadlocked"
            for s, optype, k, st, du in recv_rows:
                op(d, s, step, optype, st, du, k)
            for s in range(pp):
                op(d, s, step, "gc", last_end[s], 0.0, 0, mb=0)
                op(d, s, step, "layernorm-grads-all-reduce", last_end[s], 0.001, 0)
                post_start[(d, s)] = last_end[s] + 0.001
            if pp > 1:  # embedding all-reduce between the first and last stage
                st = max(post_start[(d, 0)], post_start[(d, pp - 1)])
                for s in (0, pp - 1):
                    op(d, s, step, "embedding-grads-all-reduce", post_start[(d, s)], st + 0.005 - post_start[(d, s)], 0)
                    post_start[(d, s)] = st + 0.005
        rs_end = {}
        for s in range(pp):  # grads reduce-scatter across the DP ranks of a stage
            st = max(post_start[(d, s)] for d in range(dp))
            for d in range(dp):
                op(d, s, step, "grads-reduce-scatter", post_start[(d, s)], st + 0.01 - post_start[(d, s)], 0, mc=0)
                rs_end[(d, s)] = st + 0.01
        st = max(rs_end.values())  # grad-norm all-reduce across everyone
        for (d, s), t in rs_end.items():
            op(d, s, step, "optimizer-clip-main-grad", t, st + 0.003 - t, 0)
            op(d, s, step, "optimizer", st + 0.003, 0.02, 0)
    return pd.DataFrame(rows)


def write_trace(tmp_path: Path, df: pd.DataFrame, dp: int = 2, pp: int = 4) -> Path:
    df.to_parquet(tmp_path / "trace-SYN.parquet")
    (tmp_path / "meta-SYN.yaml").write_text(
        f"trial_name: SYN\nrun_id: 0\ndp_size: {dp}\npp_size: {pp}\ntp_size: 1\nvpp_size: 1\nworld_size: {dp * pp}\n")
    return tmp_path


def test_trace_replay_reproduces_the_recorded_steps(tmp_path):
    res = importers.import_path("straggler-trace", write_trace(tmp_path, pipeline_trace()))
    wi = res.whatif
    assert abs(wi["launch_slowdown"] - 1.0) < 0.01  # the model replays the recorded timeline
    assert wi["slowdown"] < 1.03 and len(res.labels) == 0


def test_trace_single_slow_worker_is_the_worker(tmp_path):
    res = importers.import_path("straggler-trace", write_trace(tmp_path, pipeline_trace(slow={(1, 1): 1.6})))
    wi = res.whatif
    assert wi["slowdown"] > 1.05
    assert list(res.labels["component"]) == ["rank:3"]  # stage 1 x dp 2 + dp rank 1
    assert res.labels.iloc[0]["component_kind"] == "rank"
    assert wi["removal_share"]["rank"]["3"] > 0.8
    assert wi["mw"]["ranks"] == [3] and wi["mw"]["share"] > 0.8


def test_trace_stage_imbalance_is_the_stage(tmp_path):
    res = importers.import_path("straggler-trace",
                                write_trace(tmp_path, pipeline_trace(slow={(0, 3): 1.6, (1, 3): 1.6})))
    wi = res.whatif
    assert list(res.labels["component"]) == ["stage:3"]
    assert max(wi["decomposition"]["stage"], key=wi["decomposition"]["stage"].get) == "3"
    assert wi["ms"]["share"] > 0.8


def test_trace_deterministic(tmp_path):
    p = write_trace(tmp_path, pipeline_trace(slow={(0, 2): 1.4}, seed=2))
    a = importers.import_path("straggler-trace", p)
    b = importers.import_path("straggler-trace", p)
    assert len(a.labels) > 0  # equal frames, not two empty ones
    pd.testing.assert_frame_equal(a.labels, b.labels)
    assert json.dumps(json_safe(a.whatif), sort_keys=True) == json.dumps(json_safe(b.whatif), sort_keys=True)
    shuffled = pipeline_trace(slow={(0, 2): 1.4}, seed=2).sample(frac=1.0, random_state=3)
    c = trace.analyze(shuffled, {"dp_size": 2, "pp_size": 4})[0]
    assert abs(c["slowdown"] - a.whatif["slowdown"]) < 1e-12


def test_write_outputs(tmp_path):
    res = importers.import_path("straggler-trace", write_trace(tmp_path, pipeline_trace(slow={(1, 1): 1.6})))
    written = importers.write_outputs(res, tmp_path / "out")
    assert set(written) == {"labels.parquet", "whatif.json", "import.json"}  # no components summary for this format
    assert res.components is None and not (tmp_path / "out" / "components.parquet").exists()
    back = pq.read_table(written["labels.parquet"]).to_pandas()
    assert list(back["component"]) == ["rank:3"]
    assert json.loads(written["whatif.json"].read_text())["slowdown"] == pytest.approx(res.whatif["slowdown"])


def test_long_components_sampling_on_their_own_clocks_still_have_peers():
    """Each component samples every 10 s on its own clock (0.1 s apart): no timestamp is
    shared, yet the slow one is found (align_s=None aligns to the sampling interval);
    align_s=0 (exact timestamps) finds no peers, as documented."""
    df = long_frame(comps=6)
    df["timestamp"] = df["timestamp"] + 0.1 * df["component"].str[1:].astype(int)
    assert list(importers.label_long(df)["component"]) == ["c2"]
    assert len(importers.label_long(df, {"align_s": 0})) == 0
    assert _auto_align(df["timestamp"].to_numpy(), df["component"].str[1:].astype(int).to_numpy()) == pytest.approx(10.0)
    shared = long_frame(comps=6)  # shared timestamps: exact comparison
    assert _auto_align(shared["timestamp"].to_numpy(), shared["component"].str[1:].astype(int).to_numpy()) == 0.0


@pytest.mark.parametrize("spec", __import__("faultlab.labeler.synthetic", fromlist=["CLUSTERS"]).CLUSTERS,
                         ids=lambda c: c.name)
def test_drive_verdict_on_synthetic_clusters(tmp_path, spec):
    """Clusters with 0, 1 and 30% fail-slow drives, hard negatives (slow episodes for
    3-26% of their time at 1.4-1.8x), offset drives and noisy hosts: the perseus
    verdict, with the defaults, flags the fail-slow drives and no other."""
    from faultlab.labeler import synthetic

    df, truth = synthetic.generate(spec)
    df.to_parquet(tmp_path / "metrics.parquet")
    res = importers.import_path("perseus", tmp_path)
    ranking = res.extra["drives.json"]
    flagged = set(ranking["failslow"])
    hit = len(flagged & set(truth))
    assert len(flagged) - hit == 0, sorted(flagged - set(truth))
    assert hit >= 0.95 * len(truth)
    assert [d["drive"] for d in ranking["drives"][:len(truth)]] == ranking["failslow"][:len(truth)]
    assert drives_of(res.labels) <= flagged  # a steady 1.2x drive on a noisy host may have no slow window
    # the long importer, the same drives in the long format (throughput as the load), the
    # same verdict rule and defaults
    long = pd.DataFrame({"component": "drive:" + df["host"] + "/" + df["disk_id"], "peer_group": df["host"],
                         "timestamp": df["ts"].astype(float), "metric": "latency", "value": df["latency"],
                         "load": df["throughput"]})
    long.to_parquet(tmp_path / "long.parquet")
    comps = importers.import_path("long", tmp_path / "long.parquet").components
    lflag = {c.split(":", 1)[1] for c in comps.loc[comps["persistent"], "component"]}
    hit = len(lflag & set(truth))
    assert len(lflag) - hit == 0, sorted(lflag - set(truth))
    assert hit >= 0.95 * len(truth)


def _loaded_host(n: int = 720, seed: int = 0, slow: float = 1.5) -> pd.DataFrame:
    """One host of 10 drives sampled every 15 s; a drive's latency grows with the
    throughput it serves (``base x (0.5 + 0.5 x tp / 20 MB/s)``, 8% noise). ``busy``
    serves 1.6x its peers' throughput all along (so 1.3x their latency: a healthy drive);
    ``slow`` serves what its peers serve at ``slow`` x the latency for 70% of its time."""
    rng = np.random.default_rng(seed)
    t = 1_700_000_000.0 + 15.0 * np.arange(n)
    work = 20e6 * (1.0 + 0.3 * np.sin(np.arange(n) / 40.0)) * rng.lognormal(0.0, 0.15, n)
    rows = []
    for d in ["busy", "slow"] + [f"d{k}" for k in range(8)]:
        tp = work * (1.6 if d == "busy" else 1.0) * rng.lognormal(0.0, 0.2, n)
        lat = 50.0 * (0.5 + 0.5 * tp / 20e6) * rng.lognormal(0.0, 0.08, n)
        if d == "slow":
            lat[int(0.15 * n):int(0.85 * n)] *= slow
        rows.append(pd.DataFrame({"component": d, "peer_group": "host", "timestamp": t, "metric": "latency_ms",
                                  "value": lat, "load": tp}))
    return pd.concat(rows, ignore_index=True)


def test_long_load_column_judges_the_value_at_its_load(tmp_path):
    """With a ``load`` column a drive that is slower only because it serves more than its
    peers is no fail-slow drive, and the slow one is; without it latency alone reads the
    busy drive as 1.3x its peers (the ``long, no load`` row of perf/public_datasets.py)."""
    df = _loaded_host()
    _, with_load = importers.label_long_components(df)
    _, without = importers.label_long_components(df.drop(columns="load"))
    lv = with_load.set_index("component")["level"]
    assert sorted(with_load.loc[with_load["persistent"], "component"]) == ["slow"]
    assert 1.4 < lv["slow"] < 1.6 and abs(lv["busy"] - 1.0) < 0.05
    assert without.set_index("component")["level"]["busy"] > 1.2  # latency alone: the load reads as slowness
    # read from a file too (CSV keeps the load column), the rows without a load counted
    bad = df.copy()
    bad.loc[bad.index[:3], "load"] = np.nan
    bad.loc[bad.index[3], "load"] = -1.0
    bad.to_csv(tmp_path / "d.csv", index=False)
    res = importers.import_path("long", tmp_path / "d.csv")
    assert res.info["skipped"]["skipped"] == {"n/a load (empty or missing) of a metric with a load": 3, "negative load": 1}
    assert "latency_ms judged relative to its peer group's value at the same load (1 of 1 peer group(s) fitted)" \
        in res.info["skipped_line"]
    assert res.info["persistent"] == ["slow"]
    ev = json.loads(res.labels.loc[res.labels["component"] == "slow", "evidence"].iloc[0])
    assert ev["relative_to_load"] is True
    with pytest.raises(BadInput) as ei:
        importers.label_long_components(df.assign(load=df["load"].astype(str).where(df.index != 5, "busy")))
    assert ei.value.field == "load"


# -- the public data as upstream publishes it ---------------------------------------------


def _kratos_layout(root: Path, hosts: list[str]) -> Path:
    """ucare-uchicago/kratos-failslow's ``data/`` folder, built from the shared subset:
    ``data/cluster_A/HOST/YYYY-MM-DD.csv`` (quoted header ``"ts","disk_id","throughput",
    "latency"``, quoted disk ids, one file per host per day) and
    ``data/slow_drive_info.csv`` (the answers, here with the wrong drive on purpose: an
    importer that read it would show it)."""
    import csv as csv_mod

    t = pq.read_table(PERSEUS_DIR / "metrics.parquet", columns=["host", "ts", "disk_id", "throughput", "latency"],
                      filters=[("host", "in", hosts)]).to_pandas()
    data = root / "data"
    t["day"] = pd.to_datetime(t["ts"], unit="s").dt.strftime("%Y-%m-%d")
    for (host, day), g in t.groupby(["host", "day"], observed=True):
        d = data / "cluster_A" / str(host)
        d.mkdir(parents=True, exist_ok=True)
        g[["ts", "disk_id", "throughput", "latency"]].to_csv(d / f"{day}.csv", index=False,
                                                            quoting=csv_mod.QUOTE_NONNUMERIC)
    (data / "slow_drive_info.csv").write_text("cluster,host_name,workload,disk_id,\ncluster_A,host_20,e-commerce,disk1,\n")
    return data


@needs_perseus
def test_perseus_reads_the_kratos_failslow_layout_as_published(tmp_path):
    hosts = ["host_20", "host_21", "host_22", "host_23", "host_24", "host_25"]
    data = _kratos_layout(tmp_path, hosts)
    head = next((data / "cluster_A" / "host_22").glob("*.csv")).read_text().splitlines()[:2]
    assert head[0] == '"ts","disk_id","throughput","latency"' and ',"disk' in head[1]  # as upstream
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    pq.write_table(pq.read_table(PERSEUS_DIR / "metrics.parquet", filters=[("host", "in", hosts)]),
                   ref_dir / "metrics.parquet")
    ref = importers.import_path("perseus", ref_dir)
    for path in (data, data / "cluster_A"):  # the data/ folder, or one cluster's
        res = importers.import_path("perseus", path)
        ranking = res.extra["drives.json"]
        assert set(ranking["failslow"]) == {"host_22/disk11", "host_25/disk8"}, ranking["failslow"]
        assert ranking["failslow"] == ref.extra["drives.json"]["failslow"]
        assert res.info["n_samples"] == ref.info["n_samples"]
        # the empty values of the published data are counted, as in the converted form
        assert res.info["skipped"]["skipped"] == ref.info["skipped"]["skipped"] == {"n/a (empty or missing value)": 393}
        assert res.labels["run_id"].unique().tolist() == ["cluster_A"]
    cp = fl("label", "--import", "perseus", str(data), "--out", str(tmp_path / "o"))
    assert cp.returncode == 0, cp.stderr
    assert "skipped 393 of 725,760 rows: 393 n/a" in cp.stdout
    assert json.loads((tmp_path / "o" / "import.json").read_text())["skipped"]["n_skipped"] == 393


@needs_st
def test_straggler_trace_reads_the_stragglerananalysis_data_folder_as_published(tmp_path):
    """ByteDance-Seed/StragglerAnalysis' ``data/``: several traces (trace-NAME.parquet +
    meta-NAME.yaml), beside answers (result-, ms-, mw-), timelines and heatmaps."""
    import shutil

    data = tmp_path / "data"
    data.mkdir()
    for f in ST_DIR.iterdir():
        if f.name != "LICENSE":
            shutil.copy(f, data / f.name)
    shutil.copy(ST_DIR / "trace-ST.parquet", data / "trace-SX.parquet")  # a second trace of the format
    (data / "meta-SX.yaml").write_text((ST_DIR / "meta-ST.yaml").read_text().replace("trial_name: ST", "trial_name: SX"))
    (data / "timeline-ST.json.gz").write_bytes(b"\x1f\x8b not read")
    (data / "heatmap-ST.png").write_bytes(b"\x89PNG not read")
    (data / "result-SX.json").write_text("{not json: an importer that read it would fail")
    res = importers.import_path("straggler-trace", data)
    up = json.loads((ST_DIR / "result-ST.json").read_text())["blocking_slowdown"]
    S = res.whatif["slowdown_by_trace"]
    assert set(S) == {"ST-0", "SX-0"} and res.info["n_traces"] == 2
    assert abs(S["ST-0"] / up - 1) < 1e-4 and S["SX-0"] == S["ST-0"]
    assert set(res.labels["run_id"]) == {"ST-0", "SX-0"}
    assert set(res.labels["component"]) == {"stage:3"}
    cp = fl("label", "--import", "straggler-trace", str(data), "--out", str(tmp_path / "o"))
    assert cp.returncode == 0, cp.stderr
    assert "S by trace: ST-0 1.1" in cp.stdout


# -- nothing dropped in silence -------------------------------------------------------------


def test_long_counts_every_skipped_row_and_reads_tsv(tmp_path):
    df = persistent_frame(healthy=6, seed=2)
    n = len(df)
    bad = df.iloc[:7].copy()
    bad.loc[bad.index[0], "value"] = np.nan                  # n/a
    bad.loc[bad.index[1], "value"] = -1.0                    # negative
    bad.loc[bad.index[2], "value"] = np.inf                  # infinite
    bad.loc[bad.index[3], "timestamp"] *= 1000.0             # milliseconds among seconds
    bad = bad.iloc[:4]
    dup = df.iloc[10:13]                                     # duplicated keys
    full = pd.concat([df, bad, dup], ignore_index=True)
    f = tmp_path / "m.tsv"
    full.to_csv(f, sep="\t", index=False)
    res = importers.import_path("long", f)
    sk = res.info["skipped"]
    assert sk["n_rows"] == n + 7 and sk["n_skipped"] == 7
    assert sk["skipped"] == {"n/a (empty or missing value)": 1, "infinite": 1, "negative value": 1,
                             "timestamp in milliseconds or larger units among seconds": 1,
                             "duplicated (component, metric, timestamp)": 3}
    assert res.info["skipped_line"].startswith("skipped 7 of ")
    # the same as the clean input: the skipped rows changed nothing
    clean = importers.import_path("long", (tmp_path / "c.parquet") if df.to_parquet(tmp_path / "c.parquet") is None else None)
    assert sorted(clean.info["persistent"]) == sorted(res.info["persistent"]) == ["slow"]
    # a tab-separated file without the .tsv name is recognized too
    g = tmp_path / "m.txt"
    g.write_text(f.read_text())
    assert importers.read_long(g).shape[0] == n + 7


def test_long_milliseconds_column_is_converted_and_said(tmp_path):
    """A whole timestamp column in milliseconds (or microseconds) is converted to
    seconds and said; the labels are the seconds file's."""
    df = long_frame(seed=4)
    secs = importers.import_path("long", (tmp_path / "s.csv") if df.to_csv(tmp_path / "s.csv", index=False) is None else None)
    for unit, mult in (("milliseconds", 1e3), ("microseconds", 1e6)):
        f = tmp_path / f"{unit}.csv"
        df.assign(timestamp=df["timestamp"] * mult).to_csv(f, index=False)
        res = importers.import_path("long", f)
        assert f"timestamp converted from {unit} to seconds" in res.info["skipped_line"]
        assert res.info["skipped"]["n_skipped"] == 0
        cols = ["component", "start_ts", "end_ts", "slowdown"]
        assert len(secs.labels) == 1
        pd.testing.assert_frame_equal(res.labels[cols], secs.labels[cols], rtol=1e-9)


def test_perseus_milliseconds_column_is_converted_and_said(tmp_path):
    df = perseus_frame(hosts=1, slow={(0, 2): (1.5, None)}, seed=4)
    df.to_parquet(tmp_path / "s.parquet")
    ms = df.assign(ts=df["ts"] * 1000)
    ms.loc[ms.index[:3], "latency"] = -5.0
    ms.to_parquet(tmp_path / "ms.parquet")
    a = importers.import_path("perseus", tmp_path / "s.parquet")
    b = importers.import_path("perseus", tmp_path / "ms.parquet")
    assert b.extra["drives.json"]["failslow"] == a.extra["drives.json"]["failslow"] == ["host_0/disk2"]
    assert b.info["skipped"]["skipped"] == {"negative throughput or latency <= 0": 3}
    assert "ts converted from milliseconds to seconds" in b.info["skipped_line"]
    assert a.info["skipped_line"] == f"skipped no rows of {len(df):,}"


@needs_st
def test_straggler_trace_counts_every_row_it_leaves_out(tmp_path):
    """The public trace with damaged rows added: an empty duration, a negative one, an
    infinite start, an operation recorded twice, an operation type the model does not
    know. Each is counted by reason (one line, import.json), and the what-if is the
    clean trace's: the rows left out changed nothing."""
    import shutil

    t = pq.read_table(ST_DIR / "trace-ST.parquet").to_pandas()
    base = t.iloc[[0]]
    bad = pd.concat([base.assign(duration=np.nan), base.assign(duration=-0.5), base.assign(start_ts=np.inf),
                     t.iloc[[5]], base.assign(optype="flash-checkpoint")], ignore_index=True)
    bad["optype"] = bad["optype"].astype(str)
    full = pd.concat([t.astype({"optype": str}), bad], ignore_index=True)
    d = tmp_path / "st"
    d.mkdir()
    full.to_parquet(d / "trace-ST.parquet")
    shutil.copy(ST_DIR / "meta-ST.yaml", d / "meta-ST.yaml")
    res = importers.import_path("straggler-trace", d)
    clean = importers.import_path("straggler-trace", ST_DIR)
    assert clean.info["skipped_line"] == f"skipped no rows of {len(t):,}"
    sk = res.info["skipped"]
    assert sk["n_rows"] == len(t) + 5 and sk["n_skipped"] == 5
    assert sk["skipped"] == {"n/a (empty or missing value)": 1, "infinite start_ts or duration": 1,
                             "negative duration": 1,
                             "duplicated (dp_rank, stage, rank, step, optype, seq_id)": 1,
                             "of an operation type not modeled (flash-checkpoint)": 1}
    assert res.whatif["slowdown"] == clean.whatif["slowdown"]
    cp = fl("label", "--import", "straggler-trace", str(d), "--out", str(tmp_path / "o"))
    assert cp.returncode == 0, cp.stderr
    assert f"skipped 5 of {len(t) + 5:,} rows: 1 n/a" in cp.stdout
    assert json.loads((tmp_path / "o" / "import.json").read_text())["skipped"]["n_skipped"] == 5


PAI_DIR = PUBLIC / "alibaba-pai-minibatch"


@pytest.mark.skipif(not (PAI_DIR / "job_2_norm.csv").exists(), reason="public PAI data not present")
def test_pai_minibatch_steady_offsets_are_no_episodes():
    """alibaba/clusterdata's mini-batch times as published: job 2 (steady per-worker
    offsets, up to 1.09x its peers) gets no label and no verdict; job 3's straggler
    episodes are labeled on the workers whose series show them (6-9), with the
    defaults."""
    res = importers.import_path("pai-minibatch", PAI_DIR)
    jobs = res.info["jobs"]
    assert set(jobs) == {"job_2", "job_3"}
    assert jobs["job_2"]["n_labels"] == 0 and jobs["job_2"]["failslow"] == []
    assert max(jobs["job_2"]["level_by_worker"].values()) > 1.05  # the offsets are there
    lab3 = res.labels[res.labels["run_id"] == "job_3"]
    assert len(lab3) >= 1
    assert set(lab3["component"]) <= {f"job_3/worker:{k}" for k in (6, 7, 8, 9)}
    assert (lab3["slowdown"] >= 1.2).all()
    assert res.info["skipped"]["n_skipped"] == 1  # one worker sampled twice at one time: said
    single = importers.import_path("pai-minibatch", PAI_DIR / "job_2_norm.csv")
    assert len(single.labels) == 0 and set(single.components["component"]) == {f"worker:{k}" for k in range(10)}


def _trace_dir(tmp_path: Path, name: str, edit=None, meta: bytes | None = None) -> Path:
    d = tmp_path / name
    d.mkdir()
    write_trace(d, pipeline_trace())
    if edit is not None:
        df = pd.read_parquet(d / "trace-SYN.parquet")
        edit(df)
        df.to_parquet(d / "trace-SYN.parquet")
    if meta is not None:
        (d / "meta-SYN.yaml").write_bytes(meta)
    return d


def _text_at(col, row, text):
    def edit(df):
        df[col] = df[col].astype(str)
        df.loc[row, col] = text
    return edit


#: a meta file of nested YAML aliases (never to be expanded into a 2.4 MB whatif.json)
_ALIAS_BOMB = b"a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\ndp_size: 2\npp_size: 4\n"


def _damaged_body(tmp: Path) -> Path:
    """A trace whose Parquet footer (the schema reads) is kept and whose pages are spoilt."""
    d = _trace_dir(tmp, "t")
    raw = bytearray((d / "trace-SYN.parquet").read_bytes())
    raw[8 : len(raw) // 2] = b"U" * (len(raw) // 2 - 8)
    (d / "trace-SYN.parquet").write_bytes(bytes(raw))
    return d


#: each bad trace (made in a folder) and the field its refusal names
BAD_TRACES = {
    "dp_rank text": (lambda t: _trace_dir(t, "t", _text_at("dp_rank", 5, "x")), "dp_rank"),
    "start_ts text": (lambda t: _trace_dir(t, "t", _text_at("start_ts", 5, "abc")), "start_ts"),
    "meta not utf-8": (lambda t: _trace_dir(t, "t", meta=b"trial_name: \xff\xfe\ndp_size: 2\npp_size: 4\n"), "meta"),
    "meta with aliases": (lambda t: _trace_dir(t, "t", meta=_ALIAS_BOMB), "meta"),
    "meta not yaml": (lambda t: _trace_dir(t, "t", meta=b"dp_size: [2\npp_size: 4\n"), "meta"),
    "body damaged": (_damaged_body, "PATH"),
}


@pytest.fixture(scope="module")
def bad_trace_imports(tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """For each case of BAD_TRACES: its --out folder and ``faultlab label --import
    straggler-trace`` of the trace, all in one child process through faultlab's entry point."""
    outs, argvs = {}, []
    for i, (case, (make, _)) in enumerate(BAD_TRACES.items()):
        tmp = tmp_path_factory.mktemp(f"bad-trace-{i}")
        outs[case] = tmp / "out"
        argvs.append(["label", "--import", "straggler-trace", str(make(tmp)), "--out", str(outs[case])])
    return {case: (outs[case], cp) for case, cp in zip(outs, fl_many(argvs, timeout=120 * len(argvs)))}


@pytest.mark.parametrize("case", list(BAD_TRACES))
def test_a_bad_trace_is_one_line_naming_the_field_and_nothing_is_written(bad_trace_imports, case):
    """Each bad trace is one line naming the field, nothing written: text in an id
    column, a meta file that is not UTF-8 (no traceback), a meta file of nested YAML
    aliases (never expanded into a 2.4 MB whatif.json), a parse error (one line, not
    six), and a damaged Parquet body (named as PATH, not blamed on --out)."""
    field = BAD_TRACES[case][1]
    out, cp = bad_trace_imports[case]
    assert cp.returncode == 2, (cp.returncode, cp.stderr[-1500:])
    lines = [l for l in cp.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"faultlab: error: {field}: "), cp.stderr[-1500:]
    assert not out.exists() or not any(out.iterdir())


def test_a_negative_id_in_a_trace_is_counted_and_left_out(tmp_path):
    def neg(df):
        df.loc[0, "dp_rank"] = -1  # indexed a dense array from its end: S came out NaN
    res = importers.import_path("straggler-trace", _trace_dir(tmp_path, "t", neg))
    assert np.isfinite(res.whatif["slowdown"])
    assert "1 a negative, fractional or huge id" in res.info["skipped_line"]


def test_a_data_folder_pairs_each_trace_with_its_own_meta_and_run(tmp_path):
    """A folder of several traces: each is read with its own meta file's sizes (never
    another trace's), and two metas naming the same run keep both traces' what-if
    results."""
    d = tmp_path / "data"
    d.mkdir()
    write_trace(d, pipeline_trace())
    pipeline_trace(slow={(0, 1): 2.0}).to_parquet(d / "trace-AR.parquet")
    with pytest.raises(BadInput, match="trace-AR.parquet has no meta-AR.yaml"):
        importers.import_path("straggler-trace", d)
    (d / "meta-AR.yaml").write_text((d / "meta-SYN.yaml").read_text())  # the same trial_name and run_id
    with pytest.raises(BadInput, match="trace-AR.parquet and trace-SYN.parquet both name run SYN-0"):
        importers.import_path("straggler-trace", d)
    (d / "meta-AR.yaml").write_text((d / "meta-SYN.yaml").read_text().replace("trial_name: SYN", "trial_name: AR"))
    res = importers.import_path("straggler-trace", d)
    assert sorted(res.whatif["slowdown_by_trace"]) == ["AR-0", "SYN-0"]
    assert res.whatif["slowdown_by_trace"]["AR-0"] > res.whatif["slowdown_by_trace"]["SYN-0"]


@pytest.mark.skipif(not (PAI_DIR / "job_2_norm.csv").exists(), reason="public PAI data not present")
def test_pai_jobs_stay_apart_in_pai_and_in_long(tmp_path):
    """Two files of one job name are refused naming both (never merged, the second's
    rows counted as "duplicated" and its labels filed under the other job), a long file
    holding two runs with the same worker names keeps them apart, and a text value is
    named with its file and CSV line."""
    import shutil

    d = tmp_path / "pai"
    d.mkdir()
    shutil.copy(PAI_DIR / "job_2_norm.csv", d / "job_2_norm.csv")
    shutil.copy(PAI_DIR / "job_3_norm.csv", d / "job_2.csv")
    with pytest.raises(BadInput, match="job_2.csv and job_2_norm.csv are both job job_2"):
        importers.import_path("pai-minibatch", d)
    (d / "job_2.csv").unlink()
    bad = pd.read_csv(PAI_DIR / "job_3_norm.csv").astype({"time": object})
    bad.loc[100, "time"] = "later"
    bad.to_csv(d / "job_3_norm.csv", index=False)
    with pytest.raises(BadInput, match=r"time: job_3_norm.csv: 1 value\(s\) are not numbers, e.g. 'later' at CSV line 102"):
        importers.import_path("pai-minibatch", d)
    pai = importers.import_path("pai-minibatch", PAI_DIR)
    both = importers.read_pai(PAI_DIR)
    both["component"] = both["component"].str.replace("worker:", "w", regex=False)
    both.to_csv(tmp_path / "two-runs.csv", index=False)
    long = importers.import_path("long", tmp_path / "two-runs.csv")
    assert sorted(long.labels["component"]) == sorted(c.replace("worker:", "w") for c in pai.labels["component"])
    assert {"job_3/w6", "job_3/w7", "job_3/w8"} <= set(long.labels["component"]) <= {f"job_3/w{k}" for k in (6, 7, 8, 9)}


def test_perseus_nanoseconds_as_integers_and_seconds_among_milliseconds(tmp_path):
    """int64 nanoseconds are converted to seconds (not refused as "not numeric, got
    int64"), and seconds among milliseconds are skipped and counted, never kept in
    silence (in 1970, a fit of their own)."""
    df = perseus_frame(hosts=1, slow={(0, 2): (1.5, None)}, seed=4)
    ref = importers.import_path("perseus", _parquet(tmp_path / "s.parquet", df))
    ns = importers.import_path("perseus", _parquet(tmp_path / "ns.parquet", df.assign(ts=(df["ts"] * 1e9).astype("int64"))))
    assert ns.extra["drives.json"]["failslow"] == ref.extra["drives.json"]["failslow"] == ["host_0/disk2"]
    assert "ts converted from nanoseconds to seconds" in ns.info["skipped_line"]
    mixed = df.assign(ts=df["ts"] * 1000.0)
    mixed.loc[mixed.index[:50], "ts"] = df["ts"].iloc[:50]  # 50 rows still in seconds
    mx = importers.import_path("perseus", _parquet(tmp_path / "mx.parquet", mixed))
    assert mx.info["skipped"]["skipped"] == {"ts in a coarser unit than the column's milliseconds": 50}


@needs_perseus
def test_perseus_reads_gzipped_kratos_days(tmp_path):
    """A gzipped kratos day file is read like a plain one, never skipped in silence."""
    import gzip

    hosts = ["host_20", "host_21", "host_22", "host_23", "host_24", "host_25"]
    data = _kratos_layout(tmp_path / "k", hosts)
    plain = importers.import_path("perseus", data)
    day = sorted((data / "cluster_A" / "host_22").glob("*.csv"))[0]
    day.with_name(day.name + ".gz").write_bytes(gzip.compress(day.read_bytes()))
    day.unlink()
    gz = importers.import_path("perseus", data)
    assert gz.info["n_samples"] == plain.info["n_samples"]
    assert gz.extra["drives.json"]["failslow"] == plain.extra["drives.json"]["failslow"]


def _parquet(p: Path, df: pd.DataFrame) -> Path:
    df.to_parquet(p)
    return p
