"""The column chunks pyarrow reads from a Parquet file another user owns, checked as
they are served.

A footer states how large a file's pages decode, but the pages say it for themselves:
a page header's ``uncompressed_page_size`` is what pyarrow allocates and decompresses
into, whatever the footer's ``total_uncompressed_size`` claims. A 17 KB file whose
footer states 64 bytes decoded held eight zstd pages of 64 MiB each: as a run's
``host.parquet``, its check and read decoded 512 MiB of text, 1.9 GB of peak RSS. And the file's owner may rewrite it between root's checks and its
read. :class:`Pages` is the one file object every reader of such a file goes through
(:class:`faultlab.parquetbound.Held`): it serves a column chunk only after reading the
page headers in the very bytes it serves and counting their decompressed sizes against
the file's bound, and it serves a chunk read twice (the text check's dictionary read,
then the read itself) only when its bytes are the ones served before.
"""

from __future__ import annotations

import hashlib
import io
import os

import pyarrow.parquet as pq

_DATA_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 2, 3


class PagesOver(ValueError):
    """A Parquet file's pages decode to more than its bound, or are not what its
    footer or an earlier read of them said (:class:`Pages`)."""


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i
        if shift > 63:
            raise PagesOver("a page header has a number of more than 64 bits")


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _skip(buf: bytes, i: int, t: int, depth: int) -> int:
    """The offset after a Thrift compact value of type ``t`` at ``i``."""
    if depth > 32:
        raise PagesOver("a page header is nested more than 32 deep")
    if t in (1, 2):
        return i
    if t == 3:
        return i + 1
    if t in (4, 5, 6):
        return _varint(buf, i)[1]
    if t == 7:
        return i + 8
    if t == 8:
        n, i = _varint(buf, i)
        return i + n
    if t in (9, 10):
        h = buf[i]
        i += 1
        n, et = h >> 4, h & 15
        if n == 15:
            n, i = _varint(buf, i)
        for _ in range(n):
            i = i + 1 if et in (1, 2) else _skip(buf, i, et, depth + 1)
            if i > len(buf):
                raise IndexError(i)
        return i
    if t == 11:
        n, i = _varint(buf, i)
        if n:
            kv = buf[i]
            i += 1
            for _ in range(n):  # a map's items as a list's: a boolean a byte, and no further than the buffer
                for et in (kv >> 4, kv & 15):
                    i = i + 1 if et in (1, 2) else _skip(buf, i, et, depth + 1)
                if i > len(buf):
                    raise IndexError(i)
        return i
    if t == 12:
        return _struct(buf, i, depth + 1, {})[1]
    raise PagesOver(f"a page header has a value of unknown type {t}")


def _struct(buf: bytes, i: int, depth: int, want: dict) -> tuple[dict, int]:
    """The integer fields of the struct at ``i`` whose ids ``want`` names (a nested
    struct's: ``want[id]`` is its own ``want``), and the offset after it."""
    got, last = {}, 0
    while True:
        h = buf[i]
        i += 1
        if h == 0:
            return got, i
        delta, t = h >> 4, h & 15
        if delta:
            fid = last + delta
        else:
            n, i = _varint(buf, i)
            fid = _zigzag(n)
        last = fid
        if fid in want and want[fid] is None and t in (5, 6):  # a number where one is wanted
            n, i = _varint(buf, i)
            got[fid] = _zigzag(n)
        elif fid in want and want[fid] is not None and t == 12:  # a struct where one is wanted; else skipped as unknown
            got[fid], i = _struct(buf, i, depth + 1, want[fid])
        else:
            i = _skip(buf, i, t, depth)


#: PageHeader: 1 type, 2 uncompressed_page_size, 3 compressed_page_size, and the
#: num_values (field 1) of 5 data_page_header and 8 data_page_header_v2
_HEADER = {1: None, 2: None, 3: None, 5: {1: None}, 8: {1: None}}


def page_bytes(chunk: bytes, num_values: int) -> int:
    """The bytes the pages of one column chunk decompress to, read from their headers
    up to the page that completes the chunk's ``num_values`` (where pyarrow stops).
    Raises PagesOver for a header that cannot be read or states a negative size."""
    i = total = values = 0
    while values < num_values and i < len(chunk):
        try:
            h, i = _struct(chunk, i, 0, _HEADER)
        except (IndexError, RecursionError):
            raise PagesOver("a page header runs past its column chunk") from None
        size, stored = h.get(2, -1), h.get(3, -1)
        if size < 0 or stored < 0:
            raise PagesOver("a page header states no size, or a negative one")
        total += size
        if h.get(1) in (_DATA_PAGE, _DATA_PAGE_V2):
            values += max(0, h.get(5 if h.get(1) == _DATA_PAGE else 8, {}).get(1, 0))
        i += stored
    return total


class Pages(io.RawIOBase):
    """The binary file ``fh`` (left open) as pyarrow reads it, at positions of its own
    (``os.pread``). Until :meth:`arm` it serves any read (the footer's). Once armed
    with the footer pyarrow parsed, it serves only reads that start at a column chunk
    of that footer, each checked before it is served: the chunk's page headers state
    at most ``limit`` bytes decompressed over all the chunks served, and a chunk served
    again states the same; one of the columns :meth:`arm` names to remember (those a
    check reads before the read: the text columns) is served again only as the same
    bytes (sha256). Raises PagesOver (a ValueError) otherwise."""

    def __init__(self, fh):
        super().__init__()
        self._fh = fh
        self._fd = fh.fileno()
        self._pos = 0
        self._chunks: dict[int, int] | None = None
        self._served: dict[int, tuple[int, bytes | None]] = {}
        self._remember: set[int] = set()
        self._limit = 0
        self.decoded = 0

    def fileno(self) -> int:
        return self._fd

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: os.fstat(self._fd).st_size}[whence]
        self._pos = base + pos
        return self._pos

    def arm(self, md: pq.FileMetaData, limit: int, remember: set[str] = frozenset()) -> None:
        """Check every later read against the footer ``md``: its column chunks, where
        pyarrow starts reading each (the dictionary page when before the data pages),
        and at most ``limit`` bytes decompressed in all; the chunks of the columns
        named in ``remember`` are hashed when first served, to be served again only as
        the same bytes (hashing every chunk cost a third more CPU per read of a
        labeler's block, for chunks a reader serves once)."""
        chunks: dict[int, int] = {}
        keep: set[int] = set()
        for r in range(md.num_row_groups):
            rg = md.row_group(r)
            for c in range(rg.num_columns):
                cc = rg.column(c)
                start = cc.data_page_offset
                if cc.has_dictionary_page and 0 < cc.dictionary_page_offset < start:
                    start = cc.dictionary_page_offset
                # pages are read up to the row group's rows at least (a flat column has a
                # value a row), whatever its chunk's num_values says
                chunks[start] = max(chunks.get(start, 0), cc.num_values, rg.num_rows)
                if cc.path_in_schema in remember:
                    keep.add(start)
        self._chunks, self._limit, self._remember = chunks, limit, keep

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = max(0, os.fstat(self._fd).st_size - self._pos)
        at = self._pos
        parts, got = [], 0
        while got < n:  # one pread returns at most 2 GiB on Linux; a column chunk may be larger
            part = os.pread(self._fd, n - got, at + got)
            if not part:
                break
            parts.append(part)
            got += len(part)
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self._pos += len(data)
        if self._chunks is not None:
            self._check(at, data)
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def _check(self, at: int, data: bytes) -> None:
        if at not in self._chunks:
            raise PagesOver(f"a read at byte {at} is of no column chunk its footer lists")
        if self._chunks[at] == 0:  # an empty row group's chunks: pyarrow writes their data page offset 0 and reads each
            return                   # from there, each its own length; nothing of them is decoded
        digest = hashlib.sha256(data).digest() if at in self._remember else None
        n = page_bytes(data, self._chunks[at])
        if at in self._served:
            if self._served[at] != (n, digest):
                raise PagesOver(f"its column chunk at byte {at} changed between two reads of it (the file was rewritten)")
            return
        self.decoded += n
        if self.decoded > self._limit:
            raise PagesOver(f"its pages decompress to more than {self._limit} bytes (page headers counted as read; "
                            "its footer understates them)")
        self._served[at] = (n, digest)
