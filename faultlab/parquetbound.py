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

A file's numbers are bounded by its footer before anything is decoded
(:func:`footer_over`): the decoded size it states (8 bytes a value of each column read,
or its row groups' uncompressed size when larger) may be at most :data:`DECODED_RATIO`
times the file's size on disk. Run-length (or dictionary) encoded rows of one repeated
number cost a few bytes a million rows, so a few MB state billions of rows; the
ratio is what bounds a file that is within every absolute bound (a 16 GiB import, each
of a steps table's many files), whatever its reader.
"""

from __future__ import annotations

import functools
import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from faultlab import parquetpages
from faultlab.errors import printable


def _is_text(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)


class NestedColumn(ValueError):
    """A Parquet file has a column of a nested type (:func:`text_over`)."""


class UncountedColumn(ValueError):
    """A Parquet file has a column whose bytes read as a type :func:`text_over` does
    not count (:func:`uncounted_column`)."""


class FooterOver(ValueError):
    """A Parquet file's footer is larger than any table faultlab reads has
    (:func:`open_parquet`)."""


#: the most row groups a file may have, and the longest list pyarrow reads from a footer
#: (its ``thrift_container_size_limit``, 1,000,000 by default): :func:`text_over` reads
#: a row group at a time, and a file of a million one-row groups (235 MB) held it 50 s
#: (SCHED_IDLE), after 1.9 s parsing its 134 MB footer. faultlab writes at most 32 (2**25
#: rows a file, 2**20 a group), the public traces 1 and 4; 16 GiB (an import's bound) of
#: 1 MiB row groups is 16,384
MAX_ROW_GROUPS = 1 << 14
#: the most (leaf) columns a file may have: faultlab's tables have at most 12, the public
#: traces 11; a footer of 900,000 columns (12 MB, no row) held pyarrow's read of no rows
#: over 5 minutes, and 100,000 columns 5 s and 554 MB
MAX_COLUMNS = 1 << 10
#: the largest footer read: faultlab's are a few KB; 16,384 row groups of a dozen
#: columns with their statistics some 30 MB. A footer's length is the file's to state,
#: and pyarrow reads all of it before parsing any
MAX_FOOTER_BYTES = 64 << 20
_FIX = "rewrite it with fewer, larger row groups (pyarrow's default: 2**20 rows) and only the columns faultlab reads"


def open_parquet(fh, cls=pq.ParquetFile, **kw) -> pq.ParquetFile:
    """``cls(fh, **kw)`` (a ``pq.ParquetFile``) of the binary file object ``fh``, its
    footer bounded before pyarrow parses it: at most :data:`MAX_FOOTER_BYTES`, lists of
    at most :data:`MAX_ROW_GROUPS` (row groups, schema elements), and at most
    :data:`MAX_COLUMNS` columns, checked before the schema is converted. Raises
    FooterOver (a ValueError, one line with its fix) past them, and what pyarrow raises
    for a file that is not Parquet."""
    size = os.fstat(fh.fileno()).st_size
    if size >= 12:
        tail = os.pread(fh.fileno(), 8, size - 8)
        stated = int.from_bytes(tail[:4], "little")
        if tail[4:] == b"PAR1" and stated > MAX_FOOTER_BYTES:
            raise FooterOver(f"its footer is {stated} bytes, more than {MAX_FOOTER_BYTES}: {_FIX}")
    try:
        pf = cls(fh, thrift_container_size_limit=MAX_ROW_GROUPS, **kw)
    except OSError as e:
        if "Exceeded size limit" not in str(e):
            raise
        raise FooterOver(f"its footer lists more than {MAX_ROW_GROUPS} row groups or columns "
                         f"(at most {MAX_ROW_GROUPS} row groups of at most {MAX_COLUMNS} columns): {_FIX}") from None
    if pf.metadata.num_columns > MAX_COLUMNS:
        raise FooterOver(f"it has {pf.metadata.num_columns} columns, more than {MAX_COLUMNS}: {_FIX}")
    return pf


#: the ParquetFile methods that decode, each taking ``use_threads``
_DECODING_READS = ("read", "read_row_group", "read_row_groups", "iter_batches")


@functools.cache
def _in_calling_thread(cls: type) -> type:
    """``cls`` (a ``pq.ParquetFile`` class) whose reads decode in the calling thread
    (``use_threads=False``). Pages serves every page as a Python buffer: a decode task on
    Arrow's thread pool releases it after the read returned, and when the interpreter
    has begun to exit by then (a command that reads, then refuses at once) that release
    aborts the process (SIGABRT, apache/arrow#34314) after its exit code was chosen.
    Each chunk read takes the GIL anyway, so the pool gains little here."""
    def forced(name: str):
        base = getattr(cls, name)

        def read(self, *args, **kw):
            kw["use_threads"] = False
            return base(self, *args, **kw)
        read.__name__ = read.__qualname__ = name
        read.__doc__ = base.__doc__
        return read
    return type(cls.__name__, (cls,), {"__module__": cls.__module__, **{n: forced(n) for n in _DECODING_READS}})


class Held:
    """One Parquet file held open (the binary file ``fh``, opened by the caller with no
    link followed), read through one descriptor and one footer: the footer is parsed
    once, bounded (:func:`open_parquet`), and every ParquetFile of the file made from
    it (``held(**kw)``, keyword arguments as ``pq.ParquetFile``'s) reads its column
    chunks through :class:`faultlab.parquetpages.Pages`. So the checks made on the
    footer and by :func:`text_over` hold for what is read: a file swapped at its path
    after the check is not read (the descriptor is the checked file's), and one
    rewritten in place is refused when a chunk read twice changed, or when its pages
    decompress to more than :data:`DECODED_RATIO` times its size, whatever its footer
    states. Raises what :func:`open_parquet` raises, and UncountedColumn (a ValueError,
    one line naming the column) for a column :func:`uncounted_column` refuses."""

    def __init__(self, fh):
        self.fh = fh
        self.size = os.fstat(fh.fileno()).st_size
        self.pages = parquetpages.Pages(fh)
        pf = open_parquet(self.pages)
        self.metadata = pf.metadata
        self.schema_arrow = pf.schema_arrow
        why = uncounted_column(self.metadata, self.schema_arrow)
        if why is not None:  # before any column is decoded: text_over would pass it uncounted
            raise UncountedColumn(why)
        self.pages.arm(self.metadata, DECODED_RATIO * max(self.size, 1),
                       remember={f.name for f in self.schema_arrow if _is_text(f.type)})

    def __call__(self, cls=pq.ParquetFile, **kw) -> pq.ParquetFile:
        # one range read a column chunk (no pre-buffering, which coalesces ranges), as Pages checks them
        return _in_calling_thread(cls)(self.pages, metadata=self.metadata, pre_buffer=False, **kw)

    def close(self) -> None:
        self.fh.close()


def uncounted_column(md: pq.FileMetaData, schema: pa.Schema) -> str | None:
    """Why a column of the file whose footer is ``md`` (read as ``schema``) is refused
    for a type whose decoded size no check counts, or None: a view of text
    (``string_view``, ``binary_view``) or an extension type (its storage is decoded;
    ``arrow.json`` and ``arrow.opaque`` store text), also as a dictionary's values; and
    any other type over variable-length bytes (``BYTE_ARRAY``: a decimal). A file's
    stored Arrow schema, or its footer's annotation, chooses the type its bytes read as,
    and :func:`text_over` counts only ``string`` and ``binary``: one 1 MiB value that
    every row names, typed so, passed it and was decoded whole (a decimal's bytes are
    decoded for every row before any is found too long for one)."""
    for f in schema:
        t = f.type.value_type if pa.types.is_dictionary(f.type) else f.type
        if isinstance(t, pa.BaseExtensionType) or pa.types.is_string_view(t) or pa.types.is_binary_view(t):
            return _uncounted(f)
    # a flat file's i-th column is its i-th field (footer_over, which every reader runs, refuses a nested one)
    if nested_column(schema) is None and md.num_columns == len(schema):
        for i, f in enumerate(schema):
            if md.schema.column(i).physical_type == "BYTE_ARRAY" and not _is_text(f.type):
                return _uncounted(f)
    return None


def _uncounted(f: pa.Field) -> str:
    return (f"column {printable(f.name, 80)!r} is of type {printable(str(f.type), 80)}, whose decoded size no check "
            "counts: faultlab's tables hold text as string or binary")


def nested_column(schema: pa.Schema) -> str | None:
    """The first column of ``schema`` of a nested type (struct, list, map, union), or
    None."""
    return next((f.name for f in schema if pa.types.is_nested(f.type)), None)


def _nested(schema: pa.Schema) -> str | None:
    """Why ``schema`` is refused for a column of a nested type, or None."""
    nested = nested_column(schema)
    if nested is None:
        return None
    return f"column {printable(nested, 80)!r} is of a nested type (struct, list or map): faultlab's tables hold flat columns only"


def text_over(held: Held, limit: int) -> bool:
    """Whether the text columns of the Parquet file ``held`` decode to more than
    ``limit`` bytes, read through its own footer and pages (:class:`Held`: the bytes
    counted here are the ones a later read of it decodes). Raises what pyarrow raises
    for a file that is not Parquet, PagesOver (a ValueError) for pages past the file's
    bound, and NestedColumn (a ValueError naming the column) for a column of a nested
    type, before any column is read."""
    schema = held.schema_arrow
    why = _nested(schema)
    if why is not None:
        raise NestedColumn(why)
    text = [f.name for f in schema if _is_text(f.type)]
    if not text:
        return False
    probe = held(read_dictionary=text)
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


#: the most a Parquet file may state it decodes to, times its size on disk
#: (:func:`footer_over`). Measured with :func:`decoded_bytes`: the public traces 7.7
#: (StragglerAnalysis ST) and 5.2 (Perseus cluster_A); the published datasets' part
#: files at most 15 (a host table; steps at most 3.4); a synthetic run's steps files
#: (faultlab.synthrun) 4.6; a host table of a run 1000 times as long whose every sample
#: repeats exactly (the most an honest table of faultlab's compresses) 41 with snappy,
#: 50 with zstd. 100 keeps twice that, as gzip's bound does
#: (labeler.importers.common.GZIP_RATIO); a few MB of run-length-encoded rows state
#: thousands of times their size.
DECODED_RATIO = 100
#: bytes a value is counted as decoded to: a float64, int64 or timestamp, a pandas
#: text's pointer or an Arrow text's offset and dictionary index (the text itself is
#: bounded by :func:`text_over`); a fixed-size binary its own width
VALUE_BYTES = 8


def decoded_bytes(md: pq.FileMetaData, columns=None) -> int:
    """The decoded size the footer ``md`` states for ``columns`` (top-level column
    names; all when None): the larger of :data:`VALUE_BYTES` (or a fixed-size value's
    width) a row of each of those leaf columns and the row groups' uncompressed size."""
    want = None if columns is None else set(columns)
    width = 0
    for i in range(md.num_columns):
        c = md.schema.column(i)
        if want is not None and c.path.split(".", 1)[0] not in want and c.path not in want:
            continue
        width += max(VALUE_BYTES, c.length if c.physical_type == "FIXED_LEN_BYTE_ARRAY" else 0)
    stated = sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))
    return max(md.num_rows * width, stated)


def footer_over(md: pq.FileMetaData, file_bytes: int, max_rows: int | None = None, max_bytes: int | None = None,
                columns=None) -> str | None:
    """Why the file of ``file_bytes`` bytes whose footer is ``md`` is more than a reader
    of it holds: it states more than ``max_rows`` rows, more than ``max_bytes`` decoded
    bytes, or more than :data:`DECODED_RATIO` times its size (:func:`decoded_bytes` of
    the ``columns`` read: a few MB of run-length-encoded numbers decode to GBs). None
    when it is within all three, and refuses a column of a nested type first
    (:func:`nested_column`: no footer count bounds what it holds)."""
    why = _nested(md.schema.to_arrow_schema())
    if why is not None:
        return why
    size = decoded_bytes(md, columns)
    if (max_rows is not None and md.num_rows > max_rows) or (max_bytes is not None and size > max_bytes):
        bounds = " and ".join(f"{n} {what}" for n, what in ((max_rows, "rows"), (max_bytes, "bytes")) if n is not None)
        return f"it states {md.num_rows} rows, about {size} bytes decoded (at most {bounds})"
    if size > DECODED_RATIO * file_bytes:
        return (f"it states {md.num_rows} rows, about {size} bytes decoded, more than {DECODED_RATIO} times its "
                f"{file_bytes} bytes on disk (run-length-encoded rows)")
    return None
