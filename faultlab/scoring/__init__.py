"""Scoring straggler detectors against labels (``faultlab score``).

- :mod:`faultlab.scoring.detectors`: the detector plugin API and how a detector is
  found by name (built-ins, entry points ``faultlab.detectors``, ``module:Class``).
- :mod:`faultlab.scoring.baselines`: ``peer-median``, ``temporal-z``,
  ``arrival-late``, ``random``, ``constant``.
- :mod:`faultlab.scoring.metrics`: per-run statistics and the metric definitions.
- :mod:`faultlab.scoring.aggregate`: pooling over runs, bootstrap CIs, breakdowns.
- :mod:`faultlab.scoring.api`: offline and replay scoring of runs and datasets.
- :mod:`faultlab.scoring.gate`: the CI gate (``--baseline previous.json``).
- :mod:`faultlab.scoring.cli`: the ``faultlab score`` command.
"""

from faultlab.scoring.api import ScoreResult, replay, replay_run, score_dataset, score_runs, score_table
from faultlab.scoring.detectors import Detector, available_detectors, load_detector
from faultlab.scoring.metrics import effect_labels, run_components, run_stats, score

__all__ = [
    "Detector", "ScoreResult", "available_detectors", "effect_labels", "load_detector", "replay", "replay_run",
    "run_components", "run_stats", "score", "score_dataset", "score_runs", "score_table",
]
