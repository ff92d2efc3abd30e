"""How many bytes a Parquet file's text columns decode to, before they are decoded.

A file's footer counts a dictionary-encoded column as stored: one long value in the
dictionary that every row names is a few KB on disk and in the footer, and each row
decodes to the whole value (a 10 KB file of 200,000 rows naming one 1 MiB peer group
decodes to 200 GB). The text columns are read dictionary-encoded (the dictionary and
4 bytes a row) and the decoded size is summed from the values' lengths, a row group
at a time, stopping as soon as it passes the limit.

A text column counts whether the file's stored Arrow schema types it as text or as a
dictionary of text (pyarrow reads the latter back as a dictionary, which pandas turns
into a categorical, and ``astype(str)`` decodes every row of it). A column of any
other type but true/false, numbers, times and decimals (each a few bytes a row, as a
footer counts them) is refused outright: no footer count bounds what a struct, a
list or a map holds (a struct around a text column that every row names; a list of
a billion values in one row), a fixed-size binary value may be a MiB that every row
repeats, and an extension type (``arrow.json``) hides text or a list from both
checks. faultlab's tables are flat columns of text, numbers and true/false.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from faultlab.errors import printable


class UnboundedColumn(ValueError):
    """A Parquet file has a column of a type whose decoded size neither its footer nor
    its dictionary bounds (:func:`text_over`)."""


def _values(t: pa.DataType) -> pa.DataType:
    """``t``, or the type of a dictionary's values."""
    return t.value_type if pa.types.is_dictionary(t) else t


def _is_text(t: pa.DataType) -> bool:
    t = _values(t)
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _bounded(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` decodes to what :func:`text_over` (text) or a
    footer's row count (a few bytes a value) bounds."""
    v = _values(t)
    return _is_text(v) or any(is_(v) for is_ in (pa.types.is_null, pa.types.is_boolean, pa.types.is_integer, pa.types.is_floating,
                                                  pa.types.is_temporal, pa.types.is_decimal))


def unbounded_column(schema: pa.Schema, columns=None) -> pa.Field | None:
    """The first field of ``schema`` (of the names ``columns``; all when None) of a type
    :func:`_bounded` refuses: nested (struct, list, map, union), fixed-size binary, a
    view, an extension type. None when there is none."""
    return next((f for f in schema if (columns is None or f.name in columns) and not _bounded(f.type)), None)


def text_over(source, limit: int, columns=None) -> bool:
    """Whether the text columns of a Parquet file (of the names ``columns``; all when
    None: every column that is read) decode to more than ``limit`` bytes.
    ``source``: the file as a binary file object (left open), or a callable that opens
    it as ``pq.ParquetFile`` with the keyword arguments it is given. Raises what
    pyarrow raises for a file that is not Parquet, and UnboundedColumn (a ValueError
    naming the column) for a column of a type no count bounds
    (:func:`unbounded_column`), before any column is read."""
    def open_file(**kw) -> pq.ParquetFile:
        return source(**kw) if callable(source) else pq.ParquetFile(source, **kw)

    schema = open_file().schema_arrow
    bad = unbounded_column(schema, columns)
    if bad is not None:
        raise UnboundedColumn(f"column {printable(bad.name, 80)!r} is of type {printable(str(bad.type), 80)} (nested, fixed-size binary or "
                              "an extension type): faultlab reads only text, numbers, times and true/false, whose decoded size "
                              "a file's footer and dictionary bound")
    text = [f.name for f in schema if (columns is None or f.name in columns) and _is_text(f.type)]
    if not text:
        return False
    probe = open_file(read_dictionary=text)
    total = 0
    for i in range(probe.num_row_groups):
        # one thread: a refusal leaves no pool of reader threads to end at exit
        for col in probe.read_row_group(i, columns=text, use_threads=False).columns:
            for chunk in col.chunks:
                if pa.types.is_dictionary(chunk.type):
                    total += pc.sum(pc.take(pc.binary_length(chunk.dictionary), chunk.indices)).as_py() or 0
                else:
                    total += chunk.nbytes
        if total > limit:
            return True
    return False


def footer_over(md: pq.FileMetaData, max_rows: int, max_bytes: int) -> str | None:
    """Why the file whose footer is ``md`` is more than a reader of it holds: it states
    more than ``max_rows`` rows, or more than ``max_bytes`` decoded bytes (the larger of
    its row groups' uncompressed size and 8 bytes a value: a few MB of run-length-encoded
    numbers decode to GBs). None when it is within both."""
    size = max(sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups)), md.num_rows * md.num_columns * 8)
    if md.num_rows > max_rows or size > max_bytes:
        return f"it states {md.num_rows} rows, about {size} bytes decoded (at most {max_rows} rows and {max_bytes} bytes)"
    return None
