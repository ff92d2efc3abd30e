"""The leaderboard as Markdown (leaderboard.md, the terminal) and JSON
(leaderboard.json: the scores file ``--verify`` re-scores).

Each dataset is a table: rank, detector, window MCC with its 95% CI, the mark of the
paired bootstrap against the next row (``>``: better than the row below, the paired
95% interval of the window-MCC difference above 0; ``~``: not shown better), then
event F1, VUS-PR, Acc@1, latency median (replay) and false alarms per
component-hour, each with its CI (:func:`faultlab.scoring.table.cell`).
"""

from __future__ import annotations

import json
import math

from faultlab.scoring.leaderboard.compute import COLUMNS, RANK_BY, Board, DatasetBoard, Row, settings_of
from faultlab.scoring.table import cell

MARK_BETTER, MARK_NOT = ">", "~"
LEGEND = (f"Ranked by window MCC (the figure chance cannot inflate). `{MARK_BETTER}`: better than the next row, the 95% "
          f"interval of the paired bootstrap over runs (the same resampled runs for both) of the window-MCC difference lies above 0; "
          f"`{MARK_NOT}`: not shown better. Each figure: value [95% bootstrap CI over runs]; `-`: undefined (no continuous scores, "
          "or latency outside replay).")


def _digits(key: str) -> int:
    return 1 if key.endswith("_s") or key.startswith("false_alarms") else 2


def mark(row: Row) -> str:
    """The paired-bootstrap cell of ``row`` against the next one: the mark and the
    difference with its interval (``> +0.12 [0.05, 0.20]``); empty for the last row."""
    v = row.vs_next
    if v is None:
        return ""
    sym = MARK_BETTER if v["better"] else MARK_NOT
    diff, ci = v["diff"], v["ci"]
    if diff is None or (isinstance(diff, float) and math.isnan(diff)):
        return sym
    if ci[0] is None or (isinstance(ci[0], float) and math.isnan(ci[0])):
        return f"{sym} {diff:+.2f}"
    return f"{sym} {diff:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}]"


def row_cells(row: Row) -> list[str]:
    out = []
    for key, _ in COLUMNS:
        m = row.metrics.get(key) or {}
        out.append(cell(m.get("value", math.nan), m.get("ci"), row.n_runs, _digits(key)))
        if key == RANK_BY:
            out.append(mark(row))
    return out


def header() -> list[str]:
    """The column titles of a dataset's table."""
    out = ["rank", "detector"]
    for key, title in COLUMNS:
        out.append(title)
        if key == RANK_BY:
            out.append("vs next (paired)")
    return out


def dataset_title(db: DatasetBoard, settings: dict) -> str:
    """``faultlab-hw-v1: 7 runs (test split), offline, 10 s windows``."""
    return f"{db.name}: {db.n_runs} runs ({settings['split']} split), {settings['mode']}, {settings['window_s']:g} s windows"


def dataset_markdown(db: DatasetBoard, settings: dict, heading: str = "###") -> list[str]:
    """One dataset's heading and table lines."""
    head = header()
    lines = [f"{heading} {dataset_title(db, settings)}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in db.rows:
        lines.append("| " + " | ".join([str(r.rank), r.label] + row_cells(r)) + " |")
    return lines


def card_table(db: DatasetBoard, settings: dict) -> str:
    """One dataset's table as its card carries it: the table, the legend and the
    command that remakes it (the dataset named as ``datasets/NAME``, never a path of
    this machine)."""
    defaults = settings_of()
    shown = {"mode": ("--mode", "{}"), "split": ("--split", "{}"), "window_s": ("--window", "{:g}s"), "tick_s": ("--tick", "{:g}s"),
             "n_boot": ("--boot", "{}"), "seed": ("--seed", "{}")}
    opts = "".join(f" {flag} {fmt.format(settings[k])}" for k, (flag, fmt) in shown.items() if settings[k] != defaults[k])
    cmd = f"faultlab leaderboard --dataset datasets/{db.name}{opts} --card"
    return "\n".join(dataset_markdown(db, settings) + ["", LEGEND, f"From `{cmd}`."])


def markdown(board: Board, heading: str = "###") -> str:
    """The whole leaderboard: the legend, then each dataset's table."""
    lines = [LEGEND, ""]
    for db in board.datasets:
        lines += dataset_markdown(db, board.settings, heading) + [""]
    return "\n".join(lines)


def brief_markdown(board: Board) -> str:
    """One short table of every dataset (the README's): a row per detector (by its
    mean rank over the datasets, then name), a column per dataset whose cell is the
    detector's rank there, its window MCC with the CI and the paired mark against the
    next rank of that dataset (``#1 0.56 [0.18, 0.80] >``; ``-`` where it was not
    scored)."""
    where: dict[str, dict] = {}
    for i, db in enumerate(board.datasets):
        for r in db.rows:
            where.setdefault(r.label, {})[i] = r
    n = len(board.datasets)
    order = sorted(where, key=lambda lab: (sum(where[lab][i].rank if i in where[lab] else 1e9 for i in range(n)) / max(n, 1), lab))
    lines = ["| detector | " + " | ".join(f"{db.name} ({db.n_runs} runs)" for db in board.datasets) + " |", "|---|" + "---|" * n]
    for lab in order:
        cells = []
        for i in range(n):
            r = where[lab].get(i)
            if r is None:
                cells.append("-")
                continue
            m = r.metrics.get(RANK_BY) or {}
            sym = "" if r.vs_next is None else MARK_BETTER if r.vs_next["better"] else MARK_NOT
            cells.append(f"#{r.rank} {cell(m.get('value', math.nan), m.get('ci'), r.n_runs)} {sym}".rstrip())
        lines.append(f"| {lab} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def to_json(board: Board) -> str:
    """leaderboard.json: strict JSON (NaN as null) of :meth:`Board.to_dict`."""
    return json.dumps(board.to_dict(), indent=1)
