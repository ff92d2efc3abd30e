"""Straggler-detector plugin API and baseline detectors.

A detector reads telemetry (the ``steps`` and ``host`` tables) and emits alarms
(faultlab.schema.ALARMS: ``component`` like ``"rank:3"`` or ``"job"``, ``start_ts``,
``end_ts`` in unix s, ``score``: higher = more suspicious). Scoring
(:mod:`faultlab.scoring`) compares alarms with labels.

Plugins are classes in any installed package, registered as entry points in the
``faultlab.detectors`` group (the pytest/pluggy model)::

    [project.entry-points."faultlab.detectors"]
    my-detector = "mypkg.detect:MyDetector"

:func:`load_detector` finds built-in names first, then entry points, then a
``"module:Class"`` spec.

Baselines here (every score table shows the last two, to expose inflated metrics):

- :class:`PeerMedianDetector` (``peer-median``): a rank whose compute_s exceeds
  ``threshold`` x its peer group's median at the same step for ``>= k`` consecutive
  steps. A deliberately simpler method than the labeler: no temporal view, no noise
  floor, no gap tolerance.
- :class:`RandomDetector` (``random``): seeded coin flips per rank per window.
- :class:`ConstantDetector` (``constant``): every rank alarmed for the whole run.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

import numpy as np
import pandas as pd

from faultlab import schema
from faultlab.errors import BadInput

GROUP = "faultlab.detectors"


class Detector:
    """Base class of a detector plugin.

    Subclasses set ``name`` and implement :meth:`detect`. Constructor keyword
    arguments are the detector's parameters.
    """

    name: str = "detector"

    def detect(self, steps: pd.DataFrame, host: pd.DataFrame) -> pd.DataFrame:
        """Return alarms for the telemetry of one run.

        Args:
            steps: faultlab.schema.STEPS rows (seconds; ``t_start`` unix s).
            host: faultlab.schema.HOST rows (long format), may be empty.

        Returns:
            a frame with the faultlab.schema.ALARMS columns (component, start_ts,
            end_ts [unix s], score), possibly empty.
        """
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def empty_alarms() -> pd.DataFrame:
    """An empty alarms frame (faultlab.schema.ALARMS columns)."""
    return schema.empty("alarms")


def _alarms(df: pd.DataFrame) -> pd.DataFrame:
    if df is None or len(df) == 0:
        return empty_alarms()
    out = df[["component", "start_ts", "end_ts", "score"]].copy()
    out["component"] = out["component"].astype(str)
    for c in ("start_ts", "end_ts", "score"):
        out[c] = out[c].astype("float64")
    return out.sort_values(["start_ts", "component"], kind="mergesort").reset_index(drop=True)


def _rank_spans(steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank: first t_start and last t_start + step_s (unix s)."""
    end = steps["t_start"] + steps["step_s"]
    g = pd.DataFrame({"rank": steps["rank"].astype(int), "t0": steps["t_start"], "t1": end}).groupby("rank", sort=True)
    return pd.DataFrame({"t0": g["t0"].min(), "t1": g["t1"].max()})


class PeerMedianDetector(Detector):
    """Alarm on a rank whose ``compute_s / median(compute_s of its peer group at the same
    step)`` exceeds ``threshold`` (ratio, default 1.5) for at least ``k`` (default 3)
    consecutive steps of that rank. One alarm per such run of steps, from its first
    step's ``t_start`` to its last step's ``t_start + step_s`` (unix s); score = the mean
    ratio over the run. Uses only the ``steps`` table (pandas groupby).
    """

    name = "peer-median"

    def __init__(self, threshold: float = 1.5, k: int = 3):
        if threshold <= 0 or k < 1:
            raise BadInput("threshold must be > 0 and k >= 1", field="peer-median")
        self.threshold = float(threshold)
        self.k = int(k)

    def detect(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        if steps is None or len(steps) == 0:
            return empty_alarms()
        df = steps[["run_id", "rank", "peer_group", "step", "t_start", "compute_s", "step_s"]].copy()
        df["run_id"] = df["run_id"].astype(str)
        med = df.groupby(["run_id", "peer_group", "step"], sort=False)["compute_s"].transform("median")
        df["ratio"] = df["compute_s"] / med
        df["hot"] = df["ratio"] > self.threshold
        df = df.sort_values(["run_id", "rank", "step"], kind="mergesort").reset_index(drop=True)
        key = df["run_id"] + "/" + df["rank"].astype(str)
        new_seg = (df["hot"] != df["hot"].shift()) | (key != key.shift())
        df["seg"] = new_seg.cumsum()
        hot = df[df["hot"]]
        if hot.empty:
            return empty_alarms()
        agg = hot.groupby("seg", sort=True).agg(
            rank=("rank", "first"),
            n=("step", "size"),
            start_ts=("t_start", "first"),
            t_last=("t_start", "last"),
            s_last=("step_s", "last"),
            score=("ratio", "mean"),
        )
        agg = agg[agg["n"] >= self.k]
        return _alarms(
            pd.DataFrame(
                {
                    "component": "rank:" + agg["rank"].astype(int).astype(str),
                    "start_ts": agg["start_ts"],
                    "end_ts": agg["t_last"] + agg["s_last"],
                    "score": agg["score"],
                }
            )
        )


class RandomDetector(Detector):
    """Seeded random alarms: the run is cut into windows of ``window_steps`` steps
    (default 20); each (rank, window) is alarmed with probability ``p`` (default 0.1)
    with a uniform random score in [0, 1). Same ``seed`` -> same alarms.
    """

    name = "random"

    def __init__(self, seed: int = 0, p: float = 0.1, window_steps: int = 20):
        if not 0 <= p <= 1 or window_steps < 1:
            raise BadInput("p must be in [0, 1] and window_steps >= 1", field="random")
        self.seed = int(seed)
        self.p = float(p)
        self.window_steps = int(window_steps)

    def detect(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        if steps is None or len(steps) == 0:
            return empty_alarms()
        df = pd.DataFrame(
            {
                "rank": steps["rank"].astype(int),
                "win": steps["step"].astype(np.int64) // self.window_steps,
                "t0": steps["t_start"],
                "t1": steps["t_start"] + steps["step_s"],
            }
        )
        w = df.groupby(["rank", "win"], sort=True).agg(t0=("t0", "min"), t1=("t1", "max")).reset_index()
        rng = np.random.default_rng(self.seed)
        hit = rng.random(len(w)) < self.p
        score = rng.random(len(w))
        w = w[hit].assign(score=score[hit])
        return _alarms(
            pd.DataFrame(
                {"component": "rank:" + w["rank"].astype(str), "start_ts": w["t0"], "end_ts": w["t1"], "score": w["score"]}
            )
        )


class ConstantDetector(Detector):
    """Alarm on every rank for the whole run (score 1.0): recall 1 at no cost, which
    exposes metrics that reward alarming everything."""

    name = "constant"

    def __init__(self, score: float = 1.0):
        self.score = float(score)

    def detect(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        if steps is None or len(steps) == 0:
            return empty_alarms()
        sp = _rank_spans(steps)
        return _alarms(
            pd.DataFrame(
                {
                    "component": ["rank:" + str(r) for r in sp.index],
                    "start_ts": sp["t0"].to_numpy(),
                    "end_ts": sp["t1"].to_numpy(),
                    "score": self.score,
                }
            )
        )


BUILTIN: dict[str, type[Detector]] = {
    "peer-median": PeerMedianDetector,
    "random": RandomDetector,
    "constant": ConstantDetector,
}


def available_detectors() -> dict[str, str]:
    """Name -> ``module:Class`` of every detector :func:`load_detector` can find."""
    out = {n: f"{c.__module__}:{c.__qualname__}" for n, c in BUILTIN.items()}
    for ep in entry_points(group=GROUP):
        out.setdefault(ep.name, ep.value)
    return dict(sorted(out.items()))


def load_detector(name: str, **params) -> Detector:
    """Instantiate the detector called ``name`` with keyword ``params``.

    Lookup order: built-in names (``peer-median``, ``random``, ``constant``), entry
    points of the ``faultlab.detectors`` group (``importlib.metadata.entry_points``),
    then a ``"package.module:ClassName"`` spec.

    Returns:
        a :class:`Detector` instance (or any object with a ``detect`` method).

    Raises:
        BadInput (field ``detector``) when the name is unknown, the plugin fails to
        import, or it has no ``detect`` method.
    """
    cls = BUILTIN.get(name)
    if cls is None:
        for ep in entry_points(group=GROUP):
            if ep.name == name:
                try:
                    cls = ep.load()
                except Exception as e:  # a broken plugin must say which one
                    raise BadInput(f"plugin {name!r} ({ep.value}) failed to import: {e}", field="detector") from e
                break
    if cls is None and ":" in name:
        mod, _, attr = name.partition(":")
        try:
            cls = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as e:
            raise BadInput(f"cannot import {name!r}: {e}", field="detector") from e
    if cls is None:
        raise BadInput(
            f"unknown detector {name!r}",
            field="detector",
            fix="one of " + ", ".join(available_detectors()) + ", or module:Class",
        )
    det = cls(**params) if isinstance(cls, type) else cls
    if not callable(getattr(det, "detect", None)):
        raise BadInput(f"{name!r} has no detect(steps, host) method", field="detector")
    if not getattr(det, "name", None) or det.name == Detector.name:
        try:
            det.name = name
        except AttributeError:
            pass
    return det
