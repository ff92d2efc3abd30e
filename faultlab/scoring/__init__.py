"""Scoring straggler detectors against labels (``faultlab score``).

- :mod:`faultlab.scoring.detectors`: the detector plugin API.
- :mod:`faultlab.scoring.lookup`: how a detector is found by name (built-ins, entry
  points ``faultlab.detectors``, ``module:Class``).
- :mod:`faultlab.scoring.baselines`: ``peer-median``, ``temporal-z``,
  ``arrival-late``, ``random``, ``constant``.
- :mod:`faultlab.scoring.metrics`: per-run statistics and the metric definitions.
- :mod:`faultlab.scoring.aggregate`: pooling over runs, bootstrap CIs, breakdowns.
- :mod:`faultlab.scoring.api`: offline and replay scoring of runs and datasets.
- :mod:`faultlab.scoring.gate`: the CI gate (``--baseline previous.json``).
- :mod:`faultlab.scoring.cli`: the ``faultlab score`` command.
"""

import importlib

# The names are loaded on first use (PEP 562), so that importing the CLI (every
# ``faultlab`` command) or the pytest plugin does not import pandas and the metrics.
_LAZY = {
    **dict.fromkeys(("ScoreResult", "replay", "replay_run", "score_dataset", "score_runs", "score_table"), "faultlab.scoring.api"),
    "Detector": "faultlab.scoring.detectors",
    **dict.fromkeys(("available_detectors", "load_detector"), "faultlab.scoring.lookup"),
    **dict.fromkeys(("effect_labels", "run_components", "run_stats", "score"), "faultlab.scoring.metrics"),
}

__all__ = [
    "Detector", "ScoreResult", "available_detectors", "effect_labels", "load_detector", "replay", "replay_run",
    "run_components", "run_stats", "score", "score_dataset", "score_runs", "score_table",
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
