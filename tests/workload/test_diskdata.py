"""The workload's disk-backed data path (benchmarks/diskdata.py): real ranks read a
shard from disk every step and checkpoint with O_DIRECT; an io-slow fault (blk-throttle
on this machine's real disk) on one rank stalls its dataloader, so io-slow manifests."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest

from faultlab.benchmarks.diskdata import DiskData
from faultlab.benchmarks.launch import free_port, launch_ranks, stop_ranks, wait_ranks
from faultlab.injectors import IoSlow, apply
from faultlab.nodes import LocalNode
from faultlab.rundir import RunDir
from tests.helpers import ROOT, real_disk_dir

NODE = LocalNode("local")


DISK = real_disk_dir()
needs_throttle = pytest.mark.skipif(DISK is None or not ROOT or not Path("/sys/fs/cgroup/blkio/blkio.throttle.read_bps_device").exists(),
                                    reason="needs root, a real block device and cgroup v1 blk-throttle")


def test_shards_round_trip_and_are_removed(tmp_path):
    rng = np.random.default_rng(0)
    shards = [(rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32)) for _ in range(3)]
    d = DiskData(tmp_path / "data", "run1", 0, shards)
    for i in range(5):
        x, y = d.read(i)
        np.testing.assert_array_equal(x, shards[i % 3][0])
        np.testing.assert_array_equal(y, shards[i % 3][1])
    assert d.checkpoint(b"abc" * 5000) % 4096 == 0 and (d.dir / "ckpt.bin").stat().st_size >= 15000
    d.close()
    assert not (tmp_path / "data" / "run1").exists()


def _launch(tmp_path, job, data_dir, steps):
    procs = launch_ranks(
        [(LocalNode(name="n0"), 0), (LocalNode(name="n1"), 1)], telemetry_dir=tmp_path / "run" / "telemetry", run_id="dd",
        master_addr="127.0.0.1", master_port=free_port(), duration_s=None, log_dir=tmp_path / "logs",
        extra_args=["--steps", str(steps), "--hidden", "128", "--batch", "128", "--data-dir", str(data_dir), "--checkpoint-every", "20"],
    )
    job.extend(procs)
    return procs


@pytest.fixture
def job():
    started = []
    yield started
    stop_ranks(started, grace_s=1)


@pytest.fixture
def data_dir():
    if DISK is None:
        pytest.skip("no real block device")
    d = DISK / "faultlab-diskdata-test"
    yield d
    assert not (d / "dd").exists(), "the ranks left their shards behind"
    try:
        d.rmdir()
    except OSError:
        pass


@needs_throttle
def test_io_slow_on_one_rank_stalls_its_dataloader(tmp_path, job, data_dir, no_residue):
    procs = _launch(tmp_path, job, data_dir, steps=80)
    # a 1 MB/s read cap on rank 1: each step's 128 KiB shard takes ~0.13 s instead of ~1 ms
    active = apply(IoSlow(NODE, [procs[1].pid], str(DISK), read_bps=1_000_000), 120)
    try:
        assert active.evidence["verify"]["ok"]
        assert wait_ranks(procs, timeout_s=180) == {0: 0, 1: 0}
    finally:
        assert active.revert() == "reverted"
    steps = RunDir(tmp_path / "run").read_raw_steps()
    assert steps["dataloader_s"].notna().all()
    dl = {r: statistics.median(steps.loc[steps["rank"] == r, "dataloader_s"].iloc[10:]) for r in (0, 1)}
    assert dl[1] > 0.05 and dl[1] > 5 * dl[0], dl
    # everyone waits for the slow reader: the job's step time follows rank 1's reads
    assert steps.loc[steps["rank"] == 0, "step_s"].iloc[10:].median() > 0.05
    ck = steps[(steps["step"] % 20) == 19]
    assert len(ck) >= 6  # checkpoint steps were recorded (their write is in compute_s)
