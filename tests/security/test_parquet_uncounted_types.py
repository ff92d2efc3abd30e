"""A Parquet column whose values are bytes read as a type the text check does not count
is refused before it is decoded.

``parquetbound.text_over`` bounds what a file's text columns decode to (one 1 MiB
value that every row names costs a few KB on disk and the whole value a row decoded).
It counts a column as text only when it reads as ``string`` or ``binary`` (large, or a
dictionary of them). The file's stored Arrow schema may type the same bytes as
``string_view`` or ``binary_view``, or as an extension type over text (``arrow.json``,
``arrow.opaque``): the check passed them, uncounted, and the read decoded every row (a
1 MB file of 1,000 rows read whole to 1 GB; its rows are the file's to state).
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faultlab import rundir
from faultlab.errors import BadInput
from faultlab.report.synthetic import make_run
from faultlab.rundir import RunDir

#: the rows naming one value, and its size: 64 MiB decoded, past the text bound set below
ROWS, VALUE_BYTES = 64, 1 << 20
TYPES = {"json": pa.json_(pa.string()), "opaque": pa.opaque(pa.binary(), "t", "v"),
         "string_view": pa.string_view(), "binary_view": pa.binary_view()}


def _column(t: pa.DataType) -> pa.Array:
    storage = t.storage_type if isinstance(t, pa.BaseExtensionType) else t
    arr = pa.array([os.urandom(VALUE_BYTES // 2).hex()] * ROWS, type=storage)
    return pa.ExtensionArray.from_storage(t, arr) if isinstance(t, pa.BaseExtensionType) else arr


def test_the_same_text_as_a_string_column_is_refused_by_the_text_bound(tmp_path, monkeypatch):
    """The bound the other types must not slip past."""
    run = make_run(tmp_path / "run", ranks=2, duration_s=5, label=False)
    pq.write_table(pa.table({"node": _column(pa.string()), "cpu_pct": [1.0] * ROWS}), run / "host.parquet")
    monkeypatch.setattr(rundir, "TABLE_TEXT_BYTES", VALUE_BYTES * ROWS // 4)
    with pytest.raises(BadInput, match="text columns decode to more than"):
        RunDir(run).read_table("host")


@pytest.mark.parametrize("kind", TYPES)
def test_a_run_table_whose_text_reads_as_another_type_is_refused(tmp_path, monkeypatch, kind):
    run = make_run(tmp_path / "run", ranks=2, duration_s=5, label=False)
    pq.write_table(pa.table({"node": _column(TYPES[kind]), "cpu_pct": [1.0] * ROWS}), run / "host.parquet")
    monkeypatch.setattr(rundir, "TABLE_TEXT_BYTES", VALUE_BYTES * ROWS // 4)
    with pytest.raises(BadInput) as e:
        RunDir(run).read_table("host")
    msg = str(e.value)
    assert "host.parquet" in msg and "'node'" in msg and "\n" not in msg, msg
