"""``metrics.json``: the score rows of one run, as ``faultlab demo`` writes them into
the run directory and ``faultlab report`` reads them.

The document (:data:`FORMAT`)::

    {"format": "faultlab-run-metrics/1", "run_id": "...", "n_runs": 1,
     "split": "all", "mode": "offline (latency: replay)", "window_s": 10.0,
     "ci_note": "n/a: 1 run; ...",
     "params": {detector: {name: value}},
     "rows": [{"detector": "peer-median", "window_mcc": 0.41, ...}, ...]}

One row per detector, each metric a plain number (no interval: one run has none over
runs). :func:`rows_of` also reads a bare list of rows.
"""

from __future__ import annotations

from faultlab.scoring.api import NO_CI_NOTE

FORMAT = "faultlab-run-metrics/1"


def document(run_id: str, rows: list[dict], *, window_s: float, params: dict | None = None) -> dict:
    """The metrics.json document of one run's score ``rows`` (every metric offline,
    latency from the replay), scored with cells of ``window_s`` seconds and each
    detector's ``params`` (detector -> {name: value})."""
    return {"format": FORMAT, "run_id": str(run_id), "n_runs": 1, "split": "all", "mode": "offline (latency: replay)",
            "window_s": float(window_s), "ci_note": NO_CI_NOTE, "params": params or {}, "rows": rows}


def is_document(doc) -> bool:
    """True for a :data:`FORMAT` document whose ``rows`` is a list."""
    return isinstance(doc, dict) and doc.get("format") == FORMAT and isinstance(doc.get("rows"), list)


def rows_of(doc) -> list[dict] | None:
    """The score rows of a metrics.json (a :data:`FORMAT` document or a bare list of
    rows); None for anything else."""
    if is_document(doc):
        rows = doc["rows"]
    elif isinstance(doc, list):
        rows = doc
    else:
        return None
    return [r for r in rows if isinstance(r, dict)]


def provenance_of(doc: dict) -> list[dict]:
    """Per row of a :data:`FORMAT` document, what it was scored on, in the fields of
    faultlab report's scores page (dataset: the run, split, mode, window, params)."""
    window = doc.get("window_s")
    params = doc.get("params") if isinstance(doc.get("params"), dict) else {}
    out = []
    for r in rows_of(doc) or []:
        det = str(r.get("detector", "-"))
        p = params.get(det) if isinstance(params.get(det), dict) else {}
        out.append({"detector": det, "spec": det, "mode": str(doc.get("mode", "-")), "dataset": f"run {doc.get('run_id', '-')}",
                    "source": "metrics.json", "split": str(doc.get("split", "-")), "runs": 1,
                    "window": f"{window:g} s" if isinstance(window, (int, float)) else "-",
                    "params": ", ".join(f"{k}={v}" for k, v in p.items()) or "defaults", "settings": "-"})
    return out
