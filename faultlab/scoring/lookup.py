"""How a detector is found by name: the built-in baselines, the entry points of the
``faultlab.detectors`` group, then a ``package.module:ClassName`` spec.

Apart from :mod:`faultlab.scoring.detectors` (the plugin API every detector, built-in
or not, is written against), so that the baselines build on the API and the lookup
builds on both.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import typing
from importlib.metadata import entry_points

import yaml
from pydantic import TypeAdapter, ValidationError

from faultlab.errors import BadInput, FaultlabError
from faultlab.scoring import baselines, published
from faultlab.scoring.detectors import GROUP, Detector


def builtin_detectors() -> dict[str, type]:
    """Short name -> class of the detectors shipped with faultlab: the baselines and
    the published methods (:mod:`faultlab.scoring.published`)."""
    return {**baselines.BUILTIN, **published.BUILTIN}


def available_detectors() -> dict[str, str]:
    """Name -> ``module:Class`` of every detector :func:`load_detector` can find by name."""
    out = {n: f"{c.__module__}:{c.__qualname__}" for n, c in builtin_detectors().items()}
    for ep in entry_points(group=GROUP):
        out.setdefault(ep.name, ep.value)
    return dict(sorted(out.items()))


def _import_from_cwd(mod: str):
    """Import ``mod``; if it is not found, again with the current folder on sys.path
    (a ``faultlab`` console script does not have it), as ``python -m`` would."""
    try:
        return importlib.import_module(mod)
    except ModuleNotFoundError as e:
        if e.name != mod.split(".")[0] or os.getcwd() in sys.path:
            raise
    sys.path.append(os.getcwd())
    return importlib.import_module(mod)


#: bounds ``(low, high)`` of the built-in detectors' parameters that size their arrays
#: or loops, by name (the same name means the same thing in every built-in detector):
#: a leaderboard file or ``--param`` beyond them is refused in one line, before any
#: array is made. Counts of steps, samples or windows at most 10^5 (a run's steps are
#: fewer); seconds at least 1 ms and at most a day; seeds numpy takes.
PARAM_BOUNDS: dict[str, tuple[float, float]] = {
    **dict.fromkeys(("k", "window", "min_history", "min_segment", "max_lag", "stride", "continuity",
                     "min_samples", "min_score"), (0, 100_000)),
    "draws": (1, baselines.MAX_DRAWS), "degree": (0, 10), "latent": (1, 4096), "hidden": (1, 4096), "epochs": (1, 10_000),
    **dict.fromkeys(("window_s", "sample_s", "report_time_interval"), (0.001, 86_400.0)),
    "seed": (0, 2**32 - 1),
}


def check_bounds(name: str, params: dict) -> None:
    """Raise BadInput (field ``--param``, one line naming the parameter and its bounds)
    when a number in ``params`` of the built-in detector ``name`` is outside
    :data:`PARAM_BOUNDS`."""
    for k, v in params.items():
        lo_hi = PARAM_BOUNDS.get(k)
        if lo_hi is None or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        lo, hi = lo_hi
        if not lo <= v <= hi:
            shown, rng = _num(v), f"[{_num(lo)}, {_num(hi)}]"
            raise BadInput(f"{name!r} got {k}={shown}, outside {rng}", field="--param",
                           fix=f"give {k} within {rng} (faultlab.scoring.lookup.PARAM_BOUNDS)")


def _num(v) -> str:
    """A bound or value as a person reads it: an int in full up to 12 digits, else ``%.3g``."""
    return str(v) if isinstance(v, int) and abs(v) < 10**12 else f"{v:.3g}"


def _instantiate(cls, name: str, params: dict):
    """``cls(**params)`` with its errors told apart: a parameter the constructor's
    signature does not have (or a required one missing) is "does not take"; NaN, or a
    TypeError/ValueError the constructor raises for a parameter it does take, is "refused
    the value"; anything else it raises is a FaultlabError (exit 1) naming it. All one
    line. ``cls`` that is not a class (an instance from an entry point) is returned as
    it is."""
    if not isinstance(cls, type):
        return cls
    try:
        inspect.signature(cls).bind(**params)
    except TypeError as e:
        raise BadInput(f"{name!r} does not take these parameters ({e})", field="--param",
                       fix="see the detector's docstring for its parameters") from None
    except ValueError:  # no signature to read: the call itself tells
        pass
    shown = ", ".join(f"{k}={v!r}" for k, v in params.items())
    for k, v in params.items():
        if isinstance(v, float) and v != v:
            raise BadInput(f"{name!r} got {k}=nan, which is no value", field="--param", fix=f"give a number, e.g. --param {k}=2.0")
    if cls in builtin_detectors().values():
        check_bounds(name, params)
    try:
        return cls(**params)
    except BadInput:
        raise
    except (TypeError, ValueError) as e:
        raise BadInput(f"{name!r} refused the value(s) {shown}: {' '.join(str(e).split())}", field="--param",
                       fix="see the detector's docstring for each parameter's type and range") from None
    except FaultlabError:
        raise
    except Exception as e:  # a plugin's constructor that fails: one line naming it
        raise FaultlabError(f"{name!r} raised in __init__({shown}): {type(e).__name__}: {' '.join(str(e).split())}",
                            field="detector") from None


def detector_class(name: str):
    """The class (or the instance an entry point gives) of the detector called ``name``,
    found as :func:`load_detector` finds it. Raises BadInput (field ``detector``) as it."""
    cls = builtin_detectors().get(name)
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
            cls = getattr(_import_from_cwd(mod), attr)
        except (ImportError, AttributeError) as e:
            raise BadInput(f"cannot import {name!r}: {e}", field="detector",
                           fix="give package.module:ClassName importable from the current folder or sys.path") from e
    if cls is None:
        raise BadInput(
            f"unknown detector {name!r}",
            field="detector",
            fix="known: " + ", ".join(available_detectors()) + "; or module:Class",
        )
    return cls


def _yaml_scalar(text: str):
    """``text`` read as a YAML scalar (``2`` int, ``0.5`` float, ``true`` bool, else the
    text itself)."""
    try:
        v = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return v if isinstance(v, (int, float, bool, str)) or v is None else text


def typed_params(name: str, raw: dict[str, str]) -> dict:
    """``--param KEY=VALUE`` texts typed by the detector's declared parameters: each
    value converted to the annotation of its constructor parameter (``str`` stays the
    text, ``--param c=7`` for ``c: str`` is ``"7"``; ``int``, ``float``, ``bool``,
    ``X | None``... as pydantic reads a string), a parameter without an annotation (or
    not in the signature: :func:`load_detector` names it) as a YAML scalar. Raises
    BadInput (field ``--param``) for a value its annotation refuses, and as
    :func:`detector_class` for an unknown detector."""
    cls = detector_class(name)
    try:
        hints = typing.get_type_hints(cls.__init__) if isinstance(cls, type) else {}
    except Exception:  # an annotation naming what is not importable: read the values as YAML
        hints = {}
    out = {}
    for key, text in raw.items():
        ann = hints.get(key)
        if ann is None or ann is typing.Any:
            out[key] = _yaml_scalar(text)
            continue
        adapter = TypeAdapter(ann)
        try:
            out[key] = adapter.validate_strings(text)
        except (ValidationError, TypeError):
            try:
                out[key] = adapter.validate_python(_yaml_scalar(text))
            except ValidationError as e:
                msg = " ".join(e.errors()[0]["msg"].split())
                raise BadInput(f"{name!r} refused the value(s) {key}={text!r}: {key} is declared {getattr(ann, '__name__', ann)} ({msg})",
                               field="--param", fix="see the detector's docstring for each parameter's type and range") from None
    return out


def load_detector(name: str, **params) -> Detector:
    """Instantiate the detector called ``name`` with keyword ``params``.

    Lookup order: built-in names (the baselines ``peer-median``, ``temporal-z``,
    ``arrival-late``, ``random``, ``constant`` and the published methods of
    :mod:`faultlab.scoring.published`), entry points of the ``faultlab.detectors`` group
    (``importlib.metadata.entry_points``), then a ``"package.module:ClassName"`` spec
    (imported from ``sys.path``: no install needed).

    Returns:
        a :class:`Detector` instance (or any object with a ``detect`` method).

    Raises:
        BadInput (field ``detector``) when the name is unknown (the message lists the
        known ones), the plugin fails to import, or it has no ``detect`` method;
        BadInput (field ``--param``) for a parameter its constructor does not take, or
        a value it refuses (NaN, or a TypeError/ValueError of its constructor);
        FaultlabError when its constructor raises anything else.
    """
    cls = detector_class(name)
    if not callable(getattr(cls, "detect", None)):  # checked before anything named is constructed
        raise BadInput(f"{name!r} has no detect(steps, host) method", field="detector")
    det = _instantiate(cls, name, params)
    if not getattr(det, "name", None) or det.name == Detector.name:
        try:
            det.name = name
        except AttributeError:
            pass
    return det
