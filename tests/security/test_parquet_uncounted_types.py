"""A Parquet column whose values are bytes read as a type the text check does not count
is refused before it is decoded.

``parquetbound.text_over`` bounds what a file's text columns decode to (one 1 MiB
value that every row names costs a few KB on disk and the whole value a row decoded).
It counts a column as text only when it reads as ``string`` or ``binary`` (large, or a
dictionary of them). The file's stored Arrow schema may type the same bytes as
``string_view`` or ``binary_view``, or as an extension type over text (``arrow.json``,
``arrow.opaque``): the check passed them, uncounted, and the read decoded every row (a
1 MB file of 1,000 rows read whole to 1 GB; its rows are the file's to state). So may
the footer's own annotation: a ``BYTE_ARRAY`` column annotated as a decimal reads as
``decimal128``, and pyarrow decodes every row's bytes before it finds one too long for
a decimal (a 1 MB file of 1,000 rows naming one 1 MiB value took 1.6 GB).
"""

from __future__ import annotations

import os
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faultlab import rundir
from faultlab.errors import BadInput
from faultlab.report.synthetic import make_run
from faultlab.rundir import RunDir
from tests.security.test_parquet_understated_pages import _field, _read, _write

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


def _as_decimal(data: bytes, name: str) -> bytes:
    """``data`` (a Parquet file with no stored Arrow schema) with its column ``name``
    annotated DECIMAL(38, 0) in the footer (converted type and logical type)."""
    n = struct.unpack("<i", data[-8:-4])[0]
    md, _ = _read(data[-8 - n:-8], 0, 12)
    for el in _field(md, 2)[2][1]:
        if _field(el, 4)[2] == name.encode():
            el[:] = sorted([f for f in el if f[0] not in (6, 7, 8, 10)]
                           + [[6, 5, 5], [7, 5, 0], [8, 5, 38], [10, 12, [[5, 12, [[1, 5, 0], [2, 5, 38]]]]]])
    footer = _write(12, md)
    return data[:-8 - n] + footer + struct.pack("<i", len(footer)) + b"PAR1"


def test_a_run_table_whose_bytes_its_footer_annotates_as_a_decimal_is_refused(tmp_path):
    run = make_run(tmp_path / "run", ranks=2, duration_s=5, label=False)
    value = pa.array([b"\x01" + os.urandom(VALUE_BYTES - 1)], pa.binary())
    node = pa.DictionaryArray.from_arrays(pa.array([0] * ROWS, pa.int32()), value)
    p = run / "host.parquet"
    pq.write_table(pa.table({"node": node, "cpu_pct": [1.0] * ROWS}), p, store_schema=False)
    p.write_bytes(_as_decimal(p.read_bytes(), "node"))
    assert pq.read_schema(p).field("node").type == pa.decimal128(38, 0)
    with pytest.raises(BadInput) as e:
        RunDir(run).read_table("host")
    msg = str(e.value)
    assert "host.parquet" in msg and "'node'" in msg and "decimal128" in msg and "\n" not in msg, msg
