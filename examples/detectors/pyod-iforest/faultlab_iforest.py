"""A faultlab detector plugin on pyod: IsolationForest over per-rank step features."""
import numpy as np
import pandas as pd
from pyod.models.iforest import IForest

from faultlab.scoring.detectors import Detector, alarms_from_steps, step_frame


class IForestDetector(Detector):
    """IsolationForest (Liu et al. ICDM'08, via pyod) fitted on each run's own steps
    (unsupervised), features per rank and step: compute over its peer median, compute
    over the rank's run median, share of the step spent communicating. Alarm on >= k
    consecutive outlier steps (pyod's label at ``contamination``)."""

    name = "pyod-iforest"

    def __init__(self, contamination: float = 0.05, k: int = 3, seed: int = 0):
        self.contamination, self.k, self.seed = float(contamination), int(k), int(seed)

    def _frame(self, steps: pd.DataFrame) -> pd.DataFrame:
        f = step_frame(steps)
        own = f["compute_s"] / f.groupby("rank")["compute_s"].transform("median")
        X = np.column_stack([f["peer_ratio"], own, f["comm_s"] / f["step_s"]])
        model = IForest(contamination=self.contamination, random_state=self.seed).fit(np.nan_to_num(X))
        f["stat"] = model.decision_scores_
        f["hot"] = (model.labels_ == 1) & (f["peer_ratio"] > 1.0)  # slower than its peers, not faster
        return f

    def _once(self, steps):  # detect and scores of the same rows (offline, or one replay tick) share one fit
        if getattr(self, "_seen_rows", None) is not steps:
            self._seen_rows, self._f = steps, self._frame(steps)
        return self._f

    def detect(self, steps, host=None):
        return alarms_from_steps(self._once(steps), self.k)

    def scores(self, steps, host=None):
        f = self._once(steps)
        return pd.DataFrame({"component": f["component"], "ts": f["t_start"], "score": f["stat"]})
