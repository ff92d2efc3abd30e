"""Reads through parquetbound.Held decode in the calling thread: the page source is a
Python object, so each page Arrow decodes is a Python buffer, and a decode task left
on Arrow's thread pool may release one after the interpreter began to exit, which
aborts the process (SIGABRT, "terminate called without an active exception") after
the command's own exit code was chosen (apache/arrow#34314)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq

#: the child: a file of 8 columns read through Held each way faultlab reads one,
#: printing how many threads the process has before and after (Arrow starts its
#: thread pool's workers on the first task it is given)
CHILD = textwrap.dedent("""
    import os, sys
    from faultlab import parquetbound
    def threads():
        return len(os.listdir("/proc/self/task"))
    before = threads()
    with open(sys.argv[1], "rb") as fh:
        held = parquetbound.Held(fh)
        pf = held()
        pf.read()
        pf.read(columns=["c0", "c1", "c2"])
        pf.read_row_group(0)
        pf.read_row_groups([0, 1])
        for _ in pf.iter_batches(batch_size=1000):
            pass
        held(read_dictionary=["c0"]).read()
    print(before, threads())
""")


def test_reads_through_a_held_file_start_no_arrow_pool_thread(tmp_path):
    path = tmp_path / "t.parquet"
    cols = {f"c{i}": pa.array([str(j % 7) for j in range(20_000)]) if i % 2 == 0 else pa.array(range(20_000))
            for i in range(8)}
    pq.write_table(pa.table(cols), path, row_group_size=5_000)
    cp = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    before, after = map(int, cp.stdout.split())
    assert after == before, f"{after - before} threads started by the reads"
