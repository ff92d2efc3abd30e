"""How many bytes a Parquet file's text columns decode to, before they are decoded.

A file's footer counts a dictionary-encoded column as stored: one long value in the
dictionary that every row names is a few KB on disk and in the footer, and each row
decodes to the whole value (a 10 KB file of 200,000 rows naming one 1 MiB peer group
decodes to 200 GB). The text columns are read dictionary-encoded (the dictionary and
4 bytes a row) and the decoded size is summed from the values' lengths, a row group
at a time, stopping as soon as it passes the limit.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)


def text_over(source, limit: int) -> bool:
    """Whether the text columns of a Parquet file decode to more than ``limit`` bytes.
    ``source``: the file as a binary file object (left open), or a callable that opens
    it as ``pq.ParquetFile`` with the keyword arguments it is given. Raises what
    pyarrow raises for a file that is not Parquet."""
    def open_file(**kw) -> pq.ParquetFile:
        return source(**kw) if callable(source) else pq.ParquetFile(source, **kw)

    text = [f.name for f in open_file().schema_arrow if _is_text(f.type)]
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
