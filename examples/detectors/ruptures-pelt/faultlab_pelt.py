"""A faultlab detector plugin on ruptures: change points per rank (PELT)."""
import numpy as np
import pandas as pd
import ruptures as rpt
from faultlab.scoring.detectors import Detector, alarms_from_steps, step_frame


class PeltDetector(Detector):
    """PELT change points (Killick et al. JASA 2012, ruptures, l2 cost, penalty x log n on
    the MAD-scaled series) of each rank's compute over its peer median; a segment whose
    median ratio exceeds ``threshold`` is alarmed (>= ``k`` steps)."""

    name = "ruptures-pelt"

    def __init__(self, threshold: float = 1.3, penalty: float = 3.0, k: int = 3):
        self.threshold, self.penalty, self.k = float(threshold), float(penalty), int(k)

    def _frame(self, steps: pd.DataFrame) -> pd.DataFrame:
        f = step_frame(steps).sort_values(["component", "step"], kind="mergesort").reset_index(drop=True)
        f["stat"] = 1.0
        for _, idx in f.groupby("component").groups.items():
            x = np.nan_to_num(f.loc[idx, "peer_ratio"].to_numpy(), nan=1.0)
            if len(x) >= 2 * self.k:  # long enough to segment (not early in a replay)
                scale = max(np.median(np.abs(x - np.median(x))) * 1.4826, 0.02)
                bkps = rpt.Pelt(model="l2", min_size=self.k).fit(x / scale).predict(pen=self.penalty * np.log(len(x)))
                f.loc[idx, "stat"] = np.concatenate([np.full(b - a, np.median(x[a:b])) for a, b in zip([0] + bkps[:-1], bkps)])
        f["hot"] = f["stat"] > self.threshold
        return f

    def _once(self, steps):  # detect and scores of the same rows (offline, one replay tick) share a fit
        self._seen_rows, self._f = (steps, self._frame(steps)) if getattr(self, "_seen_rows", None) is not steps else (steps, self._f)
        return self._f

    def detect(self, steps, host=None):
        return alarms_from_steps(self._once(steps), self.k)

    def scores(self, steps, host=None):
        f = self._once(steps)
        return pd.DataFrame({"component": f["component"], "ts": f["t_start"], "score": f["stat"]})
