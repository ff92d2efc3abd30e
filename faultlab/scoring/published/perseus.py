"""``perseus``: Perseus's fail-slow detection, ported from drives to ranks.

Paper: Ruiming Lu, Erci Xu, Yiming Zhang et al., "Perseus: A Fail-Slow Detection
Framework for Cloud Storage Systems", USENIX FAST 2023 (best paper). Per node it
takes every drive's (throughput, latency) samples, keeps the normal ones (PCA of the
standardized points, then DBSCAN: the largest cluster is normal), fits a polynomial
regression of latency on throughput to them and takes the upper bound of its
prediction interval as the most a healthy drive's latency may be at that load;
each sample's slowdown ratio is latency over that bound, runs of slowdown become
events, and a score table of duration x severity ranks the drives.

Port (drives -> ranks, a node's drives -> a run's ranks): a point is one (rank,
step); its load (Perseus's throughput) is the peer group's median local time at
that step (what every rank had to do), its latency the rank's own local time
(``compute_s + dataloader_s``). The fit is on the run's points seen so far (the
peers are the reference, as a node's drives are). Per rank per ``window_s``
window: duration = the share of its steps with slowdown > 1, severity = the median
slowdown of those steps; each is binned (``duration_bins``, ``severity_bins``:
level 1, 2, 3 past each edge) and the score is the product of the two levels; a
window with score >= ``min_score`` is an alarm on the rank (score = the product).

Signals read: ``steps`` (``compute_s``, ``dataloader_s``, ``peer_group``). Needs
scikit-learn (``pip install faultlab[detectors]``). Replay: the base class's re-run
on what the clock has shown (the fit uses only those points).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from faultlab.errors import FaultlabError
from faultlab.scoring.detectors import as_alarms, empty_alarms
from faultlab.scoring.published.iaso import peer_ratio
from faultlab.scoring.published.params import Param, PublishedDetector, params_doc
from faultlab.scoring.steparrays import memo
from faultlab.steps import dense_steps


def _bins(text: str) -> bool:
    try:
        v = [float(x) for x in str(text).split(",")]
    except ValueError:
        return False
    return len(v) == 3 and v == sorted(v)


PARAMS = (
    Param("eps", 0.5, "standardized units",
          "ours, the paper's number not found: scikit-learn's DBSCAN default, a scale-free radius here because the "
          "points are standardized first", "DBSCAN neighbourhood radius in the PCA space", lambda v: v > 0),
    Param("min_samples", 5, "points", "ours, the paper's number not found: scikit-learn's DBSCAN default",
          "DBSCAN core-point neighbours", lambda v: v >= 1),
    Param("degree", 2, "",
          "ours, the paper's number not found: the lowest degree that bends, as the paper rejects a linear fit for "
          "latency rising non-linearly with load", "polynomial degree of the fit", lambda v: 1 <= v <= 5),
    Param("z", 3.29, "sigma",
          "paper: its 99.9% upper prediction bound (the regression step, as a public summary of the paper gives it; "
          "the paper's own text was not in the searched sources), the upper end of a normal 99.9% interval",
          "the bound is the fit plus z residual standard deviations", lambda v: v > 0),
    Param("duration_bins", "0.1,0.3,0.6", "share of steps",
          "ours, the paper's score table not found: level 3 once most of the window (over 60%) is slow",
          "edges of duration levels 1, 2, 3", _bins),
    Param("severity_bins", "1.0,1.5,2.0", "slowdown ratio",
          "ours, the paper's score table not found: level 1 past the bound, level 3 at twice it",
          "edges of severity levels 1, 2, 3", _bins),
    Param("min_score", 2, "duration level x severity level",
          "ours: the smallest score above one barely-slow level-1 x level-1 window",
          "a window with at least this score is an alarm", lambda v: 1 <= v <= 9),
    Param("window_s", 10.0, "s", "ours: faultlab's scoring window (the paper scores each drive per day)", "window length",
          lambda v: v > 0),
)
__doc__ += params_doc(PARAMS)


def normal_points(x: np.ndarray, y: np.ndarray, eps: float, min_samples: int) -> np.ndarray:
    """Mask of the points (``x``, ``y``; 1-D, same length) in the largest DBSCAN
    cluster of their standardized PCA projection (all True when there are fewer
    than ``min_samples`` points or no cluster)."""
    try:
        # scikit-learn is imported here: a heavy optional dependency, needed by perseus only
        from sklearn.cluster import DBSCAN
        from sklearn.decomposition import PCA
    except ImportError:
        raise FaultlabError("perseus needs scikit-learn", field="detector", fix="pip install faultlab[detectors]") from None
    pts = np.column_stack([x, y])
    if len(pts) < max(min_samples, 3):
        return np.ones(len(pts), bool)
    sd = pts.std(axis=0)
    std = (pts - pts.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    proj = PCA(n_components=2).fit_transform(std)
    lab = DBSCAN(eps=eps, min_samples=min_samples).fit_predict(proj)
    if (lab < 0).all():
        return np.ones(len(pts), bool)
    biggest = np.bincount(lab[lab >= 0]).argmax()
    return lab == biggest


def upper_bound(x: np.ndarray, y: np.ndarray, keep: np.ndarray, degree: int, z: float) -> np.ndarray:
    """The upper prediction bound at every ``x``: the degree-``degree`` polynomial
    fit of ``y`` on ``x`` over the ``keep`` points plus ``z`` standard deviations of
    its residuals there."""
    xs, ys = x[keep], y[keep]
    deg = min(degree, max(len(np.unique(xs)) - 1, 0))
    fit = np.polynomial.Polynomial.fit(xs, ys, deg)  # on a scaled domain: well conditioned at millisecond loads
    resid = ys - fit(xs)
    return fit(x) + z * float(resid.std())


def level(value: np.ndarray, edges: list[float]) -> np.ndarray:
    """0 below the first edge, else 1, 2 or 3 (the number of edges reached)."""
    return np.searchsorted(np.asarray(edges), value, side="right")


class PerseusDetector(PublishedDetector):
    """Perseus (FAST'23) ported to ranks: PCA + DBSCAN, polynomial upper bound,
    duration x severity score per window (see the module)."""

    name = "perseus"
    PARAMS = PARAMS

    def _frame(self, steps: pd.DataFrame):
        """(dense steps, slowdown ratio S x R)."""
        d = dense_steps(steps)
        y = d.compute
        load = y / (peer_ratio(y, d.groups) + 1.0)  # the peer group's median at the step
        ok = np.isfinite(y) & np.isfinite(load)
        sr = np.full(y.shape, np.nan)
        if ok.sum() >= 3:
            keep = normal_points(load[ok], y[ok], self.eps, self.min_samples)
            bound = upper_bound(load[ok], y[ok], keep, self.degree, self.z)
            with np.errstate(divide="ignore", invalid="ignore"):
                sr[ok] = np.where(bound > 0, y[ok] / bound, np.nan)
        return d, sr

    def _memo(self, steps):
        return memo(self, "perseus", steps, lambda: self._frame(steps))

    def detect(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        if steps is None or len(steps) == 0:
            return empty_alarms()
        d, sr = self._memo(steps)
        dur_edges = [float(v) for v in self.duration_bins.split(",")]
        sev_edges = [float(v) for v in self.severity_bins.split(",")]
        t0, t1 = d.t_start, d.t_start + d.step_s
        win = np.floor((t0 - np.nanmin(t0)) / self.window_s)
        rows = []
        for j, rank in enumerate(d.ranks):
            ok = np.isfinite(sr[:, j])
            for w in np.unique(win[ok, j]):
                m = ok & (win[:, j] == w)
                slow = sr[m, j] > 1.0
                if not slow.any():
                    continue
                dur = level(np.array([slow.mean()]), dur_edges)[0]
                sev = level(np.array([np.median(sr[m, j][slow])]), sev_edges)[0]
                if dur * sev >= self.min_score:
                    rows.append((f"rank:{int(rank)}", float(np.min(t0[m, j])), float(np.max(t1[m, j])), float(dur * sev)))
        if not rows:
            return empty_alarms()
        return as_alarms(pd.DataFrame(rows, columns=["component", "start_ts", "end_ts", "score"]))

    def scores(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        """Each step's slowdown ratio (latency over the upper bound; 0 where unknown)."""
        d, sr = self._memo(steps)
        ok = np.isfinite(d.t_start)
        comp = np.broadcast_to(np.array([f"rank:{int(r)}" for r in d.ranks], dtype=object), d.t_start.shape)
        return pd.DataFrame({"component": comp[ok], "ts": d.t_start[ok], "score": np.nan_to_num(sr[ok])})
