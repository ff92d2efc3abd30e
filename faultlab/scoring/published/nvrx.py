"""``nvrx``: the straggler scores of the NVIDIA Resiliency Extension, ported to
faultlab's steps.

Tool: NVIDIA Resiliency Extension (nvidia-resiliency-ext), package
``nvidia_resiliency_ext.straggler`` (usage guide:
https://nvidia.github.io/nvidia-resiliency-ext/straggler_det/usage_guide.html).
Ranks time "detection sections" of their code; at each report (every
``report_time_interval`` seconds, ``Detector.initialize(report_time_interval=60)``)
each rank's median section time over the interval gives two performance scores in
[0, 1]: the **relative** score (the fastest rank's median over this rank's: 0.5 =
twice as slow as the best rank) and the **individual** score (this rank's best
median of any report so far over its current one: 0.5 = twice as slow as its own
best). ``Report.identify_stragglers`` reports a rank whose section score is below a
threshold (0.75 for each kind by default). ``scores_to_compute`` chooses the kinds.

Signals read: ``steps``: the sections are ``compute`` (``compute_s``) and, when the
run records it, ``dataloader`` (``dataloader_s``). The tool's report gathers every
rank's scores on rank 0 (``gather_on_rank0=True``), which is what a detector that
sees all ranks does. Alarms: each (report interval, straggler rank), from the
interval's first step start to its last step end; score = 1 minus the rank's lowest
score. Continuous score per step: the same, for the interval the step falls in (0
for steps of an interval not reported yet). Replay re-runs the reports on what the
clock has shown (the base class's update): an interval is reported once a step ends
past its end.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from faultlab.scoring.detectors import as_alarms, empty_alarms
from faultlab.scoring.published.params import Param, PublishedDetector, params_doc
from faultlab.scoring.steparrays import memo

KINDS = ("relative_perf_scores", "individual_perf_scores")

PARAMS = (
    Param("report_time_interval", 60.0, "s", "tool: Detector.initialize default", "seconds between reports", lambda v: v > 0),
    Param("scores_to_compute", "all", "name", "tool: Detector.initialize default",
          "all, relative_perf_scores or individual_perf_scores", lambda v: v in ("all", *KINDS)),
    Param("section_rel_threshold", 0.75, "score", "tool: Report.identify_stragglers default",
          "a rank whose relative section score is below this is a straggler", lambda v: 0 <= v <= 1),
    Param("section_indiv_threshold", 0.75, "score", "tool: Report.identify_stragglers default",
          "a rank whose individual section score is below this is a straggler", lambda v: 0 <= v <= 1),
)
__doc__ += params_doc(PARAMS)


def report_scores(steps: pd.DataFrame, interval_s: float) -> pd.DataFrame:
    """The scores of every report of a run: one row per (report, rank, section) with
    ``report`` (0, 1, ...), ``rank``, ``section``, ``relative`` and ``individual``
    (each in [0, 1]; NaN where a median is not positive), ``t0``/``t1`` (the report
    interval's first step start and last step end, unix s). A report covers the
    steps that ended within ``[first t_start + k * interval_s, ... + interval_s)``
    and exists once a step ended past its end (the tool reports when the interval
    has elapsed)."""
    t_end = steps["t_start"].to_numpy(np.float64) + steps["step_s"].to_numpy(np.float64)
    start = float(steps["t_start"].min())
    k = np.floor((t_end - start) / interval_s).astype(np.int64)
    done = int(np.floor((t_end.max() - start) / interval_s))  # reports whose interval has ended
    sections = {"compute": steps["compute_s"].to_numpy(np.float64)}
    if "dataloader_s" in steps.columns and steps["dataloader_s"].notna().any():
        sections["dataloader"] = steps["dataloader_s"].to_numpy(np.float64)
    keep = k < done
    rows = []
    for section, x in sections.items():
        f = pd.DataFrame({"report": k[keep], "rank": steps["rank"].to_numpy(np.int64)[keep], "x": x[keep],
                          "t0": steps["t_start"].to_numpy(np.float64)[keep], "t1": t_end[keep]})
        g = f.groupby(["report", "rank"], sort=True).agg(med=("x", "median"), t0=("t0", "min"), t1=("t1", "max")).reset_index()
        med = g["med"].where(g["med"] > 0)
        best_rank = med.groupby(g["report"]).transform("min")  # the workload's fastest median
        best_own = med.groupby(g["rank"]).cummin()  # the rank's best median so far
        rows.append(g.assign(section=section, relative=best_rank / med, individual=best_own / med))
    if not rows:
        return pd.DataFrame(columns=["report", "rank", "section", "relative", "individual", "t0", "t1"])
    return pd.concat(rows, ignore_index=True)[["report", "rank", "section", "relative", "individual", "t0", "t1"]]


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
        t_end = steps["t_start"].to_numpy(np.float64) + steps["step_s"].to_numpy(np.float64)
        k = np.floor((t_end - float(steps["t_start"].min())) / self.report_time_interval).astype(np.int64)
        key = pd.MultiIndex.from_arrays([k, steps["rank"].to_numpy(np.int64)])
        score = pd.Series(1.0 - w["low"].to_numpy(), index=pd.MultiIndex.from_arrays([w["report"], w["rank"]]))
        s = score.reindex(key).to_numpy(np.float64)
        return pd.DataFrame({"component": "rank:" + steps["rank"].astype(int).astype(str).to_numpy(),
                             "ts": steps["t_start"].to_numpy(np.float64), "score": np.nan_to_num(s, nan=0.0)})
