"""Root reads a Parquet footer that someone handed it only so far: at most
``parquetbound.MAX_ROW_GROUPS`` row groups (the text check reads text a row group at
a time: a file of a million one-row groups held it 50 s), at most
``parquetbound.MAX_COLUMNS`` columns (a footer of 900,000 columns and no row held
pyarrow's read over 5 minutes), and a footer of at most
``parquetbound.MAX_FOOTER_BYTES`` (pyarrow reads a footer's stated length whole
before parsing it). Each file is refused in one line naming it and the fix, from its
footer, under the same address-space limit as the other Parquet bombs.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faultlab import parquetbound
from faultlab.labeler.importers.trace.read import TRACE_COLUMNS
from faultlab.report.synthetic import make_run
from tests.helpers import ROOT, give_to_nobody
from tests.security.test_parquet_bombs import _refused

pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("prlimit"), reason="needs root (the files are nobody's) and prlimit")


def _trace_row() -> pa.Table:
    return pa.table({c: pa.array(["forward-compute" if c == "optype" else 1.0 if c in ("start_ts", "duration") else 1])
                     for c in TRACE_COLUMNS})


def _many_row_groups(real: pa.Table, path: Path) -> None:
    """``path`` holding ``real``'s first row MAX_ROW_GROUPS + 1 times, a row group each."""
    n = parquetbound.MAX_ROW_GROUPS + 1
    pq.write_table(real.slice(0, 1).take(pa.array([0] * n)), path, row_group_size=1, write_statistics=False)


def _many_columns(real: pa.Table, path: Path) -> None:
    """``path`` holding ``real``'s first row and MAX_COLUMNS more columns of one byte."""
    t = real.slice(0, 1)
    for i in range(parquetbound.MAX_COLUMNS):
        t = t.append_column(f"extra{i}", pa.array([0], pa.int8()))
    pq.write_table(t, path)


def _long_footer(real: pa.Table, path: Path) -> None:
    """``path``: ``real`` as Parquet, then its footer's length rewritten to say 1 GiB
    (the file made that long, sparse: no disk)."""
    pq.write_table(real, path)
    with open(path, "r+b") as f:
        f.truncate(1 << 30)
        f.seek(0, 2)
        f.write(struct.pack("<i", (1 << 30) - 16) + b"PAR1")


CASES = {"row-groups": (_many_row_groups, "row groups"), "columns": (_many_columns, "columns"), "footer-bytes": (_long_footer, "footer is")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_run_folders_table_whose_footer_is_larger_than_faultlab_reads_is_refused(tmp_path, case):
    make, word = CASES[case]
    run = make_run(tmp_path / "run", ranks=2, duration_s=20)
    host = run / "host.parquet"
    make(pq.read_table(host), host)
    give_to_nobody(run)
    _refused(["label", str(run)], "host.parquet", word)


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_imported_files_footer_larger_than_faultlab_reads_is_refused(tmp_path, case):
    make, word = CASES[case]
    src = tmp_path / "trace"
    src.mkdir()
    make(_trace_row(), src / "trace-x.parquet")
    give_to_nobody(src)
    _refused(["label", "--import", "straggler-trace", str(src / "trace-x.parquet"), "--out", str(tmp_path / "out")], "trace-x.parquet", word)
