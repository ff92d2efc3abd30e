"""How well the labeler's labels match what was injected, over a campaign's runs.

    python3 perf/labeler_campaign.py CAMPAIGN_OUT_DIR      # runs made by `faultlab campaign`
    python3 perf/labeler_campaign.py --run examples/labeler-eval.yaml --out DIR

For every injection it measures, from the telemetry alone, its job impact (mean job
step time over the fault / the expected mean step time of the fault-free steps within
10 s before it and 10 s after it, all on steps when no other injection was in force; a fault
wholly overlapped by others is counted as confounded and left out; see
:func:`job_impact`) and, for a fault on a rank, the target's own slowdown against its
peers (:func:`target_impact`). It "slowed the job" when the job impact is at least the
labeler's floor, ``LabelerConfig().min_slowdown`` (1.2): one figure for what the labeler
must label and what the evaluation counts. It then reports, against those that did:

- event-level precision, recall and F1 (no point-adjust). A predicted event is the
  injected labels of one component that claim one injection (a slowdown cut in two is
  one claim; labels per event shown apart). It is a true positive when that injection
  slowed the job, a false positive when it did not, and neither when it did not but
  its target rank was slowed by at least the floor (the rank label's claim is true;
  the job had slack), when the job's time ratio over the labels' own span reaches the
  floor (:func:`claim_impact`; ``event_precision_strict`` counts these as false
  positives), or it is confounded. An injection that slowed the job is recalled
  when a label claims it. The same precision per label is shown beside;
- localization Acc@1 per fault type: the injected component (:func:`wanted_component`:
  the rank of a fault or knob on a rank; one of the ranks, or the job, for a knob on
  several ranks; the node for nic-slow) is the label's component, or for a job label the
  culprit it names (for a fault on a rank only that rank's labels can claim it, so
  its Acc@1 is 1 by construction); beside it ``acc_at_1_telemetry``, the share
  whose rank the step timings named, i.e. not only the injection record
  (``located_by: injection``: stalls inside the collective, which no step timing can
  attribute; see :func:`faultlab.labeler.reconcile.locate_job_labels`), and how many
  those are; and ``event_recall_telemetry`` / ``recall_by_type_telemetry``, recall
  with the faults only the record located counted as missed;
- onset error in steps (label start step - first step at or after the injection);
- observed labels (no injection) per run-hour, for the noise level, with their
  slowdowns and the cause their host evidence names (``--details``: one line each);
- recall per bin of job impact and fault type (a curve from 1.1x up; the bins below
  the floor are shown too, for what the labeler catches there);
- peer groups (:func:`peer_groups_check`): in how many runs the groups the labeler
  found are the groups the testbed made (``testbed.node_groups``), and the labels on
  healthy ranks of a node group (ranks slower by design, with no fault of their own).

The labels are recomputed with the default LabelerConfig (thresholds are not tuned to
this campaign).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from faultlab.labeler import LabelerConfig, label
from faultlab.labeler.analysis import analyze
from faultlab.labeler.grid import StepGrid
from faultlab.rundir import RunDir

#: a fault "slowed the job" when its impact reaches the labeler's own floor
SLOWED = LabelerConfig().min_slowdown
#: job-impact bins of the recall curve (lower edges)
IMPACT_BINS = (1.0, 1.1, 1.2, 1.35, 1.5, 2.0, 3.0)
#: seconds after an injection's end before the job counts as settled
SETTLE_S = 1.0
#: seconds of fault-free job steps on each side of a fault for its impact's baseline
BASELINE_S = 10.0
#: seconds per block of the baseline's time ratio, at least (:func:`time_baseline`)
BLOCK_S = 1.0
#: steps per block of the baseline's time ratio, at least
BLOCK_STEPS = 20



def wanted_component(r) -> str:
    """The component a label must name to locate injection ``r`` (an injections row):
    its rank (``rank:N``), its ranks (``ranks:A,B,..``: a workload knob in force on
    several ranks), else its node (``node:NAME``: a link fault names an interface)."""
    t = str(r.target or "")
    return t if t.startswith(("rank:", "ranks:")) else f"node:{r.node}"


def located(component, want: str) -> bool:
    """Whether a label's ``component`` (a job label's culprit where it names one)
    locates an injection whose :func:`wanted_component` is ``want``: the same
    component, or for a knob on several ranks one of them or the job (each of those
    ranks straggles in turn, so the job is the straggler's honest name)."""
    if want.startswith("ranks:"):
        return component == "job" or component in {f"rank:{k}" for k in want.split(":", 1)[1].split(",")}
    return component == want


def _job_step(steps: pd.DataFrame) -> pd.DataFrame:
    """``steps`` -> one row per step: ``step``, ``t`` (earliest t_start, unix s),
    ``step_s`` (median over ranks, s), sorted by step."""
    g = steps.groupby("step").agg(t=("t_start", "min"), step_s=("step_s", "median")).reset_index()
    return g.sort_values("step").reset_index(drop=True)


def _in_force(js: pd.DataFrame, inj: pd.DataFrame, skip: str | None = None) -> np.ndarray:
    """``(steps,)`` bool: an injection other than ``skip`` was in force at the step (or
    ended less than :data:`SETTLE_S` before it: the job settles). One with no end (a
    failed revert: ``end_ts`` NaN) is in force to the end of the run."""
    out = np.zeros(len(js), dtype=bool)
    for o in inj.itertuples():
        if o.fault_id != skip:
            end = o.end_ts if np.isfinite(o.end_ts) else np.inf
            out |= ((js.t >= o.start_ts) & (js.t < end + SETTLE_S)).to_numpy()
    return out


def time_baseline(t: np.ndarray, x: np.ndarray) -> float:
    """The expected mean of ``x`` (a step time, s, or a ratio) over fault-free steps at
    times ``t`` (unix s): the median over blocks of each block's mean, a block
    :data:`BLOCK_S` s or :data:`BLOCK_STEPS` median steps, whichever is longer, and a
    block with under half the median block's steps (the edge of a side) left out.
    A mean, because an impact is a time ratio (mean over the fault / the mean it would
    have had): step times are skewed right, so the *median* step under-reads the
    expected step and every fault read ~5% high (on the 10 fault-free runs of
    examples/fault-free.yaml drawn with --seed 21, 30-40 ms steps, a window with no
    fault read 1.05x against the median and 1.00x against this). The median over
    blocks, so that one burst of host load in the baseline does not lift it; blocks of
    many steps, so that each block's mean holds its share of the hiccups (a block of a
    few steps is a median again). NaN when there is no step."""
    t, x = np.asarray(t, dtype=np.float64), np.asarray(x, dtype=np.float64)
    ok = np.isfinite(t) & np.isfinite(x)
    if not ok.any():
        return float("nan")
    t, x = t[ok], x[ok]
    gaps = np.diff(np.sort(t))
    step = float(np.median(gaps)) if gaps.size else 0.0
    blocks = np.floor((t - t.min()) / max(BLOCK_S, BLOCK_STEPS * step)).astype(np.int64)
    g = pd.Series(x).groupby(blocks)
    n, means = g.size(), g.mean()
    full = n >= 0.5 * float(n.median())
    return float(means[full].median())


def job_impact(js: pd.DataFrame, inj: pd.DataFrame, r) -> tuple[float, float, float]:
    """``(impact, impact_pre10, impact_median)`` of injection ``r`` on the job (ratios).

    impact = mean job step time over the fault / the expected mean step time
    (:func:`time_baseline`) of the fault-free steps within :data:`BASELINE_S` before
    its start and after its end (+ :data:`SETTLE_S`), all on steps when no other
    injection was in force (an overlap would lend this fault the other's slowdown). A
    time ratio: intermittent stalls count in full. Both sides, because a window on one
    side alone is at the mercy of a burst of host load in it (a 2-core machine shared
    with other work: one 3 s burst before a fault read a 1.11x fault as 0.85x) and
    follows drift from one side only. ``impact_pre10`` (the 10 s before only) and
    ``impact_median`` (against the median step of both sides, biased ~5% high) are
    former measures, kept for comparison. NaN (confounded) when fewer than 3 steps
    of the fault are clear or no baseline step is."""
    other = _in_force(js, inj, skip=r.fault_id)
    cur = ((js.t >= r.start_ts) & (js.t < r.end_ts)).to_numpy() & ~other
    pre = ((js.t >= r.start_ts - BASELINE_S) & (js.t < r.start_ts)).to_numpy() & ~other
    post = ((js.t >= r.end_ts + SETTLE_S) & (js.t < r.end_ts + SETTLE_S + BASELINE_S)).to_numpy() & ~other
    if cur.sum() < 3:
        return float("nan"), float("nan"), float("nan")
    during = float(js.step_s[cur].mean())

    def ratio(base: float) -> float:
        return during / base if base > 0 else float("nan")

    both = pre | post
    median = float(js.step_s[both].median()) if both.any() else float("nan")
    return (ratio(time_baseline(js.t[both], js.step_s[both])), ratio(time_baseline(js.t[pre], js.step_s[pre])),
            ratio(median))


def claim_impact(js: pd.DataFrame, inj: pd.DataFrame, r, claims: pd.DataFrame) -> float:
    """The job's time ratio over the steps the labels ``claims`` of injection ``r``
    cover (their ``start_ts``..``end_ts``, unix s) *inside the fault's window* (its
    start to its end + :data:`SETTLE_S`; steps when no other injection was in force),
    against the baseline of :func:`job_impact`: what those labels claim of this fault,
    measured from the telemetry independently of the labeler. An intermittent pause
    labeled from its first to its last stall claims that span, not the fault's whole
    window (whose clear tail after the last stall dilutes the fault's impact); a label
    matched through reconciliation's slack over a slowdown before or after the fault
    claims nothing of it. NaN when fewer than 3 claimed steps are clear or there is
    no baseline step."""
    other = _in_force(js, inj, skip=r.fault_id)
    mine = np.zeros(len(js), dtype=bool)
    for c in claims.itertuples():
        mine |= ((js.t >= c.start_ts) & (js.t < c.end_ts)).to_numpy()
    mine &= ((js.t >= r.start_ts) & (js.t < r.end_ts + SETTLE_S)).to_numpy() & ~other
    pre = ((js.t >= r.start_ts - BASELINE_S) & (js.t < r.start_ts)).to_numpy() & ~other
    post = ((js.t >= r.end_ts + SETTLE_S) & (js.t < r.end_ts + SETTLE_S + BASELINE_S)).to_numpy() & ~other
    base = time_baseline(js.t[pre | post], js.step_s[pre | post])
    if mine.sum() < 3 or not base > 0:
        return float("nan")
    return float(js.step_s[mine].mean()) / base


def target_impact(steps: pd.DataFrame, js: pd.DataFrame, inj: pd.DataFrame, r) -> float:
    """The slowdown of the rank a fault targets (ratio; NaN for a node fault or no
    data): its local time (compute_s + dataloader_s) over the median of its peers'
    (same peer group, itself left out) at the same step, mean over the fault's clear
    steps, divided by that ratio's expected mean over the run's fault-free steps
    (:func:`time_baseline`; a rank's steady offset from its peers is no slowdown). Measured from the telemetry,
    independently of the labeler: what a rank label of this fault claims."""
    if not str(r.target).startswith("rank:"):
        return float("nan")
    k = int(str(r.target).split(":", 1)[1])
    s = steps.assign(loc=steps.compute_s + (steps.dataloader_s.fillna(0) if "dataloader_s" in steps else 0))
    if not (s["rank"] == k).any():
        return float("nan")
    group = s.loc[s["rank"] == k, "peer_group"].iloc[0]
    piv = s[s.peer_group == group].pivot_table(index="step", columns="rank", values="loc")
    others = [c for c in piv.columns if c != k]
    if not others:
        return float("nan")
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = (piv[k] / piv[others].median(axis=1)).reindex(js.step).to_numpy()
    other = _in_force(js, inj, skip=r.fault_id)
    cur = ((js.t >= r.start_ts) & (js.t < r.end_ts)).to_numpy() & ~other
    free = ~_in_force(js, inj)
    level = time_baseline(js.t[free], rel[free])
    during = np.nanmean(rel[cur]) if np.isfinite(rel[cur]).any() else float("nan")
    return float(during / level) if level > 0 else float("nan")


def _claims(labels: pd.DataFrame, fault_id: str) -> pd.DataFrame:
    """The injected labels that claim ``fault_id``: by their fault_id or by their
    evidence's ``also_matches`` (one slowdown of one component with two overlapping
    causes)."""
    also = labels.evidence.map(lambda e: fault_id in (json.loads(e or "{}").get("also_matches") or []))
    return labels[((labels.fault_id == fault_id) | also) & (labels.source == "injected")]


def _events(labels: pd.DataFrame) -> pd.DataFrame:
    """The predicted events: injected labels grouped by (fault_id, component), one row
    each with ``n_labels``. One slowdown of one component cut in two (a gap in its
    flags) is one claim, counted once, right or wrong; how often that happens is
    reported apart (``labels_per_event``)."""
    inj_l = labels[labels.source == "injected"]
    if inj_l.empty:
        return pd.DataFrame({"fault_id": [], "component": [], "n_labels": []})
    return inj_l.groupby(["fault_id", "component"]).size().rename("n_labels").reset_index()


def evaluate_run(run_dir: Path) -> dict:
    rd = RunDir(run_dir)
    steps, inj = rd.read_table("steps"), rd.read_table("injections")
    if steps.empty:
        return {"run": str(run_dir), "skipped": "no steps"}
    labels = label(steps, inj, host=rd.read_table("host"))
    js = _job_step(steps)
    out = {"run": str(run_dir), "injections": [], "observed": int((labels.source == "observed").sum()),
           "hours": float((steps.t_start.max() - steps.t_start.min()) / 3600),
           "observed_labels": [_observed(r) for r in labels[labels.source == "observed"].itertuples()]}
    for r in inj.itertuples():
        impact, impact_pre10, impact_median = job_impact(js, inj, r)
        first_step = int(js[js.t >= r.start_ts].step.min()) if (js.t >= r.start_ts).any() else -1
        want = wanted_component(r)
        hits = _claims(labels, r.fault_id)
        comp = None
        onset = None
        located = None
        if len(hits):
            # "telemetry" when any label of it named its component from the steps; "injection"
            # when only the injection record did (stalls inside the collective, see reconcile)
            located = "telemetry" if any(json.loads(e or "{}").get("located_by") != "injection" for e in hits.evidence) \
                else "injection"
            h = hits.sort_values("start_ts").iloc[0]
            comp = h.component
            if comp == "job":
                comp = json.loads(h.evidence or "{}").get("culprit", "job")
            shared = [f for f in [h.fault_id, *(json.loads(h.evidence or "{}").get("also_matches") or [])] if f != r.fault_id]
            earlier = inj[inj.fault_id.isin(shared) & (inj.start_ts < r.start_ts)]
            # the onset of a label that began with an earlier fault says nothing of this one's
            onset = None if len(earlier) else int(h.start_step) - first_step
        out["injections"].append({"fault_id": r.fault_id, "type": r.fault_type, "impact": impact,
                                  "impact_pre10": impact_pre10, "impact_median": impact_median,
                                  "target_impact": target_impact(steps, js, inj, r),
                                  # over all its labels, for the details line; precision uses each event's own
                                  "claim_impact": claim_impact(js, inj, r, hits) if len(hits) else float("nan"),
                                  "confounded": not np.isfinite(impact), "labeled": bool(len(hits)),
                                  "component": comp, "want": want, "onset_steps": onset, "located_by": located})
    out.update(_score_events(labels, out["injections"], _event_claims(js, inj, labels)))
    out.update(peer_groups_check(run_dir, steps, inj, labels))
    return out


def peer_groups_check(run_dir: Path, steps: pd.DataFrame, inj: pd.DataFrame, labels: pd.DataFrame) -> dict:
    """The peer groups a run was made with against those the labeler found, and the
    labels on healthy ranks of a node group.

    Made: each ``testbed.node_groups`` entry of the run's ``scenario.yaml`` (rank i
    runs on node i), and the ranks in none of them as one more group. Found: the
    groups of :func:`faultlab.labeler.analysis.analyze` with the defaults (declared,
    else discovered). A *healthy-slow* label is a rank label (``observed`` or
    ``injected``) on a rank of a node group with ``compute_repeat`` > 1 (slower by
    design) that no fault on that same rank accounts for: the slower kind of rank read
    as a straggler.

    Returns ``{"groups_made": [[rank, ...], ...], "groups_found": [...],
    "healthy_slow_labels": [{"component", "source", "fault_id", "slowdown",
    "duration_s"}, ...]}`` (groups as sorted lists of rank numbers, sorted)."""
    sc = yaml.safe_load((Path(run_dir) / "scenario.yaml").read_text()) if (Path(run_dir) / "scenario.yaml").is_file() else {}
    node_groups = ((sc or {}).get("testbed") or {}).get("node_groups") or []
    ranks = sorted(int(r) for r in steps["rank"].unique())
    made = [sorted(int(n) for n in g.get("nodes", []) if int(n) in ranks) for g in node_groups]
    rest = [r for r in ranks if all(r not in g for g in made)]
    made = sorted(g for g in [*made, rest] if g)
    an = analyze(StepGrid.from_steps(steps))
    found = sorted(sorted(int(m.split(":", 1)[1]) for m in g["members"])
                   for g in an.groups.summary([an.grid.component(j) for j in range(an.grid.R)]))
    slow = {f"rank:{int(n)}" for g in node_groups if int(g.get("compute_repeat", 1)) > 1 for n in g.get("nodes", [])}
    target = dict(zip(inj["fault_id"], inj["target"])) if len(inj) else {}
    bad = []
    for r in labels.itertuples():
        if r.component in slow and r.source in ("observed", "injected") and target.get(r.fault_id) != r.component:
            bad.append({"component": r.component, "source": r.source, "fault_id": r.fault_id,
                        "slowdown": round(float(r.slowdown), 3), "duration_s": round(float(r.end_ts - r.start_ts), 2)})
    return {"groups_made": made, "groups_found": found, "healthy_slow_labels": bad}


def _event_claims(js: pd.DataFrame, inj: pd.DataFrame, labels: pd.DataFrame) -> dict:
    """``{(fault_id, component): claim_impact}`` of each predicted event
    (:func:`_events`) of an injection on record: the labels of that component and
    fault only (a true job label of a fault does not lend its span to a false rank
    label of it, nor a long false label dilute a true one)."""
    inj_l = labels[labels.source == "injected"]
    rec = {o.fault_id: o for o in inj.itertuples()}
    return {(f, c): claim_impact(js, inj, rec[f], grp) for (f, c), grp in inj_l.groupby(["fault_id", "component"])
            if f in rec}


def _score_events(labels: pd.DataFrame, injs: list[dict], claims: dict | None = None) -> dict:
    """Precision counts of one run's predicted events (:func:`_events`).

    An event is a true positive when its fault slowed the job (impact >=
    :data:`SLOWED`). A fault whose job impact stayed below the floor but whose target
    rank the telemetry shows slowed at least as much (:func:`target_impact` >=
    :data:`SLOWED`, the same floor: the rank label's own claim, a rank slower than its
    peers, is true) is neither: not required for recall, not counted against
    precision (``component_only``). So is one whose own labels' span inside the
    fault's window the telemetry shows slowed by at least the floor (``claims``:
    ``{(fault_id, component): claim_impact}``, see :func:`claim_impact`; the job was
    slowed when and as long as the event's labels say, though the fault's whole
    window was not; ``claim_only``), and a confounded one. Every other event is a
    false positive. ``label_*`` are the same counts per label, each label of a split
    slowdown counted apart (shown beside, so that neither count hides the other; a
    label of a ``claim_only`` event counts neither way there too)."""
    by = {i["fault_id"]: i for i in injs}
    claims = claims or {}

    def kind(fid: str, comp: str) -> str:
        i = by.get(fid)
        if i is None:
            return "fp"
        if i["confounded"]:
            return "neither"
        if i["impact"] >= SLOWED:
            return "tp"
        if i["target_impact"] >= SLOWED:
            return "component_only"
        if claims.get((fid, comp), float("nan")) >= SLOWED:
            return "claim_only"
        return "fp"

    ev = _events(labels)
    kinds = [kind(f, c) for f, c in zip(ev.fault_id, ev.component)]
    inj_l = labels[labels.source == "injected"]
    lk = [kind(f, c) for f, c in zip(inj_l.fault_id, inj_l.component)]
    return {"event_tp": kinds.count("tp"), "event_fp": kinds.count("fp"), "event_component_only": kinds.count("component_only"),
            "event_claim_only": kinds.count("claim_only"),
            "events": len(kinds), "label_tp": lk.count("tp"), "label_fp": lk.count("fp"), "labels": len(lk),
            "fp_events": [f"{f}@{c}" for f, c, k in zip(ev.fault_id, ev.component, kinds) if k == "fp"]}


def _observed(r) -> dict:
    """One observed label as a dict: component, slowdown, duration (s), views and the
    host evidence of its cause (:mod:`faultlab.labeler.hostcause`; ``None`` when the
    host metrics show none)."""
    ev = json.loads(r.evidence or "{}")
    host = ev.get("host") or {}
    return {"component": r.component, "slowdown": float(r.slowdown), "duration_s": float(r.end_ts - r.start_ts),
            "views": r.views, "likely_cause": host.get("likely_cause"), "host_cpu_busy_pct": host.get("host_cpu_busy_pct"),
            "ranks_cpu_pct": host.get("ranks_cpu_pct"), "ranks_cpu_pct_typical": host.get("ranks_cpu_pct_typical")}


def _observed_summary(runs: list[dict]) -> dict:
    """Observed labels over all runs: count, slowdowns (median, max), by component
    kind, and by the cause their host evidence names."""
    obs = [o for r in runs for o in r.get("observed_labels", [])]
    sd = [o["slowdown"] for o in obs]
    causes: dict[str, int] = {}
    for o in obs:
        k = o["likely_cause"] or "none shown"
        causes[k] = causes.get(k, 0) + 1
    return {"n": len(obs), "slowdown_median": float(np.median(sd)) if sd else float("nan"),
            "slowdown_max": float(np.max(sd)) if sd else float("nan"),
            "job": sum(o["component"] == "job" for o in obs), "rank": sum(o["component"].startswith("rank:") for o in obs),
            "by_cause": causes}


def _curve(injs: list[dict]) -> dict:
    """``{bin: {type: "labeled/n"}}`` over the bins of :data:`IMPACT_BINS` (all types
    too, as ``"all"``), for faults with a measured impact."""
    out = {}
    edges = list(IMPACT_BINS) + [float("inf")]
    for lo, hi in zip(edges[:-1], edges[1:]):
        xs = [i for i in injs if np.isfinite(i["impact"]) and lo <= i["impact"] < hi]
        row = {}
        for t in ["all"] + sorted({i["type"] for i in xs}):
            ys = [i for i in xs if t == "all" or i["type"] == t]
            row[t] = f"{sum(i['labeled'] for i in ys)}/{len(ys)}"
        out[f"{lo:g}-{hi:g}"] = row
    return out


def _pr(runs: list[dict]) -> tuple[float, float]:
    """(event precision, event recall) over ``runs`` (NaN where undefined)."""
    tp = sum(r.get("event_tp", 0) for r in runs)
    fp = sum(r.get("event_fp", 0) for r in runs)
    hit = [i["labeled"] for r in runs for i in r.get("injections", []) if i["impact"] >= SLOWED]
    return (tp / (tp + fp) if tp + fp else float("nan"), float(np.mean(hit)) if hit else float("nan"))


def bootstrap_ci(runs: list[dict], n: int = 2000, seed: int = 0) -> dict:
    """95% percentile bootstrap intervals of event precision and recall, resampling
    runs with replacement (DESIGN: every figure with a CI over runs). ``{"precision":
    [lo, hi], "recall": [lo, hi]}``."""
    rng = np.random.default_rng(seed)
    draws = np.array([_pr([runs[k] for k in rng.integers(0, len(runs), len(runs))]) for _ in range(n)]) if runs else np.empty((0, 2))
    out = {}
    for j, name in enumerate(("precision", "recall")):
        v = draws[:, j][np.isfinite(draws[:, j])] if len(draws) else np.array([])
        out[name] = [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))] if v.size else [float("nan")] * 2
    return out


def _by_telemetry(i: dict) -> bool:
    """A fault some label claimed from the step timings (not only by the record)."""
    return bool(i["labeled"]) and i.get("located_by") != "injection"


def summarize(runs: list[dict]) -> dict:
    injs = [i for r in runs for i in r.get("injections", [])]
    slowed = [i for i in injs if i["impact"] >= SLOWED]
    tp_e = sum(r.get("event_tp", 0) for r in runs)
    fp_e = sum(r.get("event_fp", 0) for r in runs)
    tp_l = sum(r.get("label_tp", 0) for r in runs)
    fp_l = sum(r.get("label_fp", 0) for r in runs)
    claims = sum(r.get("event_claim_only", 0) for r in runs)
    recall = np.mean([i["labeled"] for i in slowed]) if slowed else float("nan")
    precision = tp_e / (tp_e + fp_e) if tp_e + fp_e else float("nan")
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else float("nan")
    acc = {}
    for t in sorted({i["type"] for i in slowed}):
        xs = [i for i in slowed if i["type"] == t and i["labeled"]]
        acc[t] = {"acc_at_1": float(np.mean([located(i["component"], i["want"]) for i in xs])) if xs else float("nan"), "n": len(xs),
                  "n_slowed": sum(1 for i in slowed if i["type"] == t),
                  # the same, counting a component only the injection record named as wrong
                  "acc_at_1_telemetry": float(np.mean([located(i["component"], i["want"]) and i.get("located_by") != "injection"
                                                       for i in xs])) if xs else float("nan"),
                  "located_by_injection": sum(1 for i in xs if i.get("located_by") == "injection")}
    onsets = [abs(i["onset_steps"]) for i in slowed if i["onset_steps"] is not None]
    hours = sum(r.get("hours", 0) for r in runs)
    return {
        "runs": len(runs), "injections": len(injs), "slowed_job": len(slowed),
        "confounded": sum(1 for i in injs if i["confounded"]),
        "event_precision": precision, "event_recall": float(recall), "event_f1": f1,
        # the same with every claim_only event counted as a false positive (a stricter rule)
        "event_precision_strict": tp_e / (tp_e + fp_e + claims) if tp_e + fp_e + claims else float("nan"),
        "ci95_over_runs": bootstrap_ci(runs),
        "events": {"tp": tp_e, "fp": fp_e, "component_only": sum(r.get("event_component_only", 0) for r in runs),
                   "claim_only": sum(r.get("event_claim_only", 0) for r in runs),
                   "fp_events": [f for r in runs for f in r.get("fp_events", [])]},
        "label_precision": tp_l / (tp_l + fp_l) if tp_l + fp_l else float("nan"),
        "labels_per_event": (sum(r.get("labels", 0) for r in runs) / sum(r.get("events", 0) for r in runs)
                             if sum(r.get("events", 0) for r in runs) else float("nan")),
        "localization": acc,
        "onset_error_steps_median": float(np.median(onsets)) if onsets else float("nan"),
        "onset_error_steps_p95": float(np.percentile(onsets, 95)) if onsets else float("nan"),
        "observed_labels_per_run_hour": sum(r.get("observed", 0) for r in runs) / hours if hours else float("nan"),
        "observed": _observed_summary(runs),
        "slowed_threshold": SLOWED,
        "unmanifested": [(i["type"], round(i["impact"], 3)) for i in injs if i["impact"] < SLOWED],
        "recall_slowed_by_impact_pre10": float(np.mean([i["labeled"] for i in injs if i["impact_pre10"] >= SLOWED]))
        if any(i["impact_pre10"] >= SLOWED for i in injs) else float("nan"),
        "recall_slowed_by_impact_median": float(np.mean([i["labeled"] for i in injs if i["impact_median"] >= SLOWED]))
        if any(i["impact_median"] >= SLOWED for i in injs) else float("nan"),
        "recall_by_type": {t: float(np.mean([i["labeled"] for i in slowed if i["type"] == t]))
                           for t in sorted({i["type"] for i in slowed})},
        # the same, a fault whose only claims the injection record located counted as missed
        "event_recall_telemetry": float(np.mean([_by_telemetry(i) for i in slowed])) if slowed else float("nan"),
        "recall_by_type_telemetry": {t: float(np.mean([_by_telemetry(i) for i in slowed if i["type"] == t]))
                                     for t in sorted({i["type"] for i in slowed})},
        "recall_by_impact": _curve(injs),
        "onset_error_steps_max": float(np.max(onsets)) if onsets else float("nan"),
        "onset_within_2_steps": float(np.mean([o <= 2 for o in onsets])) if onsets else float("nan"),
        "peer_groups": _groups_summary(runs),
    }


def _groups_summary(runs: list[dict]) -> dict:
    """Over the runs: how many found the groups they were made with (the others
    listed), and the labels on healthy ranks of a slower node group
    (:func:`peer_groups_check`)."""
    done = [r for r in runs if "groups_made" in r]
    miss = [{"run": Path(r["run"]).name, "made": r["groups_made"], "found": r["groups_found"]}
            for r in done if r["groups_made"] != r["groups_found"]]
    bad = [dict(run=Path(r["run"]).name, **b) for r in done for b in r["healthy_slow_labels"]]
    return {"found_equal_made": f"{len(done) - len(miss)}/{len(done)}", "mismatches": miss,
            "labels_on_healthy_slow_ranks": len(bad), "healthy_slow_labels": bad}


def _run_one():
    """faultlab.cli's ``_run_one``, with Ctrl-C raising KeyboardInterrupt again.

    Importing faultlab.cli sets SIGINT to SIG_DFL (the CLI's ``_main`` restores it per
    command; a library import never runs that), so a Ctrl-C during a chunk killed this
    process outright: no revert, no testbed teardown, the faults and namespaces left to
    the on-node watchdog's lease. The runner ends a run on KeyboardInterrupt."""
    import signal

    from faultlab.cli import _run_one as run_one

    signal.signal(signal.SIGINT, signal.default_int_handler)
    return run_one


def run_chunk(file: Path, out: Path, seed: int | None, runs: str | None) -> int:
    """Run the drawn runs ``runs`` (``"A:B"``, Python slice bounds) of campaign ``file``
    drawn with ``seed`` (its own when None) into ``out/NAME-NNN``; a run whose
    ``meta.json`` says ``complete`` is skipped. Unlabeled (evaluation relabels). A
    Ctrl-C ends the run in progress (its faults reverted, its testbed down) and the
    chunk: returns 130 then, else 0."""
    from faultlab.scenario import load

    run_one = _run_one()

    c = load(file, "campaign")
    if seed is not None:
        c = c.model_copy(update={"seed": seed, "name": f"{c.name}-s{seed}"})
    scs = c.scenarios()
    a, b = (int(x) if x else None for x in (runs or ":").split(":", 1))
    out.mkdir(parents=True, exist_ok=True)
    for sc in scs[a:b]:
        meta = out / sc.name / "meta.json"
        if meta.exists() and json.loads(meta.read_text()).get("complete"):
            continue
        print(f"run {sc.name}", flush=True)
        try:
            if run_one(sc, out / sc.name, False)["code"] == 130:  # interrupted, torn down
                print(f"{sc.name} interrupted: the chunk stops here", flush=True)
                return 130
        except Exception as e:  # unattended: one failed run must not stop the chunk
            print(f"{sc.name} failed: {type(e).__name__}: {e}", flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", help="a campaign output folder (run folders inside)")
    ap.add_argument("--run", help="run this campaign file first")
    ap.add_argument("--out", help="output folder for --run")
    ap.add_argument("--details", action="store_true", help="also print one line per injection (to stderr)")
    ap.add_argument("--seed", type=int, help="with --run: draw the campaign with this seed instead of its own "
                    "(tune on one seed, report on a fresh one)")
    ap.add_argument("--runs", metavar="A:B", help="with --run: only the drawn runs A..B-1 (a chunk; runs already "
                    "complete in --out are skipped, so chunks resume)")
    ap.add_argument("--no-eval", action="store_true", help="with --run: only run, do not evaluate")
    a = ap.parse_args()
    d = a.dir
    if a.run:
        d = a.out or "faultlab-runs/labeler-eval"
        if a.seed is None and a.runs is None:
            subprocess.run([sys.executable, "-m", "faultlab.cli", "campaign", a.run, "--out", d, "--no-label"], check=False)
        else:
            if run_chunk(Path(a.run), Path(d), a.seed, a.runs):
                return 130
        if a.no_eval:
            return 0
    if not d:
        ap.error("give a campaign output folder or --run FILE")
    runs = [evaluate_run(p.parent) for p in sorted(Path(d).glob("*/meta.json"))]
    if a.details:
        for r in runs:
            for i in r.get("injections", []):
                print(f"{Path(r['run']).name:24s} {i['fault_id']:16s} {i['type']:15s} impact={i['impact']:.2f} "
                      f"(pre10 {i['impact_pre10']:.2f}, median {i['impact_median']:.2f}, target {i['target_impact']:.2f}, "
                      f"claim {i['claim_impact']:.2f}) "
                      f"labeled={i['labeled']!s:5s} got={i['component']!s:8s} want={i['want']:8s} onset={i['onset_steps']} "
                      f"located_by={i.get('located_by')}",
                      file=sys.stderr)
            for o in r.get("observed_labels", []):
                print(f"{Path(r['run']).name:24s} observed {o['component']:8s} slowdown={o['slowdown']:.2f} "
                      f"{o['duration_s']:.1f}s views={o['views']} cause={o['likely_cause']} host_cpu={o['host_cpu_busy_pct']}% "
                      f"ranks_cpu={o['ranks_cpu_pct']}% (typical {o['ranks_cpu_pct_typical']}%)", file=sys.stderr)
    rep = summarize(runs)
    print(json.dumps(rep, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
