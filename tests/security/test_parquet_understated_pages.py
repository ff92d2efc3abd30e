"""A Parquet file whose footer understates its uncompressed sizes is refused before
its pages are decompressed.

The footer's ``total_uncompressed_size`` and ``total_byte_size`` are the file's own
to state; pyarrow allocates and decompresses each page by its page header's size, and
checks neither against the footer. A file of a few KB of zstd pages of one long value
each, its footer rewritten to state 1 byte uncompressed, passed the decoded-size bound
(``parquetbound.footer_over``) and was decoded whole (a 17 KB ``host.parquet`` of
eight 64 MiB values: 512 MiB of text, 1.9 GB of peak RSS for ``RunDir.read_table``). The footer is rewritten here with a
small Thrift compact codec, as anyone could.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faultlab import parquetbound
from faultlab.errors import BadInput
from faultlab.labeler.importers.long.read import read_long
from faultlab.parquetpages import _varint
from faultlab.report.synthetic import make_run
from faultlab.rundir import RunDir

VALUE_BYTES = 4 << 20
VALUES = 8


def _read(b: bytes, i: int, t: int):
    """A Thrift compact value of type ``t`` at ``i``: (value, next offset)."""
    if t in (1, 2):
        return t == 1, i
    if t == 3:
        return b[i], i + 1
    if t in (4, 5, 6):
        n, i = _varint(b, i)
        return (n >> 1) ^ -(n & 1), i
    if t == 7:
        return b[i:i + 8], i + 8
    if t == 8:
        n, i = _varint(b, i)
        return b[i:i + n], i + n
    if t in (9, 10):
        h = b[i]
        i += 1
        n, et = h >> 4, h & 15
        if n == 15:
            n, i = _varint(b, i)
        items = []
        for _ in range(n):
            if et in (1, 2):
                items.append(b[i] == 1)
                i += 1
            else:
                v, i = _read(b, i, et)
                items.append(v)
        return (et, items), i
    assert t == 12, t
    fields, last = [], 0
    while True:
        h = b[i]
        i += 1
        if h == 0:
            return fields, i
        fid = last + (h >> 4) if h >> 4 else None
        if fid is None:
            n, i = _varint(b, i)
            fid = (n >> 1) ^ -(n & 1)
        last = fid
        v, i = _read(b, i, h & 15)
        fields.append([fid, h & 15, v])


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        x, n = n & 0x7F, n >> 7
        out.append(x | 0x80 if n else x)
        if not n:
            return bytes(out)


def _write(t: int, v) -> bytes:
    if t == 3:
        return bytes([v])
    if t in (4, 5, 6):
        return _uvarint((v << 1) ^ (v >> 63))
    if t in (7, 8):
        return bytes(v) if t == 7 else _uvarint(len(v)) + bytes(v)
    if t in (9, 10):
        et, items = v
        head = bytes([(len(items) << 4) | et]) if len(items) < 15 else bytes([0xF0 | et]) + _uvarint(len(items))
        return head + b"".join(bytes([1 if x else 2]) if et in (1, 2) else _write(et, x) for x in items)
    out, last = bytearray(), 0
    for fid, ft, fv in v:
        d = fid - last
        out += bytes([(d << 4) | ft]) if 0 < d <= 15 else bytes([ft]) + _write(4, fid)
        last = fid
        if ft not in (1, 2):
            out += _write(ft, fv)
    return bytes(out + b"\0")


def _field(fields: list, fid: int) -> list:
    return next(f for f in fields if f[0] == fid)


def understated(data: bytes) -> bytes:
    """``data`` (a Parquet file) with every row group's ``total_byte_size`` and every
    column chunk's ``total_uncompressed_size`` stated as 1 byte."""
    n = struct.unpack("<i", data[-8:-4])[0]
    md, _ = _read(data[-8 - n:-8], 0, 12)
    for rg in _field(md, 4)[2][1]:
        _field(rg, 2)[2] = 1
        for cc in _field(rg, 1)[2][1]:
            _field(_field(cc, 3)[2], 6)[2] = 1
    footer = _write(12, md)
    return data[:-8 - n] + footer + struct.pack("<i", len(footer)) + b"PAR1"


def write_understated(table: pa.Table, path: Path) -> None:
    pq.write_table(table, path, compression="zstd", use_dictionary=False)
    path.write_bytes(understated(path.read_bytes()))


def long_values(n: int) -> list[str]:
    return ["x" * VALUE_BYTES + str(i) for i in range(n)]


def test_an_understating_footer_passes_the_footer_bound_alone(tmp_path):
    """The case the page check is for: the footer alone cannot tell."""
    p = tmp_path / "f.parquet"
    write_understated(pa.table({"node": long_values(VALUES)}), p)
    with open(p, "rb") as fh:
        held = parquetbound.Held(fh)
        assert parquetbound.footer_over(held.metadata, held.size) is None
        assert VALUES * VALUE_BYTES > 1000 * held.size


def test_a_run_table_whose_footer_understates_its_pages_is_refused(tmp_path):
    run = tmp_path / "run"
    make_run(run, ranks=2, duration_s=5, label=False)
    write_understated(pa.table({"node": long_values(VALUES), "cpu_pct": [1.0] * VALUES}), run / "host.parquet")
    with pytest.raises(BadInput) as e:
        RunDir(run).read_table("host")
    assert "host.parquet" in str(e.value) and "decompress to more than" in str(e.value) and "\n" not in str(e.value)


def test_an_imported_file_whose_footer_understates_its_pages_is_refused(tmp_path):
    p = tmp_path / "telemetry.parquet"
    write_understated(pa.table({"component": long_values(VALUES), "peer_group": ["all"] * VALUES,
                                "timestamp": [float(i) for i in range(VALUES)], "metric": ["m"] * VALUES,
                                "value": [1.0] * VALUES}), p)
    with pytest.raises(BadInput) as e:
        read_long(p)
    assert "telemetry.parquet" in str(e.value) and "decompress to more than" in str(e.value) and "\n" not in str(e.value)
