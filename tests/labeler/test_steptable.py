"""A run's steps stored for scale (faultlab.steptable): one file or a partitioned
dataset by step range, read by every consumer through one reader, and the streaming
synthetic run generator (faultlab.synthrun, ``faultlab synth``)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

from faultlab import steptable, synthrun
from faultlab.errors import BadInput
from faultlab.labeler import label_run, read_steps
from faultlab.rundata import read_run_dir
from faultlab.rundir import RunDir
from tests.helpers import fl


@pytest.fixture(scope="module")
def synth_run(tmp_path_factory):
    """48 ranks x 12,000 steps in blocks of 2,730 steps (5 blocks)."""
    d = tmp_path_factory.mktemp("synth") / "run"
    info = synthrun.write_run(d, 48, 12_000, seed=3, block_rows=1 << 17)
    return d, info


def test_synthetic_run_is_partitioned_by_step_block(synth_run):
    d, info = synth_run
    assert info["blocks"] == 5 and not (d / "steps.parquet").exists()
    lay = steptable.layout(d / "steps")
    assert lay["block_steps"] == info["block_steps"] == (1 << 17) // 48
    bl = steptable.blocks(d / "steps")
    assert [k for k, _ in bl] == list(range(5))
    for k, t in zip(range(5), steptable.iter_blocks(d / "steps", ["step", "rank"])):
        s = t.column("step").to_numpy()
        assert s.min() == k * lay["block_steps"] and s.max() == min(12_000, (k + 1) * lay["block_steps"]) - 1
        assert t.num_rows == (s.max() - s.min() + 1) * 48


def test_every_planted_fault_is_labeled_with_its_component_and_span(synth_run, tmp_path):
    d, info = synth_run
    labels = label_run(d)
    for f in info["faults"]:
        row = labels[labels["fault_id"] == f["fault_id"]]
        assert len(row) == 1, (f, labels[["component", "start_step", "end_step", "fault_id"]])
        r = row.iloc[0]
        assert r["component"] == ("job" if f["rank"] is None else f"rank:{f['rank']}")
        assert r["source"] == "injected"
        assert abs(int(r["start_step"]) - f["a"]) <= 5 and abs(int(r["end_step"]) - (f["b"] - 1)) <= 5, (f, r)
    a = info["faults"][0]
    assert a["a"] < info["block_steps"] <= a["b"] - 1  # the first straggler spans a block boundary


def test_partitioned_and_single_file_read_and_label_the_same(synth_run, tmp_path):
    d, _ = synth_run
    whole = steptable.read_table(d / "steps")
    one = tmp_path / "one"
    RunDir.create(one, run_id=str(whole["run_id"].iloc[0]), scenario={"name": "copy"})
    (one / "injections.parquet").write_bytes((d / "injections.parquet").read_bytes())
    assert steptable.write_steps(one, whole, partition_rows=len(whole) + 1) == one / "steps.parquet"
    pdt.assert_frame_equal(read_steps(d / "steps"), read_steps(one / "steps.parquet"))
    pdt.assert_frame_equal(RunDir(d).read_table("steps"), RunDir(one).read_table("steps"))
    la, lb = label_run(d), label_run(one)
    pdt.assert_frame_equal(la.drop(columns=["evidence"]), lb.drop(columns=["evidence"]))
    assert read_run_dir(d).steps.shape == whole.shape  # scoring, datasets and the report read it too


def test_writing_past_the_threshold_partitions_and_removes_the_other_layout(tmp_path):
    rd = RunDir.create(tmp_path / "r", run_id="r", scenario={"name": "t"})
    steps = synthrun_frame(8, 600)
    rd.write_table("steps", steps)
    assert (rd.path / "steps.parquet").is_file()
    p = steptable.write_steps(rd.path, steps, partition_rows=1000, block_rows=8 * 128)
    assert p == rd.path / "steps" and not (rd.path / "steps.parquet").exists()
    assert [k for k, _ in steptable.blocks(p)] == [0, 1, 2, 3, 4]
    back = rd.read_table("steps")
    pdt.assert_frame_equal(back[list(steps.columns)], steps, check_dtype=False)
    rd.write_table("steps", steps)  # small again: one file, the folder removed
    assert (rd.path / "steps.parquet").is_file() and not (rd.path / "steps").exists()


def test_a_folder_that_is_no_step_block_is_named(tmp_path):
    rd = RunDir.create(tmp_path / "r", run_id="r", scenario={"name": "t"})
    steptable.write_steps(rd.path, synthrun_frame(4, 300), partition_rows=10, block_rows=400)
    (rd.path / "steps" / "stray").mkdir()
    with pytest.raises(BadInput) as ei:
        read_steps(rd.path / "steps")
    assert ei.value.field == "steps" and "step_block=K" in str(ei.value)
    cp = fl("label", rd.path)
    assert cp.returncode == 2 and "stray" in cp.stderr


def test_cli_synth_writes_a_run_that_labels(tmp_path):
    cp = fl("synth", tmp_path / "s", "--ranks", "16", "--steps", "3000", "--seed", "1")
    assert cp.returncode == 0, cp.stderr
    assert "48,000 rank-steps" in cp.stdout and (tmp_path / "s" / "steps.parquet").is_file()
    cp = fl("label", tmp_path / "s")
    assert cp.returncode == 0, cp.stderr
    wi = json.loads((tmp_path / "s" / "whatif.json").read_text())
    assert wi["n_steps"] == 3000
    cp = fl("synth", tmp_path / "s")
    assert cp.returncode == 2 and "DIR" in cp.stderr


def synthrun_frame(R: int, S: int) -> pd.DataFrame:
    """A small STEPS frame of R ranks x S steps, step-major."""
    rng = np.random.default_rng(0)
    step = np.repeat(np.arange(S), R)
    rank = np.tile(np.arange(R), S)
    c = 0.03 * (1 + 0.03 * rng.standard_normal(R * S))
    st = np.repeat(0.045 + 0.001 * rng.standard_normal(S), R)
    t = 1.7e9 + np.repeat(np.cumsum(st[::R]) - st[0], R)
    return pd.DataFrame({"run_id": "r", "rank": rank.astype(np.int32), "node": [f"n{x}" for x in rank], "peer_group": "g",
                         "step": step.astype(np.int64), "t_start": t, "compute_s": c, "comm_s": st - c, "step_s": st})
