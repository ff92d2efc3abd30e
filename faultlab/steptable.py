"""A run's ``steps`` table on disk, and the one reader every consumer uses.

Two layouts (:func:`steps_source` finds the one a run directory holds):

- ``steps.parquet``: one Parquet file (a run under :data:`PARTITION_ROWS` rank-steps);
- ``steps/step_block=K/part-N.parquet``: a hive-partitioned Parquet dataset by step
  range, block ``K`` holding the steps ``K x B .. (K + 1) x B - 1`` (``B`` the block's
  steps, in ``steps/_layout.json``, chosen so a block holds about :data:`BLOCK_ROWS`
  rank-steps), rows step-major inside a block. A reader holds one block at a time.

Readers: :func:`iter_blocks` (Arrow tables, block by block, in step order),
:func:`read_table` (the whole table as pandas, as ``pq.read_table().to_pandas()``
gives it) and :func:`read_lean` (the columns the labeler reads, strings as pandas
categoricals, read a million rows at a time into preallocated arrays).
Writers: :func:`write_steps` (a frame; partitioned past :data:`PARTITION_ROWS`) and
:class:`BlockWriter` (block by block, for a run too large to hold).
Every error is a :class:`~faultlab.errors.BadInput` naming the file.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from faultlab import parquetbound, safefs, schema, workdirs
from faultlab.errors import BadInput
from faultlab.steps import OPTIONAL_STEP_COLUMNS, STEP_COLUMNS

STEPS_FILE = "steps.parquet"
STEPS_DIR = "steps"
LAYOUT_FILE = "_layout.json"  # a leading "_": not a data file to dataset readers
#: rank-steps past which a run's steps are written partitioned (8.4M: a 0.5 GiB frame)
PARTITION_ROWS = 1 << 23
#: rank-steps a block holds, about (4.2M: ~150 MiB of the labeler's columns)
BLOCK_ROWS = 1 << 22
#: the most bytes the text columns of one part file may decode to when the whole
#: table is read (:func:`iter_blocks`, :mod:`faultlab.parquetbound`)
TEXT_BYTES = 1 << 31
#: the most rows, and decoded bytes, one steps file may state in its footer (faultlab
#: writes one file under PARTITION_ROWS, a block's part of about BLOCK_ROWS): a few MB
#: of run-length-encoded rows decode to GBs, in every reader (:func:`parquet_file`)
FILE_ROWS = 1 << 25
FILE_BYTES = 1 << 32
#: string columns :func:`read_lean` reads dictionary-encoded (categoricals)
STRING_COLUMNS = ("run_id", "node", "peer_group")
_FIX = "restore it, or remove it to relabel from the raw step records in telemetry/"


def steps_source(run_dir: str | os.PathLike) -> Path | None:
    """The steps table of a run directory: ``steps.parquet``, else the ``steps/``
    folder, else None (a symbolic link is returned as it is: callers refuse it)."""
    d = Path(run_dir)
    f, p = d / STEPS_FILE, d / STEPS_DIR
    if f.exists() or f.is_symlink():
        return f
    if p.is_dir() or p.is_symlink():
        return p
    return None


def block_steps(n_ranks: int, block_rows: int = BLOCK_ROWS) -> int:
    """Steps per block for ``n_ranks`` ranks: ``block_rows // n_ranks``, at least 1."""
    return max(1, int(block_rows) // max(1, int(n_ranks)))


def layout(path: str | os.PathLike) -> dict:
    """``{"block_steps": B}`` of a partitioned table (``{}`` for one file or without
    its ``_layout.json``). The file is read with no link followed and only when a
    regular file of at most ``safefs.MAX_READ_BYTES`` (else BadInput naming it)."""
    p = Path(path)
    if not p.is_dir():
        return {}
    try:
        d = safefs.parse_json(safefs.read_below(p, LAYOUT_FILE, safefs.MAX_READ_BYTES), str(p / LAYOUT_FILE))  # no link, regular, bounded
    except FileNotFoundError:
        return {}
    except safefs.UntrustedPath as e:
        raise BadInput(e.reason, field=LAYOUT_FILE, fix=e.fix) from None
    except (OSError, ValueError) as e:
        raise BadInput(f"{p / LAYOUT_FILE} could not be read ({e})", field=LAYOUT_FILE, fix=_FIX) from None
    return d if isinstance(d, dict) else {}


def blocks(path: str | os.PathLike) -> list[tuple[int, list[Path]]]:
    """``[(K, [part files])]`` in step order: ``[(0, [path])]`` for one file.

    Raises:
        BadInput naming the folder when a partition is not named ``step_block=K``."""
    p = Path(path)
    if p.is_symlink():
        raise _linked(p)
    if not p.is_dir():
        return [(0, [p])]
    out = []
    for sub in p.iterdir():
        if sub.name.startswith((".", "_")):
            continue
        if sub.is_symlink():
            raise _linked(sub)
        key, _, val = sub.name.partition("=")
        if key != "step_block" or not val.lstrip("-").isdigit() or not sub.is_dir():
            raise BadInput(f"{sub} is not a step block (step_block=K/)", field=STEPS_DIR,
                           fix="a partitioned steps table holds only step_block=K/ folders of part-N.parquet files")
        out.append((int(val), sorted(sub.glob("*.parquet"), key=_part_order)))
    return sorted(out)


def _linked(p: Path) -> BadInput:
    return BadInput(f"{p} is a symlink", field=STEPS_DIR, fix="restore the run's own steps table: faultlab reads tables only as regular files, never through links")


def parquet_file(f: Path) -> parquetbound.Held:
    """The part file ``f`` held open for its checks and its read as one file
    (:class:`faultlab.parquetbound.Held`: ``held(**kw)`` is a ``pq.ParquetFile`` of
    it), opened with no link followed below the
    run folder (``steps/step_block=K/part-N.parquet``; else at its name) and only when
    a regular file (:func:`faultlab.safefs.open_below`): ``steps/`` or a block folder
    swapped for a link after :func:`blocks` listed it is refused, never read through.
    Raises UntrustedPath (one line naming it) otherwise, and ValueError when its footer
    states more than :data:`FILE_ROWS` rows or :data:`FILE_BYTES` decoded bytes, or more
    than ``parquetbound.DECODED_RATIO`` times its size (:func:`faultlab.parquetbound.footer_over`)."""
    block = f.parent
    if block.name.startswith("step_block=") and block.parent.name == STEPS_DIR:
        raw = safefs.open_below(block.parent.parent, f"{STEPS_DIR}/{block.name}/{f.name}")
    else:
        raw = safefs.open_below(f.parent, f.name)
    held = parquetbound.Held(raw)
    over = parquetbound.footer_over(held.metadata, held.size, FILE_ROWS, FILE_BYTES)
    if over:
        raise ValueError(f"{over}: more than a steps file faultlab writes holds")
    return held


def _part_order(p: Path) -> tuple:
    stem = p.stem.rsplit("-", 1)[-1]
    return (int(stem), p.name) if stem.isdigit() else (1 << 62, p.name)


def files(path: str | os.PathLike) -> list[Path]:
    """Every Parquet file of the table, in step order."""
    return [f for _, fs in blocks(path) for f in fs]


def count_rows(path: str | os.PathLike) -> int:
    """Rows (rank-steps) of the table, from the files' footers. Raises BadInput naming
    the file whose footer cannot be read or is over a steps file's bounds."""
    n = 0
    for f in files(path):
        try:
            n += parquet_file(f).metadata.num_rows
        except (pa.ArrowException, OSError, ValueError) as e:
            raise unreadable(f, e) from None
    return n


def over_rows(table: str | os.PathLike, max_rows: int) -> BadInput:
    """The BadInput for a steps table whose files, as they are read, hold more than
    ``max_rows`` rows: the bound a caller chose from a count of the table taken before
    (a whole-run read, an in-memory labeling), which the run folder's owner may have
    grown since."""
    return BadInput(f"{table} holds more than {max_rows:,} rank-steps as it is read (more than when it was counted: "
                    "it changed meanwhile)", field=STEPS_DIR if Path(table).name == STEPS_DIR else STEPS_FILE,
                    fix="run the command again once nothing writes the run folder")


def unreadable(p: Path, err: BaseException | None = None) -> BadInput:
    """The BadInput for a steps file that cannot be read (``err`` summed up)."""
    why = f": {type(err).__name__}: {' '.join(str(err).split())}"[:300] if err is not None else ""
    return BadInput(f"{p} could not be read as Parquet{why}", field=p.name if p.name == STEPS_FILE else STEPS_FILE, fix=_FIX)


def iter_blocks(path: str | os.PathLike, columns: list[str] | None = None, max_rows: int | None = None) -> Iterator[pa.Table]:
    """The table block by block (one Arrow table per step block; one for a single
    file), in step order, with ``columns`` (all when None; absent ones left out).
    Raises BadInput (:func:`over_rows`) before reading the file that brings the
    rows read past ``max_rows``, counted from the footers of the files read."""
    rows = 0
    for _, fs in blocks(path):
        parts = []
        for f in fs:
            try:
                held = parquet_file(f)
                rows += held.metadata.num_rows
                if max_rows is not None and rows > max_rows:
                    raise over_rows(path, max_rows)
                _check_text(held, f)
                cols = None if columns is None else [c for c in columns if c in held.schema_arrow.names]
                parts.append(held().read(columns=cols))
            except (pa.ArrowException, OSError, ValueError) as e:
                raise unreadable(f, e) from None
        if parts:
            yield pa.concat_tables(parts, promote_options="default") if len(parts) > 1 else parts[0]


def _check_text(held: parquetbound.Held, f: Path) -> None:
    """Raise BadInput naming the part file ``f`` (held open as ``held``, read after
    through it) when its text columns decode to more than :data:`TEXT_BYTES`
    (:func:`faultlab.parquetbound.text_over`), before a dictionary value is decoded for
    every row: a run folder may be another user's."""
    if parquetbound.text_over(held, TEXT_BYTES):
        raise BadInput(f"{f}: its text columns decode to more than {TEXT_BYTES} bytes (a dictionary value every row names)",
                       field=f.name, fix="restore the file faultlab wrote")


def read_table(path: str | os.PathLike, columns: list[str] | None = None, max_rows: int | None = None) -> pd.DataFrame:
    """The whole table as pandas (the values and dtypes of
    ``pq.read_table(file).to_pandas()``), converted column by column with each Arrow
    column freed once converted: the peak is the frame and one column, not the frame
    and the whole Arrow table beside it. At most ``max_rows`` rows (:func:`iter_blocks`)."""
    tables = list(iter_blocks(path, columns, max_rows))
    if not tables:
        return schema.empty("steps")
    t = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
    del tables  # the table alone holds the blocks' buffers, so self_destruct can free them
    return t.to_pandas(split_blocks=True, self_destruct=True)


def read_lean(path: str | os.PathLike, max_rows: int | None = None) -> pd.DataFrame:
    """The columns the labeler reads (:data:`~faultlab.steps.STEP_COLUMNS` and the
    optional ones present) of either layout, the lean way: ``run_id``, ``node`` and
    ``peer_group`` as pandas categoricals, the numbers as numpy arrays in their
    Parquet type, read about a million rows (whole row groups) at a time into
    preallocated arrays (peak: the frame plus one batch). Same values as
    :func:`read_table`; falls back to it for a column of another type or an integer
    column with nulls.

    Raises:
        BadInput naming the file when one is not readable Parquet, or the table
        (:func:`over_rows`) when its files hold more than ``max_rows`` rows, counted
        from the footers of the files read, before any is read."""
    return read_lean_files(files(path), max_rows=max_rows, table=path)


def read_lean_files(fs: list[Path], columns: list[str] | None = None, max_rows: int | None = None,
                    table: str | os.PathLike | None = None) -> pd.DataFrame:
    """:func:`read_lean` of the Parquet files ``fs`` (e.g. one step block), in order,
    with ``columns`` (the labeler's when None), at most ``max_rows`` rows (else
    BadInput naming ``table``, default the first file's folder)."""
    try:
        return _read_lean(fs, columns, max_rows, table)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise unreadable(Path(fs[0]) if fs else Path(STEPS_FILE), e) from None


def _plain(fs: list[Path], helds: list[parquetbound.Held], cols: list[str] | None) -> pd.DataFrame:
    """The files ``fs`` (held open as ``helds``) read whole with pyarrow, as pandas
    (the fallback of :func:`read_lean`), each checked as :func:`iter_blocks` checks it:
    a text column the lean read passed over (typed as a dictionary, or nested) decodes
    here."""
    for held, f in zip(helds, fs):
        _check_text(held, f)
    ts = [held().read(columns=cols) for held in helds]
    if not ts:
        return schema.empty("steps")
    return (pa.concat_tables(ts, promote_options="default") if len(ts) > 1 else ts[0]).to_pandas()


def _read_lean(fs: list[Path], columns: list[str] | None, max_rows: int | None = None,
               table: str | os.PathLike | None = None) -> pd.DataFrame:
    pfs = [parquet_file(f) for f in fs]  # each file checked and read through one descriptor
    if not pfs:
        return schema.empty("steps")
    if max_rows is not None and sum(pf.metadata.num_rows for pf in pfs) > max_rows:  # the very files read
        raise over_rows(table if table is not None else Path(fs[0]).parent, max_rows)
    sch = pfs[0].schema_arrow
    want = STEP_COLUMNS + OPTIONAL_STEP_COLUMNS if columns is None else tuple(columns)
    cols = [c for c in want if c in sch.names]
    strs = [c for c in cols if c in STRING_COLUMNS]
    ok = all(pa.types.is_string(sch.field(c).type) or pa.types.is_large_string(sch.field(c).type) for c in strs) and all(
        pa.types.is_integer(sch.field(c).type) or pa.types.is_floating(sch.field(c).type) for c in cols if c not in strs)
    ok = ok and all(pf.schema_arrow.names == sch.names for pf in pfs)
    n = sum(pf.metadata.num_rows for pf in pfs)
    if not ok or n == 0:
        return _plain(fs, pfs, cols)
    out = {c: np.empty(n, dtype=np.int32 if c in strs else sch.field(c).type.to_pandas_dtype()) for c in cols}
    cats: dict[str, dict] = {c: {} for c in strs}
    pos = 0
    for held in pfs:
        pf = held(read_dictionary=strs)
        for rgs in _batches(pf):
            t = pf.read_row_groups(rgs, columns=cols)
            if not _fill(t, cols, strs, out, cats, pos):
                return _plain(fs, pfs, cols)
            pos += t.num_rows
            del t
    data = {}
    for c in cols:
        if c in strs:
            data[c] = pd.Categorical.from_codes(out.pop(c), categories=pd.Index(list(cats[c]), dtype="str"))
        else:
            data[c] = out.pop(c)
    return pd.DataFrame(data, copy=False)


def _batches(pf: pq.ParquetFile) -> list[list[int]]:
    """Row-group indices of ``pf`` in batches of about a million rows."""
    out, cur, rows = [], [], 0
    for i in range(pf.num_row_groups):
        cur.append(i)
        rows += pf.metadata.row_group(i).num_rows
        if rows >= 1 << 20:
            out.append(cur)
            cur, rows = [], 0
    if cur:
        out.append(cur)
    return out


def _fill(t: pa.Table, cols: list[str], strs: list[str], out: dict, cats: dict, pos: int) -> bool:
    """Copy ``t`` into ``out`` at row ``pos`` (strings as codes of ``cats``); False for
    an integer column with nulls (pandas would make it float: the caller falls back)."""
    m = t.num_rows
    for c in cols:
        col = t.column(c)
        if c in strs:
            p, gm = pos, cats[c]
            for ch in col.chunks:  # map each chunk's dictionary onto the categories so far
                if not pa.types.is_dictionary(ch.type):
                    ch = ch.dictionary_encode()
                lut = np.asarray([gm.setdefault(v, len(gm)) for v in ch.dictionary.to_pylist()] or [0], dtype=np.int32)
                dst = out[c][p : p + len(ch)]
                dst[:] = lut[ch.indices.fill_null(0).to_numpy()]
                if ch.null_count:
                    dst[ch.is_null().to_numpy(zero_copy_only=False)] = -1
                p += len(ch)
        elif col.null_count and out[c].dtype.kind != "f":
            return False
        else:
            out[c][pos : pos + m] = col.to_numpy()
    return True


class BlockWriter:
    """Write a run's steps as the partitioned layout, block by block.

    ``with BlockWriter(run_dir, block_steps=B) as w: w.write(table)`` for each piece
    (a ``pa.Table`` or frame with the STEPS columns, rows of steps in ascending order;
    a piece may span blocks). The folder is written beside ``steps/`` and renamed
    over it when the ``with`` ends without an error (a stale ``steps.parquet`` is then
    removed): a reader never sees half a table."""

    def __init__(self, run_dir: str | os.PathLike, *, block_steps: int):
        if int(block_steps) < 1:
            raise BadInput(f"must be >= 1, got {block_steps!r}", field="block_steps")
        self.run_dir = Path(run_dir)
        self.block_steps = int(block_steps)
        self.rows = 0
        self._tmp: Path | None = None
        self._parts: dict[int, int] = {}

    def __enter__(self) -> "BlockWriter":
        # named for this process: a later writer removes it once this process is gone
        workdirs.sweep(self.run_dir, TMP_PREFIX)
        self._tmp = Path(workdirs.make(self.run_dir, TMP_PREFIX))
        return self

    def write(self, piece: pa.Table | pd.DataFrame) -> None:
        """Append ``piece`` (its rows split by step block, one part file per block)."""
        t = piece if isinstance(piece, pa.Table) else schema.to_table("steps", piece)
        if t.num_rows == 0:
            return
        k = t.column("step").to_numpy() // self.block_steps
        for key in np.unique(k):
            sel = np.flatnonzero(k == key)
            part = t.take(pa.array(sel)) if sel.size < t.num_rows else t
            d = self._tmp / f"step_block={int(key)}"
            d.mkdir(exist_ok=True)
            i = self._parts.get(int(key), 0)
            self._parts[int(key)] = i + 1
            pq.write_table(part, d / f"part-{i}.parquet", row_group_size=1 << 20)
            self.rows += part.num_rows

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            return
        (self._tmp / LAYOUT_FILE).write_text(json.dumps({"block_steps": self.block_steps, "rows": self.rows}) + "\n")
        _replace(self.run_dir, self._tmp, STEPS_DIR, STEPS_FILE)


def _replace(run_dir: Path, new: Path, name: str, stale: str) -> None:
    """Rename ``new`` over ``run_dir/name`` (a file or folder), then remove
    ``run_dir/stale`` (the other layout)."""
    dst = run_dir / name
    old = None
    if dst.is_dir() and not dst.is_symlink():
        old = run_dir / f".{name}-old-{os.getpid()}"
        os.rename(dst, old)
    os.replace(new, dst)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    s = run_dir / stale
    if s.is_dir() and not s.is_symlink():
        shutil.rmtree(s, ignore_errors=True)
    elif s.exists() or s.is_symlink():
        s.unlink()


#: the prefix of a steps writer's temporaries in a run folder (a block folder, a
#: staged file), named for their maker (faultlab.workdirs)
TMP_PREFIX = ".steps-"


def write_steps(run_dir: str | os.PathLike, steps: pd.DataFrame | pa.Table, *, partition_rows: int = PARTITION_ROWS,
                block_rows: int = BLOCK_ROWS) -> Path:
    """Write a run's steps table: ``steps.parquet`` under ``partition_rows`` rows,
    else the partitioned layout (blocks of :func:`block_steps` of the run's ranks).
    Returns the path written; the other layout, if any, is removed."""
    d = Path(run_dir)
    t = steps if isinstance(steps, pa.Table) else schema.to_table("steps", steps)
    if t.num_rows < int(partition_rows):
        workdirs.sweep(d, TMP_PREFIX, files=".parquet")  # those of writers gone, as BlockWriter's
        tmp = d / f"{TMP_PREFIX}{workdirs.tag()}{secrets.token_hex(6)}.parquet"
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        try:
            pq.write_table(t, tmp)
            os.chmod(tmp, 0o644)
            _replace(d, Path(tmp), STEPS_FILE, STEPS_DIR)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return d / STEPS_FILE
    n_ranks = len(pc.unique(t.column("rank")))
    order = pc.sort_indices(t, sort_keys=[("step", "ascending"), ("rank", "ascending")])
    with BlockWriter(d, block_steps=block_steps(n_ranks, block_rows)) as w:
        w.write(t.take(order))
    return d / STEPS_DIR


__all__ = ["BLOCK_ROWS", "BlockWriter", "LAYOUT_FILE", "PARTITION_ROWS", "STEPS_DIR", "STEPS_FILE", "block_steps",
           "blocks", "count_rows", "files", "iter_blocks", "layout", "read_lean", "read_lean_files", "read_table", "steps_source", "write_steps"]
