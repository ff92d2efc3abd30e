"""Straggler-trace importer: the what-if analysis of an operation-level training trace.

Method: "Understanding Stragglers in Large Model Training Using What-if Analysis"
(OSDI'25; artifact ByteDance-Seed/StragglerAnalysis, Apache-2.0). This is an
independent implementation of the method described there; it reads the artifact's
trace format.

Input (format name ``straggler-trace``): ``trace-NAME.parquet``, one row per recorded
operation with columns ``dp_rank, stage, rank, step, optype, start_ts, duration,
seq_id, mc, gmc, mb_id`` (seconds; ``start_ts`` may be relative to the step), and
``meta-NAME.yaml`` with the parallelism sizes (``dp_size``, ``pp_size``, ``tp_size``,
``vpp_size``, ``world_size``, ``trial_name``, ``run_id``). Rows left out are counted
by reason (an empty value, an infinite time, a negative duration, an operation
recorded twice, an operation type not modeled, a step without the same operations on
every worker) in ``info["skipped"]``/``import.json`` and one line
(``info["skipped_line"]``). No timestamp unit is checked: ``start_ts`` is relative
(seconds from an origin of the recorder's), so no magnitude tells milliseconds apart.

1. **Dependency model** (one per training step, identical for every step and DP rank,
   built from the order of operations in the trace; nodes are ``(stage, optype,
   seq_id)``):

   - per stage, the forward/backward compute operations form one stream (a chain in
     their recorded order);
   - pipeline send/recv: each of ``forward-send``, ``forward-recv``, ``backward-send``,
     ``backward-recv`` is a chain; the k-th recv of a direction feeds the k-th compute
     of that direction and is posted after the compute just before it in the compute
     stream; the k-th send follows the k-th compute; ``forward-send`` k of stage s
     pairs with ``forward-recv`` k of stage s+1 (``backward-*`` the other way);
   - data-parallel collectives (``params-all-gather``, ``grads-reduce-scatter``,
     ``separate-grads-all-reduce``) form a stream; the first forward compute of a model
     chunk waits for its parameters' all-gather; after the last compute:
     ``gc -> layernorm-grads-all-reduce -> embedding-grads-all-reduce (first and last
     stage) -> grads-reduce-scatter... -> optimizer-clip-main-grad -> optimizer``
     (with ``separate-grads-all-reduce`` present, the reduce-scatters overlap the
     backward pass instead);
   - **communication groups**: a collective ends, for every participant, at the latest
     start among its participants plus the participant's own *transfer time*. Groups:
     a send/recv pair (within a DP replica); the embedding all-reduce of the first and
     last stage; the grad-norm all-reduce (``optimizer-clip-main-grad``) of every stage
     and DP rank; each DP collective across the DP ranks of its stage.

2. **Durations.** A compute (local) op's duration is its recorded ``duration``; a
   communication op's is its transfer time ``end - max(start of its group)`` (its
   waiting for peers removed), clipped at 0.

3. **Simulation.** Topological order of the graph with communication groups as units;
   every step and DP rank at once (numpy ``(steps, dp)`` arrays). A step's simulated
   time is the end of its last ``optimizer`` op, from the step start (no launch delay).

4. **What-if.** ``T_replay``: the trace's own durations replayed (the artifact's
   *no-delay* timeline); ``T_ideal``: every op's duration replaced by the ideal of its
   operation type, pooled over all stages, DP ranks and steps (compute: the mean;
   communication: the median), so a stage that does more work than the others (a
   partitioning imbalance) counts as straggling, as in the paper. Then::

       S        = sum_t T_replay[t] / sum_t T_ideal[t]                 (Eq. 1)
       S_G      = sum_t T_G[t] / sum_t T_ideal[t]                      (Eq. 2, 4)

   where ``T_G`` is the ideal timeline with only the ops of group ``G`` (a DP rank, a
   stage, an operation type, a worker) kept at their recorded durations.
   ``launch_slowdown = sum T_measured / sum T_replay`` is the simulation gap (CPU-side
   delays the model does not see).

   The *removal* view answers "what if only G were fixed": ``T_rem,G`` is the replay
   with only G's ops made ideal, and ``share_G = (sum T_replay - sum T_rem,G) /
   (sum T_replay - sum T_ideal)`` the fraction of the straggling time G alone
   explains. The paper's M_S is ``share`` of the last stage; M_W is ``share`` of the
   top 3% workers ranked by ``min(S_dp, S_stage)``.

5. **Labels.** A stage, DP rank or worker is a straggler when the job's ``S`` reaches
   ``decompose_min_slowdown`` (the artifact's 1.03) and fixing that component alone
   removes at least ``straggler_min_share`` (0.5) of the straggling time; when a worker
   qualifies, the stage and DP rank that contain it are not labeled separately (the
   finest component is the cause). Label slowdown = ``S_G``.

Limitation: interleaved pipelines (``vpp_size > 1``) are not modeled (BadInput).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from faultlab.errors import BadInput

FORMAT = "straggler-trace"
TRACE_COLUMNS = ("dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id", "mc", "gmc", "mb_id")

FWD, BWD = "forward-compute", "backward-compute"
P2P_OPTYPES = ("forward-send", "forward-recv", "backward-send", "backward-recv")
DP_COLLECTIVES = ("params-all-gather", "grads-reduce-scatter", "separate-grads-all-reduce")
LAYERNORM, EMBEDDING, CLIP, OPTIMIZER, GC = (
    "layernorm-grads-all-reduce", "embedding-grads-all-reduce", "optimizer-clip-main-grad", "optimizer", "gc")
#: operation types whose ideal is the median (communication); every other type is
#: compute and its ideal is the mean (as the artifact does)
COMM_OPTYPES = P2P_OPTYPES + DP_COLLECTIVES + (LAYERNORM, EMBEDDING, CLIP)
KNOWN_OPTYPES = (FWD, BWD, OPTIMIZER, GC) + COMM_OPTYPES
#: the decomposition by operation type merges each direction's send/recv (the paper's
#: ``forward-pp-comm`` / ``backward-pp-comm``)
OPTYPE_GROUP = {"forward-send": "forward-pp-comm", "forward-recv": "forward-pp-comm",
                "backward-send": "backward-pp-comm", "backward-recv": "backward-pp-comm"}


@dataclass(frozen=True)
class TraceConfig:
    """Defaults of the straggler-trace analysis (the same for every trace).

    Attributes:
        decompose_min_slowdown: the job's S must reach this ratio before any component
            is labeled (below it there is no straggling worth attributing); the
            OSDI'25 artifact's decomposition threshold. 1.03.
        straggler_min_share: a component is a straggler when making it alone ideal
            removes at least this fraction of the straggling time
            ``sum T_replay - sum T_ideal``. 0.5.
        mw_top_fraction: M_W takes this fraction of the workers (rounded up) with the
            highest ``min(S_dp, S_stage)`` (the paper's 3%). 0.03.
    """

    decompose_min_slowdown: float = 1.03
    straggler_min_share: float = 0.5
    mw_top_fraction: float = 0.03

    def __post_init__(self) -> None:
        if not float(self.decompose_min_slowdown) >= 1.0:
            raise BadInput(f"must be >= 1.0 (a ratio), got {self.decompose_min_slowdown!r}", field="decompose_min_slowdown")
        for name in ("straggler_min_share", "mw_top_fraction"):
            v = float(getattr(self, name))
            if not 0.0 < v <= 1.0:
                raise BadInput(f"must be in (0, 1], got {v!r}", field=name)

    def to_dict(self) -> dict:
        return asdict(self)


# -- reading --------------------------------------------------------------------------


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


def _own_metas(traces: list[Path]) -> None:
    """BadInput (field PATH) when a trace of a folder of several has no
    ``meta-NAME.yaml`` of its own: it would be read with another trace's sizes."""
    for t in traces:
        if _meta_beside(t) is None:
            name = _trace_name(t)
            raise BadInput(f"{t.name} has no meta-{name or 'NAME'}.yaml beside it", field="PATH",
                           fix="in a folder of several traces each trace-NAME.parquet needs its own meta-NAME.yaml")


def _distinct_runs(traces: list[Path], run_ids: list[str]) -> None:
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
    import pyarrow.parquet as pq

    trace_path, meta_path = find_files(path)
    try:
        names = pq.ParquetFile(trace_path).schema_arrow.names
    except Exception as e:  # pyarrow raises several types for a non-Parquet file
        raise BadInput(f"{trace_path} is not a readable Parquet file ({e})", field="PATH") from None
    missing = [c for c in TRACE_COLUMNS if c not in names]
    if missing:
        raise BadInput(f"{trace_path.name} misses column(s) {', '.join(missing)}", field="trace",
                       fix=f"a straggler trace has columns {', '.join(TRACE_COLUMNS)}")
    try:
        df = pq.read_table(trace_path, columns=list(TRACE_COLUMNS)).to_pandas()
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
    """The meta file as a mapping, read strictly: UTF-8, at most
    :data:`MAX_META_BYTES`, no YAML aliases (a few hundred bytes of nested aliases
    expand to gigabytes), no key written twice (:mod:`faultlab.yamlsafe`).
    Raises BadInput (field ``meta``) naming the file otherwise."""
    import yaml

    from faultlab import yamlsafe

    fix = "a meta file as StragglerAnalysis writes it (dp_size, pp_size, ... as plain YAML)"
    raw = meta_path.read_bytes()[: MAX_META_BYTES + 1]
    if len(raw) > MAX_META_BYTES:
        raise BadInput(f"{meta_path.name}: over {MAX_META_BYTES} bytes, no meta file", field="meta", fix=fix)
    try:
        text = raw.decode("utf-8")
        if any(isinstance(t, yaml.AliasToken) for t in yaml.scan(text)):
            raise BadInput(f"{meta_path.name}: holds a YAML alias (*name)", field="meta", fix="write each value out")
        meta = yamlsafe.load(text) or {}
    except UnicodeDecodeError as e:
        raise BadInput(f"{meta_path.name}: not UTF-8 text (byte {e.start})", field="meta", fix=fix) from None
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
    from faultlab.labeler.importers import numbers_or_refuse

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
    from faultlab.labeler.importers import SkipCount

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


def _left_out(df: pd.DataFrame, model: "TraceModel", skips) -> None:
    """Count, in ``skips``, the rows the model leaves out (:func:`build_model`): of an
    operation type it does not model, of a step without the same operations on every
    worker."""
    known = df["optype"].isin(KNOWN_OPTYPES).to_numpy()
    if model.ignored_optypes:
        skips.add(f"of an operation type not modeled ({', '.join(model.ignored_optypes)})", int((~known).sum()))
    if model.dropped_steps:
        n = int((known & df["step"].isin(model.dropped_steps).to_numpy()).sum())
        skips.add(f"of {len(model.dropped_steps)} step(s) without the same operations on every worker", n)


# -- the dependency model ---------------------------------------------------------------


@dataclass
class _Unit:
    members: list[int]
    grouped: bool  # a communication group: ends at max(start) + transfer
    dp_sync: bool  # the group also spans the DP ranks


@dataclass
class TraceModel:
    """The per-step dependency model and the trace as dense arrays.

    ``nodes[n] = (stage, optype, seq_id)``; arrays are ``(N, S, D)``: N nodes, S steps
    (``steps``), D DP ranks; ``start`` is relative to the step start (s), ``duration``
    the recorded duration (s), ``eff`` the effective duration the simulator uses
    (duration for local ops, transfer time for grouped ones), all float64.
    """

    nodes: list[tuple[int, str, int]]
    deps: list[list[int]]
    units: list[_Unit]
    order: list[int]  # unit indices in topological order
    steps: np.ndarray
    dp_size: int
    pp_size: int
    start: np.ndarray
    duration: np.ndarray
    eff: np.ndarray
    measured: np.ndarray  # (S,) measured step time, s
    step_start: np.ndarray  # (S,) earliest start_ts of the step, as in the trace
    step_end: np.ndarray  # (S,) latest end of the step, as in the trace
    rank_of: dict[tuple[int, int], int]  # (dp_rank, stage) -> global rank
    dropped_steps: list[int] = field(default_factory=list)
    ignored_optypes: list[str] = field(default_factory=list)

    @property
    def N(self) -> int:
        return len(self.nodes)

    def node_stage(self) -> np.ndarray:
        return np.array([n[0] for n in self.nodes], dtype=np.int64)

    def node_optype(self) -> np.ndarray:
        return np.array([n[1] for n in self.nodes], dtype=object)


def build_model(df: pd.DataFrame, meta: dict) -> TraceModel:
    """Build the dependency model (see the module docstring) and the dense arrays.

    Steps whose operations do not match the others' (an op missing on some worker) are
    dropped and listed in ``dropped_steps``; operation types the model does not know
    are left out (``ignored_optypes``).

    The steps, in order: :func:`_known_rows` (the modeled operation types),
    :func:`_relative_start` (each op's start from its step's start),
    :func:`_complete_steps` (the node set and the steps analyzed),
    :func:`_analyzed_rows` (their rows), :func:`_node_order` (the nodes in reference
    order), :func:`_dense` (the ``(N, S, D)`` arrays), :func:`_dependencies` (module
    docstring, 1.), :func:`_units` (the communication groups), :func:`_toposort`,
    :func:`_transfer_times` (2.), :func:`_measured_steps`, :func:`_step_bounds` and
    :func:`_rank_of`.

    Raises:
        BadInput when the trace is empty, no step is complete, or the model has a cycle.
    """
    df, ignored = _known_rows(df)
    # the sizes the trace shows (read_trace checked they fit the meta file's)
    D = int(df["dp_rank"].max()) + 1
    pp = int(df["stage"].max()) + 1
    keys = list(zip(df["stage"].to_numpy().tolist(), df["optype"].to_numpy().tolist(), df["seq_id"].to_numpy().tolist()))
    rel = _relative_start(df)
    node_keys, good, dropped = _complete_steps(df, keys, D)
    d, keys, rel = _analyzed_rows(df, keys, rel, good)
    steps = np.sort(good)
    nodes = _node_order(node_keys, keys, rel, d)
    start, dur = _dense(d, keys, rel, nodes.idx, steps, D)
    _dependencies(nodes, pp)
    units = _units(nodes, pp, D)
    order = _toposort(units, nodes.deps, nodes.keys)
    step_start, step_end = _step_bounds(d, steps)
    return TraceModel(
        nodes=nodes.keys, deps=nodes.deps, units=units, order=order, steps=steps, dp_size=D, pp_size=pp,
        start=start, duration=dur, eff=_transfer_times(start, dur, units), measured=_measured_steps(start, dur),
        step_start=step_start, step_end=step_end,
        rank_of=_rank_of(d), dropped_steps=dropped, ignored_optypes=ignored,
    )


def _known_rows(df: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The rows of an operation type the model knows (:data:`KNOWN_OPTYPES`), and the
    sorted other types found (``ignored_optypes``).

    Raises:
        BadInput when the trace has no rows, or no row of a known type.
    """
    if len(df) == 0:
        raise BadInput("the trace has no rows", field="trace")
    known = df["optype"].isin(KNOWN_OPTYPES)
    ignored = sorted(set(df.loc[~known, "optype"].unique().tolist()))
    df = df[known]
    if len(df) == 0:
        raise BadInput(f"the trace has no operation of a known type (found {', '.join(ignored)})", field="trace")
    return df, ignored


def _relative_start(df: pd.DataFrame) -> np.ndarray:
    """Each row's ``start_ts`` from its step's earliest ``start_ts`` (seconds, a
    relative clock), ``(rows,)`` float64."""
    st0 = df.groupby("step")["start_ts"].transform("min").to_numpy()
    return df["start_ts"].to_numpy() - st0


def _complete_steps(df: pd.DataFrame, keys: list[tuple], D: int) -> tuple[list[tuple], np.ndarray, list[int]]:
    """The node set and the steps analyzed.

    A step is complete when each of its ops (``keys``, one ``(stage, optype, seq_id)``
    per row) appears once on every one of the ``D`` DP ranks; the ops of the most
    common complete step are the nodes, and the steps with exactly those ops are
    analyzed (the others are dropped and listed). Returns ``(node_keys, good steps
    (sorted int64), dropped steps (sorted))``.

    Raises:
        BadInput when no step is complete.
    """
    inst = pd.DataFrame({"key": keys, "step": df["step"].to_numpy(), "dp": df["dp_rank"].to_numpy()})
    all_steps = np.unique(df["step"].to_numpy())
    g = inst.groupby(["step", "key"], sort=True)["dp"].agg(["size", "nunique"])
    pair_ok = (g["size"] == D) & (g["nunique"] == D)
    sigs: dict[tuple, list[int]] = {}
    for st, sub in pair_ok.groupby(level=0, sort=True):
        if bool(sub.all()):
            sigs.setdefault(tuple(sub.index.get_level_values(1)), []).append(int(st))
    if not sigs:
        raise BadInput("no step of the trace has the same operations on every worker", field="trace")
    sig = max(sigs, key=lambda k: (len(sigs[k]), len(k), -min(sigs[k])))
    good = np.array(sorted(sigs[sig]), dtype=np.int64)
    dropped = sorted(int(s) for s in set(all_steps.tolist()) - set(good.tolist()))
    return list(sig), good, dropped


def _analyzed_rows(df: pd.DataFrame, keys: list[tuple], rel: np.ndarray, good: np.ndarray) -> tuple[pd.DataFrame, list[tuple], np.ndarray]:
    """The rows of the ``good`` steps: ``(rows, their keys, their relative start (s))``."""
    sel = np.isin(df["step"].to_numpy(), good)
    return df[sel], [k for k, s in zip(keys, sel) if s], rel[sel]


@dataclass
class _Nodes:
    """The model's nodes while its dependencies are built: ``keys[n] = (stage, optype,
    seq_id)`` in reference order, ``idx`` their index, ``ref``/``ref_end`` the median
    relative start/end (s) of each key over every replica, ``mc`` each key's model
    chunk (its first recorded ``mc``), ``deps[n]`` the nodes ``n`` waits for."""

    keys: list[tuple[int, str, int]]
    ref: pd.Series
    ref_end: pd.Series
    mc: dict = field(default_factory=dict)
    deps: list[list[int]] = field(init=False)
    idx: dict = field(init=False)

    def __post_init__(self) -> None:
        self.idx = {k: i for i, k in enumerate(self.keys)}
        self.deps = [[] for _ in self.keys]

    def dep(self, v, u) -> None:
        """``v`` waits for ``u`` (once; never on itself)."""
        if u is not None and v is not None and u != v and u not in self.deps[v]:
            self.deps[v].append(u)

    def chain(self, ns, first_deps=()) -> None:
        """``ns`` in a chain (each waits for the one before), the first for ``first_deps``."""
        prev = list(first_deps)
        for n in ns:
            for u in prev:
                self.dep(n, u)
            prev = [n]

    def of(self, stage: int, optype: str) -> list[int]:
        """The nodes of ``optype`` on ``stage``, by ``seq_id``."""
        return sorted((self.idx[k] for k in self.keys if k[0] == stage and k[1] == optype), key=lambda n: self.keys[n][2])


def _node_order(node_keys: list[tuple], keys: list[tuple], rel: np.ndarray, d: pd.DataFrame) -> _Nodes:
    """The nodes in reference order: by stage, then the median relative start ``rel``
    (s) of the op over every replica (then optype, seq_id); with each key's median
    relative end and its model chunk (``mc`` of its first row)."""
    ref = pd.DataFrame({"key": keys, "rel": rel}).groupby("key")["rel"].median()
    ref_end = pd.DataFrame({"key": keys, "end": rel + d["duration"].to_numpy()}).groupby("key")["end"].median()
    node_keys = sorted(node_keys, key=lambda k: (k[0], float(ref[k]), k[1], k[2]))
    mc = {}
    for k, m in zip(keys, d["mc"].to_numpy().tolist()):
        mc.setdefault(k, m)
    return _Nodes(node_keys, ref, ref_end, mc)


def _dense(d: pd.DataFrame, keys: list[tuple], rel: np.ndarray, idx: dict, steps: np.ndarray, D: int) -> tuple[np.ndarray, np.ndarray]:
    """The relative start and the recorded duration as ``(N, S, D)`` float64 arrays
    (seconds; NaN where nothing was recorded)."""
    N, S = len(idx), len(steps)
    ni = np.array([idx[k] for k in keys], dtype=np.int64)
    si = np.searchsorted(steps, d["step"].to_numpy())
    di = d["dp_rank"].to_numpy()
    start = np.full((N, S, D), np.nan)
    dur = np.full((N, S, D), np.nan)
    start[ni, si, di] = rel
    dur[ni, si, di] = d["duration"].to_numpy()
    return start, dur


def _dependencies(nodes: _Nodes, pp: int) -> None:
    """Every stage's dependencies into ``nodes.deps`` (module docstring, 1.), stage by
    stage: :func:`_compute_stream`, :func:`_p2p_dependencies`, :func:`_dp_stream`,
    :func:`_param_gathers`, :func:`_after_last_compute`."""
    for s in range(pp):
        comp = _compute_stream(nodes, s)
        _p2p_dependencies(nodes, s, comp)
        _dp_stream(nodes, s)
        _param_gathers(nodes, s, comp)
        _after_last_compute(nodes, s, comp)


def _compute_stream(nodes: _Nodes, s: int) -> list[int]:
    """Stage ``s``'s forward/backward compute ops as one stream, a chain in their
    reference order; returns the stream."""
    keys, ref = nodes.keys, nodes.ref
    comp = sorted((nodes.idx[k] for k in keys if k[0] == s and k[1] in (FWD, BWD)),
                  key=lambda n: (float(ref[keys[n]]), keys[n][2], keys[n][1]))
    nodes.chain(comp)
    return comp


def _p2p_dependencies(nodes: _Nodes, s: int, comp: list[int]) -> None:
    """Stage ``s``'s pipeline send/recv, per direction: each of recv and send a chain;
    the k-th recv feeds the k-th compute of its direction and is posted after the
    compute just before it in the stream (``comp``); the k-th send follows the k-th
    compute. When there is one recv fewer than computes the first was not recorded."""
    pos = {n: i for i, n in enumerate(comp)}
    for t in ("forward", "backward"):
        comps_t = sorted((n for n in comp if nodes.keys[n][1] == f"{t}-compute"), key=lambda n: pos[n])
        recv, send = nodes.of(s, f"{t}-recv"), nodes.of(s, f"{t}-send")
        nodes.chain(recv)
        nodes.chain(send)
        off = 1 if len(recv) + 1 == len(comps_t) else 0  # the first recv is sometimes not recorded
        for k, r in enumerate(recv):
            if k + off < len(comps_t):
                c = comps_t[k + off]
                nodes.dep(c, r)
                if pos[c] > 0:
                    nodes.dep(r, comp[pos[c] - 1])
        for k, sn in enumerate(send):
            if k < len(comps_t):
                nodes.dep(sn, comps_t[k])


def _dp_stream(nodes: _Nodes, s: int) -> None:
    """Stage ``s``'s data-parallel collectives (params all-gather, grads
    reduce-scatter) as one stream, a chain in reference order."""
    keys, ref = nodes.keys, nodes.ref
    dpc = sorted((nodes.idx[k] for k in keys if k[0] == s and k[1] in DP_COLLECTIVES[:2]),
                 key=lambda n: (float(ref[keys[n]]), keys[n][2]))
    nodes.chain(dpc)


def _param_gathers(nodes: _Nodes, s: int, comp: list[int]) -> None:
    """The first forward compute (in the stream ``comp``) of each model chunk (``mc``)
    of stage ``s`` waits for its parameters' all-gather (the chunk's all-gather with
    the highest ``seq_id``; the stage's first forward when no forward has that chunk)."""
    fwds = [n for n in comp if nodes.keys[n][1] == FWD]
    done_mc = set()
    for ag in reversed(nodes.of(s, "params-all-gather")):
        m = nodes.mc.get(nodes.keys[ag])
        if m in done_mc:
            continue
        done_mc.add(m)
        cand = [n for n in fwds if nodes.mc.get(nodes.keys[n]) == m] or fwds[:1]
        if cand:
            nodes.dep(cand[0], ag)


def _after_last_compute(nodes: _Nodes, s: int, comp: list[int]) -> None:
    """Stage ``s``'s chain after the compute that ends last: ``gc -> layernorm ->
    embedding -> grads-reduce-scatter... -> optimizer-clip-main-grad -> optimizer``;
    with ``separate-grads-all-reduce`` present the reduce-scatters overlap the backward
    pass instead (:func:`_overlapped_reduce_scatters`) and the separate all-reduce takes
    their place in the chain, also after the last reduce-scatter."""
    of = nodes.of
    pos = {n: i for i, n in enumerate(comp)}
    ovlp = any(k[0] == s and k[1] == "separate-grads-all-reduce" for k in nodes.keys)
    rs = of(s, "grads-reduce-scatter")
    last = max(comp, key=lambda n: (float(nodes.ref_end[nodes.keys[n]]), pos[n])) if comp else None
    tail = of(s, GC) + of(s, LAYERNORM) + of(s, EMBEDDING)
    first_deps = [last] if last is not None else []
    if ovlp:
        _overlapped_reduce_scatters(nodes, rs, comp)
        tail += of(s, "separate-grads-all-reduce")
        first_deps += rs[-1:]
    else:
        tail += rs
    tail += of(s, CLIP) + of(s, OPTIMIZER)
    nodes.chain(tail, first_deps)


def _overlapped_reduce_scatters(nodes: _Nodes, rs: list[int], comp: list[int]) -> None:
    """Each model chunk's first (by ``seq_id``) grads reduce-scatter of ``rs`` follows
    the last backward compute (in the stream ``comp``) of its chunk (the stage's last
    backward when none has that chunk)."""
    bwds = [n for n in comp if nodes.keys[n][1] == BWD]
    done_mc = set()
    for r in rs:
        m = nodes.mc.get(nodes.keys[r])
        if m in done_mc:
            continue
        done_mc.add(m)
        cand = [n for n in bwds if nodes.mc.get(nodes.keys[n]) == m] or bwds[-1:]
        if cand:
            nodes.dep(r, cand[-1])


def _units(nodes: _Nodes, pp: int, D: int) -> list[_Unit]:
    """The simulation units: the communication groups (:func:`_p2p_groups`,
    :func:`_allreduce_groups`, :func:`_dp_groups`, then each unpaired send/recv as a
    communication op of its own), then every other node as a unit of its own."""
    N = len(nodes.keys)
    groups = _p2p_groups(nodes, pp) + _allreduce_groups(nodes, D) + _dp_groups(nodes, D)
    in_group = np.zeros(N, dtype=bool)
    for m, _ in groups:
        in_group[m] = True
    unpaired = [([n], False) for n in range(N) if nodes.keys[n][1] in P2P_OPTYPES and not in_group[n]]
    for m, _ in unpaired:
        in_group[m] = True
    groups += unpaired
    units = [_Unit(sorted(m), True, sync) for m, sync in groups]
    units += [_Unit([n], False, False) for n in range(N) if not in_group[n]]
    return units


def _p2p_groups(nodes: _Nodes, pp: int) -> list[tuple[list[int], bool]]:
    """``(members, dp_sync)`` of each send/recv pair: ``forward-send`` k of stage s with
    ``forward-recv`` k of stage s+1, ``backward-send`` k of stage s with
    ``backward-recv`` k of stage s-1 (within a DP replica)."""
    groups = []
    for s in range(pp):
        for t, delta in (("forward", 1), ("backward", -1)):
            peer = s + delta
            if not 0 <= peer < pp:
                continue
            send, recv = nodes.of(s, f"{t}-send"), nodes.of(peer, f"{t}-recv")
            for a, b in zip(send, recv):
                groups.append(([a, b], False))
    return groups


def _allreduce_groups(nodes: _Nodes, D: int) -> list[tuple[list[int], bool]]:
    """``(members, dp_sync)`` per ``seq_id`` of the embedding all-reduce (its stages,
    within a DP replica) and of the grad-norm all-reduce (``optimizer-clip-main-grad``:
    every stage, across the DP ranks too when ``D > 1``)."""
    groups = []
    for optype, sync in ((EMBEDDING, False), (CLIP, D > 1)):
        by_seq: dict[int, list[int]] = {}
        for k in nodes.keys:
            if k[1] == optype:
                by_seq.setdefault(k[2], []).append(nodes.idx[k])
        for seq in sorted(by_seq):
            groups.append((by_seq[seq], sync))
    return groups


def _dp_groups(nodes: _Nodes, D: int) -> list[tuple[list[int], bool]]:
    """``(members, dp_sync)`` of each DP collective across the DP ranks of its stage
    (none when ``D == 1``)."""
    if D <= 1:
        return []
    return [([nodes.idx[k]], True) for k in nodes.keys if k[1] in DP_COLLECTIVES]


def _transfer_times(start: np.ndarray, dur: np.ndarray, units: list[_Unit]) -> np.ndarray:
    """The effective durations ``(N, S, D)`` s (module docstring, 2.): the recorded
    duration for a local op; for a grouped op its transfer time ``end - max(start of
    its group)`` (over the DP ranks too when DP-synchronized), clipped at 0."""
    end = start + dur
    eff = dur.copy()
    for u in units:
        if not u.grouped:
            continue
        gmax = np.max(start[u.members], axis=0)  # (S, D)
        if u.dp_sync:
            gmax = np.max(gmax, axis=1, keepdims=True)
        for v in u.members:
            eff[v] = np.maximum(end[v] - gmax, 0.0)
    return eff


def _measured_steps(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """The measured step times ``(S,)`` s: the latest end minus the earliest start of
    the step's ops (relative clock), over every node and DP rank."""
    end = start + dur
    return np.max(np.max(end, axis=2), axis=0) - np.min(np.min(start, axis=2), axis=0)


def _step_bounds(d: pd.DataFrame, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each analyzed step's earliest ``start_ts`` and latest ``start_ts + duration``,
    ``(S,)`` each, on the trace's own clock."""
    sel_df = pd.DataFrame({"step": d["step"].to_numpy(), "abs": d["start_ts"].to_numpy(), "end": d["start_ts"].to_numpy() + d["duration"].to_numpy()})
    g = sel_df.groupby("step")
    return g["abs"].min().reindex(steps).to_numpy(), g["end"].max().reindex(steps).to_numpy()


def _rank_of(d: pd.DataFrame) -> dict[tuple[int, int], int]:
    """``{(dp_rank, stage): global rank}`` (the first recorded)."""
    rank_of = {}
    for dp_, st_, rk in d[["dp_rank", "stage", "rank"]].drop_duplicates().itertuples(index=False):
        rank_of.setdefault((int(dp_), int(st_)), int(rk))
    return rank_of


def _toposort(units: list[_Unit], deps: list[list[int]], node_keys) -> list[int]:
    """Kahn's algorithm over units (deterministic: smallest unit index first)."""
    unit_of = {}
    for ui, u in enumerate(units):
        for n in u.members:
            unit_of[n] = ui
    preds = [set() for _ in units]
    for ui, u in enumerate(units):
        for v in u.members:
            for p in deps[v]:
                if unit_of[p] != ui:
                    preds[ui].add(unit_of[p])
    succ = [[] for _ in units]
    for ui, ps in enumerate(preds):
        for p in ps:
            succ[p].append(ui)
    deg = [len(p) for p in preds]
    heap = [ui for ui, k in enumerate(deg) if k == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        ui = heapq.heappop(heap)
        order.append(ui)
        for w in succ[ui]:
            deg[w] -= 1
            if deg[w] == 0:
                heapq.heappush(heap, w)
    if len(order) != len(units):
        stuck = [node_keys[units[ui].members[0]] for ui in range(len(units)) if deg[ui] > 0][:5]
        raise BadInput(f"the trace's dependency model has a cycle (involving {stuck})", field="trace",
                       fix="the recorded operation order is inconsistent; check the trace's start_ts")
    return order


def simulate(model: TraceModel, eff: np.ndarray) -> np.ndarray:
    """Simulated step times ``(S,)`` in seconds for effective durations ``eff``
    ``(N, S, D)`` (seconds): every op starts when its dependencies end (a root at the
    step start), a communication group ends for each member at the group's latest start
    (over the DP ranks too when DP-synchronized) plus the member's duration; the step
    ends with its last ``optimizer`` op (the last op of any kind when there is none)."""
    N, S, D = eff.shape
    start = np.zeros((N, S, D))
    end = np.zeros((N, S, D))
    for ui in model.order:
        u = model.units[ui]
        for v in u.members:
            ds = model.deps[v]
            if ds:
                start[v] = np.max(end[ds], axis=0) if len(ds) > 1 else end[ds[0]]
        if u.grouped:
            ready = np.max(start[u.members], axis=0)
            if u.dp_sync:
                ready = np.broadcast_to(np.max(ready, axis=1, keepdims=True), (S, D))
            for v in u.members:
                end[v] = ready + eff[v]
        else:
            v = u.members[0]
            end[v] = start[v] + eff[v]
    opt = [n for n, k in enumerate(model.nodes) if k[1] == OPTIMIZER]
    last = end[opt] if opt else end
    return np.max(np.max(last, axis=2), axis=0)


def ideal_durations(model: TraceModel) -> tuple[np.ndarray, dict[str, float]]:
    """The ideal effective durations ``(N, S, D)``: per operation type, pooled over every
    stage, DP rank and step, the mean (compute) or the median (communication) of the
    effective durations. Returns ``(eff_ideal, {optype: seconds})``."""
    ot = model.node_optype()
    out = np.empty_like(model.eff)
    per = {}
    for t in sorted(set(ot.tolist())):
        m = ot == t
        vals = model.eff[m].ravel()
        vals = vals[np.isfinite(vals)]
        v = float(np.median(vals) if t in COMM_OPTYPES else np.mean(vals)) if vals.size else 0.0
        out[m] = v
        per[t] = v
    return out, per


# -- the analysis ---------------------------------------------------------------------


def _masks(model: TraceModel) -> dict[str, dict[str, np.ndarray]]:
    """Boolean ``(N, S, D)`` masks of the decomposition groups, by dimension."""
    N, S, D = model.eff.shape
    st = model.node_stage()
    ot = model.node_optype()
    out: dict[str, dict[str, np.ndarray]] = {"dp_rank": {}, "stage": {}, "optype": {}, "rank": {}}
    for j in range(D):
        m = np.zeros((N, S, D), dtype=bool)
        m[:, :, j] = True
        out["dp_rank"][str(j)] = m
    for s in range(model.pp_size):
        m = np.zeros((N, S, D), dtype=bool)
        m[st == s] = True
        out["stage"][str(s)] = m
    grp = np.array([OPTYPE_GROUP.get(t, t) for t in ot], dtype=object)
    for g in sorted(set(grp.tolist())):
        m = np.zeros((N, S, D), dtype=bool)
        m[grp == g] = True
        out["optype"][g] = m
    for (j, s), r in sorted(model.rank_of.items(), key=lambda kv: kv[1]):
        if j >= D:
            continue
        m = np.zeros((N, S, D), dtype=bool)
        m[st == s, :, j] = True
        out["rank"][str(r)] = m
    return out


def analyze(df: pd.DataFrame, meta: dict, config: TraceConfig | None = None) -> tuple[dict, TraceModel]:
    """What-if analysis of one trace (see the module docstring for the method).

    The steps, in order: :func:`build_model`, :func:`_timelines` (T_replay, T_ideal,
    S), :func:`_decompose` (S_G and the removal share of every group of
    :func:`_masks`), :func:`_ms` and :func:`_mw` (the paper's M_S, M_W),
    :func:`_stragglers` (the labeled components) and :func:`_result` (the document).

    Args:
        df: the trace (``TRACE_COLUMNS``), e.g. from :func:`read_trace`.
        meta: ``dp_size``, ``pp_size`` (and optionally ``trial_name``, ``run_id``, ...).
        config: :class:`TraceConfig` (defaults when None).

    Returns:
        ``(result, model)``. ``result`` is JSON-able: ``slowdown`` (S, ratio),
        ``slowdown_measured`` (measured / ideal), ``launch_slowdown`` (measured /
        replay), ``decomposition`` ``{"rank"|"dp_rank"|"stage"|"optype": {key: S_G}}``,
        ``decomposition_per_step`` (same, per step), ``removal_share`` (same keys:
        fraction of the straggling time removed by fixing only that group),
        ``per_rank`` ``{"rank:N": S_w}``, ``ms``/``mw`` (the paper's M_S and M_W),
        ``step_time_s`` ``{"measured"|"replay"|"ideal": {step: s}}``,
        ``ideal_durations_s`` per operation type, ``stragglers`` (the labeled
        components) and bookkeeping (``n_steps``, ``dropped_steps``, ...).

    Raises:
        BadInput for an empty or inconsistent trace.
    """
    cfg = config or TraceConfig()
    model = build_model(df, meta)
    tl = _timelines(model)
    masks = _masks(model)
    dec = _decompose(model, tl, masks)
    ms = _ms(model, dec)
    mw = _mw(model, tl, dec, masks, cfg)
    stragglers = _stragglers(tl.S, dec.decomp, dec.share, model, cfg)
    return _result(model, meta, cfg, tl, dec, ms, mw, stragglers), model


@dataclass(frozen=True)
class _Timelines:
    """The timelines of one trace (module docstring, 4.)."""

    ideal: np.ndarray  # (N, S, D) ideal effective durations, s (ideal_durations)
    per_type: dict[str, float]  # the ideal per operation type, s
    replay: np.ndarray  # (S,) T_replay, s
    ideal_t: np.ndarray  # (S,) T_ideal, s
    measured: np.ndarray  # (S,) measured step time, s
    A: float  # sum T_replay, s
    I: float  # sum T_ideal, s
    M: float  # sum T_measured, s
    S: float  # A / I (Eq. 1), NaN when I is 0
    gap: float  # the straggling time A - I, s


def _timelines(model: TraceModel) -> _Timelines:
    """``T_replay`` (the trace's own effective durations replayed), ``T_ideal`` (every
    op at the ideal of its type, :func:`ideal_durations`), the measured step times,
    their sums and ``S = sum T_replay / sum T_ideal`` (Eq. 1)."""
    ideal, per_type = ideal_durations(model)
    t_replay = simulate(model, model.eff)
    t_ideal = simulate(model, ideal)
    t_meas = model.measured
    A, I, M = float(t_replay.sum()), float(t_ideal.sum()), float(t_meas.sum())
    S = A / I if I > 0 else float("nan")
    return _Timelines(ideal, per_type, t_replay, t_ideal, t_meas, A, I, M, S, A - I)


@dataclass
class _Decomposition:
    """The what-if figures of every group ``G``, ``{dim: {key: value}}`` (dims of
    :func:`_masks`)."""

    decomp: dict[str, dict[str, float]]  # S_G (Eq. 2, 4), by S_G descending
    per_step: dict[str, dict[str, dict[str, float]]]  # {dim: {step: {key: S_G of that step}}}
    share: dict[str, dict[str, float]]  # share_G: the fraction of the straggling time G alone explains
    rem_s: dict[str, dict[str, float]]  # sum T_replay / sum T_rem,G


def _decompose(model: TraceModel, tl: _Timelines, masks: dict[str, dict[str, np.ndarray]]) -> _Decomposition:
    """For every group of ``masks``: ``S_G = sum T_G / sum T_ideal`` (Eq. 2, 4; also per
    step), and the removal view: ``sum T_replay / sum T_rem,G`` and ``share_G = (sum
    T_replay - sum T_rem,G) / (sum T_replay - sum T_ideal)`` (0 when nothing
    straggles); timelines from :func:`_group_timelines`."""
    A, I, gap = tl.A, tl.I, tl.gap
    decomp: dict[str, dict[str, float]] = {}
    per_step: dict[str, dict[str, dict[str, float]]] = {}
    share: dict[str, dict[str, float]] = {}
    rem_s: dict[str, dict[str, float]] = {}
    for dim, groups in masks.items():
        decomp[dim], share[dim], rem_s[dim] = {}, {}, {}
        for key, m in groups.items():
            t_add, t_rem = _group_timelines(model, tl, m)
            decomp[dim][key] = float(t_add.sum()) / I if I > 0 else float("nan")
            rem_s[dim][key] = A / float(t_rem.sum()) if t_rem.sum() > 0 else float("nan")
            share[dim][key] = (A - float(t_rem.sum())) / gap if gap > 0 else 0.0
            for i, st in enumerate(model.steps):
                per_step.setdefault(dim, {}).setdefault(str(int(st)), {})[key] = float(t_add[i] / tl.ideal_t[i]) if tl.ideal_t[i] > 0 else float("nan")
        decomp[dim] = dict(sorted(decomp[dim].items(), key=lambda kv: (-kv[1], kv[0])))
    return _Decomposition(decomp, per_step, share, rem_s)


def _group_timelines(model: TraceModel, tl: _Timelines, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The step times ``(S,)`` s of group ``G`` (mask ``m``, ``(N, S, D)``): ``T_G``
    (ideal, only G's ops at their recorded durations) and ``T_rem,G`` (the replay,
    only G's ops made ideal)."""
    t_add = simulate(model, np.where(m, model.eff, tl.ideal))
    t_rem = simulate(model, np.where(m, tl.ideal, model.eff))
    return t_add, t_rem


def _ms(model: TraceModel, dec: _Decomposition) -> dict:
    """The paper's M_S: ``share`` of the last stage (NaN when it has none)."""
    last = str(model.pp_size - 1)
    return {"stage": int(last), "share": dec.share["stage"].get(last, float("nan"))}


def _mw(model: TraceModel, tl: _Timelines, dec: _Decomposition, masks: dict[str, dict[str, np.ndarray]],
        cfg: TraceConfig) -> dict:
    """The paper's M_W: ``share`` of the workers of :func:`_top_workers` made ideal
    together; ``{"ranks": [global rank], "share": fraction}`` (0 when nothing straggles)."""
    top = _top_workers(model, dec, cfg)
    m_top = np.zeros_like(model.eff, dtype=bool)
    for r in top:
        m_top |= masks["rank"][str(r)]
    t_rem_top = simulate(model, np.where(m_top, tl.ideal, model.eff))
    return {"ranks": top, "share": (tl.A - float(t_rem_top.sum())) / tl.gap if tl.gap > 0 else 0.0}


def _top_workers(model: TraceModel, dec: _Decomposition, cfg: TraceConfig) -> list[int]:
    """The ``mw_top_fraction`` of the workers (rounded up, at least one) with the
    highest ``min(S_dp, S_stage)``, ties by rank."""
    scores = {}
    for (j, s), r in model.rank_of.items():
        scores[r] = min(dec.decomp["dp_rank"].get(str(j), float("nan")), dec.decomp["stage"].get(str(s), float("nan")))
    n_top = max(1, math.ceil(len(scores) * cfg.mw_top_fraction - 1e-9))
    return sorted(scores, key=lambda r: (-scores[r], r))[:n_top]


def _result(model: TraceModel, meta: dict, cfg: TraceConfig, tl: _Timelines, dec: _Decomposition, ms: dict, mw: dict,
            stragglers: list[dict]) -> dict:
    """The JSON-able result document of :func:`analyze` (its keys are listed there)."""
    A, I, M = tl.A, tl.I, tl.M
    steps = [int(s) for s in model.steps]
    return {
        "method": "osdi25-whatif-trace",
        "slowdown": tl.S,
        "slowdown_measured": M / I if I > 0 else float("nan"),
        "launch_slowdown": M / A if A > 0 else float("nan"),
        "actual_s": A,
        "simulated_s": I,
        "measured_s": M,
        "n_steps": len(steps),
        "steps": steps,
        "dropped_steps": model.dropped_steps,
        "ignored_optypes": model.ignored_optypes,
        "per_step_slowdown": {str(s): float(a / b) if b > 0 else float("nan") for s, a, b in zip(steps, tl.replay, tl.ideal_t)},
        "step_time_s": {
            "measured": {str(s): float(v) for s, v in zip(steps, tl.measured)},
            "replay": {str(s): float(v) for s, v in zip(steps, tl.replay)},
            "ideal": {str(s): float(v) for s, v in zip(steps, tl.ideal_t)},
        },
        "decomposition": dec.decomp,
        "decomposition_per_step": dec.per_step,
        "removal_share": dec.share,
        "removal_slowdown": dec.rem_s,
        "per_rank": {f"rank:{k}": v for k, v in sorted(dec.decomp["rank"].items(), key=lambda kv: int(kv[0]))},
        "ms": ms,
        "mw": mw,
        "ideal_durations_s": tl.per_type,
        "stragglers": stragglers,
        "job_meta": {k: v for k, v in meta.items()},
        "config": cfg.to_dict(),
    }


def _stragglers(S: float, decomp: dict, share: dict, model: TraceModel, cfg: TraceConfig) -> list[dict]:
    """The components to label (see the module docstring, 5.)."""
    if not (np.isfinite(S) and S >= cfg.decompose_min_slowdown):
        return []
    hit = {dim: [k for k, v in share[dim].items() if v >= cfg.straggler_min_share] for dim in ("rank", "stage", "dp_rank")}
    covered_stage, covered_dp = set(), set()
    for (j, s), r in model.rank_of.items():
        if str(r) in hit["rank"]:
            covered_stage.add(str(s))
            covered_dp.add(str(j))
    out = []
    kinds = {"rank": "rank", "stage": "stage", "dp_rank": "dp_rank"}
    for dim in ("stage", "dp_rank", "rank"):
        for k in sorted(hit[dim], key=int):
            if (dim == "stage" and k in covered_stage) or (dim == "dp_rank" and k in covered_dp):
                continue
            out.append({"component": f"{dim}:{k}", "component_kind": kinds[dim], "slowdown": decomp[dim][k],
                        "share": share[dim][k]})
    return out


def labels_from(result: dict, model: TraceModel, run_id: str = "") -> pd.DataFrame:
    """Labels (faultlab.schema.LABELS columns) for the stragglers of :func:`analyze`.

    One label per straggling component over the analyzed steps: ``start_step`` /
    ``end_step`` the first and last analyzed step; ``start_ts`` / ``end_ts`` the trace's
    own clock when it is a unix time (else NaN: the trace's times are relative to each
    step); ``slowdown`` = S_G; ``confidence`` = min(1, share); ``views`` ``"whatif"``;
    ``source`` ``"observed"``; ``cause`` ``"unknown"``.
    """
    from faultlab.labeler.fusion import _empty_labels, _typed, label_row

    rows = []
    absolute = bool(len(model.step_start)) and float(np.nanmin(model.step_start)) > 1e8
    t0 = float(np.nanmin(model.step_start)) if absolute else float("nan")
    t1 = float(np.nanmax(model.step_end)) if absolute else float("nan")
    for st in result["stragglers"]:
        dim, key = st["component"].split(":", 1)
        ev = {
            "method": "osdi25-whatif",
            "job_slowdown": result["slowdown"],
            "attributed_slowdown": st["slowdown"],
            "removal_share": st["share"],
            "removal_slowdown": result["removal_slowdown"][dim][key],
            "n_steps": result["n_steps"],
            "time_base": "unix" if absolute else "per-step relative (no absolute time in the trace)",
        }
        if dim == "stage":
            ev["ranks"] = sorted(r for (j, s), r in model.rank_of.items() if str(s) == key)
        elif dim == "dp_rank":
            ev["ranks"] = sorted(r for (j, s), r in model.rank_of.items() if str(j) == key)
        rows.append(label_row(run_id, st["component"], st["component_kind"], t0, t1, int(model.steps[0]), int(model.steps[-1]),
                              st["slowdown"], "whatif", round(float(min(1.0, max(0.0, st["share"]))), 6), ev))
    if not rows:
        return _empty_labels()
    return _typed(pd.DataFrame(rows).sort_values(["component"], kind="mergesort").reset_index(drop=True))


def import_trace(path: str | Path, config: TraceConfig | dict | None = None):
    """Import a StragglerAnalysis trace: what-if analysis and labels.

    Args:
        path: ``trace-NAME.parquet``, the folder holding it with ``meta-NAME.yaml``, or
            a folder of several traces (StragglerAnalysis' ``data/`` as published:
            ``trace-AR.parquet``, ``trace-SE.parquet``, ``trace-ST.parquet``, each with
            its meta file; every trace is imported).
        config: :class:`TraceConfig` or a dict of its fields.

    Returns:
        :class:`faultlab.labeler.importers.ImportResult` with ``labels`` (LABELS
        columns; ``run_id`` = ``TRIAL-RUNID`` from the meta file) and ``whatif`` (the
        :func:`analyze` result plus ``source`` paths; for several traces
        ``{"traces": {run_id: result}, "slowdown_by_trace": {run_id: S}}``);
        ``info`` with ``n_rows``, ``skipped`` (the rows left out by reason, see the
        module docstring; per trace for several) and ``skipped_line``.

    Raises:
        BadInput for a missing file or column, a bad config field, or an inconsistent trace.
    """
    from faultlab.labeler.importers import ImportResult, make_config

    cfg = make_config(TraceConfig, config)
    many = trace_files(path)
    if len(many) > 1:  # StragglerAnalysis' data/ folder as published: every trace in it
        _own_metas(many)
        parts = [import_trace(f, cfg) for f in many]
        _distinct_runs(many, [r.whatif["run_id"] for r in parts])
        labels = pd.concat([r.labels for r in parts if len(r.labels)], ignore_index=True) if any(
            len(r.labels) for r in parts) else parts[0].labels
        traces = {r.whatif["run_id"]: r.whatif for r in parts}
        whatif = {"method": parts[0].whatif.get("method"), "source": {"format": FORMAT, "folder": str(path)},
                  "traces": traces, "slowdown_by_trace": {k: v.get("slowdown") for k, v in traces.items()}}
        return ImportResult(format=FORMAT, labels=labels, whatif=whatif,
                            info={"n_rows": sum(r.info["n_rows"] for r in parts), "n_traces": len(parts),
                                  "traces": [str(f) for f in many],
                                  "skipped": {r.whatif["run_id"]: r.info["skipped"] for r in parts},
                                  "skipped_line": "; ".join(f"{r.whatif['run_id']}: {r.info['skipped_line']}"
                                                            for r in parts)})
    df, meta, paths = read_trace(path)
    skips = df.attrs["skips"]
    result, model = analyze(df, meta, cfg)
    _left_out(df, model, skips)
    run_id = f"{meta.get('trial_name', Path(paths['trace']).stem)}-{meta.get('run_id', 0)}"
    result["run_id"] = run_id
    result["source"] = {"format": FORMAT, **paths}
    labels = labels_from(result, model, run_id)
    return ImportResult(format=FORMAT, labels=labels, whatif=result,
                        info={"n_rows": skips.n_rows, "source": paths["trace"], "skipped": skips.to_dict(),
                              "skipped_line": skips.line()})


__all__ = ["FORMAT", "TRACE_COLUMNS", "TraceConfig", "TraceModel", "analyze", "build_model", "find_files",
           "ideal_durations", "import_trace", "labels_from", "read_trace", "simulate"]
