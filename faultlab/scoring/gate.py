"""The CI gate: compare a score with a previous one (``faultlab score ... --baseline
previous.json --max-drop 0.02 [--metric event_f1 ...]``).

A metric *drops* when it got worse than the baseline's value by more than
``max_drop`` (absolute, in the metric's unit): lower for the higher-is-better metrics,
higher for latency and false alarms. Every metric is judged; the gate fails (exit 1)
when any dropped and names each with both values and both 95% CIs. An improvement
passes and says so.

A baseline is compared only with a score made the same way (:func:`mismatches`): the
same dataset (by manifest digest; run directories by their run ids), split, mode,
window, replay tick and tolerance, Acc@k's k, VUS buffer, and, for the same detector,
the same parameters. Anything else is refused in one line naming what differs
(:func:`require_comparable`, exit 2) unless the caller allows the mismatch, and then
the verdict says it was compared anyway (:func:`verdict`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from faultlab import inputfile, safefs, schema
from faultlab.errors import BadInput, printable

DEFAULT_METRICS = ("event_f1", "window_f1", "window_mcc", "range_f1", "vus_pr", "acc_at_1")
LOWER_IS_BETTER = {"latency_median_s", "latency_p95_s", "false_alarms_per_component_hour", "unmanifested_alarmed_share"}


@dataclass
class Verdict:
    metric: str
    before: float
    after: float
    ci_before: list
    ci_after: list
    status: str  # dropped | within (worse, inside the allowance) | same | improved | n/a

    def line(self) -> str:
        def f(x):
            return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"

        def ci(c):
            return f"[{f(c[0])}, {f(c[1])}]" if c else "[-]"

        return f"{self.status:8s} {self.metric}: {f(self.before)} {ci(self.ci_before)} -> {f(self.after)} {ci(self.ci_after)}"


#: the settings two scores must share, and the modes each matters in
SETTINGS = (("window_s", ("offline", "replay")), ("k", ("offline", "replay")), ("vus_window", ("offline", "replay")),
            ("tick_s", ("replay",)), ("late_s", ("replay",)))


def _dataset_of(d: dict) -> tuple[str, str]:
    """(kind, identity) of the data a score was made on: its dataset's manifest digest,
    else its sorted run ids (``per_run``), else its source path."""
    if d.get("dataset_digest"):
        return "digest", str(d["dataset_digest"])
    ids = sorted(str(r.get("run_id")) for r in d.get("per_run") or [] if isinstance(r, dict))
    if ids:
        return "runs", ",".join(ids)
    return "source", str(d.get("source", ""))


def _show_dataset(d: dict) -> str:
    kind, ident = _dataset_of(d)
    name = Path(str(d.get("source") or "?")).name or "?"
    if kind == "digest":
        return f"{name} (manifest digest {ident[:12]})"
    if kind == "runs":
        return f"{len(ident.split(','))} runs of {d.get('source') or '?'}"
    return name


def mismatches(current: dict, baseline: dict) -> list[str]:
    """What differs between how ``current`` and ``baseline`` (ScoreResult.to_dict()
    forms) were scored, one phrase each (``split: baseline all, this test``); empty
    when they are comparable. The dataset is compared by manifest digest when both
    have one, else by run ids; the detector parameters only when both name the same
    detector (the gate compares a detector with another one too)."""
    out = []
    if _dataset_of(current)[0] == _dataset_of(baseline)[0] and _dataset_of(current) != _dataset_of(baseline):
        out.append(f"dataset: baseline {_show_dataset(baseline)}, this {_show_dataset(current)}")
    elif _dataset_of(current)[0] != _dataset_of(baseline)[0]:
        out.append(f"dataset: baseline {_show_dataset(baseline)}, this {_show_dataset(current)} (not comparable by the same key)")
    for key in ("split", "mode"):
        if baseline.get(key) != current.get(key):
            out.append(f"{key}: baseline {baseline.get(key)}, this {current.get(key)}")
    bs, cs = baseline.get("settings") or {}, current.get("settings") or {}
    for key, modes in SETTINGS:
        if current.get("mode") in modes and bs.get(key) != cs.get(key):
            out.append(f"{key}: baseline {bs.get(key, 'not recorded')}, this {cs.get(key)}")
    if baseline.get("detector") == current.get("detector") and (baseline.get("params") or {}) != (current.get("params") or {}):
        out.append(f"{current.get('detector')} parameters: baseline {baseline.get('params') or {}}, this {current.get('params') or {}}")
    return out


def require_comparable(current: dict, baseline: dict, path, allow: bool = False) -> list[str]:
    """The :func:`mismatches` of ``current`` against the baseline file ``path``.

    Raises BadInput (exit 2, field ``--baseline``) naming each mismatch in one line,
    unless ``allow``: then returns them (the caller says it compared anyway)."""
    found = mismatches(current, baseline)
    if found and not allow:
        raise BadInput(f"{path} was scored differently: {'; '.join(found)}", field="--baseline",
                       fix="score the baseline again with the same settings, or pass --allow-mismatch to compare anyway")
    return found


def verdict(verdicts: list, baseline_path, max_drop: float, allowed: list[str]) -> dict:
    """The gate's outcome as ``--json`` carries it: ``verdict`` (passed | failed),
    ``baseline``, ``max_drop``, ``mismatches_allowed`` (what differed and was compared
    anyway) and per metric its ``status``, ``before``, ``after``, ``ci_before``,
    ``ci_after``."""
    failed = any(v.status == "dropped" for v in verdicts)
    return schema.json_safe({"verdict": "failed" if failed else "passed", "baseline": str(baseline_path), "max_drop": max_drop,
            "mismatches_allowed": list(allowed),
            "metrics": [{"metric": v.metric, "status": v.status, "before": v.before, "after": v.after,
                         "ci_before": v.ci_before, "ci_after": v.ci_after} for v in verdicts]})


def load_baseline(path: str | Path) -> dict:
    """The ``metrics`` of a ``faultlab score --out`` file. Raises BadInput (field
    ``--baseline``) when it cannot be read or has no metrics."""
    p = Path(path)
    text = inputfile.read_text(p, "--baseline", limit=inputfile.JSON_BYTES, fix="give a file written by faultlab score --out")
    try:
        d = safefs.parse_json(text, str(p))
    except ValueError as e:  # bad or too deeply nested JSON
        raise BadInput(f"{p} could not be read ({type(e).__name__}: {e})", field="--baseline",
                       fix="give a file written by faultlab score --out") from None
    if not isinstance(d, dict) or not isinstance(d.get("metrics"), dict):
        raise BadInput(f"{p} has no 'metrics' object", field="--baseline", fix="give a file written by faultlab score --out")
    for name, m in d["metrics"].items():
        if not _metric_ok(m):
            raise BadInput(f"{p}: metric {printable(name, 60)!r} is not an object of a number 'value' and a 'ci' of two numbers",
                           field="--baseline", fix="give a file written by faultlab score --out")
    return d


def _number(x) -> bool:
    return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool) and abs(x) < 1e300)


def _metric_ok(m) -> bool:
    """Whether ``m`` has the shape of a metric of a ``score --out`` file, which the
    gate compares and prints: ``value`` a number (or null), ``ci`` null or two numbers."""
    if not isinstance(m, dict) or not _number(m.get("value")):
        return False
    ci = m.get("ci")
    return ci is None or (isinstance(ci, list) and len(ci) == 2 and all(map(_number, ci)))


def _val(m: dict, name: str):
    v = (m.get(name) or {}).get("value")
    return float("nan") if v is None else float(v)


def compare(current: dict, baseline: dict, max_drop: float = 0.02, metrics=None) -> list[Verdict]:
    """Judge each metric of ``current`` (a ScoreResult.to_dict()) against ``baseline``.

    ``metrics``: names to judge (default :data:`DEFAULT_METRICS`, those defined in
    either). Raises BadInput for a negative ``max_drop`` or a metric neither has."""
    if not max_drop >= 0:
        raise BadInput(f"max drop must be >= 0, got {max_drop}", field="--max-drop")
    cm, bm = current["metrics"], baseline["metrics"]
    names = list(metrics) if metrics else [n for n in DEFAULT_METRICS if n in cm or n in bm]
    out = []
    for n in names:
        if n not in cm and n not in bm:
            raise BadInput(f"unknown metric {n!r}", field="--metric", fix="one of " + ", ".join(sorted(cm)))
        b, a = _val(bm, n), _val(cm, n)
        if math.isnan(a) and math.isnan(b):
            status = "n/a"
        elif math.isnan(a) or math.isnan(b):
            status = "dropped" if math.isnan(a) else "improved"
        else:
            delta = (b - a) if n in LOWER_IS_BETTER else (a - b)
            status = "dropped" if delta < -max_drop else "improved" if delta > 1e-12 else "same" if delta >= -1e-12 else "within"
        out.append(Verdict(n, b, a, (bm.get(n) or {}).get("ci"), (cm.get(n) or {}).get("ci"), status))
    return out
