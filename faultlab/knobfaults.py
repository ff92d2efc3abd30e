"""Software stragglers as ground truth: the injections rows of a run's workload knobs.

A knob of ``workload.stragglers`` (or uneven ``layers_per_stage``) is a fault the
workload makes itself. Each one in force over at least one recorded step becomes one
row of the run's ``injections`` table (faultlab.schema.INJECTIONS) with ``kind``
``workload``, so the labeler reconciles labels to it exactly as to an injected fault
(``cause`` = its type; a knob that slowed nothing gets an ``injected-unmanifested``
row):

============================  ====================  ============================================
knob                          ``fault_type``        ``target`` / ``severity`` (= ``value``)
============================  ====================  ============================================
``seq_len``                   ``seq-imbalance``     every rank; mean over the window's steps of
                                                    the largest rank's tokens over the mean
                                                    (ddp: the recorded ``tokens``; pipeline: the
                                                    microbatches' draw), ratio
``gc`` uncoordinated          ``gc-uncoordinated``  every rank; the mean steps between full
                                                    collections (``every_steps``)
``gc`` planned                ``gc-planned``        every rank; the steps between the planned
                                                    collections (``every_steps``)
uneven ``layers_per_stage``   ``stage-imbalance``   the heaviest stage's rank(s); its layers
                                                    over the mean layers per stage, ratio
``slow_shard``                ``slow-shard``        its rank; ``factor`` (sample length ratio)
============================  ====================  ============================================

Window: the knob's ``from_step`` .. ``to_step - 1`` (``to_step`` None: the run's last
step), as ``from_step``/``to_step`` in ``params``; ``start_ts`` is the earliest start of
a window step on any rank and ``end_ts`` the latest end (unix s). ``status`` is
``reverted`` when the run went past ``to_step`` (switched off mid-run), else
``run-end``. ``fault_id`` is ``TYPE-XXXXXX`` (hex of the run id and the knob's
place, so a rebuild gives the same id). ``verified`` is True: the window's steps were recorded (``evidence`` says
how many, and the measured value where the steps table holds it). A target of several
ranks is written ``ranks:0,1,2,3`` (labeler.reconcile matches any of them, and ``job``
when it names every rank).
"""

from __future__ import annotations

import hashlib
import json
import statistics

import numpy as np
import pandas as pd

from faultlab.benchmarks.knobs import draw_sequences, rebalance
from faultlab.scenario import KnobWindow, Scenario

#: what ``severity`` (= ``params.value``) of each workload fault type measures, with its unit
SEVERITY_UNITS = {
    "seq-imbalance": "ratio (largest rank's tokens / mean tokens, mean over the window's steps)",
    "gc-uncoordinated": "steps (mean between a rank's full collections)",
    "gc-planned": "steps (between the planned collections)",
    "stage-imbalance": "ratio (heaviest stage's layers / mean layers per stage)",
    "slow-shard": "ratio (its samples' length / the others')",
}

#: microbatches of a pipeline step (faultlab.benchmarks.pipeline's ``--microbatches`` default)
PIPELINE_MICROBATCHES = 4


def workload_injections(sc: Scenario, steps: pd.DataFrame, run_id: str) -> list[dict]:
    """The injections rows (faultlab.schema.INJECTIONS columns) of ``sc``'s workload
    knobs over the recorded ``steps`` (STEPS columns; the module docstring says what
    each row holds). A knob whose window holds no recorded step gets no row (it was
    never in force). Returns ``[]`` for a workload without knobs or empty steps."""
    if steps is None or len(steps) == 0:
        return []
    w = sc.workload
    st = w.stragglers
    ranks = sorted(int(r) for r in steps["rank"].unique())
    nodes = steps.groupby("rank")["node"].first().to_dict()
    out = []
    if st.seq_len is not None:
        value, measured = _seq_value(sc, steps)
        out.append(_row(run_id, len(out), "seq-imbalance", ranks, nodes, st.seq_len, steps, value,
                        {"tokens": st.seq_len.tokens, "sigma": st.seq_len.sigma, "rebalance": st.seq_len.rebalance}, measured))
    if st.gc is not None:
        out.append(_row(run_id, len(out), f"gc-{st.gc.mode}", ranks, nodes, st.gc, steps, float(st.gc.every_steps),
                        {"mode": st.gc.mode, "every_steps": st.gc.every_steps, "garbage_mb": st.gc.garbage_mb}, _gc_measured(steps, st.gc)))
    if w.kind == "pipeline" and w.layers_per_stage and max(w.layers_per_stage) > min(w.layers_per_stage):
        layers = w.layers_per_stage
        heavy = [s for s, n in enumerate(layers) if n == max(layers)]
        out.append(_row(run_id, len(out), "stage-imbalance", heavy, nodes, KnobWindow(), steps,
                        max(layers) / statistics.fmean(layers),
                        {"layers_per_stage": list(layers)}, {}))
    if st.slow_shard is not None:
        sh = st.slow_shard
        out.append(_row(run_id, len(out), "slow-shard", [sh.rank], nodes, sh, steps, float(sh.factor),
                        {"rank": sh.rank, "factor": sh.factor}, {}))
    return [r for r in out if r is not None]


def window_steps(steps: pd.DataFrame, win: KnobWindow) -> pd.DataFrame:
    """The rows of ``steps`` in ``win`` (``from_step`` <= step < ``to_step``)."""
    s = steps["step"].to_numpy()
    keep = s >= win.from_step
    if win.to_step is not None:
        keep &= s < win.to_step
    return steps[keep]


def _target(ranks: list[int]) -> str:
    return f"rank:{ranks[0]}" if len(ranks) == 1 else "ranks:" + ",".join(map(str, ranks))


def _row(run_id: str, k: int, ftype: str, ranks: list[int], nodes: dict, win: KnobWindow, steps: pd.DataFrame,
         value: float, params: dict, measured: dict) -> dict | None:
    """One knob's injections row over the steps of ``win`` (None when it holds none)."""
    ws = window_steps(steps, win)
    if len(ws) == 0:
        return None
    last = int(steps["step"].max())
    switched_off = win.to_step is not None and last >= win.to_step
    t0 = ws["t_start"].to_numpy(dtype=np.float64)
    t1 = t0 + ws["step_s"].to_numpy(dtype=np.float64)
    evidence = {"steps_in_window": int(ws["step"].nunique()), "first_step": int(ws["step"].min()),
                "last_step": int(ws["step"].max()), **measured}
    return {
        "run_id": run_id,
        "fault_id": f"{ftype}-{hashlib.sha256(f'{run_id}:{k}'.encode()).hexdigest()[:6]}",
        "fault_type": ftype,
        "kind": "workload",
        "node": ",".join(sorted({str(nodes[r]) for r in ranks if r in nodes})),
        "target": _target(ranks),
        "start_ts": float(np.nanmin(t0)),
        "end_ts": float(np.nanmax(t1)),
        "params": json.dumps({**params, "from_step": win.from_step, "to_step": win.to_step, "value": value,
                              "value_unit": SEVERITY_UNITS[ftype]}, sort_keys=True),
        "severity": float(value),
        "status": "reverted" if switched_off else "run-end",
        "verified": True,
        "evidence": json.dumps(evidence, sort_keys=True),
    }


def _seq_value(sc: Scenario, steps: pd.DataFrame) -> tuple[float, dict]:
    """The imbalance ratio of the seq_len knob over its window: ddp, from the recorded
    per-rank ``tokens`` (measured); pipeline, from the microbatches' draw (every stage
    records the step's total). Returns ``(value, evidence)``."""
    knob = sc.workload.stragglers.seq_len
    ws = window_steps(steps, knob)
    if sc.workload.kind == "ddp" and "tokens" in ws and ws["tokens"].notna().any():
        per = ws.groupby("step")["tokens"].agg(["max", "mean"])
        ratio = float((per["max"] / per["mean"]).mean())
        return ratio, {"measured_from": "tokens"}
    ratios = []
    for s in sorted(ws["step"].unique()):
        seqs = draw_sequences(sc.seed, int(s), PIPELINE_MICROBATCHES, knob.tokens, knob.sigma)
        tok = [sum(x) for x in (rebalance(seqs) if knob.rebalance else seqs)]
        ratios.append(max(tok) / statistics.fmean(tok))
    return (float(np.mean(ratios)) if ratios else 1.0), {"measured_from": "draw"}


def _gc_measured(steps: pd.DataFrame, win: KnobWindow) -> dict:
    """Recorded GC time over the window: its total and largest step (s)."""
    if "gc_s" not in steps:
        return {}
    g = window_steps(steps, win)["gc_s"].to_numpy(dtype=np.float64)
    if not np.isfinite(g).any():
        return {}
    return {"gc_s_total": float(np.nansum(g)), "gc_s_max_step": float(np.nanmax(g))}
