"""How many bytes a Parquet file's text columns decode to, before they are decoded.

A file's footer counts a dictionary-encoded column as stored: one long value in the
dictionary that every row names is a few KB on disk and in the footer, and each row
decodes to the whole value (a 10 KB file of 200,000 rows naming one 1 MiB peer group
decodes to 200 GB). The text columns are read dictionary-encoded (the dictionary and
4 bytes a row) and the decoded size is summed from the values' lengths, a row group
at a time, stopping as soon as it passes the limit.

A text column counts whether the file's stored Arrow schema types it as text or as a
dictionary of text (pyarrow reads the latter back as a dictionary, which pandas turns
into a categorical, and ``astype(str)`` decodes every row of it). A column of a nested
type (a struct, a list, a map) is refused outright: faultlab's tables are flat, and no
footer count bounds what such a column holds (a struct around a text column that
every row names; a list of a billion values in one row).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from faultlab.errors import printable


def _is_text(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)


class NestedColumn(ValueError):
    """A Parquet file has a column of a nested type (:func:`text_over`)."""


def nested_column(schema: pa.Schema) -> str | None:
    """The first column of ``schema`` of a nested type (struct, list, map, union), or
    None."""
    return next((f.name for f in schema if pa.types.is_nested(f.type)), None)


def text_over(source, limit: int) -> bool:
    """Whether the text columns of a Parquet file decode to more than ``limit`` bytes.
    ``source``: the file as a binary file object (left open), or a callable that opens
    it as ``pq.ParquetFile`` with the keyword arguments it is given. Raises what
    pyarrow raises for a file that is not Parquet, and NestedColumn (a ValueError
    naming the column) for a column of a nested type, before any column is read."""
    def open_file(**kw) -> pq.ParquetFile:
        return source(**kw) if callable(source) else pq.ParquetFile(source, **kw)

    schema = open_file().schema_arrow
    nested = nested_column(schema)
    if nested is not None:
        raise NestedColumn(f"column {printable(nested, 80)!r} is of a nested type (struct, list or map): "
                           "faultlab's tables hold flat columns only")
    text = [f.name for f in schema if _is_text(f.type)]
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
