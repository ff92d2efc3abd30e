"""Baseline straggler detectors, by short name (``faultlab score --detector NAME``).

Each gives alarms (``detect``) and a continuous score per component per step
(``scores``: columns component, ts [unix s, the step's t_start], score) for AUC-PR and
VUS-PR. Defaults are fixed for every dataset (none is tuned to one).

- ``peer-median`` (:class:`PeerMedianDetector`): a rank's compute_s over its peer
  group's median at the same step (the peer view of Greyhound / Holmes, simplified).
- ``temporal-z`` (:class:`TemporalZDetector`): robust z-score of a rank's compute_s,
  and of the job's step time, against their own trailing history (median and MAD).
- ``arrival-late`` (:class:`ArrivalLateDetector`): the rank that reaches the
  collective last, from ``t_start + dataloader_s + compute_s``, by a margin of the
  step time (the "who is everyone waiting for" view of C4 / Falcon).
- ``random`` (:class:`RandomDetector`) and ``constant`` (:class:`ConstantDetector`):
  chance and always-alarm, shown beside every score to expose inflated metrics.

Every alarm is a run of at least ``k`` consecutive hot steps of one component, from
the first step's ``t_start`` to the last step's ``t_start + step_s``; its score is the
mean statistic over the run.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from faultlab.errors import BadInput
from faultlab.scoring.detectors import Detector, alarms_from_steps, as_alarms, empty_alarms

JOB = "job"


def _segments(df: pd.DataFrame, k: int) -> pd.DataFrame:
    return alarms_from_steps(df, k)


def _rank_frame(steps: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "component": "rank:" + steps["rank"].astype(int).astype(str),
        "rank": steps["rank"].astype(int).to_numpy(),
        "peer_group": steps["peer_group"].astype(str).to_numpy(),
        "step": steps["step"].astype(np.int64).to_numpy(),
        "t_start": steps["t_start"].astype(float).to_numpy(),
        "t_end": (steps["t_start"] + steps["step_s"]).astype(float).to_numpy(),
    })


def _job_frame(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per step: the job's step (start: first rank's t_start; end: last rank's
    t_start + step_s; step_s: median over ranks)."""
    g = pd.DataFrame({"step": steps["step"].astype(np.int64), "t0": steps["t_start"],
                      "t1": steps["t_start"] + steps["step_s"], "s": steps["step_s"]}).groupby("step", sort=True)
    j = pd.DataFrame({"t_start": g["t0"].min(), "t_end": g["t1"].max(), "step_s": g["s"].median()}).reset_index()
    j["component"] = JOB
    return j


def _scores_of(frame: pd.DataFrame) -> pd.DataFrame:
    s = frame["stat"].astype(float).replace([np.inf, -np.inf], np.nan).fillna(0.0)
    return pd.DataFrame({"component": frame["component"].to_numpy(), "ts": frame["t_start"].to_numpy(), "score": s.to_numpy()})


class PeerMedianDetector(Detector):
    """Alarm on a rank whose ``compute_s / median(compute_s of its peer group at the
    same step)`` exceeds ``threshold`` (ratio, default 1.5) for at least ``k`` (default
    3) consecutive steps; score = the ratio. A deliberately simpler method than the
    labeler: no temporal view, no noise floor, no gap tolerance. Raises BadInput for
    ``threshold <= 0`` or ``k < 1``."""

    name = "peer-median"

    def __init__(self, threshold: float = 1.5, k: int = 3):
        if threshold <= 0 or k < 1:
            raise BadInput("threshold must be > 0 and k >= 1", field="peer-median")
        self.threshold = float(threshold)
        self.k = int(k)

    def _frame(self, steps: pd.DataFrame) -> pd.DataFrame:
        f = _rank_frame(steps)
        med = steps.groupby([steps["peer_group"].astype(str), steps["step"]], sort=False)["compute_s"].transform("median")
        f["stat"] = (steps["compute_s"] / med).to_numpy()
        f["hot"] = f["stat"] > self.threshold
        return f

    def detect(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        if steps is None or len(steps) == 0:
            return empty_alarms()
        return _segments(_memo_frame(self, steps), self.k)

    def scores(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        return _scores_of(_memo_frame(self, steps))


def _robust_z(x: np.ndarray, window: int, min_history: int, floor: float) -> np.ndarray:
    """z of each value against the median and MAD (x 1.4826) of the ``window`` values
    before it (NaN until ``min_history`` values exist); the MAD is at least ``floor`` x
    the median (a noise floor: a perfectly steady history would make any blip
    infinite)."""
    s = pd.Series(x)
    prev = s.shift(1)
    med = prev.rolling(window, min_periods=min_history).median()
    mad = (prev - med).abs().rolling(window, min_periods=min_history).median() * 1.4826
    scale = np.maximum(mad.to_numpy(), floor * np.abs(med.to_numpy()))
    return ((s - med) / scale).to_numpy()


class TemporalZDetector(Detector):
    """Robust z-score against a component's own trailing history: per rank of its
    compute_s, and for the job of its step time (median over ranks), each against the
    median and MAD of the previous ``window`` steps (default 50; from ``min_history``
    = 10 steps on; MAD floored at ``floor`` = 5% of the median). Alarm where z >
    ``z`` (default 4) for ``k`` (default 3) consecutive steps; score = z. Its history
    includes slowed steps (no masking), so a long slowdown fades from its view, as a
    plain rolling z-score does."""

    name = "temporal-z"

    def __init__(self, z: float = 4.0, k: int = 3, window: int = 50, min_history: int = 10, floor: float = 0.05):
        if z <= 0 or k < 1 or window < 2 or not 2 <= min_history <= window or floor < 0:
            raise BadInput("need z > 0, k >= 1, 2 <= min_history <= window, floor >= 0", field="temporal-z")
        self.z, self.k, self.window, self.min_history, self.floor = float(z), int(k), int(window), int(min_history), float(floor)

    def _frame(self, steps: pd.DataFrame) -> pd.DataFrame:
        ranks = _rank_frame(steps)
        ranks["x"] = steps["compute_s"].astype(float).to_numpy()
        ranks = ranks.sort_values(["component", "step"], kind="mergesort").reset_index(drop=True)
        job = _job_frame(steps).rename(columns={"step_s": "x"})
        parts = []
        for _, g in pd.concat([ranks, job], ignore_index=True).groupby("component", sort=True):
            g = g.sort_values("step", kind="mergesort")
            parts.append(g.assign(stat=_robust_z(g["x"].to_numpy(), self.window, self.min_history, self.floor)))
        f = pd.concat(parts, ignore_index=True)
        f["hot"] = f["stat"] > self.z
        return f

    def detect(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        if steps is None or len(steps) == 0:
            return empty_alarms()
        return _segments(_memo_frame(self, steps), self.k)

    def scores(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        return _scores_of(_memo_frame(self, steps))


class ArrivalLateDetector(Detector):
    """The rank that reaches the collective last. Arrival = ``t_start + dataloader_s +
    compute_s`` (unix s; a missing dataloader_s counts 0); lateness = arrival minus the
    peer group's median arrival at the same step, over the step's median step_s. Alarm
    the last arriver where lateness > ``margin`` (default 0.3 of a step) for ``k``
    (default 3) consecutive steps; score = lateness (every rank's, for the continuous
    score)."""

    name = "arrival-late"

    def __init__(self, margin: float = 0.3, k: int = 3):
        if margin <= 0 or k < 1:
            raise BadInput("margin must be > 0 and k >= 1", field="arrival-late")
        self.margin, self.k = float(margin), int(k)

    def _frame(self, steps: pd.DataFrame) -> pd.DataFrame:
        f = _rank_frame(steps)
        dl = steps["dataloader_s"].fillna(0.0) if "dataloader_s" in steps.columns else 0.0
        f["arrival"] = (steps["t_start"] + dl + steps["compute_s"]).astype(float).to_numpy()
        f["step_s"] = steps["step_s"].astype(float).to_numpy()
        g = f.groupby(["peer_group", "step"], sort=False)
        f["stat"] = (f["arrival"] - g["arrival"].transform("median")) / g["step_s"].transform("median")
        last = f["arrival"] == g["arrival"].transform("max")
        f["hot"] = last & (f["stat"] > self.margin)
        return f

    def detect(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        if steps is None or len(steps) == 0:
            return empty_alarms()
        return _segments(_memo_frame(self, steps), self.k)

    def scores(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        return _scores_of(_memo_frame(self, steps))


def _memo_frame(det, steps: pd.DataFrame) -> pd.DataFrame:
    """``det._frame(steps)``, computed once for the same steps object (detect and
    scores of one run share it)."""
    key = (id(steps), len(steps))
    memo = getattr(det, "_memo", None)
    if memo is None or memo[0] != key or memo[1] is not steps:
        det._memo = (key, steps, det._frame(steps))
    return det._memo[2]


def _components(steps: pd.DataFrame) -> list[str]:
    return ["rank:" + str(r) for r in sorted(pd.unique(steps["rank"].astype(int)))] + [JOB]


class RandomDetector(Detector):
    """Seeded random alarms: the run is cut into windows of ``window_s`` seconds
    (default 10, from its first step's ``t_start``: the grid of the window-level
    metrics); each (component, window), the job included, is alarmed with probability
    ``p`` (default 0.1) for exactly that window (an alarm never spills into the next
    cell) with a uniform random score in [0, 1). Each cell's draw depends only on
    ``seed``, the run_id, the component and the window (the same in replay as
    offline, where a window is alarmed once the clock has seen a step in it; runs
    differ). With ``draws`` = N > 1 scoring averages N independent draws (seeds
    ``seed`` .. ``seed + N - 1``; :func:`faultlab.scoring.api.mean_stats`): the chance
    level itself, not one noisy sample of it."""

    name = "random"

    def __init__(self, seed: int = 0, p: float = 0.1, window_s: float = 10.0, draws: int = 1):
        if not 0 <= p <= 1 or not window_s > 0 or int(draws) < 1:
            raise BadInput("p must be in [0, 1], window_s > 0 and draws >= 1", field="random")
        self.seed = int(seed)
        self.p = float(p)
        self.window_s = float(window_s)
        self.draws = int(draws)

    def redraw(self, j: int) -> "RandomDetector":
        """Draw ``j`` of a ``draws`` > 1 score: the same detector with seed ``seed + j``
        (one draw each)."""
        return RandomDetector(seed=self.seed + int(j), p=self.p, window_s=self.window_s)

    def _run_key(self, steps: pd.DataFrame) -> int:
        import zlib

        rid = str(steps["run_id"].iloc[0]) if "run_id" in steps.columns and len(steps) else ""
        return zlib.crc32(rid.encode())

    def _draw(self, run_key: int, component: str, win: int) -> tuple[float, float]:
        """(coin, score) of one cell: a function of the seed, run, component and window
        only, so a replay (which sees the run grow) draws the same cells."""
        import zlib

        u = np.random.default_rng([self.seed, run_key, zlib.crc32(component.encode()), int(win)]).random(2)
        return float(u[0]), float(u[1])

    def detect(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        if steps is None or len(steps) == 0:
            return empty_alarms()
        t_first = float(steps["t_start"].min())
        t_end = float((steps["t_start"] + steps["step_s"]).max())
        n_win = max(1, int(np.ceil((t_end - t_first) / self.window_s)))
        key = self._run_key(steps)
        rows = []
        for comp in _components(steps):
            for win in range(n_win):
                coin, score = self._draw(key, comp, win)
                if coin < self.p:  # exactly one window: [t_first + win * window_s, next window's start or the run's end]
                    t0 = t_first + win * self.window_s
                    rows.append((comp, t0, min(t0 + self.window_s, t_end), score))
        return as_alarms(pd.DataFrame(rows, columns=["component", "start_ts", "end_ts", "score"]))

    def scores(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        import zlib

        f = _rank_frame(steps)
        rng = np.random.default_rng([self.seed, self._run_key(steps), zlib.crc32(b"scores")])
        return pd.DataFrame({"component": f["component"], "ts": f["t_start"], "score": rng.random(len(f))})


class ConstantDetector(Detector):
    """Alarm on every component (each rank and the job) for the whole run (score
    ``score``, default 1.0): recall 1 at no cost, which exposes metrics that reward
    alarming everything."""

    name = "constant"

    def __init__(self, score: float = 1.0):
        self.score = float(score)

    def detect(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        if steps is None or len(steps) == 0:
            return empty_alarms()
        t0, t1 = float(steps["t_start"].min()), float((steps["t_start"] + steps["step_s"]).max())
        comps = _components(steps)
        return as_alarms(pd.DataFrame({"component": comps, "start_ts": t0, "end_ts": t1, "score": self.score}))

    def scores(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        f = _rank_frame(steps)
        return pd.DataFrame({"component": f["component"], "ts": f["t_start"], "score": self.score})


BUILTIN: dict[str, type[Detector]] = {
    "peer-median": PeerMedianDetector,
    "temporal-z": TemporalZDetector,
    "arrival-late": ArrivalLateDetector,
    "random": RandomDetector,
    "constant": ConstantDetector,
}
