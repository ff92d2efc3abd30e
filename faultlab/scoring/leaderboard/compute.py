"""The leaderboard's figures: every detector scored on a dataset in one pass over its
runs (:func:`faultlab.scoring.api.score_dataset`: one run in memory at a time, only
per-run counts kept), the rows ranked by window MCC, each row judged against the next
by the paired bootstrap (:mod:`.paired`).

Window MCC ranks because a chance detector cannot inflate it (random ~0, constant
exactly 0: see :mod:`faultlab.scoring.metrics`); the other columns are shown with their
CIs but do not rank.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from faultlab import schema
from faultlab.errors import BadInput
from faultlab.scoring.api import ScoreResult, score_dataset
from faultlab.scoring.leaderboard.paired import paired_difference
from faultlab.scoring.lookup import available_detectors
from faultlab.scoring.table import CHANCE

#: the version of leaderboard.json's layout (a scores file ``--verify`` reads)
FORMAT = "faultlab-leaderboard/1"
#: the metric that ranks the rows
RANK_BY = "window_mcc"
#: (metric, column title) of the table, each shown with its 95% CI
COLUMNS = (
    ("window_mcc", "window MCC"),
    ("event_f1", "event F1"),
    ("vus_pr", "VUS-PR"),
    ("acc_at_1", "Acc@1"),
    ("latency_median_s", "latency median (s, replay)"),
    ("false_alarms_per_component_hour", "false alarms / component-h"),
)
#: parameters a detector gets on the leaderboard when none are given: ``random`` as the
#: mean of 20 independent draws, the chance level itself (one draw of a few hundred
#: cells spreads by ~0.06 of MCC from seed to seed)
DEFAULT_PARAMS = {"random": {"draws": 20}}


@dataclass
class Row:
    """One detector on one dataset: its ``metrics`` (name -> ``{"value", "ci"}``), its
    ``rank`` (1 = best window MCC) and ``vs_next`` (:func:`paired_difference` against
    the row below; None for the last row)."""

    detector: str
    params: dict
    n_runs: int
    metrics: dict
    rank: int = 0
    vs_next: dict | None = None

    @property
    def label(self) -> str:
        """The detector's name as the table shows it: a chance row says so, with its
        number of draws; other parameters in brackets."""
        draws = int(self.params.get("draws", 1) or 1) if self.detector == "random" else 1
        base = CHANCE.get(self.detector, self.detector)
        if draws > 1:
            base = base.replace("(chance)", f"(chance: mean of {draws} draws)")
        rest = {k: v for k, v in self.params.items() if not (self.detector == "random" and k == "draws")}
        return base + (f" ({', '.join(f'{k}={v}' for k, v in rest.items())})" if rest else "")

    def to_dict(self) -> dict:
        return {"rank": self.rank, "detector": self.detector, "label": self.label, "params": self.params, "n_runs": self.n_runs,
                "metrics": self.metrics, "vs_next": self.vs_next}


@dataclass
class DatasetBoard:
    """The ranked rows of one dataset: its folder ``path``, manifest ``digest`` and the
    ``run_ids`` scored (split order)."""

    name: str
    path: str
    digest: str | None
    n_runs: int
    run_ids: list
    rows: list = field(default_factory=list)
    wall_s: float = 0.0

    def to_dict(self) -> dict:
        return {"name": self.name, "path": self.path, "digest": self.digest, "n_runs": self.n_runs, "run_ids": self.run_ids,
                "wall_s": self.wall_s, "rows": [r.to_dict() for r in self.rows]}


@dataclass
class Board:
    """The whole leaderboard: the ``settings`` every dataset was scored with (mode,
    split, window_s, late_s, tick_s, k, vus_window, n_boot, seed) and one
    :class:`DatasetBoard` per dataset. ``to_dict()`` is leaderboard.json."""

    settings: dict
    datasets: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return schema.json_safe({"format": FORMAT, "rank_by": RANK_BY, "settings": self.settings,
                                 "datasets": [d.to_dict() for d in self.datasets]})

    @classmethod
    def from_dict(cls, d: dict) -> "Board":
        """The Board of a leaderboard.json (:meth:`to_dict`'s shape, as
        :func:`faultlab.scoring.leaderboard.verify.load_scores` checks it); a value
        JSON holds as null stays None."""
        sets = []
        for x in d["datasets"]:
            rows = [Row(detector=r["detector"], params=r["params"], n_runs=_count(r.get("n_runs")), metrics=r["metrics"],
                        rank=_count(r.get("rank")), vs_next=r.get("vs_next") if isinstance(r.get("vs_next"), dict) else None)
                    for r in x["rows"]]
            sets.append(DatasetBoard(name=x["name"], path=x["path"], digest=x["digest"], n_runs=_count(x.get("n_runs")),
                                     run_ids=list(x.get("run_ids") or []), rows=rows))
        return cls(settings=dict(d["settings"]), datasets=sets)


def _count(v) -> int:
    """A count read from JSON: a whole number as it is, anything else 0."""
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else 0


def detector_specs(detectors=None) -> list[tuple[str, dict]]:
    """``(name, params)`` of each detector to rank: ``detectors`` (names, or
    ``(name, params)`` pairs; default: every detector the lookup knows,
    :func:`faultlab.scoring.lookup.available_detectors`: built-ins and entry points), a
    bare name with its :data:`DEFAULT_PARAMS`; the same detector and parameters given
    twice once."""
    out: list[tuple[str, dict]] = []
    for d in detectors or available_detectors():
        spec = d if isinstance(d, tuple) else (d, dict(DEFAULT_PARAMS.get(d, {})))
        if spec not in out:
            out.append(spec)
    return out


def _sort_key(r: ScoreResult):
    v = r.metrics.get(RANK_BY, {}).get("value")
    undefined = v is None or (isinstance(v, float) and math.isnan(v))
    return (undefined, 0.0 if undefined else -float(v), r.detector)


def rank(results: list[ScoreResult], *, n_boot: int, seed: int, k: int) -> list[Row]:
    """Rows of ``results`` (one dataset, the same runs) by window MCC (highest first,
    undefined last, ties by name), each with its rank and its paired bootstrap against
    the next row (the same resamples as the CIs: ``n_boot``, ``seed``)."""
    ordered = sorted(results, key=_sort_key)
    rows = [Row(r.detector, dict(r.params), r.n_runs, r.metrics, rank=i + 1) for i, r in enumerate(ordered)]
    for i in range(len(rows) - 1):
        rows[i].vs_next = paired_difference(ordered[i].run_counts, ordered[i + 1].run_counts, RANK_BY, n_boot=n_boot, seed=seed, k=k)
    return rows


def dataset_board(path, specs: list[tuple[str, dict]], settings: dict) -> DatasetBoard:
    """Score ``specs`` on the dataset folder ``path`` with ``settings`` (one pass, the
    manifest checked first) and rank them. Raises BadInput/FaultlabError as
    :func:`faultlab.scoring.api.score_dataset`."""
    t0 = time.perf_counter()
    s = settings
    results = score_dataset(list(specs), path, split=s["split"], mode=s["mode"], by=None, window_s=s["window_s"],
                            late_s=s["late_s"], tick_s=s["tick_s"], k=s["k"], vus_window=s["vus_window"], n_boot=s["n_boot"],
                            seed=s["seed"])
    first = results[0]  # its source: the folder scored (a published name resolved), where --card writes
    board = DatasetBoard(Path(path).name, first.source, first.dataset_digest, first.n_runs, [r["run_id"] for r in first.per_run])
    board.rows = rank(results, n_boot=s["n_boot"], seed=s["seed"], k=s["k"])
    board.wall_s = time.perf_counter() - t0
    return board


#: the most bootstrap samples a leaderboard draws (its memory grows with them)
MAX_BOOT = 100_000


def settings_of(*, mode: str = "offline", split: str = "test", window_s: float = 10.0, late_s: float | None = None,
                tick_s: float = 1.0, k: int = 3, vus_window: int = 10, n_boot: int = 1000, seed: int = 0) -> dict:
    """The settings a leaderboard is scored with, as leaderboard.json records them
    (``late_s`` defaults to ``window_s``, as in scoring). Raises BadInput for a number
    of bootstrap samples outside 0..:data:`MAX_BOOT`."""
    if not 0 <= int(n_boot) <= MAX_BOOT:
        raise BadInput(f"n_boot must be in 0..{MAX_BOOT}, got {n_boot}", field="--boot", fix=f"give 0..{MAX_BOOT} bootstrap samples (1000 is the default)")
    return {"mode": mode, "split": split, "window_s": float(window_s), "late_s": float(window_s if late_s is None else late_s),
            "tick_s": float(tick_s), "k": int(k), "vus_window": int(vus_window), "n_boot": int(n_boot), "seed": int(seed)}


def build(datasets, detectors=None, *, on_dataset=None, **settings) -> Board:
    """The leaderboard of ``detectors`` (names, default all: :func:`detector_specs`; or
    ``(name, params)`` pairs) on each dataset folder of ``datasets``, scored with
    :func:`settings_of` ``(**settings)``. ``on_dataset``: called with each finished
    :class:`DatasetBoard` (the CLI's progress line).

    Raises BadInput for a bad setting, an unknown detector or a changed dataset;
    FaultlabError naming the detector and run for a detector that raises."""
    specs = detector_specs(detectors)
    board = Board(settings_of(**settings))
    for ds in datasets:
        db = dataset_board(ds, specs, board.settings)
        board.datasets.append(db)
        if on_dataset is not None:
            on_dataset(db)
    return board
