"""Root never decodes a Parquet table that someone handed it far past what its file
holds: a text value every row names, hidden from the text check (a column the file's
stored Arrow schema types as a dictionary of text, or a text inside a struct), and
run-length-encoded rows that a small file states by the hundred million (a run
folder's host table, a steps file, a block of the out-of-core labeler).

Each file is a few KB to a few MB on disk and decodes to tens or hundreds of GB. Root's
real commands run under an address-space limit (``prlimit``), so a miss fails in the
test instead of filling the host, and must refuse the file in one line naming it
before it is decoded.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faultlab.datasets import manifest
from faultlab.labeler.importers.trace.read import TRACE_COLUMNS
from faultlab.report.synthetic import make_run
from tests.helpers import FL, REPO, ROOT, give_to_nobody

#: the address-space limit root's commands run under here (a bomb missed fails, the host keeps its memory)
LIMIT = ["prlimit", f"--as={3 << 30}", "--"]
#: rows of the text bombs: each names one 1 MiB value, 200 GB decoded
TEXT_ROWS = 200_000
pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("prlimit"), reason="needs root (the files are nobody's) and prlimit")

def _bomb_value(n: int) -> pa.DictionaryArray:
    """``n`` rows naming one 1 MiB text value, of random letters (about 800 KB on disk
    once dictionary-encoded): a value that compresses would make the file state more
    than the footer's ratio allows (parquetbound.DECODED_RATIO), refused before the
    text check this bomb is for."""
    return pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array([base64.b64encode(os.urandom(3 << 18)).decode()]))

def _repeat(real: pa.Table, n: int) -> dict:
    """``real``'s columns over ``n`` rows, each its first row's value (text as a
    dictionary of that one value)."""
    cols = {}
    for f in real.schema:
        v = real.column(f.name)[0].as_py()
        cols[f.name] = (pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array([v]))
                        if pa.types.is_string(f.type) else pa.array([v] * n, f.type))
    return cols

def _typed_bomb(real: pa.Table) -> pa.Table:
    """``real``'s columns over TEXT_ROWS rows, its peer group (or metric) the 1 MiB
    value, written with the Arrow schema stored: pyarrow reads that column back as a
    dictionary, typed so."""
    cols = _repeat(real, TEXT_ROWS)
    cols["peer_group" if "peer_group" in cols else "metric"] = _bomb_value(TEXT_ROWS)
    return pa.table(cols)

def _nested_bomb(real: pa.Table) -> pa.Table:
    """``real``'s columns over TEXT_ROWS rows and one more column, a struct around
    the 1 MiB value every row names."""
    cols = _repeat(real, TEXT_ROWS)
    cols["extra"] = pa.StructArray.from_arrays([_bomb_value(TEXT_ROWS)], ["s"])
    return pa.table(cols)

def _write(table: pa.Table, path: Path, *, store_schema: bool) -> None:
    pq.write_table(table, path, store_schema=store_schema, compression="zstd", dictionary_pagesize_limit=1 << 30)
    assert path.stat().st_size < 2 << 20

def _dataset(tmp_path: Path, make) -> tuple[Path, str]:
    """A copy of faultlab-sw-v1 whose first test run's steps part is ``make(real)``, its
    manifest rewritten to match (as the dataset's owner may), all of it nobody's."""
    ds = tmp_path / "ds"
    shutil.copytree(REPO / "datasets" / "faultlab-sw-v1", ds)
    rid = json.loads((ds / "splits.json").read_text())["test"][0]
    part = ds / "data" / "steps" / f"run={rid}" / "part-0.parquet"
    _write(make(pq.read_table(part)), part, store_schema=make is _typed_bomb)
    (ds / manifest.NAME).write_text(manifest.text({f.relative_to(ds).as_posix(): manifest.sha256(f, ds) for f in manifest._files(ds)}))
    give_to_nobody(ds)
    return ds, f"run={rid}/part-0.parquet"

def _run(tmp_path: Path, table: str, make) -> Path:
    """A synthetic run folder, nobody's, whose ``table``.parquet is ``make(real)``."""
    run = make_run(tmp_path / "run", ranks=2, duration_s=20)
    p = run / f"{table}.parquet"
    _write(make(pq.read_table(p)), p, store_schema=make is _typed_bomb)
    give_to_nobody(run)
    return run

def _word(make) -> str:
    """The words of a text bomb's own refusal: a failed malloc names the file too, and
    the footer's ratio (parquetbound.DECODED_RATIO) says "decoded"."""
    return "text columns decode" if make is _typed_bomb else "nested"

def _refused(args: list[str], name: str, *words: str, timeout: float = 180) -> None:
    cp = subprocess.run([*LIMIT, *FL, *args], capture_output=True, text=True, timeout=timeout)
    err = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(err) == 1 and name in err[0] and all(w in err[0] for w in words), (cp.returncode, cp.stderr[-1500:])

@pytest.mark.parametrize("make", [_typed_bomb, _nested_bomb], ids=["dictionary-typed", "nested"])
def test_a_datasets_dictionary_typed_or_nested_text_bomb_is_refused_before_it_is_decoded(tmp_path, make):
    ds, part = _dataset(tmp_path, make)
    _refused(["score", "--detector", "peer-median", "--boot", "0", "--dataset", str(ds)], part, _word(make))

@pytest.mark.parametrize("make", [_typed_bomb, _nested_bomb], ids=["dictionary-typed", "nested"])
@pytest.mark.parametrize("cmd", ["score", "report"])
def test_a_run_folders_dictionary_typed_or_nested_text_bomb_is_refused_before_it_is_decoded(tmp_path, make, cmd):
    run = _run(tmp_path, "steps", make)
    args = {"score": ["score", "--detector", "peer-median", "--boot", "0", "--run", str(run)],
            "report": ["report", str(run), "--out", str(tmp_path / "page.html")]}[cmd]
    _refused(args, "steps.parquet", _word(make))

@pytest.mark.parametrize("make", [_typed_bomb, _nested_bomb], ids=["dictionary-typed", "nested"])
def test_a_host_tables_dictionary_typed_or_nested_text_bomb_is_refused_by_the_labeler(tmp_path, make):
    run = _run(tmp_path, "host", make)
    _refused(["label", str(run)], "host.parquet", _word(make))

def test_the_labelers_whole_read_of_a_steps_table_refuses_a_nested_text_bomb(tmp_path):
    """A peer group that is a struct around the 1 MiB value: the lean read passes over
    a column that is not text and reads the table whole, where the value would decode
    for every row."""
    def make(real: pa.Table) -> pa.Table:
        cols = _repeat(real, TEXT_ROWS)
        cols["peer_group"] = pa.StructArray.from_arrays([_bomb_value(TEXT_ROWS)], ["s"])
        return pa.table(cols)
    run = make_run(tmp_path / "run", ranks=2, duration_s=20, label=False)
    _write(make(pq.read_table(run / "steps.parquet")), run / "steps.parquet", store_schema=False)
    give_to_nobody(run)
    _refused(["label", str(run)], "steps.parquet", "nested")

#: values of the delta-encoded text: 4 GiB decoded, past the address-space limit
DELTA_VALUES = 4096

def test_a_host_tables_delta_encoded_text_is_refused_before_it_is_decoded(tmp_path):
    """A text column written DELTA_BYTE_ARRAY, each value the one before (its whole
    length a shared prefix): 4,096 values of 1 MiB cost 4 MB on disk and their pages
    state only those bytes. Refused today by pyarrow, which cannot read such a column
    dictionary-encoded as the text check does; a pyarrow that could must still have it
    refused by the text bound, before 4 GiB is decoded (a read past the address-space
    limit fails this test: its error is neither)."""
    run = make_run(tmp_path / "run", ranks=2, duration_s=20)
    host = run / "host.parquet"
    real = pq.read_table(host)
    data = os.urandom(1 << 20)
    views = np.zeros(DELTA_VALUES, dtype=[("len", "<i4"), ("prefix", "S4"), ("buf", "<i4"), ("off", "<i4")])
    views["len"], views["prefix"] = len(data), data[:4]
    node = pa.Array.from_buffers(pa.binary_view(), DELTA_VALUES, [None, pa.py_buffer(views.tobytes()), pa.py_buffer(data)])
    cols = {f.name: pa.array([real.column(f.name)[0].as_py()] * DELTA_VALUES, f.type) for f in real.schema}
    cols["node"] = node
    pq.write_table(pa.table(cols), host, use_dictionary=False, column_encoding={"node": "DELTA_BYTE_ARRAY"}, store_schema=False)
    assert host.stat().st_size < 8 << 20
    give_to_nobody(run)
    cp = subprocess.run([*LIMIT, *FL, "label", str(run)], capture_output=True, text=True, timeout=180)
    err = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(err) == 1 and "host.parquet" in err[0], (cp.returncode, cp.stderr[-1500:])
    assert "DeltaByteArrayDecoder" in err[0] or "text columns decode" in err[0], err[0]

def _rle_rows(real: pa.Table, path: Path, n: int, groups: int = 1, text: str | None = "x") -> None:
    """``path`` holding ``real``'s columns over ``n * groups`` rows of its first row's
    numbers and ``text`` (None: its first row's text, so that no check of the run id or
    the text refuses the file first), written as ``groups`` row groups of ``n`` (numbers
    and text alike dictionary-encoded, run-length: a few MB on disk)."""
    cols = {}
    idx = pa.repeat(pa.scalar(0, pa.int8()), n)
    for f in real.schema:
        v = text if text is not None and pa.types.is_string(f.type) else real.column(f.name)[0].as_py()
        if v is None:  # pyarrow writes no dictionary of a null value
            v = "" if pa.types.is_string(f.type) else 0
        cols[f.name] = pa.DictionaryArray.from_arrays(idx, pa.array([v], f.type))
    t = pa.table(cols)
    with pq.ParquetWriter(path, t.schema, store_schema=False, compression="zstd") as w:
        for _ in range(groups):
            w.write_table(t, row_group_size=n)
    assert path.stat().st_size < 16 << 20

def test_a_run_folders_host_table_of_countless_rows_is_refused_from_its_footer(tmp_path):
    """host.parquet of 2**28 rows of one sample (a few MB; 4 text and number columns
    decode to some 9 GB): root's label refuses it from its footer."""
    run = make_run(tmp_path / "run", ranks=2, duration_s=20)
    host = run / "host.parquet"
    _rle_rows(pq.read_table(host), host, 1 << 24, groups=16)
    give_to_nobody(run)
    _refused(["label", str(run)], "host.parquet", "states")

def test_a_steps_file_of_countless_rows_is_refused_from_its_footer(tmp_path):
    """steps.parquet of 2**28 rows of one rank-step: root's score refuses it from its
    footer before any column is decoded."""
    run = make_run(tmp_path / "run", ranks=2, duration_s=20)
    steps = run / "steps.parquet"
    _rle_rows(pq.read_table(steps), steps, 1 << 24, groups=16)
    give_to_nobody(run)
    _refused(["score", "--detector", "peer-median", "--boot", "0", "--run", str(run)], "steps.parquet", "states")

def _varied_rows(real: pa.Table, path: Path, n: int) -> None:
    """``path`` holding ``real``'s columns over ``n`` rows of its first row's values,
    but ``step``, one of 1024 values at random (10 bits a row that no codec shrinks):
    the file states under parquetbound.DECODED_RATIO times its size, as an honest one."""
    cols = {}
    idx = pa.repeat(pa.scalar(0, pa.int8()), n)
    for f in real.schema:
        v = "x" if pa.types.is_string(f.type) else real.column(f.name)[0].as_py()
        cols[f.name] = pa.DictionaryArray.from_arrays(idx, pa.array([0 if v is None else v], f.type))
    rng = np.random.default_rng(0)
    cols["step"] = pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, 1024, n, dtype=np.int16)), pa.array(np.arange(1024), pa.int64()))
    pq.write_table(pa.table(cols), path, store_schema=False, compression="zstd")

def test_the_out_of_core_labeler_refuses_a_block_larger_than_a_worker_reads(tmp_path):
    """A step block of 9 part files of 2**21 rows each (each within a file's bounds,
    its ratio included): every worker would read 2**24 + 2**21 rows at once. Root's
    label --out-of-core refuses the block from its files' footers before a worker
    reads it."""
    pytest.importorskip("distributed", reason="dask.distributed is the 'scale' extra: pip install -e '.[scale]'")
    run = make_run(tmp_path / "run", ranks=2, duration_s=20, label=False)
    real = pq.read_table(run / "steps.parquet")
    (run / "steps.parquet").unlink()
    block = run / "steps" / "step_block=0"
    block.mkdir(parents=True)
    for i in range(9):
        _varied_rows(real, block / f"part-{i}.parquet", 1 << 21)
    give_to_nobody(run)
    _refused(["label", "--out-of-core", str(run)], "step_block=0", "rank-steps", timeout=300)

def _trace_bomb() -> pa.Table:
    """A StragglerAnalysis trace of TEXT_ROWS operations whose ``optype`` is the 1 MiB value."""
    cols = {c: pa.array([0] * TEXT_ROWS, pa.float64() if c in ("start_ts", "duration") else pa.int64()) for c in TRACE_COLUMNS}
    cols["optype"] = _bomb_value(TEXT_ROWS)
    return pa.table(cols)

def _long_bomb() -> pa.Table:
    """A long-format telemetry file of TEXT_ROWS samples whose ``metric`` is the 1 MiB value."""
    def one(v: str) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(pa.array([0] * TEXT_ROWS, pa.int32()), pa.array([v]))
    return pa.table({"component": one("rank:0"), "peer_group": one("dp"), "timestamp": pa.array([0.0] * TEXT_ROWS),
                     "metric": _bomb_value(TEXT_ROWS), "value": pa.array([1.0] * TEXT_ROWS)})

@pytest.mark.parametrize("fmt,name,make", [("straggler-trace", "trace-x.parquet", _trace_bomb), ("long", "telemetry.parquet", _long_bomb)],
                         ids=["straggler-trace", "long"])
def test_an_imported_files_text_bomb_is_refused_before_it_is_decoded(tmp_path, fmt, name, make):
    """A public trace's Parquet file is bounded by its size (16 GiB), not by what it
    decodes to: root's label --import refuses the bomb in one line naming the file."""
    src = tmp_path / "trace"
    src.mkdir()
    _write(make(), src / name, store_schema=False)
    give_to_nobody(src)
    _refused(["label", "--import", fmt, str(src / name), "--out", str(tmp_path / "out")], name, "text columns decode")

def test_an_imported_gzipped_csv_is_decompressed_only_so_far(tmp_path):
    """A long-format .csv.gz of 4,000 gzip members, each one line repeated (4 MB on
    disk, 1 GB of CSV): the file's size bound (16 GiB) did not bound what it
    decompresses to, and root's label --import parsed all of it. It is refused once
    100 times its size came out, in one line naming the file."""
    src = tmp_path / "trace"
    src.mkdir()
    member = gzip.compress(b"rank:0,dp,1700000000.0,step_s,1.0\n" * 7000, compresslevel=9)
    with open(src / "telemetry.csv.gz", "wb") as f:
        f.write(gzip.compress(b"component,peer_group,timestamp,metric,value\n"))
        for _ in range(4000):
            f.write(member)
    assert (src / "telemetry.csv.gz").stat().st_size < 8 << 20
    give_to_nobody(src)
    _refused(["label", "--import", "long", str(src / "telemetry.csv.gz"), "--out", str(tmp_path / "out")], "telemetry.csv.gz", "decompresses")
