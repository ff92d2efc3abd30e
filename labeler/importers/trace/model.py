"""The dependency model of one training step of a DP x PP trace (:func:`build_model`
-> :class:`TraceModel`: compute streams, pipeline send/recv, data-parallel collectives,
communication groups), its simulation over every step and DP rank (:func:`simulate`)
and the ideal duration of each operation type (:func:`ideal_durations`).

The package docstring of :mod:`faultlab.labeler.importers.trace` gives the method."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from faultlab.errors import BadInput
from faultlab.labeler.stats import median

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


def left_out(df: pd.DataFrame, model: "TraceModel", skips) -> None:
    """Count, in ``skips``, the rows the model leaves out (:func:`build_model`): of an
    operation type it does not model, of a step without the same operations on every
    worker."""
    known = df["optype"].isin(KNOWN_OPTYPES).to_numpy()
    if model.ignored_optypes:
        skips.add(f"of an operation type not modeled ({', '.join(model.ignored_optypes)})", int((~known).sum()))
    if model.dropped_steps:
        n = int((known & df["step"].isin(model.dropped_steps).to_numpy()).sum())
        skips.add(f"of {len(model.dropped_steps)} step(s) without the same operations on every worker", n)


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


#: where a pipeline recv is posted (:func:`_p2p_dependencies`): ``"same-direction"``
#: (the reference artifact's model: after the previous compute of its own direction)
#: or ``"stream"`` (after the compute just before its compute in the stage's stream)
RECV_POSTED_AFTER = ("same-direction", "stream")


def build_model(df: pd.DataFrame, meta: dict, recv_posted_after: str = "same-direction") -> TraceModel:
    """Build the dependency model (see the module docstring) and the dense arrays.

    Steps whose operations do not match the others' (an op missing on some worker) are
    dropped and listed in ``dropped_steps``; operation types the model does not know
    are left out (``ignored_optypes``). ``recv_posted_after`` is one of
    :data:`RECV_POSTED_AFTER` (:func:`_p2p_dependencies`).

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
    _check_size(len(node_keys), len(steps), D, pp, len({k[0] for k in node_keys}))
    nodes = _node_order(node_keys, keys, rel, d)
    start, dur = _dense(d, keys, rel, nodes.idx, steps, D)
    _dependencies(nodes, pp, recv_posted_after)
    units = _units(nodes, pp, D)
    order = _toposort(units, nodes.deps, nodes.keys)
    step_start, step_end = _step_bounds(d, steps)
    return TraceModel(
        nodes=nodes.keys, deps=nodes.deps, units=units, order=order, steps=steps, dp_size=D, pp_size=pp,
        start=start, duration=dur, eff=_transfer_times(start, dur, units), measured=_measured_steps(start, dur),
        step_start=step_start, step_end=step_end,
        rank_of=_rank_of(d), dropped_steps=dropped, ignored_optypes=ignored,
    )


#: the most cells the what-if analysis holds in its groups' masks: one ``(N, S, D)``
#: mask (and two replays) for each DP rank, stage, operation type and rank it judges
MAX_WHATIF_CELLS = 1 << 30
#: the operation-type groups of the decomposition (:func:`op_masks`)
N_OPTYPE_GROUPS = len({OPTYPE_GROUP.get(t, t) for t in KNOWN_OPTYPES})


def _check_size(N: int, S: int, D: int, pp: int, stages: int) -> None:
    """BadInput when the what-if analysis of ``N`` operations a step, ``S`` steps,
    ``D`` DP ranks and ``pp`` stages would hold more than :data:`MAX_WHATIF_CELLS`
    mask cells (:func:`op_masks`: a group per DP rank, stage, operation type and
    rank), checked before the model is built: its sizes are what the trace's ids
    name (rows each on a new DP rank ask for a mask of every rank per rank). Also
    when fewer than ``pp`` stages have operations in a step (``stages``): a pipeline's
    stages are numbered 0 to ``pp - 1``, and one row whose ``stage`` is 2**40 would
    have the model walk 2**40 stages."""
    if stages != pp:
        raise BadInput(f"the trace numbers its stages up to {pp - 1}, but {stages} of them have operations in its steps", field="stage",
                       fix="give the trace as StragglerAnalysis records it: a pipeline's stages are numbered 0 to pp_size - 1")
    groups = D + pp + N_OPTYPE_GROUPS + D * pp
    cells = N * S * D
    if groups * cells > MAX_WHATIF_CELLS:
        raise BadInput(f"the trace's {N} operations a step x {S} steps x {D} DP ranks on {pp} stages make {groups} what-if groups "
                       f"of {cells} cells, over the {MAX_WHATIF_CELLS} cells the analysis holds", field="trace",
                       fix="give the trace as StragglerAnalysis records it (stages and DP ranks numbered from 0), or fewer of its steps")


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
    by_stage: dict = field(init=False)

    def __post_init__(self) -> None:
        self.idx = {k: i for i, k in enumerate(self.keys)}
        self.deps = [[] for _ in self.keys]
        # each stage's nodes, in reference order: a stage's work looks at its own nodes
        # only, so building every stage's dependencies costs the nodes once, not once a stage
        self.by_stage = {}
        for i, k in enumerate(self.keys):
            self.by_stage.setdefault(k[0], []).append(i)

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
        return sorted((n for n in self.by_stage.get(stage, ()) if self.keys[n][1] == optype), key=lambda n: self.keys[n][2])


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


def _dependencies(nodes: _Nodes, pp: int, recv_posted_after: str = "same-direction") -> None:
    """Every stage's dependencies into ``nodes.deps`` (module docstring, 1.), stage by
    stage: :func:`_compute_stream`, :func:`_p2p_dependencies`, :func:`_dp_stream`,
    :func:`_param_gathers`, :func:`_after_last_compute`."""
    for s in range(pp):
        comp = _compute_stream(nodes, s)
        _p2p_dependencies(nodes, s, comp, recv_posted_after)
        _dp_stream(nodes, s)
        _param_gathers(nodes, s, comp)
        _after_last_compute(nodes, s, comp)


def _compute_stream(nodes: _Nodes, s: int) -> list[int]:
    """Stage ``s``'s forward/backward compute ops as one stream, a chain in their
    reference order; returns the stream."""
    keys, ref = nodes.keys, nodes.ref
    comp = sorted((n for n in nodes.by_stage.get(s, ()) if keys[n][1] in (FWD, BWD)),
                  key=lambda n: (float(ref[keys[n]]), keys[n][2], keys[n][1]))
    nodes.chain(comp)
    return comp


def _p2p_dependencies(nodes: _Nodes, s: int, comp: list[int], recv_posted_after: str = "same-direction") -> None:
    """Stage ``s``'s pipeline send/recv, per direction: each of recv and send a chain;
    the k-th recv feeds the k-th compute of its direction; the k-th send follows the
    k-th compute. When there is one recv fewer than computes the first was not
    recorded.

    Where a recv is posted (``recv_posted_after``):

    - ``"same-direction"`` (the reference artifact's model): after the previous compute
      of its own direction; the first backward send and recv, which the 1F1B schedule
      posts during the warm-up forwards, after the compute two before the first
      backward compute in the stream;
    - ``"stream"``: after the compute just before its compute in the stream (stricter:
      a recv never overlaps the compute of the other direction before it).
    """
    if recv_posted_after not in RECV_POSTED_AFTER:
        raise BadInput(f"must be one of {', '.join(RECV_POSTED_AFTER)}, got {recv_posted_after!r}",
                       field="recv_posted_after")
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
                if recv_posted_after == "stream":
                    if pos[c] > 0:
                        nodes.dep(r, comp[pos[c] - 1])
                elif k + off > 0:
                    nodes.dep(r, comps_t[k + off - 1])
        for k, sn in enumerate(send):
            if k < len(comps_t):
                nodes.dep(sn, comps_t[k])
    if recv_posted_after == "same-direction":
        _first_backward_p2p(nodes, s, comp)


def _first_backward_p2p(nodes: _Nodes, s: int, comp: list[int]) -> None:
    """Stage ``s``'s first backward recv and send wait for the compute two before the
    first backward compute in the stream ``comp`` (when the two before it are
    forwards: a pipelined schedule)."""
    first = next((i for i, n in enumerate(comp) if nodes.keys[n][1] == BWD), None)
    if first is None or first < 2 or any(nodes.keys[comp[i]][1] != FWD for i in (first - 1, first - 2)):
        return
    for t in ("backward-recv", "backward-send"):
        ns = nodes.of(s, t)
        if ns:
            nodes.dep(ns[0], comp[first - 2])


def _dp_stream(nodes: _Nodes, s: int) -> None:
    """Stage ``s``'s data-parallel collectives (params all-gather, grads
    reduce-scatter) as one stream, a chain in reference order."""
    keys, ref = nodes.keys, nodes.ref
    dpc = sorted((n for n in nodes.by_stage.get(s, ()) if keys[n][1] in DP_COLLECTIVES[:2]),
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
    ovlp = any(nodes.keys[n][1] == "separate-grads-all-reduce" for n in nodes.by_stage.get(s, ()))
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
    ``(N, S, D)`` (seconds).

    Every op starts when its dependencies end (a root at the step start), a
    communication group ends for each member at the group's latest start (over the DP
    ranks too when DP-synchronized) plus the member's duration; the step ends with its
    last ``optimizer`` op (the last op of any kind when there is none)."""
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
        v = (median(vals) if t in COMM_OPTYPES else float(np.mean(vals))) if vals.size else 0.0
        out[m] = v
        per[t] = v
    return out, per


def op_masks(model: TraceModel) -> dict[str, dict[str, np.ndarray]]:
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
