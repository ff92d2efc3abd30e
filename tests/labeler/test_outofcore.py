"""The labeler out of core on Dask (faultlab.labeler.outofcore): labels IDENTICAL to
the in-memory labeler's on runs of several shapes, on an embedded LocalCluster and on
a real cluster of a ``dask scheduler`` and two ``dask worker`` processes on loopback
(over TLS: the labeler refuses a plain scheduler of this host)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faultlab import steptable, synthrun
from faultlab.errors import BadInput
from faultlab.labeler import StepGrid, analyze, label_run, read_steps
from faultlab.labeler.outofcore import _wait, analyze_out_of_core, halo_steps

distributed = pytest.importorskip("distributed", reason="dask.distributed is the 'scale' extra: pip install -e '.[scale]'")
dask = pytest.importorskip("dask", reason="dask is the 'scale' extra: pip install -e '.[scale]'")
from tests.dasktls import tls_files  # noqa: E402 - it imports distributed


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """An embedded LocalCluster of two worker processes, shared by the tests, its scratch
    folder a temporary one of its own (not the shared ``TMP/dask-scratch-space``), over
    TLS (the labeler refuses a plain scheduler of this host): dask's client settings
    name its files while the tests run, and ``c.tls["env"]`` for a ``faultlab`` child."""
    tls = tls_files(tmp_path_factory.mktemp("dask-tls"))
    with dask.config.set({"temporary-directory": str(tmp_path_factory.mktemp("dask-scratch"))}):  # scheduler and workers
        c = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, protocol="tls://",
                                     security=tls["security"])
    c.tls = tls
    with dask.config.set(tls["config"]):
        yield c
    c.close()


def _both(run, scheduler: str) -> tuple[pd.DataFrame, dict, pd.DataFrame, dict]:
    """The labels and whatif.json of ``run`` in memory, then out of core."""
    a = label_run(run, out_of_core=False)
    wa = json.loads((run / "whatif.json").read_text())
    b = label_run(run, out_of_core=True, scheduler=scheduler)
    wb = json.loads((run / "whatif.json").read_text())
    return a, wa, b, wb


def _same(a, wa, b, wb) -> None:
    pd.testing.assert_frame_equal(a, b)  # every column, the evidence text too
    assert abs(wa["slowdown"] / wb["slowdown"] - 1) < 1e-12
    assert wa["per_rank"].keys() == wb["per_rank"].keys()
    for k in wa["per_rank"]:
        assert abs(wa["per_rank"][k] / wb["per_rank"][k] - 1) < 1e-12


# (ranks, steps, rows a stored block holds, (rank, block) left out of a block)
SHAPES = {
    "few-ranks-many-steps": (4, 250_000, 1 << 18, None),            # 1e6 rank-steps, 4 blocks
    "many-ranks-few-steps": (2048, 500, 1 << 20, None),             # 1e6, 1 block
    "shorter-than-six-calm-blocks": (256, 280, 1 << 14, None),      # calm blocks of 46 steps, scored in a pass of their own
    "faults-across-blocks": (64, 20_000, 1 << 17, None),            # 1.3e6, 10 blocks of 2,048 steps
    "a-block-lacks-a-rank": (64, 20_000, 1 << 17, (3, 1)),          # rank 3 has no step in block 1
    "ten-million": (1000, 10_000, 1 << 22, None),                   # 1e7, 3 blocks
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_out_of_core_labels_equal_in_memory(tmp_path, cluster, shape):
    R, S, rows, drop = SHAPES[shape]
    info = synthrun.write_run(tmp_path / "run", R, S, block_rows=rows, drop=drop)
    a, wa, b, wb = _both(tmp_path / "run", cluster.scheduler_address)
    _same(a, wa, b, wb)
    assert set(a["fault_id"].dropna()) >= {f["fault_id"] for f in info["faults"]} - ({"f-intermittent"} if S < 2000 else set())
    if shape == "faults-across-blocks":
        f = info["faults"][0]
        assert f["a"] < info["block_steps"] * (f["a"] // info["block_steps"] + 1) <= f["b"] - 1  # crosses a boundary


def _skew_clock(run: Path, rank: int, by_s: float) -> None:
    """Move every ``t_start`` of ``rank`` by ``by_s`` seconds in the stored steps table
    (a host whose clock runs ahead)."""
    for f in sorted((run / "steps").rglob("*.parquet")):
        t = pq.read_table(f)
        ts = t.column("t_start").to_numpy() + np.where(t.column("rank").to_numpy() == rank, by_s, 0.0)
        pq.write_table(t.set_column(t.schema.get_field_index("t_start"), "t_start", pa.array(ts)), f)


@pytest.mark.parametrize("steps,skew_s", [(12_000, None), (12_000, 30.0), (280, None)],
                         ids=["clocks-synchronized", "one-clock-ahead", "shorter-than-six-calm-blocks"])
def test_out_of_core_analysis_arrays_equal_in_memory(tmp_path, cluster, steps, skew_s):
    """Not only the labels: every array of the analysis, value for value, the steps'
    bounds too where a rank's clock is ahead and its offset is removed block by block,
    and the peer groups' calm stretch and levels (scored from the temporal pass's
    block medians, or in a pass of their own on a run too short for 50-step blocks)."""
    synthrun.write_run(tmp_path / "run", 48, steps, block_rows=1 << 16, drop=(5, 2))
    if skew_s:
        _skew_clock(tmp_path / "run", 9, skew_s)
    src = steptable.steps_source(tmp_path / "run")
    a = analyze(StepGrid.from_steps(read_steps(src)))
    with distributed.Client(cluster.scheduler_address) as client:
        b, span = analyze_out_of_core(src, workdir=tmp_path / "work", client=client)
    g, h = a.grid, b.grid
    for x, y in [(g.t_start, h.t_start), (g.compute, h.compute), (g.job_step, h.job_step), (g.t0, h.t0), (g.t1, h.t1),
                 (g.group_stats()[0], h.group_stats()[0]), (g.peer_median(), h.peer_median()), (a.sim, b.sim),
                 (a.job_wide_flag, b.job_wide_flag)] + [
            (getattr(a.temporal, f), getattr(b.temporal, f)) for f in ("job_base", "job_flag", "rank_base",
                                                                        "rank_ratio", "rank_flag")] + [
            (getattr(a.peer, f), getattr(b.peer, f)) for f in ("median", "ratio", "flag", "sigma")]:
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
    ref = np.asarray(a.peer.median)  # read where fusion reads it: rows of one rank, a few rows, a row
    for key in [(slice(10, 400), 7), (slice(0, 5), slice(None)), (np.array([3, 99, 100]), 2), 17, (slice(None, None, 7), 3),
                (slice(steps - 60, None), slice(40, 48))]:
        assert np.array_equal(np.asarray(b.peer.median[key]), ref[key], equal_nan=True), key
    assert a.job_expected == b.job_expected
    assert a.groups.calm == b.groups.calm and len(a.groups.calm) > 1
    assert np.array_equal(a.groups.level, b.groups.level, equal_nan=True)
    assert np.array_equal(g.clock_offsets, h.clock_offsets) and bool(np.any(h.clock_offsets)) == bool(skew_s)
    assert span[0] == float(read_steps(src)["t_start"].min())
    assert halo_steps(a.config) == 50


def _start(args: list[str], log, scratch: Path) -> subprocess.Popen:
    """``python -m dask ARGS`` in a session of its own, its scratch folder ``scratch``
    (not the shared ``TMP/dask-scratch-space`` it would leave behind)."""
    env = {**os.environ, "DASK_TEMPORARY_DIRECTORY": str(scratch)}
    return subprocess.Popen([sys.executable, "-m", "dask", *args], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=env)


def test_out_of_core_on_a_real_cluster_of_a_scheduler_and_two_workers(tmp_path):
    """``dask scheduler`` and two ``dask worker`` processes on loopback, started here and
    ended by their PIDs; the run is labeled through ``$DASK_SCHEDULER_ADDRESS``."""
    info = synthrun.write_run(tmp_path / "run", 64, 20_000, block_rows=1 << 17, drop=(7, 3))
    sched_file = tmp_path / "scheduler.json"
    log = open(tmp_path / "dask.log", "w")
    tls = tls_files(tmp_path / "tls")  # the labeler refuses a plain scheduler of this host
    procs = [_start(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--protocol", "tls", *tls["cli"],
                     "--scheduler-file", str(sched_file)], log, tmp_path / "scratch")]
    try:
        deadline = time.monotonic() + 120
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        addr = json.loads(sched_file.read_text())["address"]
        for _ in range(2):
            procs.append(_start(["worker", addr, "--host", "127.0.0.1", "--nworkers", "1", "--nthreads", "1",
                                 "--no-dashboard", "--memory-limit", "0", *tls["cli"]], log, tmp_path / "scratch"))
        with distributed.Client(addr, security=tls["security"]) as c:
            c.wait_for_workers(2, timeout=120)
            assert len(c.scheduler_info()["workers"]) == 2
        a = label_run(tmp_path / "run", out_of_core=False)
        wa = json.loads((tmp_path / "run" / "whatif.json").read_text())
        os.environ["DASK_SCHEDULER_ADDRESS"] = addr
        try:
            with dask.config.set(tls["config"]):
                b = label_run(tmp_path / "run", out_of_core=True)
        finally:
            del os.environ["DASK_SCHEDULER_ADDRESS"]
        wb = json.loads((tmp_path / "run" / "whatif.json").read_text())
        _same(a, wa, b, wb)
        assert set(b["fault_id"].dropna()) == {f["fault_id"] for f in info["faults"]}
        assert not [p for p in (tmp_path / "run").iterdir() if p.name.startswith(".label-")]  # the work folder is gone
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
        log.close()


def test_a_run_given_by_a_relative_path_is_labeled_on_a_cluster_started_elsewhere(tmp_path, cluster, monkeypatch):
    """The cluster's workers were started in another working folder (the test session's),
    as an existing cluster's are: a run named relative to the caller's folder is read
    and its maps written by its absolute path, and labels as the in-memory labeler does."""
    synthrun.write_run(tmp_path / "run", 16, 2_000, block_rows=1 << 13)
    ref = label_run(tmp_path / "run", out_of_core=False)
    monkeypatch.chdir(tmp_path)
    got = label_run("run", out_of_core=True, scheduler=cluster.scheduler_address)
    pd.testing.assert_frame_equal(got, ref)


def test_cli_label_out_of_core_says_its_passes(tmp_path, cluster):
    from tests.helpers import fl

    synthrun.write_run(tmp_path / "run", 32, 6_000, block_rows=1 << 16)
    cp = fl("label", tmp_path / "run", "--scheduler", cluster.scheduler_address, env=cluster.tls["env"], timeout=600)
    assert cp.returncode == 0, cp.stderr
    assert "read: 3 block(s)" in cp.stdout and "temporal view" in cp.stdout and "5 label(s)" in cp.stdout
    cp = fl("label", tmp_path / "run", "--in-memory")
    assert cp.returncode == 0 and "block(s)" not in cp.stdout


def test_out_of_core_labels_equal_in_memory_within_mapped_peer_groups(tmp_path, cluster):
    """Peer groups given as a mapping (two halves of the ranks) regroup the out-of-core
    grid as the in-memory one: the same labels and the same groups in whatif.json."""
    synthrun.write_run(tmp_path / "run", 32, 6_000, block_rows=1 << 16)
    mapping = {f"rank:{r}": ("a" if r < 16 else "b") for r in range(32)}
    a = label_run(tmp_path / "run", out_of_core=False, peer_groups=mapping)
    wa = json.loads((tmp_path / "run" / "whatif.json").read_text())
    b = label_run(tmp_path / "run", out_of_core=True, scheduler=cluster.scheduler_address, peer_groups=mapping)
    wb = json.loads((tmp_path / "run" / "whatif.json").read_text())
    _same(a, wa, b, wb)
    assert [g["members"] for g in wa["peer_groups"]] == [g["members"] for g in wb["peer_groups"]]
    assert len(wb["peer_groups"]) == 2


def _rewrite_block(run: Path, k: int, change) -> None:
    """Rewrite the stored block ``k`` of ``run``'s steps table with ``change(frame)``."""
    f = sorted((run / "steps").rglob("*.parquet"))[k]
    pq.write_table(pa.Table.from_pandas(change(pq.read_table(f).to_pandas()), preserve_index=False), f)


BAD_BLOCKS = {
    "a (rank, step) recorded twice": (lambda d: pd.concat([d, d.iloc[:10]]), "step"),
    # still the complete grid in step-major order, its first rank -1
    "every rank one lower": (lambda d: d.assign(rank=d["rank"] - 1), "rank"),
}


@pytest.mark.parametrize("case", list(BAD_BLOCKS))
def test_out_of_core_refuses_a_stored_block_the_in_memory_labeler_refuses(tmp_path, cluster, case):
    change, field = BAD_BLOCKS[case]
    synthrun.write_run(tmp_path / "run", 8, 4_000, block_rows=1 << 13)
    _rewrite_block(tmp_path / "run", 2, change)
    with pytest.raises(BadInput) as mem:
        label_run(tmp_path / "run", out_of_core=False)
    with pytest.raises(BadInput) as ooc:
        label_run(tmp_path / "run", out_of_core=True, scheduler=cluster.scheduler_address)
    assert mem.value.field == ooc.value.field == field
    assert not (tmp_path / "run" / "labels.parquet").exists()


def test_an_embedded_cluster_that_fails_to_start_leaves_no_scratch_folder(tmp_path):
    # a script that starts the cluster at import time, without a __main__ guard: its
    # worker processes (spawned: they import the script again) cannot start, and
    # LocalCluster raises in the script and in each worker's import of it
    script = tmp_path / "unguarded.py"
    script.write_text("from faultlab.labeler.cluster import local_cluster\nlocal_cluster(1)\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cp = subprocess.run([sys.executable, str(script)], env={**os.environ, "TMPDIR": str(tmp)},
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode != 0, "the unguarded script started its cluster"
    assert "bootstrapping phase" in cp.stderr, cp.stderr[-2000:]
    assert not list(tmp.glob("faultlab-dask-*")), sorted(p.name for p in tmp.iterdir())


def _faults_of_reused_arrays() -> int:
    """Minor page faults of allocating and freeing a 1 MiB array 32 times after once
    (below numpy's huge-page size, so each fresh mapping faults 256 pages)."""
    import resource

    np.ones(1 << 18, dtype=np.float32).sum()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(32):
        np.ones(1 << 18, dtype=np.float32).sum()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_embedded_cluster_workers_reuse_freed_array_memory(tmp_path, monkeypatch):
    # Dask's default worker environment returns freed memory to the kernel at once
    # (MALLOC_TRIM_THRESHOLD_=65536, which also fixes glibc's mmap threshold at 128 KiB):
    # every array is then a fresh mapping, faulted and zeroed page by page, 8,192
    # faults here; the labeler's workers keep it in their heap, also in a process
    # where a default Dask cluster has started before and left its setting behind
    from faultlab.labeler.cluster import close, local_cluster

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    cl, security = local_cluster(1)
    client = distributed.Client(cl, security=security)
    try:
        (faults,) = client.run(_faults_of_reused_arrays).values()
    finally:
        close(client, cl)
    assert faults < 1024, faults
    assert os.environ["MALLOC_TRIM_THRESHOLD_"] == "65536" and "MALLOC_MMAP_THRESHOLD_" not in os.environ


@pytest.mark.parametrize("how", ["option", "environment"])
def test_a_scheduler_address_that_is_none_is_one_line_naming_where_it_came_from(tmp_path, how):
    from tests.helpers import fl

    synthrun.write_run(tmp_path / "run", 4, 100, seed=0)
    before = sorted(p.name for p in (tmp_path / "run").iterdir())
    if how == "option":
        cp = fl("label", tmp_path / "run", "--scheduler", "foo")
    else:
        cp = fl("label", tmp_path / "run", "--out-of-core", env={"DASK_SCHEDULER_ADDRESS": "foo"})
    assert cp.returncode == 2, (cp.returncode, cp.stderr[-2000:])
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in cp.stderr, cp.stderr[-2000:]
    assert ("--scheduler" if how == "option" else "DASK_SCHEDULER_ADDRESS") in lines[0] and "tcp://HOST:PORT" in lines[0]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == before


def test_peer_medians_indexed_as_numpy_indexes_the_in_memory_peer_median(tmp_path, cluster):
    """The out-of-core peer median (PeerMedians, computed for the rows it is indexed
    for) gives what numpy's indexing of the in-memory one gives: a row array paired
    with a column array (or list, or mask), not crossed with it; repeated and negative
    rows; an empty range of rows."""
    synthrun.write_run(tmp_path / "run", 12, 3_000, block_rows=1 << 14)
    src = steptable.steps_source(tmp_path / "run")
    a = analyze(StepGrid.from_steps(read_steps(src)))
    with distributed.Client(cluster.scheduler_address) as client:
        b, _ = analyze_out_of_core(src, workdir=tmp_path / "work", client=client)
    ref = np.asarray(a.peer.median)
    mask = np.zeros(12, dtype=bool)
    mask[[1, 7]] = True
    for key in [(np.array([3, 99, -1]), np.array([2, 5, -1])), (np.array([3, 99]), [1, 2]), (np.array([1, 2]), mask),
                (np.array([5, 5, -2995]), slice(None)), (slice(10, 5), 2), (-1, -1), (np.array([[4], [9]]), np.array([0, 3]))]:
        got = np.asarray(b.peer.median[key])
        assert got.shape == ref[key].shape and np.array_equal(got, ref[key], equal_nan=True), key


def _refuse(x):
    raise BadInput(f"block {x} refused", field="steps")


_RELEASE = threading.Event()


def _held_read(x):
    _RELEASE.wait(60)
    return x


def test_a_refused_block_cancels_the_blocks_not_yet_read(tmp_path):
    """The first block a worker refuses ends the pass: the reads not yet done are
    cancelled on the cluster, not left to run to the end of the run (an in-process
    worker of one thread: the first held read is running, the others wait for it)."""
    _RELEASE.clear()
    with dask.config.set({"temporary-directory": str(tmp_path)}), \
            distributed.Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client:  # its scratch folder, not TMP's shared one
        futures = [client.submit(_refuse, 0, pure=False)] + [client.submit(_held_read, k, pure=False) for k in range(1, 5)]
        try:
            with pytest.raises(BadInput, match="block 0 refused"):
                _wait(client, futures, lambda *a: None, "read")
            assert all(f.cancelled() for f in futures[2:]), [f.status for f in futures]
        finally:
            _RELEASE.set()
