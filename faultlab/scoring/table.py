"""The honest score table: every detector beside the random and constant ones, the
headline metrics each with its 95% bootstrap CI over runs. One definition, used by
the table of docs/evaluation.md (``perf/dataset_table.py``) and by ``faultlab demo``'s summary.

Columns (:data:`COLUMNS`): event F1 (no point-adjust), window F1 and beside it the
point-adjusted window F1 (marked inflated: Kim et al., AAAI'22), window-level MCC
(the figure a chance detector cannot inflate: ~0 for random, exactly 0 for constant),
VUS-PR (continuous scores) and the detection latency median (online replay). The
real detectors come first, then ``random`` and ``constant``, labeled as the chance
rows. With fewer than 2 runs no interval over runs exists: cells show the value and
the table says so (one run decides little: a difference there may be chance).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich.table import Table

#: (metric key, column title, mode it is read from)
COLUMNS = (
    ("event_f1", "event F1", "offline"),
    ("window_f1", "window F1", "offline"),
    ("window_f1_point_adjusted", "window F1 point-adjusted (inflated)", "offline"),
    ("window_mcc", "window MCC", "offline"),
    ("vus_pr", "VUS-PR", "offline"),
    ("latency_median_s", "latency median (s, replay)", "replay"),
)
CHANCE = {"random": "random (chance)", "constant": "constant (alarms everything)"}
NOTE_ONE_RUN = ("1 run: no confidence interval over runs can be drawn, and one run decides little (a difference between "
                "detectors here may be chance); score many runs with faultlab score --dataset for CIs")
NOTE_PA = "point-adjusted F1 counts a whole labeled stretch as found once one cell of it is alarmed: inflated, for comparison with papers only"


#: the level a metric key's prefix names (docs/detectors.md "The metrics"); a bare
#: precision/recall/f1/mcc is component level (a component labeled anywhere in a run)
LEVELS = {"window_": "window", "event_": "event", "range_": "range"}
_NAMES = {"precision": "precision", "recall": "recall", "f1": "F1", "mcc": "MCC", "auc_pr": "AUC-PR", "vus_pr": "VUS-PR",
          "acc_at_1": "Acc@1", "acc_at_k": "Acc@k", "latency_median_s": "latency median (s)", "latency_p95_s": "latency p95 (s)",
          "false_alarms_per_component_hour": "false alarms per component-hour",
          "unmanifested_alarmed_share": "share of unmanifested faults alarmed"}


def metric_title(key: str) -> str:
    """The display title of a score metric key, naming its level and unit and marking
    point-adjusted figures inflated: ``window_mcc`` -> ``window MCC``, ``f1`` ->
    ``component F1``, ``window_f1_point_adjusted`` -> ``window F1 point-adjusted
    (inflated)``; an unknown key is returned as it is."""
    base, pa = (key[: -len("_point_adjusted")], True) if key.endswith("_point_adjusted") else (key, False)
    level = next((lv for pre, lv in LEVELS.items() if base.startswith(pre)), None)
    name = base[len(level) + 1:] if level else base
    if name not in _NAMES:
        return key
    if level is None and name in ("precision", "recall", "f1", "mcc"):
        level = "component"
    title = f"{level} {_NAMES[name]}" if level else _NAMES[name]
    return title + (" point-adjusted (inflated)" if pa else "")


@dataclass
class Row:
    """One detector's line: its label, number of runs, and per column (value, ci)."""

    label: str
    n_runs: int
    cells: dict


def rows(labels, offline, replay=None) -> list[Row]:
    """Rows from parallel lists: ``labels`` (str), ``offline`` and ``replay``
    :class:`faultlab.scoring.api.ScoreResult` (replay may be None: no latency).
    Chance detectors (``random``, ``constant``) are moved last and labeled so."""
    out, chance = [], []
    for i, (lab, o) in enumerate(zip(labels, offline)):
        r = replay[i] if replay else None
        cells = {}
        for key, _, mode in COLUMNS:
            src = o if mode == "offline" else r
            m = src.metrics.get(key) if src is not None else None
            cells[key] = (m["value"], m["ci"]) if m else (float("nan"), [float("nan")] * 2)
        name = CHANCE.get(lab, lab)
        draws = int((o.params or {}).get("draws", 1) or 1)
        if draws > 1:
            name = name.replace("(chance)", f"(chance: mean of {draws} draws)")
        row = Row(name, o.n_runs, cells)
        (chance if lab in CHANCE else out).append(row)
    return out + chance


def _isnan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def cell(value, ci, n_runs: int, digits: int = 2) -> str:
    """``0.53 [0.41, 0.65]``; the value alone for one run or an undefined CI; ``-``
    for an undefined value."""
    if _isnan(value):
        return "-"
    if n_runs < 2 or not ci or _isnan(ci[0]):
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def _digits(key: str) -> int:
    return 1 if key.endswith("_s") else 2


def markdown(rs: list[Row], dataset: str | None = None) -> list[str]:
    """Markdown table lines (a ``dataset`` column first when given)."""
    head = (["dataset"] if dataset is not None else []) + ["detector"] + [t for _, t, _ in COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rs:
        first = [f"{dataset} ({r.n_runs} runs)"] if dataset is not None else []
        lines.append("| " + " | ".join(first + [r.label] + [cell(*r.cells[k], r.n_runs, _digits(k)) for k, _, _ in COLUMNS]) + " |")
    return lines


def rich_table(rs: list[Row], title: str):
    """A rich Table of the rows, its caption saying what one run cannot show and that
    point-adjusted F1 is inflated."""

    notes = [NOTE_PA]
    if rs and min(r.n_runs for r in rs) < 2:
        notes.insert(0, NOTE_ONE_RUN)
    t = Table(title=title, caption="; ".join(notes), caption_justify="left")
    t.add_column("detector")
    for _, title_, _ in COLUMNS:
        t.add_column(title_, justify="right")
    for r in rs:
        t.add_row(r.label, *(cell(*r.cells[k], r.n_runs, _digits(k)) for k, _, _ in COLUMNS))
    return t
