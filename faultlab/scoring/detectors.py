"""The straggler-detector plugin API.

A detector reads telemetry of one run (the ``steps`` and ``host`` tables,
faultlab.schema.STEPS / HOST) and emits alarms (faultlab.schema.ALARMS:
``component`` like ``"rank:3"`` or ``"job"``, ``start_ts``, ``end_ts`` in unix s,
``score``: higher = more suspicious). It may implement:

- ``detect(steps, host) -> alarms`` (required): offline, the whole run at once.
- ``fit(train_runs)`` (optional): called once with the train split's runs
  (:class:`faultlab.rundata.RunData`, labels included) before the test split is
  scored; never with a test run.
- ``scores(steps, host) -> frame`` (optional): a continuous score per rank per step
  (columns ``component``, ``ts`` [unix s, the step's ``t_start``], ``score``), for
  AUC-PR and VUS-PR.
- ``start(info)`` and ``update(steps_chunk, host_chunk, now) -> alarms`` (optional):
  the online form that replay mode drives with a clock ``now`` (unix s); each chunk
  holds only the rows that became visible since the last call (steps that ended at or
  before ``now``, host samples taken at or before it). The base class implements
  both by re-running ``detect`` on everything seen so far, so every detector can be
  replayed; a detector that keeps its own state overrides them.
- ``online_scores(now) -> frame`` (optional): the continuous scores (as ``scores``)
  the detector gives at ``now`` to the points it has seen. Replay keeps, for each
  point, the score given at the first tick the point was visible (what the detector
  knew then), so AUC-PR / VUS-PR in replay are those of the online scores, not of a
  hindsight ``scores`` on the whole run. The base class implements it by calling
  ``scores`` on everything seen so far (when the default ``update`` is used); a
  detector that overrides ``update`` and not ``online_scores`` gets no AUC-PR /
  VUS-PR in replay (NaN), never its offline ones.

Plugins are classes in any installed package, registered as entry points in the
``faultlab.detectors`` group (the pytest/pluggy model)::

    [project.entry-points."faultlab.detectors"]
    my-detector = "mypkg.detect:MyDetector"

:func:`faultlab.scoring.lookup.load_detector` finds built-in names first
(:mod:`faultlab.scoring.baselines`), then entry points, then a ``"module:Class"``
spec. See docs/detectors.md.
"""

from __future__ import annotations


import numpy as np
import pandas as pd

from faultlab import schema
from faultlab.errors import BadInput
from faultlab.steps import local_time

GROUP = "faultlab.detectors"


class Detector:
    """Base class of a detector plugin.

    Subclasses set ``name`` and implement :meth:`detect`. Constructor keyword
    arguments are the detector's parameters (``faultlab score --param K=V``).
    """

    name: str = "detector"

    def fit(self, train_runs) -> "Detector":
        """Learn from the train split (an iterable of RunData); default: nothing."""
        return self

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

    # -- the online form (replay mode) ------------------------------------------------
    def start(self, info: dict) -> None:
        """Begin a run (``info``: ``run_id``, ``components``); resets the buffers the
        default :meth:`update` keeps."""
        self._seen_steps: list[pd.DataFrame] = []
        self._seen_host: list[pd.DataFrame] = []
        self._seen = None

    def update(self, steps_chunk: pd.DataFrame, host_chunk: pd.DataFrame, now: float) -> pd.DataFrame:
        """Take the rows that became visible up to ``now`` (unix s) and return the
        alarms standing at ``now`` (ALARMS columns). An alarm returned again (same
        component and start_ts) is the same alarm, extended; it counts from the first
        ``now`` it was returned at. Default: ``detect`` on every row seen so far."""
        if not hasattr(self, "_seen_steps"):
            self.start({})
        if len(steps_chunk):
            self._seen_steps.append(steps_chunk)
        if len(host_chunk):
            self._seen_host.append(host_chunk)
        if not self._seen_steps:
            return empty_alarms()
        steps = pd.concat(self._seen_steps, ignore_index=True) if len(self._seen_steps) > 1 else self._seen_steps[0]
        self._seen_steps = [steps]
        if self._seen_host:
            host = pd.concat(self._seen_host, ignore_index=True) if len(self._seen_host) > 1 else self._seen_host[0]
            self._seen_host = [host]
        else:
            host = schema.empty("host")
        self._seen = (steps, host)
        return self.detect(steps, host)

    def online_scores(self, now: float) -> pd.DataFrame | None:
        """The continuous scores (component, ts [unix s], score) the detector gives at
        ``now`` to every point seen so far, or None (no ``scores`` method, or nothing
        seen through the default :meth:`update`). Default: ``scores`` on the rows the
        default :meth:`update` has seen (the same frames ``detect`` got)."""
        seen = getattr(self, "_seen", None)
        if seen is None or not callable(getattr(self, "scores", None)):
            return None
        return self.scores(*seen)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def empty_alarms() -> pd.DataFrame:
    """An empty alarms frame (faultlab.schema.ALARMS columns)."""
    return _EMPTY_ALARMS.copy()


_EMPTY_ALARMS = schema.empty("alarms")
_ALARM_COLS = ("component", "start_ts", "end_ts", "score")


def as_alarms(df: pd.DataFrame | None) -> pd.DataFrame:
    """``df`` with exactly the ALARMS columns and dtypes (component text, the others
    float64), sorted by start_ts then component (stable). Raises BadInput (field
    ``alarms``) for a result that is not a DataFrame, a missing column, a
    non-numeric time or score, or values that cannot be right
    (:func:`_check_alarm_values`)."""
    if df is None:
        return empty_alarms()
    if not isinstance(df, pd.DataFrame):
        raise BadInput(f"the detector returned a {type(df).__name__}, not a pandas DataFrame", field="alarms",
                       fix="return a DataFrame with columns component, start_ts, end_ts (unix s) and score")
    if len(df) == 0:
        return empty_alarms()
    missing = [c for c in _ALARM_COLS if c not in df.columns]
    if missing:
        raise BadInput(f"the detector's alarms miss column(s) {', '.join(missing)}", field="alarms",
                       fix="return component, start_ts, end_ts (unix s) and score")
    comp = df["component"]
    comp = comp.to_numpy(object) if isinstance(comp.dtype, pd.StringDtype) else comp.astype(str).to_numpy(object)
    num = {}
    for c in ("start_ts", "end_ts", "score"):
        col = df[c]
        try:
            num[c] = col.to_numpy(np.float64) if col.dtype == np.float64 else col.astype("float64").to_numpy(np.float64)
        except (TypeError, ValueError):
            raise BadInput(f"the detector's alarms have a non-numeric {c} ({col.iloc[0]!r} ...)", field=f"alarms.{c}",
                           fix="return numbers: unix seconds for start_ts/end_ts, higher = more suspicious for score") from None
    return _alarm_frame(comp, num["start_ts"], num["end_ts"], num["score"])


def _alarm_frame(comp: np.ndarray, st: np.ndarray, en: np.ndarray, sc: np.ndarray) -> pd.DataFrame:
    """The ALARMS frame of these arrays (component text, the rest float64), checked
    (:func:`_check_alarm_values`) and sorted by start_ts then component (stable)."""
    _check_alarm_values(comp, st, en, sc)
    _, code = np.unique(comp.astype(str), return_inverse=True)  # string order, as pandas sorts text
    o = np.lexsort((code.reshape(-1), st))  # by start_ts, then component; stable
    return pd.DataFrame({"component": pd.array(comp[o], dtype=_EMPTY_ALARMS["component"].dtype),
                         "start_ts": st[o], "end_ts": en[o], "score": sc[o]})


def _check_alarm_values(comp: np.ndarray, st: np.ndarray, en: np.ndarray, sc: np.ndarray) -> None:
    """Refuse (BadInput naming the column and the first bad row) alarms that cannot be
    right: a start or end time that is not a finite, non-negative unix time, an end
    before its start, a score that is NaN. Garbage scored silently would read as a
    detector that simply missed."""
    with np.errstate(invalid="ignore"):
        checks = [
            ("start_ts", ~np.isfinite(st) | (st < 0), "is not a finite non-negative unix time"),
            ("end_ts", ~np.isfinite(en) | (en < 0), "is not a finite non-negative unix time"),
            ("end_ts", en < st, "is before its start_ts"),
            ("score", np.isnan(sc), "is NaN"),
        ]
    for col, bad, what in checks:
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise BadInput(f"{int(bad.sum())} alarm(s) whose {col} {what}, first: component={comp[i]} "
                           f"start_ts={float(st[i])} end_ts={float(en[i])} score={float(sc[i])}", field=f"alarms.{col}",
                           fix="return unix seconds within the run (see the steps' t_start) with end_ts >= start_ts, and a numeric score")


_alarms = as_alarms


def alarms_from_steps(df: pd.DataFrame, k: int = 3) -> pd.DataFrame:
    """Alarms from per-step flags: ``df`` has columns ``component``, ``step``,
    ``t_start``, ``t_end`` (unix s), ``stat`` (the step's statistic) and ``hot`` (bool);
    each run of at least ``k`` consecutive hot steps of a component becomes one alarm
    from its first ``t_start`` to its last ``t_end``, score = mean ``stat``.

    Returns: an ALARMS frame. Raises BadInput for ``k < 1``."""
    if k < 1:
        raise BadInput(f"k must be >= 1, got {k}", field="k")
    if df.empty or not df["hot"].any():
        return empty_alarms()
    codes, names = pd.factorize(df["component"].astype(str), sort=True)
    return alarms_from_codes(codes, np.asarray(names, dtype=object), df["step"].to_numpy(np.int64), df["t_start"].to_numpy(np.float64),
                             df["t_end"].to_numpy(np.float64), df["stat"].to_numpy(np.float64), df["hot"].to_numpy(bool), k)


def alarms_from_codes(codes: np.ndarray, names: np.ndarray, step: np.ndarray, t_start: np.ndarray, t_end: np.ndarray,
                      stat: np.ndarray, hot: np.ndarray, k: int = 3) -> pd.DataFrame:
    """:func:`alarms_from_steps` on arrays (one entry per component-step): ``codes``
    index ``names`` (the component names), ``step`` int, ``t_start``/``t_end`` unix s,
    ``stat``, ``hot`` bool. Returns an ALARMS frame. Raises BadInput for ``k < 1``."""
    if k < 1:
        raise BadInput(f"k must be >= 1, got {k}", field="k")
    hot = np.asarray(hot, bool)
    if not hot.any():
        return empty_alarms()
    o = np.lexsort((step, codes))
    c, st, h = np.asarray(codes)[o], np.asarray(step)[o], hot[o]
    t0, t1, sv = (np.asarray(x, np.float64)[o] for x in (t_start, t_end, stat))
    new = np.r_[True, (c[1:] != c[:-1]) | (np.diff(st) != 1) | (h[1:] != h[:-1])]
    seg = np.cumsum(new)[h]
    _, first, n = np.unique(seg, return_index=True, return_counts=True)
    keep = n >= k
    if not keep.any():
        return empty_alarms()
    return _alarm_frame(np.asarray(names, dtype=object)[c[h][first]][keep], np.minimum.reduceat(t0[h], first)[keep],
                        np.maximum.reduceat(t1[h], first)[keep], (np.add.reduceat(sv[h], first) / n)[keep])


def step_frame(steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank per step, the columns a detector usually starts from, with the time
    split the labeler uses (all times in seconds, ``t_*`` unix s):

    - ``component`` (``rank:N``), ``rank``, ``peer_group``, ``step``, ``t_start``,
      ``t_end`` (= ``t_start + step_s``);
    - ``compute_s``: forward + backward + optimizer, the rank's own work;
    - ``dataloader_s``: building (or reading from disk) the step's batch, not in
      ``compute_s``; NaN where not measured;
    - ``local_s``: ``compute_s + dataloader_s`` (a NaN ``dataloader_s`` counts 0),
      the rank's local time before the collective, what the labeler compares over
      time and across peers (faultlab.steps.local_time): a rank stalled on its own
      slow disk shows here, not in ``compute_s``;
    - ``comm_s``: inside the gradient all-reduce, waiting for slower peers included
      (so the straggler itself has the smallest);
    - ``gc_s``: Python garbage collection during the step, overlapping ``compute_s``
      and ``comm_s``; NaN where not measured;
    - ``step_s``: the whole step, the same for every rank up to bookkeeping;
    - ``peer_ratio``: ``local_s`` over its peer group's median ``local_s`` at that
      step (the labeler's peer view; 1.0 = as fast as its peers).

    ``steps``: faultlab.schema.STEPS rows; ``dataloader_s`` and ``gc_s`` may be
    absent (then NaN)."""
    n = len(steps)
    opt = {c: (steps[c].astype(float).to_numpy() if c in steps.columns else np.full(n, np.nan)) for c in ("dataloader_s", "gc_s")}
    compute = steps["compute_s"].astype(float).to_numpy()
    f = pd.DataFrame({
        "component": ("rank:" + steps["rank"].astype(int).astype(str)).to_numpy(),
        "rank": steps["rank"].astype(int).to_numpy(), "peer_group": steps["peer_group"].astype(str).to_numpy(),
        "step": steps["step"].astype("int64").to_numpy(), "t_start": steps["t_start"].astype(float).to_numpy(),
        "t_end": (steps["t_start"] + steps["step_s"]).astype(float).to_numpy(),
        "compute_s": compute, "dataloader_s": opt["dataloader_s"], "local_s": local_time(compute, opt["dataloader_s"]),
        "comm_s": steps["comm_s"].astype(float).to_numpy(), "gc_s": opt["gc_s"],
        "step_s": steps["step_s"].astype(float).to_numpy(),
    })
    med = f.groupby(["peer_group", "step"], sort=False)["local_s"].transform("median")
    f["peer_ratio"] = f["local_s"] / med
    return f
