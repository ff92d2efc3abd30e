"""Reading a StragglerAnalysis trace as published: the trace and its meta file
(:func:`find_files`, :func:`read_trace`), every trace of a ``data/`` folder
(:func:`trace_files`), and the rows kept, each one left out counted by reason
(:class:`~faultlab.labeler.importers.common.SkipCount`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from faultlab import inputfile, yamlsafe
from faultlab.errors import BadInput
from faultlab.labeler.importers.common import SkipCount, numbers_or_refuse, refuse_parquet_bomb


TRACE_COLUMNS = ("dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id", "mc", "gmc", "mb_id")


def find_files(path: str | Path) -> tuple[Path, Path | None]:
    """The trace Parquet and its meta YAML for ``path`` (a ``trace-*.parquet`` file, or a
    folder holding exactly one).

    Returns ``(trace_path, meta_path or None)``; the meta file is ``meta-NAME.yaml``
    beside ``trace-NAME.parquet`` (else the folder's only ``meta*.yaml``).

    Raises:
        BadInput when the path does not exist or the folder holds no (or several)
        trace files, or (for a folder) no meta file.
    """
    p = Path(path)
    if not p.exists():
        raise BadInput(f"{p} does not exist", field="PATH")
    if p.is_dir():
        traces = sorted(p.glob("trace*.parquet"))
        if len(traces) != 1:
            raise BadInput(
                f"{p} holds {len(traces)} trace*.parquet file(s), expected one",
                field="PATH", fix="give the folder of one StragglerAnalysis trace (trace-NAME.parquet + meta-NAME.yaml) or the Parquet file")
        trace = traces[0]
    else:
        trace = p
    meta = _meta_beside(trace)
    if meta is None:
        metas = sorted(trace.parent.glob("meta*.y*ml"))
        if len(metas) == 1:
            meta = metas[0]
    if meta is None and p.is_dir():
        raise BadInput(f"{p} holds no meta-NAME.yaml beside {trace.name}", field="PATH",
                       fix="the folder needs the trace's meta file with dp_size and pp_size")
    return trace, meta


def trace_files(path: str | Path) -> list[Path]:
    """The ``trace-NAME.parquet`` files of a folder (StragglerAnalysis publishes several
    in its ``data/`` folder, each with ``meta-NAME.yaml``, beside answer files
    ``result-*``, ``ms-*``, ``mw-*`` and timelines, never read); ``[path]`` for a file."""
    p = Path(path)
    return sorted(p.glob("trace*.parquet")) if p.is_dir() else [p]


def _trace_name(trace: Path) -> str:
    """``NAME`` of ``trace-NAME.parquet`` ("" for a bare ``trace.parquet``)."""
    return trace.stem[len("trace"):].lstrip("-_")


def _meta_beside(trace: Path) -> Path | None:
    """``meta-NAME.yaml`` (or ``.yml``) beside ``trace-NAME.parquet``, None when absent."""
    name = _trace_name(trace)
    for cand in ([trace.parent / f"meta-{name}.yaml", trace.parent / f"meta-{name}.yml"] if name else []):
        if cand.exists():
            return cand
    return None


def own_metas(traces: list[Path]) -> None:
    """BadInput (field PATH) when a trace of a folder of several has no
    ``meta-NAME.yaml`` of its own: it would be read with another trace's sizes."""
    for t in traces:
        if _meta_beside(t) is None:
            name = _trace_name(t)
            raise BadInput(f"{t.name} has no meta-{name or 'NAME'}.yaml beside it", field="PATH",
                           fix="in a folder of several traces each trace-NAME.parquet needs its own meta-NAME.yaml")


def distinct_runs(traces: list[Path], run_ids: list[str]) -> None:
    """BadInput (field meta) when two traces of one folder name the same run (their meta
    files' ``trial_name`` and ``run_id``): one would hide the other's what-if result."""
    seen: dict[str, Path] = {}
    for t, rid in zip(traces, run_ids):
        if rid in seen:
            raise BadInput(f"{seen[rid].name} and {t.name} both name run {rid}", field="meta",
                           fix="give each trace's meta file its own trial_name or run_id")
        seen[rid] = t


def read_trace(path: str | Path) -> tuple[pd.DataFrame, dict, dict]:
    """Read a StragglerAnalysis trace (only the trace and its meta file).

    Returns:
        ``(trace, meta, paths)``: the trace frame (``TRACE_COLUMNS``; times as float64
        seconds, ``optype`` as str), the meta dict (``dp_size``, ``pp_size``, ...;
        sizes inferred from the trace when there is no meta file, marked
        ``"inferred": True``) and ``{"trace": str, "meta": str | None}``.

    Raises:
        BadInput for a missing file or column, or a meta file that contradicts the trace.
    """

    trace_path, meta_path = find_files(path)
    below = Path(path) if Path(path).is_dir() else None
    with inputfile.open_data(trace_path, "PATH", below=below) as fh:  # no link, FIFO or device; checked and read as one file
        try:
            held = refuse_parquet_bomb(fh, trace_path, TRACE_COLUMNS)  # before a column is decoded
        except BadInput:
            raise
        except Exception as e:  # pyarrow raises several types for a non-Parquet file
            raise BadInput(f"{trace_path} is not a readable Parquet file ({e})", field="PATH") from None
        missing = [c for c in TRACE_COLUMNS if c not in held.schema_arrow.names]
        if missing:
            raise BadInput(f"{trace_path.name} misses column(s) {', '.join(missing)}", field="trace",
                           fix=f"a straggler trace has columns {', '.join(TRACE_COLUMNS)}")
        try:
            df = held().read(columns=list(TRACE_COLUMNS)).to_pandas()
        except Exception as e:  # a damaged body behind an intact footer: pyarrow raises OSError or ArrowInvalid
            raise BadInput(f"{trace_path} is not a readable Parquet file ({e})", field="PATH",
                           fix="give the trace as published, undamaged") from None
    df, skips = _clean_rows(df, trace_path.name)
    meta = _read_meta(meta_path) if meta_path is not None else {}
    dp_seen = int(df["dp_rank"].max()) + 1 if len(df) else 0
    pp_seen = int(df["stage"].max()) + 1 if len(df) else 0
    if "dp_size" not in meta or "pp_size" not in meta:
        meta = {**meta, "dp_size": meta.get("dp_size", dp_seen), "pp_size": meta.get("pp_size", pp_seen), "inferred": True}
    for k in ("dp_size", "pp_size", "vpp_size", "tp_size"):
        if k in meta and (not isinstance(meta[k], int) or isinstance(meta[k], bool) or meta[k] < 1):
            raise BadInput(f"{k} must be a positive integer, got {meta[k]!r}", field="meta")
    if len(df) and (dp_seen > meta["dp_size"] or pp_seen > meta["pp_size"]):
        raise BadInput(f"trace has dp_rank up to {dp_seen - 1} and stage up to {pp_seen - 1}, meta says dp_size="
                       f"{meta['dp_size']} pp_size={meta['pp_size']}", field="meta")
    if int(meta.get("vpp_size", 1)) > 1:
        raise BadInput(f"vpp_size={meta['vpp_size']}: interleaved pipelines are not modeled", field="meta",
                       fix="analyze a trace with vpp_size 1")
    df.attrs["skips"] = skips
    return df, meta, {"trace": str(trace_path), "meta": str(meta_path) if meta_path else None}


#: a meta file is a few lines of sizes and names; anything larger is not one
MAX_META_BYTES = 1 << 16


def _read_meta(meta_path: Path) -> dict:
    """The meta file as a mapping, read strictly: a regular file of UTF-8, at most
    :data:`MAX_META_BYTES`, no YAML aliases (a few hundred bytes of nested aliases
    expand to gigabytes), no key written twice (:mod:`faultlab.yamlsafe`).
    Raises BadInput (field ``meta``) naming the file otherwise."""

    fix = "a meta file as StragglerAnalysis writes it (dp_size, pp_size, ... as plain YAML)"
    text = inputfile.read_text(meta_path, "meta", limit=MAX_META_BYTES, fix=fix)
    try:
        if any(isinstance(t, yaml.AliasToken) for t in yaml.scan(text)):
            raise BadInput(f"{meta_path.name}: holds a YAML alias (*name)", field="meta", fix="write each value out")
        meta = yamlsafe.load(text) or {}
    except yaml.YAMLError as e:
        raise BadInput(f"{meta_path.name}: not valid YAML ({e})", field="meta", fix=fix) from None
    if not isinstance(meta, dict):
        raise BadInput(f"{meta_path.name}: expected a mapping", field="meta", fix=fix)
    return meta


#: the key of one recorded operation: a trace holds each once
OP_KEY = ("dp_rank", "stage", "rank", "step", "optype", "seq_id")


_IDS = ("dp_rank", "stage", "rank", "step", "seq_id")


def _numbers(df: pd.DataFrame, col: str, na: np.ndarray, name: str) -> np.ndarray:
    """Column ``col`` as float64 (:func:`faultlab.labeler.importers.numbers_or_refuse`:
    BadInput naming the file, column and row of a value that is no number; a row with
    an empty value, ``na``, is counted by the caller)."""
    return numbers_or_refuse(df[col], ~na, field=col, where=name,
                             fix="seconds for start_ts and duration, whole numbers for the ids")


def _clean_rows(df: pd.DataFrame, name: str = "trace"):
    """The trace's rows that can be analyzed, typed (times float64 s, ids int64,
    ``optype`` str), and a :class:`faultlab.labeler.importers.SkipCount` of the others
    by their first reason: an empty value in a column the model uses (n/a), an
    infinite ``start_ts`` or ``duration``, a negative ``duration``, a negative or
    fractional id, an operation recorded twice (:data:`OP_KEY`; the first row kept).
    Nothing is dropped in silence: the counts go into ``import.json`` and the CLI's
    one line. Raises BadInput naming ``name`` (the file), the column and the row for a
    value that is no number."""
    skips = SkipCount(len(df))
    used = ["dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id"]
    na = df[used].isna().any(axis=1).to_numpy()
    skips.add("n/a (empty or missing value)", int(na.sum()))
    st = _numbers(df, "start_ts", na, name)
    du = _numbers(df, "duration", na, name)
    ids = np.stack([_numbers(df, c, na, name) for c in _IDS], axis=1)
    inf = ~na & (np.isinf(st) | np.isinf(du))
    skips.add("infinite start_ts or duration", int(inf.sum()))
    with np.errstate(invalid="ignore"):
        neg = ~na & ~inf & (du < 0)
        bad_id = ~na & ~inf & ~neg & ((ids < 0) | (ids != np.floor(ids)) | ~(np.abs(ids) < 2.0**62)).any(axis=1)
    skips.add("negative duration", int(neg.sum()))
    skips.add(f"a negative, fractional or huge id ({', '.join(_IDS)})", int(bad_id.sum()))
    keep = ~(na | inf | neg | bad_id)
    if not keep.all():
        df = df[keep].reset_index(drop=True)
    df["optype"] = df["optype"].astype(str)
    df["start_ts"], df["duration"] = st[keep], du[keep]
    for k, c in enumerate(_IDS):
        df[c] = ids[keep, k].astype(np.int64)
    dup = df.duplicated(list(OP_KEY), keep="first").to_numpy()
    skips.add(f"duplicated ({', '.join(OP_KEY)})", int(dup.sum()))
    if dup.any():
        df = df[~dup].reset_index(drop=True)
    return df, skips
