"""What every importer shares: its result (:class:`ImportResult`), the rows it left out
by reason (:class:`SkipCount`), timestamps in seconds whatever unit they came in
(:func:`seconds_timestamps`), numbers or a one-line refusal (:func:`numbers_or_refuse`),
and the upstream answer files it never reads (:data:`ANSWER_FILES`).
"""

from __future__ import annotations

import gzip
import io
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from faultlab import inputfile, parquetbound, parquetpages
from faultlab.errors import BadInput
from faultlab.labeler.stats import median
from faultlab.steps import MAX_UNIX_S, finer_unit


@dataclass
class ImportResult:
    """What an importer returns.

    Attributes:
        format: the format name.
        labels: labels frame (faultlab.schema.LABELS columns, nullable Int64 steps).
        whatif: the what-if dict (JSON-able; ``slowdown`` and its decomposition) or
            None when no what-if applies.
        info: counts and timings for a person (JSON-able).
        extra: further JSON files to write, ``{file name: JSON-able}``.
        components: one row per component with its component-level judgement (the
            ``long`` importer: :data:`COMPONENT_COLUMNS`, see :func:`judge_persistence`),
            written as ``components.parquet``; None when the format has none.
    """

    format: str
    labels: pd.DataFrame
    whatif: dict | None = None
    info: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    components: pd.DataFrame | None = None


class SkipCount:
    """Rows an importer left out, by reason, so that nothing is dropped in silence:
    :meth:`line` says it in one line (the CLI prints it) and :meth:`to_dict` goes into
    the output's ``import.json``. ``notes`` are changes made without dropping (a
    timestamp column converted from milliseconds)."""

    def __init__(self, n_rows: int) -> None:
        self.n_rows = int(n_rows)
        self.reasons: dict[str, int] = {}
        self.notes: list[str] = []

    def add(self, reason: str, n: int) -> None:
        if int(n):
            self.reasons[reason] = self.reasons.get(reason, 0) + int(n)

    @property
    def total(self) -> int:
        return sum(self.reasons.values())

    def line(self) -> str:
        """``"skipped 7 of 1,200 rows: 4 n/a, 3 duplicated (...)"`` (``"skipped no
        rows"`` when none), then the notes."""
        if self.total:
            head = f"skipped {self.total:,} of {self.n_rows:,} rows: " + ", ".join(
                f"{n:,} {r}" for r, n in self.reasons.items())
        else:
            head = f"skipped no rows of {self.n_rows:,}"
        return "; ".join([head] + self.notes)

    def to_dict(self) -> dict:
        return {"n_rows": self.n_rows, "n_skipped": self.total, "skipped": dict(self.reasons), "notes": list(self.notes)}


def seconds_timestamps(ts: np.ndarray, skips: SkipCount, field: str) -> np.ndarray:
    """Unix timestamps in seconds from ``ts`` (float64; NaN kept).

    A column whose median is in milliseconds (or micro-, nanoseconds: above 1e11,
    1e14, 1e17, which unix seconds reach only after the year 5000;
    :func:`faultlab.steps.finer_unit`, the check of a run's ``t_start``) is converted, with a
    note in ``skips``; rows of such a column over 1000x below its median (seconds
    among milliseconds: they would land in 1970) become NaN and are counted. In a
    column of seconds, rows in such a unit cannot be told apart from a clock error:
    they become NaN and are counted (``"timestamps in milliseconds"``). Negative
    timestamps become NaN and are counted."""
    ts = np.asarray(ts, dtype=np.float64)
    fin = ts[np.isfinite(ts)]
    if fin.size:
        med = median(fin)
        finer = finer_unit(med)
        if finer is not None:
            div, unit = finer
            ts = ts / div
            skips.notes.append(f"{field} converted from {unit} to seconds (median {med:.6g})")
            with np.errstate(invalid="ignore"):
                coarse = (ts >= 0) & (ts < med / div / 1000.0)
            skips.add(f"{field} in a coarser unit than the column's {unit}", int(coarse.sum()))
            ts = np.where(coarse, np.nan, ts)
        with np.errstate(invalid="ignore"):
            bad = ts > MAX_UNIX_S
            neg = ts < 0
        if bad.any() or neg.any():
            skips.add(f"{field} in milliseconds or larger units among seconds", int(bad.sum()))
            skips.add(f"negative {field}", int(neg.sum()))
            ts = np.where(bad | neg, np.nan, ts)
    return ts


#: upstream answer files kept beside public datasets: an importer never reads them
ANSWER_FILES = ("slow_drives.csv", "result-*", "ms-*", "mw-*")


#: answer files with an exact upstream name: refused even when given by name
_EXACT_ANSWER_FILES = ("slow_drives.csv",)


def is_answer(f: Path) -> bool:
    return any(f.match(pat) for pat in ANSWER_FILES)


def numbers_or_refuse(values: pd.Series, present: np.ndarray, *, field: str, where: str, fix: str,
                      at=lambda i: f"at row {i}") -> np.ndarray:
    """``values`` as float64 (NaN where empty). Raises BadInput (``field``) naming
    ``where`` (the file), the count and the first value that is ``present`` ((N,) bool:
    not an empty value, which the caller counts as n/a) yet no number, placed by
    ``at(row)`` (e.g. the CSV line)."""
    v = pd.to_numeric(values, errors="coerce").to_numpy(np.float64)
    bad = np.flatnonzero(np.isnan(v) & present)
    if bad.size:
        i = int(bad[0])
        raise BadInput(f"{where}: {bad.size} value(s) are not numbers, e.g. {values.iloc[i]!r} {at(i)}", field=field, fix=fix)
    return v


#: the most bytes the text columns of an imported Parquet file may decode to (a dataset
#: part's bound, datasets.layout.MAX_PART_BYTES): the file's size bound
#: (inputfile.DATA_BYTES) does not bound what it decodes to
TEXT_BYTES = 1 << 31


def refuse_parquet_bomb(fh, path: Path, columns) -> parquetbound.Held:
    """The Parquet file ``path`` (open as ``fh``) held for its read
    (:class:`faultlab.parquetbound.Held`: the read goes through the footer and the
    pages checked here), once checked before any column is decoded: BadInput naming it when a column is nested, its footer
    states more than ``parquetbound.DECODED_RATIO`` times its size for the ``columns``
    read (:func:`faultlab.parquetbound.footer_over`: a few MB of run-length-encoded
    numbers state billions of rows), or its text columns decode to more than
    :data:`TEXT_BYTES` (:func:`faultlab.parquetbound.text_over`, from the
    dictionary-encoded values: a trace of a few KB whose rows all name one 1 MiB value
    decodes to hundreds of GB). The file is bounded by its size (16 GiB) only, not by
    what it decodes to."""
    fix = "give the file as its source publishes it"
    held = parquetbound.Held(fh)
    over = parquetbound.footer_over(held.metadata, held.size, columns=columns)
    if over:
        raise BadInput(f"{path}: {over}", field="PATH", fix=fix)
    try:
        text = parquetbound.text_over(held, TEXT_BYTES)
    except parquetpages.PagesOver as e:
        raise BadInput(f"{path}: {e}", field="PATH", fix=fix) from None
    if text:
        raise BadInput(f"{path}: its text columns decode to more than {TEXT_BYTES} bytes (a dictionary value every row names)",
                       field="PATH", fix=fix)
    return held


#: the most a gzipped data file may decompress to, times its own size (at least 1 MiB):
#: a CSV of names and numbers compresses some 5 to 20 times, one line repeated a thousand
#: times; and never more than an uncompressed file may hold (inputfile.DATA_BYTES)
GZIP_RATIO = 100


class _Capped(io.RawIOBase):
    """The bytes of ``src`` (a binary stream), raising BadInput naming ``path`` once
    more than ``limit`` came out."""

    def __init__(self, src, limit: int, path: Path):
        super().__init__()
        self.src, self.limit, self.path, self.n = src, limit, path, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        data = self.src.read(len(b))
        self.n += len(data)
        if self.n > self.limit:
            raise BadInput(f"{self.path} decompresses to more than {self.limit} bytes ({GZIP_RATIO} times its size, at most "
                           f"{inputfile.DATA_BYTES})", field="PATH", fix="give the file as its source publishes it")
        b[:len(data)] = data
        return len(data)


def gunzipped(fh, path: Path) -> io.BufferedReader:
    """The decompressed bytes of the gzipped data file ``fh`` (``path``), as a stream
    that raises BadInput once more than :data:`GZIP_RATIO` times the file's size (or
    ``inputfile.DATA_BYTES``) came out: the file is bounded by its size, and a 10 MB
    gzip of one repeated line decompresses to 10 GB."""
    limit = min(inputfile.DATA_BYTES, GZIP_RATIO * max(os.fstat(fh.fileno()).st_size, 1 << 20))
    return io.BufferedReader(_Capped(gzip.GzipFile(fileobj=fh), limit, path))
