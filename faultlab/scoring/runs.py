"""The runs a detector is scored on: one :class:`RunData` per run, read one at a time
(scoring streams run by run, so memory stays flat as a dataset grows).

Sources: run directories (faultlab.rundir: ``steps.parquet``, ``host.parquet``,
``injections.parquet``, ``labels.parquet``) and dataset folders
(:mod:`faultlab.datasets.layout`: ``data/<table>/run=<id>/*.parquet`` and
``splits.json``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pandas as pd

from faultlab import schema
from faultlab.errors import BadInput
from faultlab.labeler.temporal import check_step_values


@dataclass
class RunData:
    """One run's tables (faultlab.schema frames) and meta.json."""

    run_id: str
    steps: pd.DataFrame
    host: pd.DataFrame
    labels: pd.DataFrame
    injections: pd.DataFrame
    meta: dict = field(default_factory=dict)

    def components(self) -> list[str]:
        """``rank:N`` of every rank, ``job``, and any component a label names."""
        from faultlab.scoring.metrics import run_components

        return run_components(self.steps, self.labels)

    def span(self) -> tuple[float, float] | None:
        """(first ``t_start``, last ``t_start + step_s``) in unix s, None without steps."""
        if self.steps is None or not len(self.steps):
            return None
        s = self.steps
        return float(s["t_start"].min()), float((s["t_start"] + s["step_s"]).max())


def read_run_dir(path: str | Path) -> RunData:
    """Read a labeled run directory.

    Raises BadInput naming the folder when it is no run directory or has no
    ``labels.parquet`` (fix: ``faultlab label DIR``), or naming the file that cannot
    be read."""
    from faultlab.rundir import RunDir

    p = Path(path)
    if not p.is_dir() or not ((p / "steps.parquet").exists() or (p / "telemetry").is_dir()):
        raise BadInput(f"{p} is not a run directory (no steps.parquet, no telemetry/)", field="--run",
                       fix="give a folder written by faultlab run/demo/campaign")
    if not (p / "labels.parquet").exists():
        raise BadInput(f"{p} has no labels.parquet", field="--run", fix=f"label it first: faultlab label {p}")
    rd = RunDir(p)
    steps = rd.read_table("steps")
    check_step_values(steps)
    return RunData(run_id=str(rd.run_id), steps=steps, host=rd.read_table("host"), labels=rd.read_table("labels"),
                   injections=rd.read_table("injections"), meta=rd.meta)


def iter_run_dirs(paths) -> Iterator[RunData]:
    """Yield :func:`read_run_dir` of each path, in order."""
    for p in paths:
        yield read_run_dir(p)


def empty_run(run_id: str) -> RunData:
    return RunData(run_id, schema.empty("steps"), schema.empty("host"), schema.empty("labels"), schema.empty("injections"))
