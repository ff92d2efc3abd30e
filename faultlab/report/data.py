"""What a report reads: one run directory's tables and JSON files, checked and put on
one time axis.

Times shown in a report are seconds since the run's time origin
(:meth:`faultlab.rundir.RunDir.time_origin`: the first training step's start), the
same origin every printed time of the demo and the runner uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from faultlab import inputfile, safefs, steptable
from faultlab.errors import BadInput
from faultlab.rundir import RunDir
from faultlab.steps import check_step_values


@dataclass
class RunData:
    """One run directory, loaded.

    Tables are pandas frames with the columns of faultlab.schema (empty frames when a
    file is absent); ``whatif`` and ``metrics`` are the parsed JSON files (None when
    absent); ``t0`` is the time origin, unix s.
    """

    path: Path
    run_id: str
    meta: dict
    steps: pd.DataFrame
    host: pd.DataFrame
    injections: pd.DataFrame
    labels: pd.DataFrame
    alarms: pd.DataFrame
    whatif: dict | None
    metrics: list | dict | None
    t0: float
    notes: list[str] = field(default_factory=list)

    @property
    def ranks(self) -> list[int]:
        return sorted(int(r) for r in self.steps["rank"].unique()) if len(self.steps) else []

    @property
    def nodes(self) -> list[str]:
        names = set(self.steps["node"].astype(str)) if len(self.steps) else set()
        names |= set(self.host["node"].astype(str)) if len(self.host) else set()
        return sorted(names)

    def rel(self, ts) -> float:
        """Seconds since the time origin (``ts`` unix s)."""
        return float(ts) - self.t0


def is_run_dir(path: Path) -> bool:
    """True when ``path`` looks like a run directory (steps.parquet or telemetry/)."""
    return path.is_dir() and (steptable.steps_source(path) is not None or (path / "telemetry").is_dir())


def load_run(path: str | Path) -> RunData:
    """Load the run directory at ``path``.

    Raises BadInput (field ``RUN_DIR``) when it is no run directory or holds no step
    telemetry, and BadInput naming the file when a table or JSON file cannot be read.
    """
    p = Path(path)
    if not is_run_dir(p):
        raise BadInput(f"{p} is not a run directory (no steps.parquet, no telemetry/)", field="RUN_DIR",
                       fix="give a folder written by faultlab run or faultlab demo")
    rd = RunDir(p)
    steps = rd.read_table("steps")
    if steps.empty:
        raise BadInput(f"{p} holds no step telemetry", field="RUN_DIR", fix="give a run that trained at least one step")
    check_step_values(steps)
    notes = []
    if not rd.meta.get("complete", False):
        notes.append("this run is incomplete (meta.json complete: false): it was interrupted or killed; tables were rebuilt from raw telemetry and the journal")
    t0 = rd.time_origin(steps)
    return RunData(
        path=p, run_id=rd.run_id, meta=rd.meta, steps=steps,
        host=rd.read_table("host"), injections=rd.read_table("injections"), labels=rd.read_table("labels"),
        alarms=rd.read_table("alarms"), whatif=_json(rd, "whatif.json"), metrics=_json(rd, "metrics.json"),
        t0=t0, notes=notes,
    )


def _json(rd: RunDir, name: str):
    """The parsed JSON file ``name`` of the run folder (None when absent), read as its
    tables are (:meth:`faultlab.rundir.RunDir.read_file`: no link, a regular file, at
    most ``inputfile.JSON_BYTES``). Raises BadInput naming the file."""
    p = rd.path / name
    data = rd.read_file(name, inputfile.JSON_BYTES, "restore or remove it")
    if data is None:
        return None
    try:
        return safefs.parse_json(data, str(p))
    except ValueError as e:  # bad UTF-8, bad or too deeply nested JSON
        raise BadInput(f"{p} could not be read as JSON ({type(e).__name__}: {e})", field=name, fix="restore or remove it") from None
