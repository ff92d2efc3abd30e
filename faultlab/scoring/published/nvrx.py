"""``nvrx``: the straggler scores of the NVIDIA Resiliency Extension, ported to
faultlab's steps.

Tool: NVIDIA Resiliency Extension (nvidia-resiliency-ext), package
``nvidia_resiliency_ext.straggler`` (usage guide:
https://nvidia.github.io/nvidia-resiliency-ext/straggler_det/usage_guide.html).
Ranks time "detection sections"
of their code; ``generate_report_if_interval_elapsed``, called after every iteration,
reports about every ``report_time_interval`` seconds
(``Detector.initialize(report_time_interval=60)``): the tool times the first 16
iterations, turns the interval into a number of iterations (over the fastest rank's
median iteration time) and reports after every iteration whose count is a multiple
of it (:func:`report_schedule`). Each report's per-rank median section time over
the iterations since the last report gives two performance scores in [0, 1]: the
**relative** score (the fastest rank's median over this rank's: 0.5 = twice as slow
as the best rank) and the **individual** score (this rank's best median of any
report so far, this one included, over its current one: 0.5 = twice as slow as its
own best). ``Report.identify_stragglers`` reports a rank whose section score is
below a threshold (0.75 for each kind by default). ``scores_to_compute`` chooses
the kinds. The tool reports neither before its interval nor at the end of training:
a run shorter than one interval gets no report, so with the tool's 60 s the
published datasets' ~22 s runs get none. A user of short jobs sets a shorter
interval; ``nvrx-short`` is that user's setting (one report per 10 s, the scoring
window), every other default the tool's.

Signals read: ``steps``: the sections are ``compute`` (``compute_s``) and, when the
run records it, ``dataloader`` (``dataloader_s``); the iteration time the interval
estimate reads is ``step_s``. The tool's report gathers every rank's scores on rank
0 (``gather_on_rank0=True``), which is what a detector that sees all ranks does.
Alarms: each (report, straggler rank), from the report's first step start to its
last step end; score = 1 minus the rank's lowest score. Continuous score per step:
the same, for the report the step falls in (0 for steps no report covers yet).
Replay re-runs the reports on what the clock has shown (the base class's update): a
report exists once every rank has finished the iteration it follows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from faultlab.scoring.detectors import as_alarms, empty_alarms
from faultlab.scoring.published.params import Param, PublishedDetector, params_doc
from faultlab.scoring.steparrays import memo

KINDS = ("relative_perf_scores", "individual_perf_scores")
ESTIMATION_ITERS = 16  # tool: ReportIntervalTracker.INTERVAL_ESTIMATION_ITERS
MAX_SAMPLES = 8 * 1024  # tool: CustomSection.max_elapseds_len, the section timings a report sees

PARAMS = (
    Param("report_time_interval", 60.0, "s", "tool: Detector.initialize default", "seconds between reports", lambda v: v > 0),
    Param("scores_to_compute", "all", "name", "tool: Detector.initialize default",
          "all, relative_perf_scores or individual_perf_scores", lambda v: v in ("all", *KINDS)),
    Param("section_rel_threshold", 0.75, "score", "tool: Report.identify_stragglers default",
          "a rank whose relative section score is below this is a straggler", lambda v: 0 <= v <= 1),
    Param("section_indiv_threshold", 0.75, "score", "tool: Report.identify_stragglers default",
          "a rank whose individual section score is below this is a straggler", lambda v: 0 <= v <= 1),
)
SHORT_PARAMS = tuple(p if p.name != "report_time_interval" else
                     Param("report_time_interval", 10.0, "s", "ours (one report per scoring window; the tool's 60 s outlasts the runs)",
                           p.help, p.ok) for p in PARAMS)
__doc__ += "\n``nvrx``:" + params_doc(PARAMS) + "\n``nvrx-short``:" + params_doc(SHORT_PARAMS)


def report_schedule(steps: pd.DataFrame, interval_s: float) -> np.ndarray:
    """The report each step of a run falls in, as the tool schedules reports: one
    number per row of ``steps`` (0, 1, ... or -1 for a step no report covers yet).

    The tool (``generate_report_if_interval_elapsed`` after every iteration, its
    ``ReportIntervalTracker``) times the first ``ESTIMATION_ITERS`` iterations of
    each rank, turns the interval into iterations (``interval_s`` over the fastest
    rank's median iteration time, at least 1) and reports after every iteration
    whose count is a multiple of it; a report covers the iterations since the last
    one. It never reports before the estimate, nor at the end of training, so a
    run shorter than one interval gets no report. Iterations are counted per rank
    in step order; a report needs every rank to have finished its iteration (the
    report is collective)."""
    order = steps.sort_values(["rank", "step"], kind="stable").index
    call = pd.Series(0, index=steps.index, dtype=np.int64)
    call.loc[order] = steps.loc[order].groupby("rank", sort=False).cumcount().to_numpy(np.int64) + 1
    out = np.full(len(steps), -1, np.int64)
    done = int(call.groupby(steps["rank"]).max().min()) if len(steps) else 0
    if done <= ESTIMATION_ITERS:
        return out
    # the time between two calls is one iteration: calls 2..17 time iterations 2..17
    timed = steps["step_s"].where((call >= 2) & (call <= ESTIMATION_ITERS + 1))
    fastest = float(timed.groupby(steps["rank"]).median().min())
    if not fastest > 0:
        return out
    every = max(int(interval_s / fastest), 1)
    reports = np.arange(every, done + 1, every)
    reports = reports[reports >= ESTIMATION_ITERS + 1]
    k = np.searchsorted(reports, call.to_numpy(np.int64), side="left")
    return np.where(k < len(reports), k, -1)


def report_scores(steps: pd.DataFrame, interval_s: float) -> pd.DataFrame:
    """The scores of every report of a run: one row per (report, rank, section) with
    ``report`` (0, 1, ...; :func:`report_schedule`), ``rank``, ``section``,
    ``relative`` and ``individual`` (each in [0, 1]; NaN where a median is not
    positive), ``t0``/``t1`` (the report's first step start and last step end, unix
    s). A section's median is over the report's iterations (the last
    ``MAX_SAMPLES`` of them, the tool's buffer); the individual score's reference
    is the rank's best median of any report up to and including this one."""
    k = report_schedule(steps, interval_s)
    keep = k >= 0
    cols = ["report", "rank", "section", "relative", "individual", "t0", "t1"]
    if not keep.any():  # no report yet (a run shorter than the interval)
        return pd.DataFrame(columns=cols)
    t_end = steps["t_start"].to_numpy(np.float64) + steps["step_s"].to_numpy(np.float64)
    sections = {"compute": steps["compute_s"].to_numpy(np.float64)}
    if "dataloader_s" in steps.columns and steps["dataloader_s"].notna().any():
        sections["dataloader"] = steps["dataloader_s"].to_numpy(np.float64)
    rows = []
    for section, x in sections.items():
        f = pd.DataFrame({"report": k[keep], "rank": steps["rank"].to_numpy(np.int64)[keep], "x": x[keep],
                          "t0": steps["t_start"].to_numpy(np.float64)[keep], "t1": t_end[keep]})
        f = f[f.groupby(["report", "rank"]).cumcount(ascending=False) < MAX_SAMPLES]
        g = f.groupby(["report", "rank"], sort=True).agg(med=("x", "median"), t0=("t0", "min"), t1=("t1", "max")).reset_index()
        med = g["med"].where(g["med"] > 0)
        best_rank = med.groupby(g["report"]).transform("min")  # the workload's fastest median
        best_own = med.groupby(g["rank"]).cummin()  # the rank's best median so far, this report included
        rows.append(g.assign(section=section, relative=best_rank / med, individual=best_own / med))
    if not rows:
        return pd.DataFrame(columns=cols)
    return pd.concat(rows, ignore_index=True)[cols]


class NvrxDetector(PublishedDetector):
    """NVIDIA Resiliency Extension straggler scores (relative and individual) per
    report interval; a rank below a threshold is a straggler (see the module)."""

    name = "nvrx"
    PARAMS = PARAMS

    def _worst(self, steps: pd.DataFrame) -> pd.DataFrame:
        """Per (report, rank): t0, t1, the lowest score of the kinds computed and
        whether it is a straggler."""
        s = report_scores(steps, self.report_time_interval)
        use_rel = self.scores_to_compute in ("all", "relative_perf_scores")
        use_ind = self.scores_to_compute in ("all", "individual_perf_scores")
        low = np.full(len(s), np.inf)
        hit = np.zeros(len(s), bool)
        if use_rel:
            low = np.fmin(low, s["relative"].to_numpy(np.float64))
            hit |= s["relative"].to_numpy(np.float64) < self.section_rel_threshold
        if use_ind:
            low = np.fmin(low, s["individual"].to_numpy(np.float64))
            hit |= s["individual"].to_numpy(np.float64) < self.section_indiv_threshold
        s = s.assign(low=np.where(np.isfinite(low), low, 1.0), hit=hit)
        return s.groupby(["report", "rank"], sort=True).agg(t0=("t0", "min"), t1=("t1", "max"), low=("low", "min"), hit=("hit", "any")).reset_index()

    def _memo(self, steps: pd.DataFrame) -> pd.DataFrame:
        return memo(self, "nvrx", steps, lambda: self._worst(steps))

    def detect(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        if steps is None or len(steps) == 0:
            return empty_alarms()
        w = self._memo(steps)
        w = w[w["hit"]]
        if w.empty:
            return empty_alarms()
        return as_alarms(pd.DataFrame({"component": "rank:" + w["rank"].astype(str), "start_ts": w["t0"], "end_ts": w["t1"],
                                       "score": 1.0 - w["low"]}))

    def scores(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        w = self._memo(steps)
        k = report_schedule(steps, self.report_time_interval)
        key = pd.MultiIndex.from_arrays([k, steps["rank"].to_numpy(np.int64)])
        score = pd.Series(1.0 - w["low"].to_numpy(np.float64), index=pd.MultiIndex.from_arrays([w["report"].astype(np.int64), w["rank"].astype(np.int64)]))
        s = score.reindex(key).to_numpy(np.float64)
        return pd.DataFrame({"component": "rank:" + steps["rank"].astype(int).astype(str).to_numpy(),
                             "ts": steps["t_start"].to_numpy(np.float64), "score": np.nan_to_num(s, nan=0.0)})


class NvrxShortDetector(NvrxDetector):
    """``nvrx`` as a user of short jobs runs it: one report per 10 s (the scoring
    window) instead of the tool's 60 s; every other default the tool's."""

    name = "nvrx-short"
    PARAMS = SHORT_PARAMS
