"""``falcon``: Greyhound / FALCON's fail-slow detection, ported to faultlab's steps.

Paper: Tianyuan Wu, Wei Wang, Yinghao Yu et al., "Greyhound: Hunting Fail-Slows in
Hybrid-Parallel Training at Scale", USENIX ATC 2025 (FALCON in its preprint,
arXiv:2410.21680). Its detection stage: a hook on the collective library sees each
rank's stream of operation durations; the iteration period is the lag of the
autocorrelation (ACF) peak of that stream; Bayesian online change-point detection
(BOCPD, Adams & MacKay 2007; :mod:`faultlab.scoring.published.bocpd`) runs on each
rank's iteration time, and a change point is accepted only when its posterior, the
mean shift between the segments before and after it and the segments' length all
pass their thresholds. A segment whose mean is ``shift`` over the last normal one is
a fail-slow.

The iteration period: faultlab's telemetry records each step's boundaries, which is
what Greyhound's ACF recovers from the op stream, so by default
(``period_from=steps``) the steps are the iterations. With ``period_from=acf`` a
rank is analyzed only once the ACF of its op stream (last 64 steps) reaches
``acf_threshold`` at some lag: measured on faultlab-hw-v1 the ACF at the period is
0.1-0.7 (the ``comm_s`` of a CPU gloo all-reduce, waiting included, is far noisier
than the GPU kernels the paper saw), so under either preset's gate falcon stays
silent there.

Signals read: ``steps`` only. The operation stream per rank is its per-step
``dataloader_s``, ``compute_s``, ``comm_s`` in order (a missing column is left
out); the iteration time is, with ``signal=local`` (default), the rank's own part
``compute_s + dataloader_s`` and with ``signal=step`` its ``step_s``. In a
synchronous job every rank's whole iteration slows with the straggler (Greyhound
then localizes by profiling and micro-benchmarks, which replayed telemetry cannot
run), so the local part stands in for that localization.

Two presets: ``paper`` (the paper's thresholds: ACF >= 0.95, P(change) > 0.9,
shift >= 10%) and ``artifact`` (the public artifact's: ACF peak >= 0.7, P > 0.8,
degradation > 0.2, change points >= 10 iterations apart, points with z > 3 dropped
before BOCPD). Alarms: per rank, each slow segment from its first step's
``t_start`` to the last step seen in it; score = the segment's mean over the
baseline. Online: ``update`` feeds each rank's new steps to its BOCPD (the state is
kept), so replay costs the same as offline; ``online_scores`` gives each step the
value over the baseline known when the step arrived.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from faultlab import schema
from faultlab.scoring.detectors import as_alarms, empty_alarms
from faultlab.scoring.published.bocpd import BOCPD
from faultlab.scoring.published.params import Param, PublishedDetector, params_doc
from faultlab.scoring.steparrays import memo


def _pos(v) -> bool:
    return v > 0


PARAMS = (
    Param("acf_threshold", 0.95, "correlation", "paper", "the ACF at the iteration period must reach this for a rank to be analyzed",
          lambda v: -1 <= v <= 1),
    Param("p_change", 0.9, "probability", "paper", "posterior probability of a change point (run length within the segment bounds) to consider it",
          lambda v: 0 < v < 1),
    Param("shift", 0.10, "ratio", "paper", "mean shift between the segments (after over before, minus 1) to accept a change point; a segment this far over the baseline is slow",
          lambda v: v >= 0),
    Param("min_segment", 10, "steps", "artifact (the paper gives no number)", "iterations each side of a change point", lambda v: v >= 2),
    Param("outlier_z", 0.0, "z-score", "artifact: 3; paper: 0 = off", "drop a point whose |z| over the rank's series so far exceeds this before BOCPD (0: keep all)",
          lambda v: v >= 0),
    Param("hazard_lambda", 250.0, "steps", "ours (the scale of Adams & MacKay's examples)", "expected run length between change points (hazard 1/lambda)",
          lambda v: v > 1),
    Param("max_lag", 12, "events", "ours", "largest lag searched for the iteration period", lambda v: v >= 2),
    Param("period_from", "steps", "name", "ours (port)", "where the iteration comes from: steps (the telemetry's step boundaries) or acf (the op stream's ACF, gated by acf_threshold)",
          lambda v: v in ("steps", "acf")),
    Param("signal", "local", "name", "ours (port)", "iteration time: local (compute_s + dataloader_s) or step (step_s)",
          lambda v: v in ("local", "step")),
)
PRESETS = {
    "paper": {},
    "artifact": {"acf_threshold": 0.7, "p_change": 0.8, "shift": 0.2, "min_segment": 10, "outlier_z": 3.0},
}
__doc__ += params_doc(PARAMS, PRESETS)


def acf_period(stream: np.ndarray, max_lag: int, threshold: float) -> int:
    """The smallest lag in 1..``max_lag`` whose autocorrelation of ``stream`` (1-D,
    seconds) reaches ``threshold``; 0 when none does (no iteration period)."""
    x = np.asarray(stream, np.float64)
    x = x - x.mean()
    den = float((x * x).sum())
    if len(x) < 2 * max_lag or den <= 0:
        return 0
    for lag in range(1, max_lag + 1):
        if float((x[:-lag] * x[lag:]).sum()) / den >= threshold:
            return lag
    return 0


class _RankState:
    """One rank's online state: the ACF gate, BOCPD, the accepted change points and
    the slow segments (indices into the points fed)."""

    def __init__(self, det: "FalconDetector"):
        self.d = det
        self.events: list[float] = []  # the operation stream, until the period is found
        self.period = 0
        self.pending: list[tuple[float, float, float]] = []  # (value, t_start, t_end) before the scale is known
        self.x: list[float] = []  # normalized values fed to BOCPD
        self.t0: list[float] = []
        self.t1: list[float] = []
        self.scores: list[tuple[float, float]] = []  # (t_start, score) of every step seen
        self.bocpd: BOCPD | None = None
        self.scale = 1.0
        self.n_seen = 0
        self.s1 = self.s2 = 0.0
        self.cp = 0  # first fed index of the current segment
        self.baseline = 1.0
        self.slow_from: int | None = None
        self.segments: list[tuple[int, int, float]] = []  # closed slow segments (first, last, score)

    def add(self, ops: np.ndarray, value: float, t0: float, t1: float) -> None:
        """Take one step: its operation durations (for the ACF gate), its iteration
        time ``value`` (s) and its start / end (unix s)."""
        if not self.period and self.d.period_from == "steps":
            self.period = 1
        if not self.period:
            self.events.extend(float(v) for v in ops)
            window = np.asarray(self.events[-64 * max(1, len(ops)):])
            self.period = acf_period(window, self.d.max_lag, self.d.acf_threshold)
            self.pending.append((value, t0, t1))
            self.scores.append((t0, 0.0))  # not analyzed yet: no period, no scale
            if not self.period:
                self.pending = self.pending[-self.d.min_segment:]
                return
            pending, self.pending = self.pending, []
            for v, a, b in pending:
                self._feed(v, a, b)
            return
        self._feed(value, t0, t1)
        self.scores.append((t0, value / self.scale / self.baseline if self.bocpd is not None else 0.0))

    def _feed(self, value: float, t0: float, t1: float) -> None:
        if self.bocpd is None:
            self.pending.append((value, t0, t1))
            if len(self.pending) < self.d.min_segment:
                return
            vals = np.array([p[0] for p in self.pending])
            self.scale = float(np.median(vals)) or 1.0
            var = float(np.var(vals / self.scale)) or 1e-6
            self.bocpd = BOCPD(self.d.hazard_lambda, 1.0, 1.0, 1.0, var)
            pending, self.pending = self.pending, []
            for v, a, b in pending:
                self._push(v / self.scale, a, b)
            return
        self._push(value / self.scale, t0, t1)

    def _push(self, x: float, t0: float, t1: float) -> None:
        self.n_seen += 1
        self.s1 += x
        self.s2 += x * x
        if self.d.outlier_z > 0 and self.n_seen > self.d.min_segment:
            mean = self.s1 / self.n_seen
            sd = np.sqrt(max(self.s2 / self.n_seen - mean * mean, 0.0))
            if sd > 0 and abs(x - mean) / sd > self.d.outlier_z:
                return
        self.x.append(x)
        self.t0.append(t0)
        self.t1.append(t1)
        post = self.bocpd.push(x)
        self._judge(post)

    def _judge(self, post: np.ndarray) -> None:
        """Accept a change point when the posterior of a run length that leaves
        ``min_segment`` points each side exceeds ``p_change`` and the mean shift
        reaches ``shift``."""
        L = self.d.min_segment
        n = len(self.x)
        since = n - self.cp
        hi = min(since - L, len(post) - 1)
        if hi < L:
            return
        mass = post[L : hi + 1]
        if float(mass.sum()) <= self.d.p_change:
            return
        r = L + int(np.argmax(mass))
        c = n - r
        before, after = np.mean(self.x[self.cp : c]), np.mean(self.x[c:])
        if abs(after / before - 1.0) < self.d.shift:
            return
        if self.slow_from is not None:
            self.segments.append((self.slow_from, c - 1, self._seg_score(self.slow_from, c)))
            self.slow_from = None
        self.cp = c
        if after / self.baseline - 1.0 >= max(self.d.shift, 1e-12):
            self.slow_from = c
        else:
            self.baseline = float(after)

    def _seg_score(self, a: int, b: int) -> float:
        return float(np.mean(self.x[a:b])) / self.baseline

    def alarms(self) -> list[tuple[float, float, float]]:
        """(start_ts, end_ts, score) of every slow segment, the open one included."""
        out = [(self.t0[a], self.t1[b], s) for a, b, s in self.segments]
        if self.slow_from is not None:
            out.append((self.t0[self.slow_from], self.t1[-1], self._seg_score(self.slow_from, len(self.x))))
        return out


class FalconDetector(PublishedDetector):
    """Greyhound / FALCON (USENIX ATC'25): BOCPD on each rank's iteration time, change
    points accepted by posterior, mean shift and segment length (see the module)."""

    name = "falcon"
    PARAMS = PARAMS
    PRESETS = PRESETS

    def start(self, info: dict) -> None:
        self._ranks: dict[int, _RankState] = {}

    def _ops(self, chunk: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Per row: the operation durations (n x k, s) and the iteration time (s)."""
        cols = [c for c in ("dataloader_s", "compute_s", "comm_s") if c in chunk.columns and chunk[c].notna().any()]
        ops = np.nan_to_num(chunk[cols].to_numpy(np.float64)) if cols else np.zeros((len(chunk), 0))
        if self.signal == "step":
            value = chunk["step_s"].to_numpy(np.float64)
        else:
            dl = np.nan_to_num(chunk["dataloader_s"].to_numpy(np.float64)) if "dataloader_s" in chunk.columns else 0.0
            value = chunk["compute_s"].to_numpy(np.float64) + dl
        return ops, value

    def update(self, steps_chunk: pd.DataFrame, host_chunk: pd.DataFrame, now: float) -> pd.DataFrame:
        if not hasattr(self, "_ranks"):
            self.start({})
        if len(steps_chunk):
            chunk = steps_chunk.sort_values(["rank", "step"], kind="stable")
            ops, value = self._ops(chunk)
            rank = chunk["rank"].to_numpy(np.int64)
            t0 = chunk["t_start"].to_numpy(np.float64)
            t1 = t0 + chunk["step_s"].to_numpy(np.float64)
            for i in range(len(chunk)):
                st = self._ranks.get(int(rank[i])) or self._ranks.setdefault(int(rank[i]), _RankState(self))
                if np.isfinite(value[i]):
                    st.add(ops[i], float(value[i]), float(t0[i]), float(t1[i]))
        return self._alarms()

    def _alarms(self) -> pd.DataFrame:
        rows = [(f"rank:{r}", a, b, s) for r, st in sorted(self._ranks.items()) for a, b, s in st.alarms()]
        if not rows:
            return empty_alarms()
        return as_alarms(pd.DataFrame(rows, columns=["component", "start_ts", "end_ts", "score"]))

    def _offline(self, steps: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(alarms, scores) of a whole run: the online form fed every step at once."""
        self.start({})
        alarms = self.update(steps, schema.empty("host"), float("inf"))
        return alarms, self.online_scores(float("inf"))

    def detect(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        if steps is None or len(steps) == 0:
            return empty_alarms()
        return memo(self, "falcon", steps, lambda: self._offline(steps))[0]

    def online_scores(self, now: float) -> pd.DataFrame | None:
        if not hasattr(self, "_ranks"):
            return None
        parts = [(f"rank:{r}", t, s) for r, st in sorted(self._ranks.items()) for t, s in st.scores]
        return pd.DataFrame(parts, columns=["component", "ts", "score"])

    def scores(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        """Each step's iteration time over the rank's baseline when it arrived (0 before
        the rank's period and scale are known)."""
        return memo(self, "falcon", steps, lambda: self._offline(steps))[1]
