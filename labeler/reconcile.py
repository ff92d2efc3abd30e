"""Reconcile labels (effect: what was slow) with injections (cause: what was done).

Matching rule. A label matches an injection when

- **time**: the label's ``[start_ts, end_ts]`` overlaps the injection's
  ``[start_ts - slack, end_ts + slack]`` (unix s; ``slack`` = ``match_slack_steps``
  x the run's median job step time, for effects that lag the cause; a missing
  ``end_ts``, e.g. a fault whose revert failed, counts as still in force), and
- **component**: for a *localized* fault (cpu-contention, process-pause, gc-storm,
  gpu caps, io-slow, mem-bw, ...) the label names the rank the injection targets
  (``target`` like ``"rank:1"``), or any rank of several (``"ranks:0,2"``, a workload
  knob such as sequence-length imbalance, whose slowest rank changes from step to
  step), and ``job`` too when those are every rank of the run; when ``target`` names no rank (PIDs, a device)
  any rank on the injection's ``node`` matches, and ``job`` too when that node runs
  every rank of the run. For a *job-wide* fault (``nic-slow``: an interface on a
  node, which every rank waits on at the collective) the label is the ``job`` label.

A ``job`` label that matches nothing this way, with exactly one injection in force
over at least half of it and that injection on one rank, is located by the record:
it becomes that rank's label (``located_by="injection"`` in its evidence; see
:func:`locate_job_labels`): stalls inside the all-reduce stall every rank alike, so
step timings cannot name whose they were.

A label matching several injections takes the one it overlaps longest (ties: earliest
start, then fault_id); the others are listed in its evidence (``also_matches``).
Matched labels get ``source="injected"``, ``fault_id``, ``cause=fault_type``; the
rest stay ``source="observed"``, ``cause="unknown"``. An injection no label matches
gets a row with ``source="injected-unmanifested"``, its own times, ``views=""``,
``confidence=0.0`` and ``slowdown`` = the measured ratio over its interval (1.0 when
nothing was measured). When the injection targets a rank that has no steps in the
run (``"rank:99"`` in a 4-rank run: nothing of that rank was measured), its row keeps
``source="injected-unmanifested"`` (scoring drops such rows) but gets ``slowdown``
NaN, not a ratio of someone else's steps, and its evidence says so
(``target_in_run: false``, the reason, the run's rank count and range).

An injection with ``status="unverified"`` (its verify did not confirm it, and the
runner reverted it at once) was not in force: it matches no label and gets no row.

Bad injections are refused (BadInput naming the column): ``start_ts``/``end_ts``
that are not numbers, an ``end_ts`` before its ``start_ts``.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from faultlab.errors import BadInput
from faultlab.labeler.analysis import Analysis
from faultlab.labeler.config import LabelerConfig
from faultlab.labeler.labelrows import evidence_json, typed_labels
from faultlab.labeler.stats import median

def _check_times(injections: pd.DataFrame) -> pd.DataFrame:
    """``injections`` with ``start_ts``/``end_ts`` as float64 (NaN where unknown).

    Raises BadInput naming the column for a value that is not a number, and naming
    ``end_ts`` for an injection that ends before it starts."""
    out = {}
    for col in ("start_ts", "end_ts"):
        raw = injections[col]
        num = pd.to_numeric(raw, errors="coerce")
        bad = num.isna().to_numpy() & raw.notna().to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise BadInput(f"injection {injections['fault_id'].iloc[i]}: not a number: {raw.iloc[i]!r}", field=col,
                           fix="unix seconds (NaN when unknown)")
        out[col] = num.to_numpy(dtype=np.float64, na_value=np.nan)
    s, e = out["start_ts"], out["end_ts"]
    back = np.flatnonzero(e < s)  # NaN compares False: an unknown end is no error
    if back.size:
        i = int(back[0])
        raise BadInput(f"injection {injections['fault_id'].iloc[i]} ends at {float(e[i])!r}, before it starts "
                       f"({float(s[i])!r})", field="end_ts",
                       fix="end_ts must be >= start_ts (unix s), NaN when the end is unknown")
    return injections.assign(start_ts=s, end_ts=e)


def _run_id(row: dict, default: str) -> str:
    rid = row.get("run_id")
    if rid is None or (isinstance(rid, float) and np.isnan(rid)) or str(rid) == "":
        return default
    return str(rid)


_RANK_RE = re.compile(r"^\s*rank[:=]\s*(\d+)\s*$", re.IGNORECASE)


def target_rank(target) -> int | None:
    """The rank an injection ``target`` names (``"rank:3"``, ``"rank=3"``), else None."""
    if target is None or (isinstance(target, float) and np.isnan(target)):
        return None
    m = _RANK_RE.match(str(target))
    return int(m.group(1)) if m else None


_RANKS_RE = re.compile(r"^\s*ranks:\s*(\d+(?:\s*,\s*\d+)*)\s*$", re.IGNORECASE)


def target_ranks(target) -> list[int]:
    """The ranks an injection ``target`` names: ``"rank:3"`` -> ``[3]``, ``"ranks:0,1,2"``
    -> ``[0, 1, 2]`` (a workload knob on several ranks); ``[]`` when it names none."""
    r = target_rank(target)
    if r is not None:
        return [r]
    if target is None or (isinstance(target, float) and np.isnan(target)):
        return []
    m = _RANKS_RE.match(str(target))
    return sorted({int(x) for x in m.group(1).split(",")}) if m else []


def candidates(inj: dict, rank_nodes: dict[int, str], job_wide_types) -> tuple[set[str], str, str]:
    """Components a label may name to match injection ``inj``.

    Args:
        inj: one injections row as a dict.
        rank_nodes: rank -> node name, from the steps table.
        job_wide_types: fault types whose effect is job-wide.

    Returns:
        ``(components, component, kind)``: the matching set, and the component name and
        kind an unmanifested row of this injection gets.
    """
    ftype = str(inj.get("fault_type"))
    node = str(inj.get("node"))
    if ftype in job_wide_types:
        return {"job"}, "job", "job"
    r = target_rank(inj.get("target"))
    if r is not None:
        return {f"rank:{r}"}, f"rank:{r}", "rank"
    several = target_ranks(inj.get("target"))
    if several:
        comps = {f"rank:{k}" for k in several}
        if rank_nodes and set(rank_nodes) <= set(several):
            return comps | {"job"}, "job", "job"
        return comps, f"rank:{several[0]}", "rank"
    on_node = {f"rank:{k}" for k, v in rank_nodes.items() if v == node}
    comps = set(on_node)
    if on_node and len(on_node) == len(rank_nodes):
        comps.add("job")
    return comps, f"node:{node}", "node"


def locate_job_labels(out: pd.DataFrame, inj_rows: list[dict], slack: float, run_ranks: set[int] | None = None, *,
                      min_share: float = 0.5) -> list[int]:
    """Name the rank of an unmatched ``job`` label from the one injection in force.

    A duty-cycle pause or a GC stall that lands inside the all-reduce stalls every rank
    alike: no step timing can say whose it was, so fusion labels the episode ``job``
    (``source="observed"`` after matching: a ``job`` label matches job-wide faults
    only). When exactly one injection overlaps such a label (with ``slack`` s on both
    sides, any fault type), it targets one rank of the run (``target`` ``"rank:N"``,
    N in ``run_ranks`` when given), it has an end (a fault whose revert failed has
    none and is not taken as in force for the rest of the run), at least ``min_share``
    of the label's time lies inside it (with the slack), the label becomes that rank's
    (beside a label of that rank the telemetry made, if any: the job's slowdown went
    beyond the rank's own steps, e.g. a GC stall that stalls every rank):
    ``component="rank:N"``, ``component_kind="rank"``, ``source="injected"``, its
    ``fault_id``/``cause``, and evidence ``located_by="injection"`` with
    ``observed_component="job"`` (scores can tell these apart from ranks the telemetry
    named). Two faults in force, or a fault that names no rank, leave the label as it
    is. ``out`` (the reconciled labels frame, LABELS columns) is changed in place.

    Returns:
        the indices into ``inj_rows`` of the injections that located a label.
    """
    used: list[int] = []
    for i in np.flatnonzero((out["component"].astype(str) == "job").to_numpy() & (out["source"] == "observed").to_numpy()):
        ls, le = float(out.at[i, "start_ts"]), float(out.at[i, "end_ts"])
        hits = []
        for k, row in enumerate(inj_rows):
            s = float(row["start_ts"]) if pd.notna(row["start_ts"]) else -np.inf
            e = float(row["end_ts"]) if pd.notna(row["end_ts"]) else np.inf
            if ls <= e + slack and le >= s - slack:
                hits.append((k, max(0.0, min(le, e + slack) - max(ls, s - slack))))
        if len(hits) != 1:
            continue
        k, ov = hits[0]
        r = target_rank(inj_rows[k].get("target"))
        if r is None or (run_ranks is not None and r not in run_ranks) or pd.isna(inj_rows[k]["end_ts"]):
            continue
        if ov < min_share * max(le - ls, 0.0):
            continue
        ev = json.loads(out.at[i, "evidence"]) if isinstance(out.at[i, "evidence"], str) and out.at[i, "evidence"] else {}
        ev.update({"located_by": "injection", "observed_component": "job",
                   "located_reason": f"the step timings name no rank; the one injection in force targets rank:{r}"})
        out.at[i, "component"] = f"rank:{r}"
        out.at[i, "component_kind"] = "rank"
        out.at[i, "source"] = "injected"
        out.at[i, "cause"] = str(inj_rows[k]["fault_type"])
        out.at[i, "fault_id"] = str(inj_rows[k]["fault_id"])
        out.at[i, "evidence"] = evidence_json(ev)
        used.append(k)
    return used


def reconcile(labels: pd.DataFrame, injections: pd.DataFrame | None, *, analysis: Analysis | None = None,
              config=None) -> pd.DataFrame:
    """Attach causes from the injections table to labels (see module docstring).

    Steps: the injections that were in force (:func:`_usable_injections`), the
    overlap of each label with each injection it may match (:func:`_overlaps`), each
    label's cause (:func:`_attach_causes`), job labels located by the record
    (:func:`locate_job_labels`), a row for each injection nothing matched
    (:func:`_unmanifested_row`).

    Args:
        labels: labels of ONE run (faultlab.schema.LABELS columns), e.g. from
            :func:`faultlab.labeler.fusion.fuse`.
        injections: the injections table of the same run (may be None or empty);
            needs ``fault_id``, ``fault_type``, ``node``, ``target``, ``start_ts``,
            ``end_ts`` (unix s).
        analysis: the run's :class:`~faultlab.labeler.analysis.Analysis`, for the rank
            -> node map, the time slack and the measured ratio of unmanifested faults
            (without it: no slack, node-targeted faults match nothing, ratio 1.0).
        config: :class:`faultlab.labeler.LabelerConfig` (defaults when None).

    Returns:
        a new labels frame (LABELS columns), sorted by ``start_ts``, component, source.

    Raises:
        BadInput when ``injections`` lacks a needed column (field ``injections``), when
        ``start_ts`` or ``end_ts`` holds a value that is not a number (field: that
        column), or when an injection's ``end_ts`` is before its ``start_ts`` (field
        ``end_ts``). A target rank absent from the run is no error: see the module
        docstring.
    """
    if config is None:
        config = LabelerConfig()
    out = typed_labels(labels.copy())
    out["source"] = "observed"
    out["cause"] = "unknown"
    out["fault_id"] = None
    injections = _usable_injections(injections)
    if injections is None:
        return out.reset_index(drop=True)
    run_id, rank_nodes, slack = _run_context(out, analysis, config)
    inj = injections.sort_values(["start_ts", "fault_id"], kind="mergesort").reset_index(drop=True)
    inj_rows = inj.to_dict("records")
    overlap, cand_info = _overlaps(out, inj_rows, rank_nodes, set(config.job_wide_fault_types), slack)
    matched_inj = _attach_causes(out, overlap, inj_rows)
    for k in locate_job_labels(out, inj_rows, slack, set(rank_nodes) if rank_nodes else None):
        matched_inj[k] = True
    if analysis is not None:
        explain_late_onsets(out, inj_rows, analysis)
    extra = [_unmanifested_row(row, cand_info[k], analysis, rank_nodes, slack, run_id)
             for k, row in enumerate(inj_rows) if not matched_inj[k]]
    if extra:
        out = pd.concat([out, typed_labels(pd.DataFrame(extra))], ignore_index=True) if len(out) else typed_labels(pd.DataFrame(extra))
    out = out.sort_values(["start_ts", "component", "source"], kind="mergesort").reset_index(drop=True)
    return typed_labels(out)


def _usable_injections(injections: pd.DataFrame | None) -> pd.DataFrame | None:
    """The injections that were in force, times checked (:func:`_check_times`); None
    when there are none. One with ``status="unverified"`` (verify did not confirm it
    and it was reverted at once) is never a cause. Raises BadInput (field
    ``injections``) for a missing column."""
    if injections is None or len(injections) == 0:
        return None
    need = ["fault_id", "fault_type", "node", "target", "start_ts", "end_ts"]
    missing = [c for c in need if c not in injections.columns]
    if missing:
        raise BadInput(f"missing column(s) {', '.join(missing)}", field="injections")
    injections = _check_times(injections)
    if "status" in injections.columns:
        injections = injections[injections["status"].astype(str) != "unverified"]
    return injections if len(injections) else None


def _run_context(out: pd.DataFrame, analysis: Analysis | None, config) -> tuple[str, dict[int, str], float]:
    """``(run_id, rank -> node, slack_s)``: the slack is ``match_slack_steps`` x the
    run's median job step time (s); without an analysis no rank map and no slack."""
    run_id = str(out["run_id"].iloc[0]) if len(out) else ""
    if analysis is None:
        return run_id, {}, 0.0
    g = analysis.grid
    rank_nodes = {int(r): str(n) for r, n in zip(g.ranks, g.nodes)}
    med_step = median(g.job_step) if g.S and np.isfinite(g.job_step).any() else 0.0
    return run_id or g.run_id, rank_nodes, config.match_slack_steps * med_step


def _overlaps(out: pd.DataFrame, inj_rows: list[dict], rank_nodes: dict[int, str], job_wide: set,
              slack: float) -> tuple[np.ndarray, list]:
    """``(overlap, cand_info)``: ``overlap`` ``(labels, injections)`` seconds each label
    overlaps each injection's slackened interval, -1 where the pair does not match (time
    or component); ``cand_info`` each injection's :func:`candidates`."""
    lab_s = out["start_ts"].to_numpy(dtype=np.float64)
    lab_e = out["end_ts"].to_numpy(dtype=np.float64)
    lab_c = out["component"].astype(str).to_numpy()
    n_l, n_i = len(out), len(inj_rows)
    overlap = np.full((n_l, n_i), -1.0)
    cand_info = []
    for k, row in enumerate(inj_rows):
        comps, comp, kind = candidates(row, rank_nodes, job_wide)
        cand_info.append((comps, comp, kind))
        s = float(row["start_ts"]) if pd.notna(row["start_ts"]) else -np.inf
        e = float(row["end_ts"]) if pd.notna(row["end_ts"]) else np.inf
        lo, hi = s - slack, e + slack
        if n_l:
            ok = np.isin(lab_c, list(comps)) & (lab_s <= hi) & (lab_e >= lo)
            ov = np.minimum(lab_e, hi) - np.maximum(lab_s, lo)
            overlap[:, k] = np.where(ok, np.maximum(ov, 0.0), -1.0)
    return overlap, cand_info


def _attach_causes(out: pd.DataFrame, overlap: np.ndarray, inj_rows: list[dict]) -> np.ndarray:
    """Each label's cause, in place on ``out``: the injection it overlaps longest
    (ties: earliest start, the injections being sorted, then fault_id), the others in
    its evidence's ``also_matches``; ``observed``/``unknown`` when none. Returns the
    ``(injections,)`` bool of those some label matched."""
    matched_inj = np.zeros(len(inj_rows), dtype=bool)
    sources, causes, fids, evs = [], [], [], []
    for i in range(len(out)):
        hits = np.flatnonzero(overlap[i] >= 0)
        raw = out.at[i, "evidence"]
        if hits.size == 0:
            sources.append("observed")
            causes.append("unknown")
            fids.append(None)
            evs.append(raw)
            continue
        matched_inj[hits] = True
        best = hits[np.argmax(overlap[i, hits])]
        r = inj_rows[best]
        sources.append("injected")
        causes.append(str(r["fault_type"]))
        fids.append(str(r["fault_id"]))
        others = [str(inj_rows[h]["fault_id"]) for h in hits if h != best]
        if others:
            ev = json.loads(raw) if isinstance(raw, str) and raw else {}
            ev["also_matches"] = others
            evs.append(evidence_json(ev))
        else:
            evs.append(raw)
    out["source"] = sources
    out["cause"] = causes
    out["fault_id"] = fids
    out["evidence"] = evs
    return matched_inj


#: a fault's first label starting more than this many steps after the fault's first
#: step says why in its evidence (``onset_after_fault``)
LATE_STEPS = 2


def explain_late_onsets(out: pd.DataFrame, inj_rows: list[dict], an: Analysis) -> None:
    """In place on ``out``: the first label (by start) of each injection that starts
    more than :data:`LATE_STEPS` steps after the injection's first step (the first
    whose ``t0`` is at or after its ``start_ts``) gets ``onset_after_fault`` in its
    evidence: ``steps`` (how many later), ``fault_first_step``, and ``why``, what
    the telemetry shows over the steps between (:func:`_why_late`).

    Why: the labels are judged on when the fault began; a late start is either the
    telemetry's (nothing slowed yet, or nothing named the rank) or the labeler's, and
    the evidence tells which."""
    if not len(out):
        return
    g = an.grid
    by_id = {str(r["fault_id"]): r for r in inj_rows}
    fids = out["fault_id"].astype(object).where(out["source"] == "injected")
    for fid in sorted({str(f) for f in fids.dropna()}):
        r = by_id.get(fid)
        if r is None or pd.isna(r["start_ts"]):
            continue
        first = int(np.searchsorted(g.t0, float(r["start_ts"]), side="left"))
        idx = out.index[fids == fid]
        k = min(idx, key=lambda i: (float(out.at[i, "start_ts"]), i))
        s0 = out.at[k, "start_step"]
        if first >= g.S or pd.isna(s0):
            continue
        i0 = int(np.searchsorted(g.steps, int(s0), side="left"))
        if i0 - first <= LATE_STEPS:
            continue
        ev = json.loads(out.at[k, "evidence"] or "{}")
        ev["onset_after_fault"] = {"steps": i0 - first, "fault_first_step": int(g.steps[first]),
                                   "why": _why_late(an, str(out.at[k, "component"]), first, i0)}
        out.at[k, "evidence"] = evidence_json(ev)


def _why_late(an: Analysis, component: str, a: int, b: int) -> str:
    """What grid rows ``a..b-1`` (a fault's first steps, before its first label) show:
    the job slowed or not (:meth:`Analysis.job_slowdown` against ``min_slowdown``),
    and for a rank its local time against its own trailing baseline and against its
    peers (medians, against ``temporal_threshold`` / ``peer_threshold``) and how many
    of those steps each view flagged."""
    cfg, g = an.config, an.grid
    job = an.job_slowdown(a, b - 1)
    job_up = bool(np.isfinite(job) and job >= cfg.min_slowdown)
    j = an.rank_col(component)
    if j is None:
        return (f"the job's steps before it ran {job:.2f}x its baseline, " +
                ("under the flag bar in most steps (a slowdown that came on gradually or in bursts)" if job_up
                 else f"under the {cfg.min_slowdown:g}x floor: the fault had not slowed the job yet"))
    with np.errstate(invalid="ignore", divide="ignore"):
        own = median(np.asarray(g.compute[a:b, j], dtype=np.float64) / np.asarray(an.temporal.rank_base[a:b, j], dtype=np.float64))
    peer = median(an.peer.ratio[a:b, j])
    shown = f"{component} ran {own:.2f}x its own baseline and {peer:.2f}x its peers, the job {job:.2f}x its baseline"
    n_t, n_p = int(an.temporal.rank_flag[a:b, j].sum()), int(an.peer.flag[a:b, j].sum())
    if n_t and not n_p:
        return (f"{shown}: its own history flagged {n_t} of those {b - a} steps, its peers none (its peers slowed "
                f"too, or the host's noise hid it): the label starts where it stood out from its peers")
    if max(own if np.isfinite(own) else 0.0, peer if np.isfinite(peer) else 0.0) >= min(cfg.temporal_threshold, cfg.peer_threshold):
        return f"{shown}: up, but in too few steps above the flag bar (noise floor mad_k sigmas) to start a label"
    if job_up:
        return f"{shown}: the job slowed but no step timing named the rank (stalls inside the collective, where every rank waits alike)"
    return f"{shown}: the fault had not slowed the rank or the job yet"


def _unmanifested_row(row: dict, cand: tuple, analysis: Analysis | None, rank_nodes: dict[int, str], slack: float,
                      run_id: str) -> dict:
    """The ``injected-unmanifested`` row of an injection no label matched: its own
    times and steps, ``slowdown`` the measured ratio over its interval
    (:meth:`Analysis.measure`; 1.0 when nothing was measured, NaN when its target rank
    is not in the run, which its evidence then says)."""
    comps, comp, kind = cand
    s = float(row["start_ts"]) if pd.notna(row["start_ts"]) else float("nan")
    e = float(row["end_ts"]) if pd.notna(row["end_ts"]) else float("nan")
    start_step = end_step = pd.NA
    measured: dict = {"ratio": 1.0, "n_steps": 0}
    r = target_rank(row.get("target")) if kind == "rank" else None
    absent = analysis is not None and r is not None and r not in rank_nodes
    if analysis is not None and np.isfinite(s):
        g = analysis.grid
        rows = g.steps_between(s, e if np.isfinite(e) else np.inf)
        if rows.size:
            start_step, end_step = int(g.steps[rows[0]]), int(g.steps[rows[-1]])
        measured = {"ratio": float("nan"), "n_steps": 0} if absent else analysis.measure(comp, rows)
    elif absent:
        measured = {"ratio": float("nan"), "n_steps": 0}
    ev = {
        "reason": "no label of a matching component overlaps the injection",
        "candidates": sorted(comps),
        "measured_ratio": measured.get("ratio"),
        "n_steps": measured.get("n_steps"),
        "job_slowdown": measured.get("job_slowdown"),
        "peer_ratio": measured.get("peer_ratio"),
        "mean_ratio": measured.get("mean_ratio"),
        "n_flagged": measured.get("n_flagged", 0),
        "slack_s": slack,
    }
    if absent:
        ranks = sorted(rank_nodes)
        ev["reason"] = f"the target {comp} is not in the run: it has no steps, so nothing of it was measured"
        ev["target_in_run"] = False
        ev["run_ranks"] = {"n": len(ranks), "min": ranks[0] if ranks else None, "max": ranks[-1] if ranks else None}
    return {
        "run_id": _run_id(row, run_id),
        "component": comp,
        "component_kind": kind,
        "start_ts": s,
        "end_ts": e,
        "start_step": start_step,
        "end_step": end_step,
        "slowdown": float(measured.get("ratio", 1.0)),  # NaN: the target is not in the run
        "views": "",
        "confidence": 0.0,
        "fault_id": str(row["fault_id"]),
        "source": "injected-unmanifested",
        "cause": str(row["fault_type"]),
        "evidence": evidence_json(ev),
    }
