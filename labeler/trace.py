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
    name = trace.stem[len("trace"):].lstrip("-_")
    meta = None
    for cand in ([trace.parent / f"meta-{name}.yaml", trace.parent / f"meta-{name}.yml"] if name else []):
        if cand.exists():
            meta = cand
            break
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
    import yaml

    trace_path, meta_path = find_files(path)
    try:
        names = pq.ParquetFile(trace_path).schema_arrow.names
    except Exception as e:  # pyarrow raises several types for a non-Parquet file
        raise BadInput(f"{trace_path} is not a readable Parquet file ({e})", field="PATH") from None
    missing = [c for c in TRACE_COLUMNS if c not in names]
    if missing:
        raise BadInput(f"{trace_path.name} misses column(s) {', '.join(missing)}", field="trace",
                       fix=f"a straggler trace has columns {', '.join(TRACE_COLUMNS)}")
    df = pq.read_table(trace_path, columns=list(TRACE_COLUMNS)).to_pandas()
    df, skips = _clean_rows(df)
    meta: dict = {}
    if meta_path is not None:
        try:
            meta = yaml.safe_load(meta_path.read_text()) or {}
        except yaml.YAMLError as e:
            raise BadInput(f"{meta_path.name}: not valid YAML ({e})", field="meta") from None
        if not isinstance(meta, dict):
            raise BadInput(f"{meta_path.name}: expected a mapping", field="meta")
    dp_seen = int(df["dp_rank"].max()) + 1 if len(df) else 0
    pp_seen = int(df["stage"].max()) + 1 if len(df) else 0
    if "dp_size" not in meta or "pp_size" not in meta:
        meta = {**meta, "dp_size": meta.get("dp_size", dp_seen), "pp_size": meta.get("pp_size", pp_seen), "inferred": True}
    for k in ("dp_size", "pp_size", "vpp_size", "tp_size"):
        if k in meta and (not isinstance(meta[k], int) or meta[k] < 1):
            raise BadInput(f"{k} must be a positive integer, got {meta[k]!r}", field="meta")
    if len(df) and (dp_seen > meta["dp_size"] or pp_seen > meta["pp_size"]):
        raise BadInput(f"trace has dp_rank up to {dp_seen - 1} and stage up to {pp_seen - 1}, meta says dp_size="
                       f"{meta['dp_size']} pp_size={meta['pp_size']}", field="meta")
    if int(meta.get("vpp_size", 1)) > 1:
        raise BadInput(f"vpp_size={meta['vpp_size']}: interleaved pipelines are not modeled", field="meta",
                       fix="analyze a trace with vpp_size 1")
    df.attrs["skips"] = skips
    return df, meta, {"trace": str(trace_path), "meta": str(meta_path) if meta_path else None}


#: the key of one recorded operation: a trace holds each once
OP_KEY = ("dp_rank", "stage", "rank", "step", "optype", "seq_id")


def _clean_rows(df: pd.DataFrame):
    """The trace's rows that can be analyzed, typed (times float64 s, ids int64,
    ``optype`` str), and a :class:`faultlab.labeler.importers.SkipCount` of the others
    by their first reason: an empty value in a column the model uses (n/a), an
    infinite ``start_ts`` or ``duration``, a negative ``duration``, an operation
    recorded twice (:data:`OP_KEY`; the first row kept). Nothing is dropped in silence:
    the counts go into ``import.json`` and the CLI's one line."""
    from faultlab.labeler.importers import SkipCount

    skips = SkipCount(len(df))
    used = ["dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id"]
    na = df[used].isna().any(axis=1).to_numpy()
    skips.add("n/a (empty or missing value)", int(na.sum()))
    st = pd.to_numeric(df["start_ts"], errors="coerce").to_numpy(np.float64)
    du = pd.to_numeric(df["duration"], errors="coerce").to_numpy(np.float64)
    inf = ~na & (np.isinf(st) | np.isinf(du))
    skips.add("infinite start_ts or duration", int(inf.sum()))
    with np.errstate(invalid="ignore"):
        neg = ~na & ~inf & (du < 0)
    skips.add("negative duration", int(neg.sum()))
    keep = ~(na | inf | neg)
    if not keep.all():
        df = df[keep].reset_index(drop=True)
    df["optype"] = df["optype"].astype(str)
    for c in ("start_ts", "duration"):
        df[c] = df[c].astype(np.float64)
    for c in ("dp_rank", "stage", "rank", "step", "seq_id"):
        df[c] = df[c].astype(np.int64)
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

    Raises:
        BadInput when the trace is empty, no step is complete, or the model has a cycle.
    """
    if len(df) == 0:
        raise BadInput("the trace has no rows", field="trace")
    known = df["optype"].isin(KNOWN_OPTYPES)
    ignored = sorted(set(df.loc[~known, "optype"].unique().tolist()))
    df = df[known]
    if len(df) == 0:
        raise BadInput(f"the trace has no operation of a known type (found {', '.join(ignored)})", field="trace")
    # the sizes the trace shows (read_trace checked they fit the meta file's)
    D = int(df["dp_rank"].max()) + 1
    pp = int(df["stage"].max()) + 1
    keys = list(zip(df["stage"].to_numpy().tolist(), df["optype"].to_numpy().tolist(), df["seq_id"].to_numpy().tolist()))
    # per step start (relative clock)
    st0 = df.groupby("step")["start_ts"].transform("min").to_numpy()
    rel = df["start_ts"].to_numpy() - st0
    # the node set: a step is complete when each of its ops appears once on every DP
    # rank; the ops of the most common complete step are the nodes, and the steps with
    # exactly those ops are analyzed (the others are dropped and listed)
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
    node_keys = list(sig)
    good = np.array(sorted(sigs[sig]), dtype=np.int64)
    dropped = sorted(int(s) for s in set(all_steps.tolist()) - set(good.tolist()))
    sel = np.isin(df["step"].to_numpy(), good)
    d = df[sel]
    rel = rel[sel]
    keys = [k for k, s in zip(keys, sel) if s]
    steps = np.sort(good)
    S = len(steps)

    # reference order of nodes: median relative start over every replica
    ref = pd.DataFrame({"key": keys, "rel": rel}).groupby("key")["rel"].median()
    ref_end = pd.DataFrame({"key": keys, "end": rel + d["duration"].to_numpy()}).groupby("key")["end"].median()
    node_keys = sorted(node_keys, key=lambda k: (k[0], float(ref[k]), k[1], k[2]))
    idx = {k: i for i, k in enumerate(node_keys)}
    N = len(node_keys)

    ni = np.array([idx[k] for k in keys], dtype=np.int64)
    si = np.searchsorted(steps, d["step"].to_numpy())
    di = d["dp_rank"].to_numpy()
    start = np.full((N, S, D), np.nan)
    dur = np.full((N, S, D), np.nan)
    start[ni, si, di] = rel
    dur[ni, si, di] = d["duration"].to_numpy()
    mc = {}
    for k, m in zip(keys, d["mc"].to_numpy().tolist()):
        mc.setdefault(k, m)

    deps: list[list[int]] = [[] for _ in range(N)]

    def dep(v, u):
        if u is not None and v is not None and u != v and u not in deps[v]:
            deps[v].append(u)

    def chain(ns, first_deps=()):
        prev = list(first_deps)
        for n in ns:
            for u in prev:
                dep(n, u)
            prev = [n]

    def of(stage, optype):
        return sorted((idx[k] for k in node_keys if k[0] == stage and k[1] == optype), key=lambda n: node_keys[n][2])

    groups: list[tuple[list[int], bool]] = []
    for s in range(pp):
        comp = sorted((idx[k] for k in node_keys if k[0] == s and k[1] in (FWD, BWD)),
                      key=lambda n: (float(ref[node_keys[n]]), node_keys[n][2], node_keys[n][1]))
        chain(comp)
        pos = {n: i for i, n in enumerate(comp)}
        for t in ("forward", "backward"):
            comps_t = sorted((n for n in comp if node_keys[n][1] == f"{t}-compute"), key=lambda n: pos[n])
            recv, send = of(s, f"{t}-recv"), of(s, f"{t}-send")
            chain(recv)
            chain(send)
            off = 1 if len(recv) + 1 == len(comps_t) else 0  # the first recv is sometimes not recorded
            for k, r in enumerate(recv):
                if k + off < len(comps_t):
                    c = comps_t[k + off]
                    dep(c, r)
                    if pos[c] > 0:
                        dep(r, comp[pos[c] - 1])
            for k, sn in enumerate(send):
                if k < len(comps_t):
                    dep(sn, comps_t[k])
        # data-parallel collectives: one stream; params all-gather feeds its chunk's first forward
        dpc = sorted((idx[k] for k in node_keys if k[0] == s and k[1] in DP_COLLECTIVES[:2]),
                     key=lambda n: (float(ref[node_keys[n]]), node_keys[n][2]))
        chain(dpc)
        ovlp = any(k[0] == s and k[1] == "separate-grads-all-reduce" for k in node_keys)
        fwds = [n for n in comp if node_keys[n][1] == FWD]
        done_mc = set()
        for ag in reversed(of(s, "params-all-gather")):
            m = mc.get(node_keys[ag])
            if m in done_mc:
                continue
            done_mc.add(m)
            cand = [n for n in fwds if mc.get(node_keys[n]) == m] or fwds[:1]
            if cand:
                dep(cand[0], ag)
        rs = of(s, "grads-reduce-scatter")
        last = max(comp, key=lambda n: (float(ref_end[node_keys[n]]), pos[n])) if comp else None
        tail = of(s, GC) + of(s, LAYERNORM) + of(s, EMBEDDING)
        first_deps = [last] if last is not None else []
        if ovlp:
            bwds = [n for n in comp if node_keys[n][1] == BWD]
            done_mc = set()
            for r in rs:
                m = mc.get(node_keys[r])
                if m in done_mc:
                    continue
                done_mc.add(m)
                cand = [n for n in bwds if mc.get(node_keys[n]) == m] or bwds[-1:]
                if cand:
                    dep(r, cand[-1])
            tail += of(s, "separate-grads-all-reduce")
            first_deps += rs[-1:]
        else:
            tail += rs
        tail += of(s, CLIP) + of(s, OPTIMIZER)
        chain(tail, first_deps)

    # communication groups
    in_group = np.zeros(N, dtype=bool)
    for s in range(pp):
        for t, delta in (("forward", 1), ("backward", -1)):
            peer = s + delta
            if not 0 <= peer < pp:
                continue
            send, recv = of(s, f"{t}-send"), of(peer, f"{t}-recv")
            for a, b in zip(send, recv):
                groups.append(([a, b], False))
                in_group[[a, b]] = True
    for optype, sync in ((EMBEDDING, False), (CLIP, D > 1)):
        by_seq: dict[int, list[int]] = {}
        for k in node_keys:
            if k[1] == optype:
                by_seq.setdefault(k[2], []).append(idx[k])
        for seq in sorted(by_seq):
            groups.append((by_seq[seq], sync))
            in_group[by_seq[seq]] = True
    if D > 1:
        for k in node_keys:
            if k[1] in DP_COLLECTIVES:
                groups.append(([idx[k]], True))
                in_group[idx[k]] = True
    for n in range(N):  # unpaired send/recv: a communication op of its own
        if node_keys[n][1] in P2P_OPTYPES and not in_group[n]:
            groups.append(([n], False))
            in_group[n] = True
    units = [_Unit(sorted(m), True, sync) for m, sync in groups]
    units += [_Unit([n], False, False) for n in range(N) if not in_group[n]]
    order = _toposort(units, deps, node_keys)

    # effective durations: transfer time for grouped ops
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
    measured = np.max(np.max(end, axis=2), axis=0) - np.min(np.min(start, axis=2), axis=0)
    sel_df = pd.DataFrame({"step": d["step"].to_numpy(), "abs": d["start_ts"].to_numpy(), "end": d["start_ts"].to_numpy() + d["duration"].to_numpy()})
    g = sel_df.groupby("step")
    rank_of = {}
    for dp_, st_, rk in d[["dp_rank", "stage", "rank"]].drop_duplicates().itertuples(index=False):
        rank_of.setdefault((int(dp_), int(st_)), int(rk))
    return TraceModel(
        nodes=node_keys, deps=deps, units=units, order=order, steps=steps, dp_size=D, pp_size=pp,
        start=start, duration=dur, eff=eff, measured=measured,
        step_start=g["abs"].min().reindex(steps).to_numpy(), step_end=g["end"].max().reindex(steps).to_numpy(),
        rank_of=rank_of, dropped_steps=dropped, ignored_optypes=ignored,
    )


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
    ideal, per_type = ideal_durations(model)
    t_replay = simulate(model, model.eff)
    t_ideal = simulate(model, ideal)
    t_meas = model.measured
    A, I, M = float(t_replay.sum()), float(t_ideal.sum()), float(t_meas.sum())
    S = A / I if I > 0 else float("nan")
    masks = _masks(model)
    decomp: dict[str, dict[str, float]] = {}
    per_step: dict[str, dict[str, dict[str, float]]] = {}
    share: dict[str, dict[str, float]] = {}
    rem_s: dict[str, dict[str, float]] = {}
    gap = A - I
    for dim, groups in masks.items():
        decomp[dim], share[dim], rem_s[dim] = {}, {}, {}
        for key, m in groups.items():
            t_add = simulate(model, np.where(m, model.eff, ideal))
            t_rem = simulate(model, np.where(m, ideal, model.eff))
            decomp[dim][key] = float(t_add.sum()) / I if I > 0 else float("nan")
            rem_s[dim][key] = A / float(t_rem.sum()) if t_rem.sum() > 0 else float("nan")
            share[dim][key] = (A - float(t_rem.sum())) / gap if gap > 0 else 0.0
            for i, st in enumerate(model.steps):
                per_step.setdefault(dim, {}).setdefault(str(int(st)), {})[key] = float(t_add[i] / t_ideal[i]) if t_ideal[i] > 0 else float("nan")
        decomp[dim] = dict(sorted(decomp[dim].items(), key=lambda kv: (-kv[1], kv[0])))
    # the paper's M_S (last stage) and M_W (top workers by min(S_dp, S_stage))
    last = str(model.pp_size - 1)
    ms = {"stage": int(last), "share": share["stage"].get(last, float("nan"))}
    scores = {}
    for (j, s), r in model.rank_of.items():
        scores[r] = min(decomp["dp_rank"].get(str(j), float("nan")), decomp["stage"].get(str(s), float("nan")))
    n_top = max(1, math.ceil(len(scores) * cfg.mw_top_fraction - 1e-9))
    top = sorted(scores, key=lambda r: (-scores[r], r))[:n_top]
    m_top = np.zeros_like(model.eff, dtype=bool)
    for r in top:
        m_top |= masks["rank"][str(r)]
    t_rem_top = simulate(model, np.where(m_top, ideal, model.eff))
    mw = {"ranks": top, "share": (A - float(t_rem_top.sum())) / gap if gap > 0 else 0.0}

    stragglers = _stragglers(S, decomp, share, model, cfg)
    steps = [int(s) for s in model.steps]
    result = {
        "method": "osdi25-whatif-trace",
        "slowdown": S,
        "slowdown_measured": M / I if I > 0 else float("nan"),
        "launch_slowdown": M / A if A > 0 else float("nan"),
        "actual_s": A,
        "simulated_s": I,
        "measured_s": M,
        "n_steps": len(steps),
        "steps": steps,
        "dropped_steps": model.dropped_steps,
        "ignored_optypes": model.ignored_optypes,
        "per_step_slowdown": {str(s): float(a / b) if b > 0 else float("nan") for s, a, b in zip(steps, t_replay, t_ideal)},
        "step_time_s": {
            "measured": {str(s): float(v) for s, v in zip(steps, t_meas)},
            "replay": {str(s): float(v) for s, v in zip(steps, t_replay)},
            "ideal": {str(s): float(v) for s, v in zip(steps, t_ideal)},
        },
        "decomposition": decomp,
        "decomposition_per_step": per_step,
        "removal_share": share,
        "removal_slowdown": rem_s,
        "per_rank": {f"rank:{k}": v for k, v in sorted(decomp["rank"].items(), key=lambda kv: int(kv[0]))},
        "ms": ms,
        "mw": mw,
        "ideal_durations_s": per_type,
        "stragglers": stragglers,
        "job_meta": {k: v for k, v in meta.items()},
        "config": cfg.to_dict(),
    }
    return result, model


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
        parts = [import_trace(f, cfg) for f in many]
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
