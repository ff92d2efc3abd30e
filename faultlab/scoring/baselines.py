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

import zlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from faultlab.errors import BadInput
from faultlab.scoring.detectors import Detector, alarms_from_codes, as_alarms, empty_alarms
from faultlab.scoring.steparrays import StepArrays, memo, step_arrays

JOB = "job"


@dataclass(frozen=True)
class StepStat:
    """A detector's per-step statistic, one row per (component, step): ``comp`` codes
    into ``names`` (sorted component names), ``step``, ``t_start``, ``t_end`` (unix s),
    ``stat`` and ``hot`` (the step is over the detector's threshold)."""

    names: np.ndarray
    comp: np.ndarray
    step: np.ndarray
    t_start: np.ndarray
    t_end: np.ndarray
    stat: np.ndarray
    hot: np.ndarray

    def alarms(self, k: int) -> pd.DataFrame:
        """Each run of at least ``k`` consecutive hot steps of a component as one alarm
        (:func:`faultlab.scoring.detectors.alarms_from_codes`)."""
        return alarms_from_codes(self.comp, self.names, self.step, self.t_start, self.t_end, self.stat, self.hot, k)

    def scores(self) -> pd.DataFrame:
        """component, ts (the step's t_start) and score (stat; NaN/inf as 0)."""
        s = np.where(np.isfinite(self.stat), self.stat, 0.0)
        return pd.DataFrame({"component": self.names[self.comp], "ts": self.t_start, "score": s})


def _group_key(a: StepArrays) -> np.ndarray:
    """One float key per row for (peer group, step); NaN where the peer group is
    missing (such rows are dropped from the group figures, as pandas groupby does)."""
    if not a.n:
        return np.zeros(0)
    span = int(a.step.max() - a.step.min()) + 1
    key = (a.peer * span + (a.step - a.step.min())).astype(np.float64)
    return np.where(a.peer < 0, np.nan, key)


def _group_transform(x: np.ndarray, key: np.ndarray, how: str) -> np.ndarray:
    """Per row, the ``how`` (median | max | min) of ``x`` over its key's rows (pandas
    groupby: NaN values skipped, NaN keys give NaN)."""
    return pd.Series(x).groupby(key, sort=False).transform(how).to_numpy(np.float64)


def _rank_stat(a: StepArrays, stat: np.ndarray, hot: np.ndarray) -> StepStat:
    return StepStat(a.names, a.comp, a.step, a.t_start, a.t_end, stat, hot)


class StepStatDetector(Detector):
    """A detector whose alarms and scores come from one per-step statistic: a subclass
    implements ``_frame(steps) -> StepStat`` and sets ``k``; ``detect`` gives each run of at
    least ``k`` consecutive hot steps as an alarm (:meth:`StepStat.alarms`), ``scores`` the
    statistic (:meth:`StepStat.scores`). The frame is computed once per steps frame while
    scoring a run (:func:`faultlab.scoring.steparrays.memo`: detect and scores share it)."""

    k: int

    def _frame(self, steps: pd.DataFrame) -> StepStat:
        raise NotImplementedError

    def _memo_frame(self, steps: pd.DataFrame) -> StepStat:
        return memo(self, "frame", steps, lambda: self._frame(steps))

    def detect(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        if steps is None or len(steps) == 0:
            return empty_alarms()
        return self._memo_frame(steps).alarms(self.k)

    def scores(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        return self._memo_frame(steps).scores()


class PeerMedianDetector(StepStatDetector):
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

    def _frame(self, steps: pd.DataFrame) -> StepStat:
        a = step_arrays(steps)
        with np.errstate(divide="ignore", invalid="ignore"):
            stat = a.compute_s / _group_transform(a.compute_s, _group_key(a), "median")
        return _rank_stat(a, stat, stat > self.threshold)


def _robust_z(series: list[np.ndarray], window: int, min_history: int, floor: float) -> list[np.ndarray]:
    """Per series, the z of each value against the median and MAD (x 1.4826) of the
    ``window`` values before it (NaN until ``min_history`` values exist); the MAD is at
    least ``floor`` x the median (a noise floor: a perfectly steady history would make
    any blip infinite). All series in one pandas rolling pass: each is preceded by
    ``window`` NaNs, which no window of another series reaches and rolling medians skip
    (pandas counts only non-NaN values towards ``min_periods``)."""
    pad = np.full(window, np.nan)
    x = np.concatenate([p for s in series for p in (pad, np.asarray(s, np.float64))]) if series else np.zeros(0)
    s = pd.Series(x)
    prev = s.shift(1)
    med = prev.rolling(window, min_periods=min_history).median()
    mad = (prev - med).abs().rolling(window, min_periods=min_history).median() * 1.4826
    scale = np.maximum(mad.to_numpy(), floor * np.abs(med.to_numpy()))
    z = ((s - med) / scale).to_numpy()
    out, at = [], 0
    for ser in series:
        at += window
        out.append(z[at : at + len(ser)])
        at += len(ser)
    return out


def _job_series(a: StepArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The job's step series, by step: ``(step, t_start, t_end, step_s)`` with t_start
    the first rank's t_start, t_end the last rank's t_start + step_s and step_s the
    median over ranks."""
    g = pd.DataFrame({"t0": a.t_start, "t1": a.t_end, "s": a.step_s}).groupby(a.step, sort=True)
    t0, t1, s = g["t0"].min(), g["t1"].max(), g["s"].median()
    return t0.index.to_numpy(np.int64), t0.to_numpy(np.float64), t1.to_numpy(np.float64), s.to_numpy(np.float64)


class TemporalZDetector(StepStatDetector):
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

    def _frame(self, steps: pd.DataFrame) -> StepStat:
        """Rows by component (sorted names, the job's among them), each by step."""
        a = step_arrays(steps)
        js, j0, j1, jx = _job_series(a)
        names = np.array(sorted(list(a.names) + [JOB]), dtype=object)
        job_code = int(np.flatnonzero(names == JOB)[0])
        rank_code = np.searchsorted(names.astype(str), a.names.astype(str))  # a rank's code among names
        o = np.lexsort((a.step, a.comp))  # by component, then step (stable)
        cols = {"comp": [], "step": [], "t0": [], "t1": [], "x": []}
        for code in range(len(names)):
            if code == job_code:
                part = (np.full(len(js), code), js, j0, j1, jx)
            else:
                rows = o[a.comp[o] == int(np.flatnonzero(rank_code == code)[0])]
                part = (np.full(len(rows), code), a.step[rows], a.t_start[rows], a.t_end[rows], a.compute_s[rows])
            for key, v in zip(cols, part):
                cols[key].append(v)
        z = np.concatenate(_robust_z(cols["x"], self.window, self.min_history, self.floor)) if len(names) else np.zeros(0)
        cat = {key: np.concatenate(v) for key, v in cols.items()}
        return StepStat(names, cat["comp"].astype(np.int64), cat["step"].astype(np.int64), cat["t0"], cat["t1"], z, z > self.z)


class ArrivalLateDetector(StepStatDetector):
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

    def _frame(self, steps: pd.DataFrame) -> StepStat:
        a = step_arrays(steps)
        arrival = a.t_start + a.dataloader_s + a.compute_s
        key = _group_key(a)
        with np.errstate(divide="ignore", invalid="ignore"):
            stat = (arrival - _group_transform(arrival, key, "median")) / _group_transform(a.step_s, key, "median")
        last = arrival == _group_transform(arrival, key, "max")
        return _rank_stat(a, stat, last & (stat > self.margin))


def _components(steps: pd.DataFrame) -> list[str]:
    return step_arrays(steps).rank_names() + [JOB]


#: the most draws a random detector averages (each is a full scoring of the runs)
MAX_DRAWS = 1000


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
        if not 0 <= p <= 1 or not window_s > 0 or not 1 <= int(draws) <= MAX_DRAWS:
            raise BadInput(f"p must be in [0, 1], window_s > 0 and draws in 1..{MAX_DRAWS}", field="random")
        self.seed = int(seed)
        self.p = float(p)
        self.window_s = float(window_s)
        self.draws = int(draws)

    def redraw(self, j: int) -> "RandomDetector":
        """Draw ``j`` of a ``draws`` > 1 score: the same detector with seed ``seed + j``
        (one draw each)."""
        return RandomDetector(seed=self.seed + int(j), p=self.p, window_s=self.window_s)

    def _run_key(self, steps: pd.DataFrame) -> int:
        return zlib.crc32(step_arrays(steps).run_id.encode())

    def _draw(self, run_key: int, component: str, win: int) -> tuple[float, float]:
        """(coin, score) of one cell: a function of the seed, run, component and window
        only, so a replay (which sees the run grow) draws the same cells."""
        u = np.random.default_rng([self.seed, run_key, zlib.crc32(component.encode()), int(win)]).random(2)
        return float(u[0]), float(u[1])

    def detect(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        if steps is None or len(steps) == 0:
            return empty_alarms()
        a = step_arrays(steps)
        t_first, t_end = float(a.t_start.min()), float(a.t_end.max())
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
        a = step_arrays(steps)
        rng = np.random.default_rng([self.seed, self._run_key(steps), zlib.crc32(b"scores")])
        return pd.DataFrame({"component": a.component, "ts": a.t_start, "score": rng.random(a.n)})


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
        a = step_arrays(steps)
        t0, t1 = float(a.t_start.min()), float(a.t_end.max())
        comps = _components(steps)
        return as_alarms(pd.DataFrame({"component": comps, "start_ts": t0, "end_ts": t1, "score": self.score}))

    def scores(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        a = step_arrays(steps)
        return pd.DataFrame({"component": a.component, "ts": a.t_start, "score": np.full(a.n, self.score)})


BUILTIN: dict[str, type[Detector]] = {
    "peer-median": PeerMedianDetector,
    "temporal-z": TemporalZDetector,
    "arrival-late": ArrivalLateDetector,
    "random": RandomDetector,
    "constant": ConstantDetector,
}
