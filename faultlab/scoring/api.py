"""Score a detector on runs or a dataset: offline or in online replay, run by run.

:func:`score_runs` is the one loop: for each run (read one at a time) it gets the
detector's alarms and continuous scores (``offline``: ``detect`` and ``scores`` on
the whole run; ``replay``: :func:`replay_run`, the alarms as raised and each point's
score as first given online), and the run's
sufficient statistics (:func:`faultlab.scoring.metrics.run_stats`); only those are
kept, so memory does not grow with the number of runs. :func:`score_dataset` adds the
split: a detector that trains is fitted on the train split only, and the test split's
labels never reach it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from faultlab import schema
from faultlab.datasets import manifest
from faultlab.datasets.layout import Dataset
from faultlab.errors import BadInput, FaultlabError
from faultlab.rundata import RunData
from faultlab.scoring.aggregate import summarize
from faultlab.scoring.detectors import Detector, as_alarms
from faultlab.scoring.lookup import load_detector
from faultlab.scoring.metrics import COUNT_KEYS, derive, prepare_labels, run_components, run_stats, score
from faultlab.scoring.steparrays import shared

MODES = ("offline", "replay")
#: the largest bootstrap seed (numpy's seeds are unsigned; 32 bits as a detector's ``seed``)
MAX_SEED = 2**32 - 1
#: why a score of fewer than 2 runs has no confidence interval (its ``ci`` is [null, null])
NO_CI_NOTE = "n/a: 1 run; the 95% CI is a bootstrap over runs and needs at least 2"
BY = ("fault_type", "source", "none")
#: the splits a dataset is scored on (:func:`score_dataset`)
SPLITS = ("test", "train", "all")
#: the most ticks a replay cuts one run into: a tick of a nanosecond (a submitted
#: leaderboard.json's setting) would call the detector billions of times
MAX_TICKS = 1_000_000


@dataclass
class ScoreResult:
    """The figures of one detector on a set of runs.

    ``metrics``: name -> ``{"value", "ci": [lo, hi]}`` (95% bootstrap over runs);
    ``by``: group -> ``{"n_labels", "metrics"}``; attribute access gives a value:
    ``result.event_f1``. ``to_dict()`` is what ``--json`` / ``--out`` write.
    ``dataset_digest``: the scored dataset's :func:`faultlab.datasets.manifest.digest`
    (None for run directories). ``run_counts``: (runs, ``len(COUNT_KEYS)``) each run's
    additive counts in run order (for a paired bootstrap; not written out)."""

    detector: str
    mode: str
    split: str
    source: str
    n_runs: int
    metrics: dict
    by_key: str | None = None
    by: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)
    per_run: list = field(default_factory=list)
    params: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    wall_s: float = 0.0
    dataset_digest: str | None = None
    run_counts: np.ndarray | None = field(default=None, repr=False)

    def __getattr__(self, name: str):
        m = self.__dict__.get("metrics") or {}
        if name in m:
            return m[name]["value"]
        raise AttributeError(name)

    def ci(self, name: str) -> list[float]:
        """The 95% interval of metric ``name``. Raises KeyError for an unknown one."""
        return self.metrics[name]["ci"]

    def to_dict(self) -> dict:
        """What ``--json`` / ``--out`` write; with fewer than 2 runs every ``ci`` is
        ``[null, null]`` and ``ci_note`` says why (:data:`NO_CI_NOTE`)."""
        return schema.json_safe({
            "detector": self.detector, "params": self.params, "mode": self.mode, "split": self.split,
            "source": self.source, "dataset_digest": self.dataset_digest, "n_runs": self.n_runs, "settings": self.settings, "metrics": self.metrics,
            **({"ci_note": NO_CI_NOTE} if self.n_runs < 2 else {}),
            "by_key": self.by_key, "by": self.by, "counts": self.counts, "per_run": self.per_run, "wall_s": self.wall_s,
            "rows": [self.row()],
        })

    def row(self) -> dict:
        """One flat row: ``detector``, ``n_runs``, each metric's value and ``METRIC_ci``
        (the shape faultlab report's score tables read)."""
        r = {"detector": self.detector, "n_runs": self.n_runs}
        for k, v in self.metrics.items():
            r[k] = v["value"]
            r[f"{k}_ci"] = v["ci"]
        return r

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)


def _online(det):
    """The detector's ``start``/``update``; for an object without them, the base
    class's re-run-``detect``-on-what-was-seen form."""
    if callable(getattr(det, "update", None)):
        return det

    class _Adapter(Detector):
        name = getattr(det, "name", "detector")

        def detect(self, steps, host):
            return det.detect(steps, host)

    a = _Adapter()
    if callable(getattr(det, "scores", None)):
        a.scores = det.scores
    return a


def replay(det, run: RunData, tick_s: float = 1.0) -> pd.DataFrame:
    """The alarms of :func:`replay_run` (ALARMS columns plus ``raised_ts``)."""
    return replay_run(det, run, tick_s)[0]


def replay_run(det, run: RunData, tick_s: float = 1.0) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Drive a detector online over one run with a replay clock.

    The clock starts at the run's first ``t_start`` and advances by ``tick_s`` (s)
    up to the last step's end (:func:`_ticks`). At each tick ``now`` the detector's
    ``update`` gets the step rows that *ended* at or before ``now`` (``t_start +
    step_s <= now``) and host rows with ``ts <= now`` not delivered before (copies: it
    can neither see nor change anything later; :class:`_Feed`). An alarm returned at
    ``now`` is raised at ``now``; returned again (same component and start_ts), it is
    the same alarm, extended to the largest end_ts given (:class:`_RaisedAlarms`). An
    alarm cannot start after ``now`` (refused: :func:`_as_of`); its end_ts is clipped
    to ``now`` (it stands up to what the clock has shown; returned at a later tick, it
    extends). After each ``update`` the detector's ``online_scores(now)`` (when it has
    one) is read, and each point (component, ts) keeps the score it had at the first
    tick it appeared in: the score the detector gave online, not in hindsight
    (:class:`_FrozenScores`).

    Returns:
        ``(alarms, scores)``: alarms with the ALARMS columns plus ``raised_ts`` (unix
        s), one row per distinct alarm; scores (component, ts, score) frozen at first
        sight, or None when the detector gives no online scores.

    Raises:
        BadInput for ``tick_s <= 0``, alarms that miss a column, or an alarm that
        starts after ``now``.
    """
    if not tick_s > 0:
        raise BadInput(f"tick must be > 0 s, got {tick_s}", field="--tick")
    det = _online(det)
    no_alarms = as_alarms(None).assign(raised_ts=pd.Series(dtype="float64"))
    if run.steps is None or not len(run.steps):
        return no_alarms, None
    feed = _Feed(run)
    if callable(getattr(det, "start", None)):
        det.start({"run_id": run.run_id, "components": run_components(run.steps, run.labels)})
    online_scores = getattr(det, "online_scores", None)
    frozen = _FrozenScores() if callable(online_scores) else None
    raised = _RaisedAlarms()
    for now in _ticks(feed.t0, feed.t_last, tick_s):
        new = feed.until(now)
        if new is None:
            continue
        raised.add(_as_of(as_alarms(det.update(*new, float(now))), float(now)), float(now))
        if frozen is not None:
            frozen.add(online_scores(float(now)))
    return raised.frame(no_alarms), frozen.frame() if frozen is not None else None


class _Feed:
    """A run's step rows in the order they end (``t_start + step_s``, stable) and its
    host rows in ``ts`` order (stable), handed out once each as the replay clock passes
    them. ``t0``: the first ``t_start``; ``t_last``: the last step end (unix s). A row
    with no ``step_s`` ends at its ``t_start``; one with no ``t_start`` either is handed
    out at the last tick (a NaN end would make ``t_last`` NaN and the replay raise
    ValueError)."""

    def __init__(self, run: RunData):
        steps = run.steps
        start = steps["t_start"].to_numpy(float)
        end = start + steps["step_s"].to_numpy(float)
        end = np.where(np.isfinite(end), end, start)
        known = np.isfinite(end)
        first = float(np.min(start[np.isfinite(start)])) if np.isfinite(start).any() else 0.0
        last = float(np.max(end[known])) if known.any() else first
        end = np.where(known, end, last)
        order = np.argsort(end, kind="mergesort")
        self.steps = steps.iloc[order].reset_index(drop=True)
        self.end = end[order]
        host = run.host if run.host is not None else schema.empty("host")
        self.host = host.sort_values("ts", kind="mergesort").reset_index(drop=True) if len(host) else host
        self.host_ts = self.host["ts"].to_numpy(float) if len(self.host) else np.zeros(0)
        self.t0, self.t_last = first, last
        self.i_s = self.i_h = 0

    def until(self, now: float) -> tuple[pd.DataFrame, pd.DataFrame] | None:
        """The step rows ended at or before ``now`` and host rows with ``ts <= now`` not
        handed out before, as copies ``(steps, host)``; None when there is none."""
        j_s = int(np.searchsorted(self.end, now, side="right"))
        j_h = int(np.searchsorted(self.host_ts, now, side="right"))
        if j_s == self.i_s and j_h == self.i_h:
            return None
        chunk = self.steps.iloc[self.i_s:j_s].copy()
        hchunk = self.host.iloc[self.i_h:j_h].copy() if len(self.host) else schema.empty("host")
        self.i_s, self.i_h = j_s, j_h
        return chunk, hchunk


def _ticks(t0: float, t_last: float, tick_s: float) -> np.ndarray:
    """The replay clock (unix s): ``t0 + tick_s``, ``t0 + 2 tick_s``, ... up to the
    first tick at or past ``t_last``, the last one at least ``t_last``; one tick at
    least (a run whose every step ends where it starts: before, no tick and an
    IndexError). BadInput past :data:`MAX_TICKS` ticks."""
    span = (t_last - t0) / tick_s
    if span > MAX_TICKS:
        raise BadInput(f"a tick of {tick_s:g} s cuts a run of {t_last - t0:g} s into more than {MAX_TICKS} ticks",
                       field="--tick", fix="give a longer tick")
    n_ticks = max(1, int(np.ceil(span)))
    ticks = t0 + tick_s * np.arange(1, n_ticks + 1)
    ticks[-1] = max(ticks[-1], t_last)
    return ticks


class _RaisedAlarms:
    """The distinct alarms of a replay, keyed by (component, start_ts): each raised at
    the tick it first came back, its end_ts and score the largest given since."""

    def __init__(self):
        self.seen: dict[tuple[str, float], list] = {}

    def add(self, got: pd.DataFrame, now: float) -> None:
        """Merge the alarms ``got`` returned at clock ``now`` (unix s)."""
        for r in got.itertuples(index=False):
            key = (r.component, float(r.start_ts))
            if key in self.seen:
                a = self.seen[key]
                a[2] = max(a[2], float(r.end_ts))
                a[3] = max(a[3], float(r.score))
            else:
                self.seen[key] = [r.component, float(r.start_ts), float(r.end_ts), float(r.score), now]

    def frame(self, empty: pd.DataFrame) -> pd.DataFrame:
        """The alarms (ALARMS columns plus ``raised_ts``) by raise time then component;
        ``empty`` when there is none."""
        out = pd.DataFrame(list(self.seen.values()), columns=["component", "start_ts", "end_ts", "score", "raised_ts"])
        return empty if out.empty else out.sort_values(["raised_ts", "component"], kind="mergesort").reset_index(drop=True)


def _as_of(alarms: pd.DataFrame, now: float) -> pd.DataFrame:
    """The alarms an online detector returned at replay clock ``now`` (unix s): refused
    (BadInput, field ``alarms.start_ts``) when one starts after ``now``, since the
    detector has seen no data past ``now`` and an alarm about what it has not seen is a
    bug (often the wrong time unit, or a forecast); each end_ts clipped to ``now``."""
    if not len(alarms):
        return alarms
    st = alarms["start_ts"].to_numpy(np.float64)
    late = st > now
    if late.any():
        i = int(np.flatnonzero(late)[0])
        raise BadInput(f"{int(late.sum())} alarm(s) start after the replay clock now={now:.3f}, first: component={alarms['component'].iloc[i]} "
                       f"start_ts={st[i]:.3f} ({st[i] - now:.3f} s ahead): an online detector sees no data past now", field="alarms.start_ts",
                       fix="date an alarm from the data it was raised on (start_ts <= now: the rows update() has been given)")
    en = alarms["end_ts"].to_numpy(np.float64)
    if (en > now).any():
        alarms = alarms.assign(end_ts=np.minimum(en, now))
    return alarms


def _within_run(alarms: pd.DataFrame, span: tuple[float, float] | None) -> pd.DataFrame:
    """Alarms clipped to the run's extent ``span`` (first t_start, last step end; unix
    s): an alarm is scored only over the run it is about (one that runs on for 1e12 s
    would otherwise shrink its range precision to nothing). An alarm that lies wholly
    outside the run is refused (BadInput, field ``alarms.start_ts``): it cannot be
    about this run (often milliseconds or run-relative seconds instead of unix s)."""
    if span is None or not len(alarms):
        return alarms
    t0, t1 = span
    st, en = alarms["start_ts"].to_numpy(np.float64), alarms["end_ts"].to_numpy(np.float64)
    out = (st > t1) | (en < t0)
    if out.any():
        i = int(np.flatnonzero(out)[0])
        raise BadInput(f"{int(out.sum())} alarm(s) lie wholly outside the run [{t0:.3f}, {t1:.3f}], first: component={alarms['component'].iloc[i]} "
                       f"start_ts={st[i]:.3f} end_ts={en[i]:.3f}", field="alarms.start_ts",
                       fix="give unix seconds within the run (the steps' t_start .. t_start + step_s), not ms or run-relative times")
    if (st < t0).any() or (en > t1).any():
        alarms = alarms.assign(start_ts=np.clip(st, t0, t1), end_ts=np.clip(en, t0, t1))
    return alarms


class _FrozenScores:
    """Each point's (component, ts) first online score: later ticks never change it."""

    def __init__(self):
        self.parts: list[pd.DataFrame] = []
        self.keys: set = set()

    def add(self, sc: pd.DataFrame | None) -> None:
        if sc is None or not len(sc):
            return
        missing = [c for c in ("component", "ts", "score") if c not in sc.columns]
        if missing:
            raise BadInput(f"the detector's online scores miss column(s) {', '.join(missing)}", field="scores",
                           fix="return component, ts (unix s) and score")
        comp = sc["component"].astype(str).to_numpy()
        ts = sc["ts"].to_numpy(np.float64)
        keys = list(zip(comp.tolist(), ts.tolist()))
        new = np.fromiter((k not in self.keys for k in keys), bool, len(keys))
        if not new.any():
            return
        self.keys.update(k for k, n in zip(keys, new) if n)
        self.parts.append(pd.DataFrame({"component": comp[new], "ts": ts[new], "score": sc["score"].to_numpy(np.float64)[new]}))

    def frame(self) -> pd.DataFrame | None:
        return pd.concat(self.parts, ignore_index=True) if self.parts else None


def resolve(detector, params: dict | None = None):
    """A detector instance from a name / ``module:Class`` (with ``params``) or an
    instance (``params`` must then be empty). Raises BadInput as load_detector."""
    if isinstance(detector, str):
        return load_detector(detector, **(params or {}))
    if params:
        raise BadInput("parameters given with a detector instance", field="--param", fix="pass them to its constructor")
    return detector


class _detector_errors:
    """Turn an exception raised inside a detector's ``method`` into one line naming the
    detector, the method and the run (FaultlabError, exit 1); faultlab's own errors
    (a BadInput about the alarms) get the detector and run prefixed."""

    def __init__(self, det, method: str, run_id: str):
        self.name = det if isinstance(det, str) else getattr(det, "name", type(det).__name__)
        self.method, self.run_id = method, run_id

    def __enter__(self):
        return self

    def __exit__(self, typ, e, tb):
        if e is None or not isinstance(e, Exception):
            return False
        where = f"detector {self.name!r}, {self.method}() on run {self.run_id}"
        if isinstance(e, FaultlabError):
            raise type(e)(f"{where}: {e}") from None
        msg = " ".join(str(e).split())[:300]
        raise FaultlabError(f"{where} raised {type(e).__name__}: {msg}", field="--detector",
                            fix="fix the detector; call it on that run in Python to see the traceback") from e


def _check_components(alarms: pd.DataFrame, comps) -> None:
    """Refuse alarms on a component the run does not have (the detector API names
    ``rank:N`` or ``job``): they would count as false alarms without a word."""
    if not len(alarms):
        return
    unknown = sorted(set(alarms["component"].to_numpy(object).tolist()) - set(comps))
    if unknown:
        raise BadInput(f"alarms on component(s) the run does not have: {', '.join(unknown[:5])} (it has {', '.join(sorted(comps))})",
                       field="alarms.component", fix="name rank:N (a rank of the run) or job")


def score_runs(detector, runs: Iterable[RunData], *, params: dict | None = None, **kw) -> ScoreResult:
    """Score ``detector`` on ``runs`` (consumed one at a time).

    Args:
        detector: a name, ``module:Class`` or an instance; ``params`` its keyword
            arguments.
        train_runs: given, and the detector has ``fit``, it is fitted on them first
            (runs, or a callable giving a fresh iterable of runs for each fitter).
        mode: ``offline`` or ``replay`` (latency is measured only in replay).
        by: ``fault_type``, ``source`` or None/``none``: the breakdown of label-side figures.
        window_s: cell width (s) of the window-level metrics; late_s: replay tolerance
            after a label's end (default ``window_s``); tick_s: replay clock step (s);
            k: of Acc@k; vus_window: VUS buffer (points); n_boot, seed: bootstrap.
        keep_alarms: a list to append each run's ``(run_id, alarms)`` to (tests, demo).

    Returns: a :class:`ScoreResult`.
    Raises: BadInput for a bad mode/by, an unknown detector, or malformed tables.
    """
    return score_many([(detector, params)], runs, **kw)[0]


def score_many(
    detectors,
    runs: Iterable[RunData],
    *,
    train_runs: Iterable[RunData] | None = None,
    mode: str = "offline",
    by: str | None = "fault_type",
    window_s: float = 10.0,
    late_s: float | None = None,
    tick_s: float = 1.0,
    k: int = 3,
    vus_window: int = 10,
    n_boot: int = 1000,
    seed: int = 0,
    split: str = "all",
    source: str = "",
    keep_alarms: list | None = None,
) -> list[ScoreResult]:
    """Score several detectors in one pass over ``runs`` (each run read once).

    ``detectors``: a list of names / instances, or of ``(detector, params)`` pairs.
    Other arguments as :func:`score_runs`. Returns one ScoreResult per detector, in order.

    The steps: :func:`_check_mode` and :func:`_check_by`, :func:`_resolve_all`,
    :func:`_fit_all` (on ``train_runs``), :func:`_score_run` on each run, and
    :func:`_results` (pooling and bootstrap per detector).
    """
    _check_mode(mode)
    by = _check_by(by)
    _check_seed(seed)
    t_wall = time.perf_counter()
    dets = _resolve_all(detectors)
    _fit_all(dets, train_runs)
    late = window_s if late_s is None else late_s
    stats: list[list] = [[] for _ in dets]
    per_run: list[list] = [[] for _ in dets]
    for run in runs:
        with shared():  # one conversion of the run's tables for every detector and metric
            _score_run(run, dets, mode, stats, per_run, keep_alarms, k=k, window_s=window_s, late=late, tick_s=tick_s, vus_window=vus_window)
    settings = {"window_s": window_s, "late_s": late, "tick_s": tick_s, "k": k, "vus_window": vus_window, "n_boot": n_boot, "seed": seed}
    return _results(dets, stats, per_run, mode=mode, by=by, split=split, source=source, settings=settings, t_wall=t_wall)


def _check_mode(mode: str) -> None:
    """Refuse (BadInput, ``--mode``) a mode other than :data:`MODES`."""
    if mode not in MODES:
        raise BadInput(f"unknown mode {mode!r}", field="--mode", fix="offline or replay")


def _check_seed(seed) -> None:
    """Refuse (BadInput, ``--seed``) a bootstrap seed numpy cannot take: a whole number
    in 0..:data:`MAX_SEED` (a submitted leaderboard.json's settings choose it, and a
    negative one ended ``leaderboard --verify`` in a traceback after every run was
    scored)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= MAX_SEED:
        raise BadInput(f"seed must be a whole number in 0..{MAX_SEED}, got {seed!r}", field="--seed", fix="give e.g. --seed 0")


def _check_by(by: str | None) -> str | None:
    """The breakdown key: None for ``none``/None; BadInput (``--by``) for one not in :data:`BY`."""
    if by == "none":
        by = None
    if by is not None and by not in BY:
        raise BadInput(f"unknown breakdown {by!r}", field="--by", fix="fault_type, source or none")
    return by


def _resolve_all(detectors) -> list[tuple[str, object, dict]]:
    """``(name, instance, params)`` of each detector (a name / instance, or a
    ``(detector, params)`` pair; :func:`resolve`): the name as given, else the
    instance's ``name``, else its class name."""
    dets = []
    for d in detectors:
        d, params = d if isinstance(d, tuple) else (d, None)
        inst = resolve(d, params)
        dets.append((d if isinstance(d, str) else getattr(inst, "name", type(inst).__name__), inst, dict(params or {})))
    return dets


def _fit_all(dets: list, train_runs) -> None:
    """Fit each detector that has ``fit`` on ``train_runs``: an iterable of runs (read
    once: kept as a list only when more than one detector fits), or a callable that
    gives a fresh iterable (each fitter reads the runs one at a time again: memory
    stays one run); nothing without train runs."""
    if train_runs is None:
        return
    fitters = [inst for _, inst, _ in dets if callable(getattr(inst, "fit", None))]
    if fitters and not callable(train_runs) and len(fitters) > 1:
        train_runs = list(train_runs)
    for inst in fitters:
        with _detector_errors(inst, "fit", "the train split"):
            inst.fit(train_runs() if callable(train_runs) else train_runs)


def _results(dets: list, stats: list, per_run: list, *, mode: str, by: str | None, split: str, source: str,
             settings: dict, t_wall: float) -> list[ScoreResult]:
    """One :class:`ScoreResult` per detector: its runs' statistics pooled, with
    bootstrap CIs and the ``by`` breakdown (:func:`faultlab.scoring.aggregate.summarize`);
    ``wall_s``: seconds since ``t_wall`` (``time.perf_counter``) when it is made."""
    out = []
    for i, (name, _, params) in enumerate(dets):
        summ = summarize(stats[i], replay=mode == "replay", k=settings["k"], by=by, n_boot=settings["n_boot"], seed=settings["seed"])
        out.append(ScoreResult(
            detector=str(name), mode=mode, split=split, source=source, n_runs=summ["n_runs"], metrics=summ["metrics"],
            by_key=by, by=summ["by"], counts=summ["counts"], per_run=per_run[i], params=params, settings=settings,
            wall_s=time.perf_counter() - t_wall,
            run_counts=np.array([[st["counts"][key] for key in COUNT_KEYS] for st in stats[i]], dtype=float).reshape(len(stats[i]), len(COUNT_KEYS)),
        ))
    return out


def _score_run(run: RunData, dets: list, mode: str, stats: list, per_run: list, keep_alarms: list | None, *,
               k: int, window_s: float, late: float, tick_s: float, vus_window: int) -> None:
    """Score every detector of ``dets`` (``(name, instance, params)``) on one run:
    append each one's :func:`run_stats` (the mean of its draws) to ``stats[i]`` and its
    per-run figures to ``per_run[i]``. The run's labels are prepared once for all."""
    span = run.span()
    comps = run_components(run.steps, run.labels)
    prep = prepare_labels(run.labels, run.injections)  # the same for every detector
    for i, (name, det, _) in enumerate(dets):
        draws = []
        for j, d in enumerate(_draws(det)):
            with _detector_errors(name, "update" if mode == "replay" else "detect", run.run_id):
                if mode == "replay":  # continuous scores too as the detector gave them online
                    alarms, sc = replay_run(d, run, tick_s=tick_s)
                else:
                    alarms = as_alarms(d.detect(run.steps, run.host)) if span else as_alarms(None)
                _check_components(alarms, comps)
                alarms = _within_run(alarms, span)
            if mode != "replay":
                with _detector_errors(name, "scores", run.run_id):
                    sc = d.scores(run.steps, run.host) if j == 0 and callable(getattr(d, "scores", None)) and span else None
            if keep_alarms is not None and j == 0:
                keep_alarms.append((run.run_id, name, alarms))
            draws.append(run_stats(alarms, run.labels, comps, span, scores=sc if j == 0 else None, injections=run.injections, k=k,
                                   window_s=window_s, late_s=late if mode == "replay" else 0.0, vus_window=vus_window,
                                   prepared=prep))
        st = draws[0] if len(draws) == 1 else mean_stats(draws)
        stats[i].append(st)
        m = derive(st["counts"], k=k)
        per_run[i].append(schema.json_safe({"run_id": run.run_id, "n_labels": st["counts"]["n_labels"], "n_alarms": st["counts"]["n_alarms"],
                                            "event_f1": m["event_f1"], "window_mcc": m["window_mcc"], "vus_pr": m["vus_pr"]}))


def _draws(det) -> list:
    """The detector, or for a chance detector with ``draws`` > 1 (``random``) its
    independent draws (``det.redraw(j)``, j = 0..draws-1), scored as one."""
    n = int(getattr(det, "draws", 1) or 1)
    if n > 1 and callable(getattr(det, "redraw", None)):
        return [det.redraw(j) for j in range(n)]
    return [det]


def mean_stats(draws: list[dict]) -> dict:
    """The expectation of several draws' :func:`run_stats` of one run: counts averaged
    (continuous-score sums from the first draw, which alone is given scores),
    per-label figures averaged, latencies pooled. Pooled counts then give the
    metrics of the mean confusion table: the chance level itself rather than one
    sample of it (which on a few hundred cells spreads by several hundredths of MCC)."""

    first_only = {"curve_runs", "auc_pr_sum", "vus_pr_sum"}
    counts = {k: (draws[0]["counts"][k] if k in first_only else float(np.mean([d["counts"][k] for d in draws]))) for k in COUNT_KEYS}
    lab = draws[0]["labels"].copy()
    if len(lab):
        num = [c for c in lab.columns if c not in ("fault_type", "source", "latency_s")]
        lab[num] = np.mean(np.stack([d["labels"][num].to_numpy(float) for d in draws]), axis=0)
        lab["latency_s"] = np.nan  # latencies are kept pooled below, not as a per-label mean
    lat = np.concatenate([d["latencies"] for d in draws]) if draws else np.zeros(0)
    return {"counts": counts, "labels": lab, "latencies": lat}


def score_dataset(detector, dataset, split: str = "test", *, verify: bool = True, **kw):
    """Score ``detector`` (or a list of detectors: then a list of results, from one
    pass) on a dataset folder's ``split``: ``test`` (the default: a detector that has
    ``fit`` is fitted on the train split only), ``train`` or ``all`` (no fitting: no
    run is left unseen to fit on). ``verify`` (default): first check every file against
    the dataset's ``MANIFEST.sha256`` (:func:`faultlab.datasets.manifest.require_intact`);
    False scores it as it is. Each result carries the dataset's digest.

    Raises BadInput for an unknown split, an unreadable dataset, files that do not
    fit together (:meth:`faultlab.datasets.layout.Dataset.check`: a table of another
    table or run, a run in both splits), or (``verify``) a file changed or missing
    since the manifest was written."""

    ds = dataset if isinstance(dataset, Dataset) else Dataset(dataset)
    if split not in SPLITS:
        raise BadInput(f"unknown split {split!r}", field="--split", fix="test, train or all")
    if verify:  # the card is never scored (and is left out of the digest): a leaderboard --card killed between
        # its two writes leaves it newer than the manifest, which the next --card writes again
        ds.pin(manifest.require_intact(ds.path, ignore=manifest.CARD_FILES, root_fd=ds.fd))  # the scores are of what was checked
    ds.check()  # every split's tables, before any is scored: a swapped one is refused whole
    digest = manifest.digest(ds.path, ds.fd) if ds.has(manifest.NAME) else None  # of the folder scored
    train = (lambda: ds.iter_runs("train")) if split == "test" else None
    many = isinstance(detector, list)
    specs = detector if many else [(detector, kw.pop("params", None))]
    results = score_many(specs, ds.iter_runs(split), train_runs=train, split=split, source=str(ds.path), **kw)
    for r in results:
        r.dataset_digest = digest
    return results if many else results[0]


def score_table(steps: pd.DataFrame, host: pd.DataFrame | None, labels: pd.DataFrame, detector_names, *,
                k: int = 3, seed: int = 0, window_s: float = 10.0, run_id: str = "run") -> pd.DataFrame:
    """One run's table: each detector in ``detector_names`` (then ``random`` and
    ``constant``, added once each) scored with :func:`faultlab.scoring.metrics.score`.

    Returns: a DataFrame, one row per detector (column ``detector`` first).
    Raises: BadInput for an unknown detector or a malformed table."""

    if isinstance(detector_names, str):
        detector_names = [detector_names]
    names: list[str] = []
    for n in list(detector_names) + ["random", "constant"]:
        if n not in names:
            names.append(n)
    host = schema.empty("host") if host is None else host
    comps = run_components(steps, labels)
    span = (float(steps["t_start"].min()), float((steps["t_start"] + steps["step_s"]).max())) if steps is not None and len(steps) else None
    rows = []
    for n in names:
        det = load_detector(n, seed=seed) if n == "random" else load_detector(n)
        sc = det.scores(steps, host) if callable(getattr(det, "scores", None)) and span else None
        rows.append({"detector": n, **score(det.detect(steps, host), labels, comps, span, k=k, scores=sc, window_s=window_s)})
    return pd.DataFrame(rows)
