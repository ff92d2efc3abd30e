"""The CI gate: compare a score with a previous one (``faultlab score ... --baseline
previous.json --max-drop 0.02 [--metric event_f1 ...]``).

A metric *drops* when it got worse than the baseline's value by more than
``max_drop`` (absolute, in the metric's unit): lower for the higher-is-better metrics,
higher for latency and false alarms. Every metric is judged; the gate fails (exit 1)
when any dropped and names each with both values and both 95% CIs. An improvement
passes and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from faultlab import safefs
from faultlab.errors import BadInput

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


def load_baseline(path: str | Path) -> dict:
    """The ``metrics`` of a ``faultlab score --out`` file. Raises BadInput (field
    ``--baseline``) when it cannot be read or has no metrics."""
    p = Path(path)
    try:
        d = safefs.parse_json(p.read_text(), str(p))
    except (OSError, ValueError) as e:  # ValueError: bad UTF-8, bad or too deeply nested JSON
        raise BadInput(f"{p} could not be read ({type(e).__name__}: {e})", field="--baseline",
                       fix="give a file written by faultlab score --out") from None
    if not isinstance(d, dict) or not isinstance(d.get("metrics"), dict):
        raise BadInput(f"{p} has no 'metrics' object", field="--baseline", fix="give a file written by faultlab score --out")
    return d


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
