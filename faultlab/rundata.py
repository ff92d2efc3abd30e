"""A run's tables as scoring, datasets and the report read them: one :class:`RunData`
per run, read one at a time (scoring streams run by run, so memory stays flat as a
dataset grows). Its steps are checked as ``faultlab label`` checks them
(:func:`faultlab.steps.check_step_values`), without importing the labeler.

Sources: run directories (faultlab.rundir: ``steps.parquet``, ``host.parquet``,
``injections.parquet``, ``labels.parquet``) and dataset folders
(:mod:`faultlab.datasets.layout`: ``data/<table>/run=<id>/*.parquet`` and
``splits.json``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from faultlab import schema, steptable
from faultlab.errors import BadInput
from faultlab.rundir import RunDir
from faultlab.steps import check_step_values


#: the ``source`` of a label for a fault that slowed nothing
UNMANIFESTED = "injected-unmanifested"
#: the most rank-steps a run directory may hold to be read whole (scoring, dataset
#: build): a detector takes the run's steps as one frame, and scoring peaks at about
#: 350 bytes a rank-step (12 GB here); the bound of a dataset's part file too
#: (``datasets.layout.MAX_PART_ROWS``)
MAX_RUN_ROWS = 1 << 25


def effect_labels(labels: pd.DataFrame | None) -> pd.DataFrame:
    """Labels that describe a real slowdown: drops ``injected-unmanifested`` rows and
    rows without a finite start_ts/end_ts."""
    if labels is None or len(labels) == 0:
        return pd.DataFrame(columns=["component", "start_ts", "end_ts"])
    keep = np.isfinite(labels["start_ts"].to_numpy(np.float64)) & np.isfinite(labels["end_ts"].to_numpy(np.float64))
    if "source" in labels.columns:
        keep &= text_values(labels["source"]) != UNMANIFESTED
    return labels.reset_index(drop=True) if keep.all() else labels[keep].reset_index(drop=True)


def unmanifested_labels(labels: pd.DataFrame | None) -> pd.DataFrame:
    """The ``injected-unmanifested`` rows (faults that slowed nothing)."""
    if labels is None or len(labels) == 0 or "source" not in labels.columns:
        return pd.DataFrame(columns=["component", "start_ts", "end_ts"])
    return labels[text_values(labels["source"]) == UNMANIFESTED].reset_index(drop=True)


def text_values(col: pd.Series) -> np.ndarray:
    """A column as an object array of text (``astype(str)``; a pandas string column
    as it is, without a copy): the one conversion scoring makes of a text column."""
    return col.to_numpy(object) if isinstance(col.dtype, pd.StringDtype) else col.astype(str).to_numpy(object)


@dataclass
class RunData:
    """One run's tables (faultlab.schema frames) and meta.json."""

    run_id: str
    steps: pd.DataFrame
    host: pd.DataFrame
    labels: pd.DataFrame
    injections: pd.DataFrame
    meta: dict = field(default_factory=dict)

    def span(self) -> tuple[float, float] | None:
        """(first ``t_start``, last ``t_start + step_s``) in unix s, None without steps."""
        if self.steps is None or not len(self.steps):
            return None
        s = self.steps
        return float(s["t_start"].min()), float((s["t_start"] + s["step_s"]).max())


def read_run_dir(path: str | Path) -> RunData:
    """Read a labeled run directory.

    Raises BadInput naming the folder when it is no run directory, has no
    ``labels.parquet`` (fix: ``faultlab label DIR``) or holds more than
    :data:`MAX_RUN_ROWS` rank-steps (refused from the Parquet footers, before the steps
    are read), or naming the file that cannot be read."""
    p = Path(path)
    if not p.is_dir() or not (steptable.steps_source(p) is not None or (p / "telemetry").is_dir()):
        raise BadInput(f"{p} is not a run directory (no steps.parquet, no telemetry/)", field="--run",
                       fix="give a folder written by faultlab run/demo/campaign")
    if not (p / "labels.parquet").exists():
        raise BadInput(f"{p} has no labels.parquet", field="--run", fix=f"label it first: faultlab label {p}")
    src = steptable.steps_source(p)
    rows = steptable.count_rows(src) if src is not None else 0  # from the footers, before anything is decoded
    if rows > MAX_RUN_ROWS:
        raise BadInput(f"{p} holds {rows:,} rank-steps, more than a run read whole may ({MAX_RUN_ROWS:,}: "
                       f"detectors take the whole run in memory, about 350 bytes a rank-step)", field="--run",
                       fix=f"give runs of at most {MAX_RUN_ROWS:,} rank-steps (fewer ranks or steps); faultlab label labels a larger run out of core")
    rd = RunDir(p)
    steps = rd.read_table("steps", max_rows=MAX_RUN_ROWS)  # the files read, which their owner may have grown since the count
    check_step_values(steps)
    return RunData(run_id=str(rd.run_id), steps=steps, host=rd.read_table("host"), labels=rd.read_table("labels"),
                   injections=rd.read_table("injections"), meta=rd.meta)


def iter_run_dirs(paths) -> Iterator[RunData]:
    """Yield :func:`read_run_dir` of each path, in order."""
    for p in paths:
        yield read_run_dir(p)


def empty_run(run_id: str) -> RunData:
    """A run with no rows in any table."""
    return RunData(run_id, schema.empty("steps"), schema.empty("host"), schema.empty("labels"), schema.empty("injections"))
