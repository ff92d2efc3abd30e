"""Root's import of a public trace someone else handed over (``faultlab label --import
FORMAT PATH``) costs what the trace's rows cost, never the product of the ids they name:
a small file whose every row names a new component at a new timestamp (long, PAI), a new
cluster, host and disk (Perseus), a new DP rank or a far pipeline stage (a
StragglerAnalysis trace) is imported, or refused in one line naming what is wrong,
before any array sized by that product is made. A long-format trace of many components,
all in one peer group or each its own, costs its components, not their square: the
group's member list is held once per group, each group's columns found by one sort. A gzipped file costs at most its
decompression bound (``GZIP_RATIO`` times its size), its header line too.

Each file is nobody's and a few MB at most. Root's command runs under an address-space
limit (``prlimit``) and a time limit, so a miss fails here instead of filling the host's
memory or holding a core for good.
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import FL, ROOT, give_to_nobody

LIMIT = ["prlimit", f"--as={3 << 30}", "--"]
#: one-sample components of the many-components traces (each file about 4 MB)
COMPONENTS = 100_000
#: rows of each diagonal: a dense grid of ROWS**2 cells (3.6e9), 27 GiB of float64
ROWS = 60_000
pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("prlimit"), reason="needs root (the trace is nobody's) and prlimit")


def _import(fmt: str, path: Path, tmp_path: Path, timeout: float = 120, cpu_s: int | None = None) -> subprocess.CompletedProcess:
    give_to_nobody(path if path.is_dir() else path.parent)
    cpu = [f"--cpu={cpu_s}"] if cpu_s else []  # CPU seconds, the work done: not wall time on a loaded host
    return subprocess.run([LIMIT[0], *cpu, *LIMIT[1:], *FL, "label", "--import", fmt, str(path), "--out", str(tmp_path / "labels")],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path)


def _refused(cp: subprocess.CompletedProcess, *words: str) -> None:
    err = cp.stderr.strip()
    assert cp.returncode == 2, err[-2000:]
    assert "Traceback" not in err and "allocate" not in err and len(err.splitlines()) == 1, err[-2000:]
    assert all(w in err for w in words), err[-2000:]


def _long_diagonal(folder: Path) -> Path:
    f = folder / "diagonal.csv"
    i = np.arange(ROWS)
    f.write_text("component,peer_group,timestamp,metric,value\n" + "".join(f"c{k},g,{1.8e9 + k},step_s,1.0\n" for k in i))
    return f


def _pai_diagonal(folder: Path) -> Path:
    f = folder / "job_1_norm.csv"
    f.write_text(",worker,gpu,time,batch_time_norm\n" + "".join(f"{k},{k},20,{k},500\n" for k in range(ROWS)))
    return f


@pytest.mark.parametrize("fmt, make", [("long", _long_diagonal), ("pai-minibatch", _pai_diagonal)], ids=["long", "pai-minibatch"])
def test_a_trace_naming_a_new_component_at_a_new_timestamp_each_row_is_refused_before_its_grid_is_made(tmp_path, fmt, make):
    src = tmp_path / "trace"
    src.mkdir()
    cp = _import(fmt, make(src), tmp_path)
    _refused(cp, "timestamp", "distinct timestamps", "components")


def test_a_perseus_file_naming_a_new_cluster_host_and_disk_each_row_is_imported_by_its_rows(tmp_path):
    """200,000 rows (a 4 MB file), each a cluster, host and disk of its own: no table
    of every cluster x host or host x disk (4e10 cells), and each cluster's drives
    judged against its bulk found by one sort, not a pass over every drive for each
    cluster (4e10 compares; some 10 CPU seconds after)."""
    src = tmp_path / "perseus"
    src.mkdir()
    n = 200_000
    i = np.arange(n)
    pq.write_table(pa.table({"cluster": [f"c{k}" for k in i], "host": [f"h{k}" for k in i], "disk_id": [f"d{k}" for k in i],
                             "ts": 1.8e9 + i.astype(np.float64), "throughput": np.ones(n), "latency": np.ones(n)}),
                   src / "metrics.parquet")
    cp = _import("perseus", src, tmp_path, timeout=900, cpu_s=120)
    err = cp.stderr.strip()
    assert cp.returncode in (0, 2), err[-2000:]
    assert "Traceback" not in err and "allocate" not in err, err[-2000:]


def _trace(folder: Path, dp: np.ndarray, stage: np.ndarray, step: np.ndarray) -> Path:
    n = len(dp)
    pq.write_table(pa.table({"dp_rank": dp.astype(np.int64), "stage": stage.astype(np.int64), "rank": np.arange(n, dtype=np.int64),
                             "step": step.astype(np.int64), "optype": ["forward-compute"] * n,
                             "start_ts": 1.8e9 + step.astype(np.float64), "duration": np.full(n, 0.1),
                             "seq_id": np.zeros(n, np.int64), "mc": np.zeros(n, np.int64), "gmc": np.zeros(n, np.int64),
                             "mb_id": np.zeros(n, np.int64)}), folder / "trace-X.parquet")
    return folder / "trace-X.parquet"


def test_a_straggler_trace_whose_stage_is_far_beyond_its_stages_is_refused_at_once(tmp_path):
    src = tmp_path / "st"
    src.mkdir()
    steps = np.repeat(np.arange(4), 2)
    f = _trace(src, np.zeros(8), np.tile([0, 1 << 40], 4), steps)
    cp = _import("straggler-trace", f, tmp_path, timeout=60)
    _refused(cp, "stage", str(1 << 40))


def test_a_straggler_trace_whose_every_row_is_a_new_dp_rank_is_refused_before_its_masks_are_made(tmp_path):
    src = tmp_path / "st"
    src.mkdir()
    n = 40_000
    f = _trace(src, np.arange(n), np.zeros(n), np.zeros(n))
    cp = _import("straggler-trace", f, tmp_path)
    _refused(cp, "trace", "DP ranks", "what-if")


def test_a_gzipped_long_file_whose_header_line_never_ends_is_refused_at_its_bound(tmp_path):
    """4,096 gzip members of 1 MiB of ``a`` each: a 4 MB file of one 4 GiB line, with
    no newline. Its decompression bound is 400 MB (100 times its size)."""
    src = tmp_path / "gz"
    src.mkdir()
    member = gzip.compress(b"a" * (1 << 20), 9)
    (src / "long.csv.gz").write_bytes(member * 4096)
    cp = _import("long", src / "long.csv.gz", tmp_path)
    _refused(cp, "long.csv.gz", "decompresses to more than")


def _many_components(folder: Path, group, run) -> Path:
    f = folder / "many.csv"
    f.write_text("run_id,component,peer_group,timestamp,metric,value\n"
                 + "".join(f"{run(k)},c{k},{group(k)},1.8e9,step_s,1.0\n" for k in range(COMPONENTS)))
    return f


@pytest.mark.parametrize("runs", [1, 2], ids=["one-run", "two-runs"])
def test_a_long_trace_of_many_components_in_one_peer_group_holds_the_groups_member_list_once(tmp_path, runs):
    """Each component's ``group_members`` is its group's members joined: as a string a
    row, 100,000 components of one group would be 100,000 strings of 100,000 names
    (some 70 GB; without the bound: a MemoryError under the 3 GiB limit)."""
    src = tmp_path / "trace"
    src.mkdir()
    cp = _import("long", _many_components(src, lambda k: "g", lambda k: f"r{k % runs}"), tmp_path, timeout=900, cpu_s=120)
    err = cp.stderr.strip()
    assert cp.returncode == 0 and "Traceback" not in err, err[-2000:]
    comps = pq.read_table(tmp_path / "labels" / "components.parquet")
    assert comps.num_rows == COMPONENTS and pa.types.is_dictionary(comps.schema.field("group_members").type)
    members = comps.column("group_members").combine_chunks()
    assert len(members.dictionary) == runs  # the group of each run
    assert sum(len(m.as_py().split(",")) for m in members.dictionary) == COMPONENTS


def test_a_long_trace_whose_every_component_is_its_own_peer_group_costs_its_components_not_their_square(tmp_path):
    """100,000 components, each its own peer group: each group's columns are found by
    one sort, not by a pass over every column per group (1e10 compares; without the bound: past
    the 120 CPU seconds the import may use, where it takes some 20 after)."""
    src = tmp_path / "trace"
    src.mkdir()
    cp = _import("long", _many_components(src, lambda k: f"g{k}", lambda k: "r"), tmp_path, timeout=900, cpu_s=120)
    err = cp.stderr.strip()
    assert cp.returncode == 0 and "Traceback" not in err, (cp.returncode, err[-2000:])
    comps = pq.read_table(tmp_path / "labels" / "components.parquet", columns=["component", "group_members"]).to_pandas()
    assert len(comps) == COMPONENTS and (comps["component"].astype(str) == comps["group_members"].astype(str)).all()
