"""A pytest plugin (entry point ``pytest11``: ``faultlab``) so that a detector's own
test suite can score it on a published dataset::

    def test_my_detector_is_good_enough(faultlab_score):
        assert faultlab_score("mypkg.detect:MyDetector", "faultlab-hw-v1").event_f1 >= 0.8

    def test_floor_with_ci(faultlab_score):
        res = faultlab_score("mypkg.detect:MyDetector", "faultlab-hw-v1", mode="replay")
        faultlab_score.require(res, "window_mcc", 0.5)   # fails naming the metric and its CI

``faultlab_score(detector, dataset, split="test", **kw)`` returns a
:class:`faultlab.scoring.api.ScoreResult` (keywords as :func:`score_runs`); results
are cached per session. The dataset's files are first checked against its
``MANIFEST.sha256`` (a changed or missing file raises BadInput naming it);
``verify=False`` scores it as it is. ``dataset`` is a folder (a ``str`` such as
``"./NAME"`` keeps its ``./``; ``Path("./NAME")`` is the bare name ``NAME``), or a name looked up in
``--faultlab-datasets DIR``, then as :mod:`faultlab.datasets.registry` finds it
(``$FAULTLAB_DATASETS``, else the installed package's data, then ``./datasets``).
"""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_addoption(parser):
    parser.addoption("--faultlab-datasets", default=None, metavar="DIR", help="folder holding faultlab datasets (by name)")


def find_dataset(name: str, extra: str | None = None) -> Path:
    """The folder of dataset ``name`` (see the module docstring). Raises
    FileNotFoundError listing where it looked."""
    # lazy: pytest loads this plugin in every session; the datasets package only when a test scores
    from faultlab.datasets.registry import find, is_bare_name
    from faultlab.errors import BadInput

    if extra and is_bare_name(name) and (Path(extra) / name / "splits.json").is_file():  # a path (./NAME) is that folder
        return Path(extra) / name
    try:
        return find(name)
    except BadInput as e:
        raise FileNotFoundError(f"{e}{f' (and in {extra})' if extra else ''}") from None


def require(result, metric: str, floor: float) -> None:
    """Fail (AssertionError) unless ``result``'s ``metric`` is at least ``floor``; the
    message names the metric, its value and 95% CI."""
    m = result.metrics.get(metric)
    if m is None:
        raise AssertionError(f"{metric}: no such metric (known: {', '.join(sorted(result.metrics))})")
    v, ci = m["value"], m["ci"]
    if not (v is not None and v == v and v >= floor):
        raise AssertionError(f"{result.detector} on {result.source}: {metric} = {v} (95% CI {ci}) is below the floor {floor}")


class _Scorer:
    def __init__(self, config):
        self._config = config
        self._cache: dict = {}

    def __call__(self, detector, dataset, split: str = "test", **kw):
        # lazy: pytest loads this plugin in every session; scoring (pandas) only when a test scores
        from faultlab.datasets.layout import Dataset
        from faultlab.scoring.api import score_dataset

        path = find_dataset(str(dataset), self._config.getoption("--faultlab-datasets"))
        key = (str(detector), str(path.resolve()), split, tuple(sorted((k, repr(v)) for k, v in kw.items())))
        if key not in self._cache:
            # the folder found: a Path of ./NAME is the bare name NAME, which Dataset would look up again
            self._cache[key] = score_dataset(detector, Dataset(path, lookup=False), split=split, **kw)
        return self._cache[key]

    require = staticmethod(require)


@pytest.fixture(scope="session")
def faultlab_score(request):
    """Score a detector on a dataset: ``faultlab_score(detector, dataset, split="test",
    **kw) -> ScoreResult``; ``faultlab_score.require(result, metric, floor)``."""
    return _Scorer(request.config)
