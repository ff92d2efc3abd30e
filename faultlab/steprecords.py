"""Raw per-rank step records (``steps-rankR.jsonl``) parsed in bounded memory.

A run's ranks append one JSON object a step to their telemetry file. Files that
ranks on docker and ssh nodes wrote were written by someone faultlab does not trust
(a container's root, an ssh node's users) and are kept per node
(``telemetry/NODE/``, faultlab.telemetry.collect). So the records are parsed while
streaming against the fixed faultlab.schema.STEPS (pyarrow.json with that explicit
schema; an unknown key is an error), never as Python dicts, with bounds:
a text value of at most MAX_TEXT_BYTES, at most MAX_ROWS_PER_FILE records a file and
MAX_TOTAL_BYTES of parsed columns in all. Past a bound, one line names the file.

A node's file keeps only the records of the ranks placed on that node, their ``node``
set from the placement, never from the record: the other records are a counted skip
naming the node (``Skip``), so a node can forge its own ranks' records, and only those.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from faultlab import safefs, schema
from faultlab.errors import BadInput

#: the longest text value of a record (bytes): run ids, node and peer-group names are
#: names of a few dozen bytes
MAX_TEXT_BYTES = 256
#: the most records one rank's file may hold: a day at over 100 steps a second
MAX_ROWS_PER_FILE = 10_000_000
#: the most bytes of parsed step columns of a run (about 100 bytes a record): what the
#: controller holds before building the steps table
MAX_TOTAL_BYTES = 2 << 30
#: bytes parsed at a time
BLOCK_BYTES = 1 << 20
FIELD = "telemetry/steps-*.jsonl"
_FIX = "one JSON object a line, with the faultlab.schema.STEPS columns only"
_COLUMN = re.compile(r"Column\(/([A-Za-z_]+)\)")
_REQUIRED = [f.name for f in schema.STEPS if f.name not in schema.OPTIONAL["steps"] and f.name not in ("run_id", "node")]


@dataclass(frozen=True)
class Source:
    """One ``steps-*.jsonl`` file: ``node`` None for a file root's own ranks wrote
    (local and netns nodes: every record kept as written); else the node it was
    collected from and ``ranks``, the ranks placed there."""

    path: Path
    node: str | None = None
    ranks: frozenset[int] = frozenset()
    #: the run folder ``path`` lies in: no component below it may be a link
    root: Path | None = None

    def label(self) -> str:
        return f"{self.path.name} of node {self.node}" if self.node else str(self.path)


@dataclass
class Skip:
    """Records of ``source`` dropped: ``count`` records of ranks not placed on its node."""

    node: str
    file: str
    count: int
    ranks: list[int]

    def line(self) -> str:
        shown = ", ".join(map(str, self.ranks[:5])) + (", ..." if len(self.ranks) > 5 else "")
        return (f"node {self.node}: {self.count} step record(s) in {self.file} name rank(s) {shown}, "
                f"not placed on node {self.node}; skipped")


def read(sources: list[Source], run_id: str) -> tuple[pa.Table, list[Skip]]:
    """The step records of ``sources`` as one Arrow table of faultlab.schema.STEPS
    (``run_id`` filled where a record has none), and the skips.

    Raises BadInput (field FIELD, or the column named) naming the file and node when a
    file is not a regular file, a record is not a STEPS object (unknown key, a value
    of the wrong type, a required column missing) or a bound is passed."""
    batches, skips, total = [], {}, 0
    for src in sources:
        for batch in _batches(src):
            batch, skip = _placed(src, batch)
            if skip is not None:
                had = skips.setdefault((skip.node, skip.file), Skip(skip.node, skip.file, 0, []))
                had.count += skip.count
                had.ranks = sorted(set(had.ranks) | set(skip.ranks))[:50]
            total += batch.nbytes
            if total > MAX_TOTAL_BYTES:
                raise BadInput(f"the step records pass {MAX_TOTAL_BYTES} bytes at {src.label()}", field=FIELD,
                               fix="a run's step records are far smaller: remove the file that does not belong")
            batches.append(batch)
    if not batches:
        return schema.STEPS.empty_table(), list(skips.values())
    tbl = pa.Table.from_batches(batches, schema=schema.STEPS)
    return tbl.set_column(0, "run_id", pc.fill_null(tbl["run_id"], run_id)), list(skips.values())


def _batches(src: Source):
    """The record batches of ``src`` up to its last newline (a torn last line of a
    killed rank is left out), checked as they come."""
    rows = 0
    with _mapped(src) as buf:
        if buf is None:
            return
        try:
            reader = pj.open_json(pa.BufferReader(buf), read_options=pj.ReadOptions(block_size=BLOCK_BYTES, use_threads=False),
                                  parse_options=pj.ParseOptions(explicit_schema=schema.STEPS, unexpected_field_behavior="error"))
            for batch in reader:
                rows += batch.num_rows
                _check(src, batch, rows)
                yield batch
        except pa.ArrowInvalid as e:
            raise _bad_value(src, e) from None


@contextlib.contextmanager
def _mapped(src: Source):
    """The file's bytes up to its last newline, memory-mapped (no copy); None when
    there is no complete line. Opens no link, FIFO or device."""
    try:
        if src.root is not None:  # no link on any component below the run folder
            with safefs.open_below(src.root, str(src.path.relative_to(src.root))) as f:
                fd = os.dup(f.fileno())
        else:
            fd = safefs.open_file(os.fspath(src.path))
    except safefs.UntrustedPath as e:
        raise BadInput(e.reason, field=FIELD, fix=e.fix) from None
    except OSError as e:
        raise BadInput(f"{src.label()} could not be read ({type(e).__name__}: {e})", field=FIELD, fix=_FIX) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"{src.label()} is not a regular file", field=FIELD, fix="remove it")
        if st.st_size == 0:
            yield None
            return
        cut = _last_newline(fd, st.st_size)
        if not cut:
            yield None
            return
        with pa.memory_map(f"/proc/self/fd/{fd}") as m:
            yield m.read_buffer(cut)
    finally:
        os.close(fd)


def _last_newline(fd: int, size: int, chunk: int = 1 << 16) -> int:
    """The offset just past the last newline of the file open at ``fd`` (0: none)."""
    end = size
    while end > 0:
        start = max(0, end - chunk)
        i = os.pread(fd, end - start, start).rfind(b"\n")
        if i >= 0:
            return start + i + 1
        end = start
    return 0


def _check(src: Source, batch: pa.RecordBatch, rows: int) -> None:
    if rows > MAX_ROWS_PER_FILE:
        raise BadInput(f"{src.label()} holds more than {MAX_ROWS_PER_FILE} step records", field=FIELD,
                       fix="one record a step of one rank: remove the file that does not belong")
    for name in ("run_id", "node", "peer_group"):
        longest = pc.max(pc.binary_length(batch.column(name))).as_py()
        if longest is not None and longest > MAX_TEXT_BYTES:
            raise BadInput(f"{src.label()} has a {name} of {longest} bytes (at most {MAX_TEXT_BYTES})", field=name, fix=_FIX)
    need = _REQUIRED + ([] if src.node else ["node"])
    for name in need:
        if batch.column(name).null_count:
            raise BadInput(f"the step records of {src.label()} miss column {name}", field=FIELD,
                           fix="each record needs the faultlab.schema.STEPS columns")


def _placed(src: Source, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, Skip | None]:
    """``batch`` of a node's file cut to the ranks placed on that node, ``node`` set to
    it; the rest as a Skip."""
    if src.node is None:
        return batch, None
    keep = pc.is_in(batch.column("rank"), value_set=pa.array(sorted(src.ranks), pa.int32()))
    dropped = batch.filter(pc.invert(keep))
    batch = batch.filter(keep)
    i = batch.schema.get_field_index("node")
    batch = batch.set_column(i, "node", pa.array([src.node] * batch.num_rows, pa.string()))
    if not dropped.num_rows:
        return batch, None
    return batch, Skip(src.node, src.path.name, dropped.num_rows, sorted(set(dropped.column("rank").to_pylist()))[:50])


def _bad_value(src: Source, e: pa.ArrowInvalid) -> BadInput:
    why = " ".join(str(e).split())[:200]
    m = _COLUMN.search(why)
    col = m.group(1) if m else next((f.name for f in schema.STEPS if f"to {f.type}," in why), None)
    if col is not None and "unexpected field" not in why:
        return BadInput(f"a value in {src.label()} does not fit {schema.STEPS.field(col).type} ({why})", field=col,
                        fix="see faultlab.schema.STEPS")
    return BadInput(f"{src.label()} holds a record that is not a step record ({why})", field=FIELD, fix=_FIX)
