"""Straggler-trace importer: the what-if analysis of an operation-level training trace.

Modules: :mod:`.read` (the trace as published), :mod:`.model` (the dependency model
and its simulation); here the what-if, its decomposition and the labels.

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
     of that direction and is posted after the previous compute of that direction
     (the first backward send and recv: after the compute two before the first
     backward, during the 1F1B warm-up), as the artifact models it
     (``TraceConfig.recv_posted_after = "stream"``: after the compute just before it
     in the compute stream, a stricter model that reads +0.07% S on the artifact's ST
     trace); the k-th send follows the k-th compute; ``forward-send`` k of stage s
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

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from faultlab.errors import BadInput
from faultlab.labeler.config import make_config
from faultlab.labeler.importers.common import ImportResult
from faultlab.labeler.importers.trace.model import (
    RECV_POSTED_AFTER,
    TraceModel,
    build_model,
    ideal_durations,
    left_out,
    op_masks,
    simulate,
)
from faultlab.labeler.importers.trace.read import TRACE_COLUMNS, distinct_runs, find_files, own_metas, read_trace, trace_files
from faultlab.labeler.labelrows import empty_labels, label_row, typed_labels

FORMAT = "straggler-trace"


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
        recv_posted_after: where the dependency model posts a pipeline recv (module
            docstring, 1.): ``"same-direction"`` (the artifact's model, the default)
            or ``"stream"``.
    """

    decompose_min_slowdown: float = 1.03
    straggler_min_share: float = 0.5
    mw_top_fraction: float = 0.03
    recv_posted_after: str = "same-direction"

    def __post_init__(self) -> None:
        if not float(self.decompose_min_slowdown) >= 1.0:
            raise BadInput(f"must be >= 1.0 (a ratio), got {self.decompose_min_slowdown!r}", field="decompose_min_slowdown")
        for name in ("straggler_min_share", "mw_top_fraction"):
            v = float(getattr(self, name))
            if not 0.0 < v <= 1.0:
                raise BadInput(f"must be in (0, 1], got {v!r}", field=name)
        if self.recv_posted_after not in RECV_POSTED_AFTER:
            raise BadInput(f"must be one of {', '.join(RECV_POSTED_AFTER)}, got {self.recv_posted_after!r}",
                           field="recv_posted_after")

    def to_dict(self) -> dict:
        return asdict(self)


def analyze(df: pd.DataFrame, meta: dict, config: TraceConfig | None = None) -> tuple[dict, TraceModel]:
    """What-if analysis of one trace (see the module docstring for the method).

    The steps, in order: :func:`build_model`, :func:`_timelines` (T_replay, T_ideal,
    S), :func:`_decompose` (S_G and the removal share of every group of
    :func:`op_masks`), :func:`_ms` and :func:`_mw` (the paper's M_S, M_W),
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
    model = build_model(df, meta, cfg.recv_posted_after)
    tl = _timelines(model)
    masks = op_masks(model)
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
    :func:`op_masks`)."""

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
        return empty_labels()
    return typed_labels(pd.DataFrame(rows).sort_values(["component"], kind="mergesort").reset_index(drop=True))


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
    cfg = make_config(TraceConfig, config)
    many = trace_files(path)
    if len(many) > 1:  # StragglerAnalysis' data/ folder as published: every trace in it
        own_metas(many)
        parts = [import_trace(f, cfg) for f in many]
        distinct_runs(many, [r.whatif["run_id"] for r in parts])
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
    left_out(df, model, skips)
    run_id = f"{meta.get('trial_name', Path(paths['trace']).stem)}-{meta.get('run_id', 0)}"
    result["run_id"] = run_id
    result["source"] = {"format": FORMAT, **paths}
    labels = labels_from(result, model, run_id)
    return ImportResult(format=FORMAT, labels=labels, whatif=result,
                        info={"n_rows": skips.n_rows, "source": paths["trace"], "skipped": skips.to_dict(),
                              "skipped_line": skips.line()})


__all__ = ["FORMAT", "TRACE_COLUMNS", "TraceConfig", "TraceModel", "analyze", "build_model", "find_files",
           "ideal_durations", "import_trace", "labels_from", "read_trace", "simulate"]
