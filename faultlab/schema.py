"""Table schemas shared by every stage (one schema version for all tables).

Units are in the column names: ``*_s`` are seconds, ``*_ts`` are unix timestamps in
seconds (float), ``slowdown`` is a ratio (1.0 = not slowed).

Tables (see docs/architecture.md):

- ``steps``: one row per rank per training step (what the workload felt).
- ``host``: long-format host metrics, one row per (node, ts, metric); metric names
  carry their unit (``cpu_util_pct``, ``net_tx_bytes_per_s``, ...).
- ``injections``: ground truth cause, one row per fault: an injected one (``kind``
  ``injected``) or a workload knob that makes stragglers (``kind`` ``workload``, see
  :mod:`faultlab.knobfaults`).
- ``labels``: effect, one row per labeled slow interval.
- ``alarms``: detector output.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

SCHEMA_VERSION = "1"

STEPS = pa.schema(
    [
        ("run_id", pa.string()),
        ("rank", pa.int32()),
        ("node", pa.string()),
        ("peer_group", pa.string()),
        ("step", pa.int64()),
        ("t_start", pa.float64()),  # unix s, step start on the rank
        ("compute_s", pa.float64()),  # forward + backward + optimizer, local work only
        ("comm_s", pa.float64()),  # time inside the gradient all-reduce, incl. waiting
        ("step_s", pa.float64()),  # whole step
        ("gc_s", pa.float64()),  # optional: Python GC time during the step (NaN if not measured)
        ("tokens", pa.float64()),  # optional: tokens this rank processed (sequence-length knob)
        ("dataloader_s", pa.float64()),  # optional: building the step's batch, not in compute_s
    ]
)

#: columns a table may lack on input, with the value they are filled with
OPTIONAL = {"steps": {"gc_s": float("nan"), "tokens": float("nan"), "dataloader_s": float("nan")},
            "injections": {"kind": "injected"}}

HOST = pa.schema(
    [
        ("run_id", pa.string()),
        ("node", pa.string()),
        ("ts", pa.float64()),
        ("metric", pa.string()),
        ("value", pa.float64()),
    ]
)

INJECTIONS = pa.schema(
    [
        ("run_id", pa.string()),
        ("fault_id", pa.string()),
        ("fault_type", pa.string()),
        ("kind", pa.string()),  # injected (a fault injector) | workload (a straggler knob of the workload)
        ("node", pa.string()),
        ("target", pa.string()),  # interface, rank, PIDs: what on the node was hit; "ranks:0,1,2,3" for several ranks
        ("start_ts", pa.float64()),  # actual start: the moment inject returned
        ("end_ts", pa.float64()),  # actual end: the moment revert returned
        ("params", pa.string()),  # JSON, explicit units in keys
        ("severity", pa.float64()),  # type-specific, documented per injector
        ("status", pa.string()),  # reverted | expired | revert-failed | handed-to-lease | unverified (verify did not confirm it: reverted at once, not in force) | run-end (a workload knob in force until the run ended)
        ("verified", pa.bool_()),  # the measured check said the condition was in force
        ("evidence", pa.string()),  # JSON: the measurements behind `verified`
    ]
)

LABELS = pa.schema(
    [
        ("run_id", pa.string()),
        ("component", pa.string()),  # "rank:3", "node:n2", "job"
        ("component_kind", pa.string()),  # rank | node | job
        ("start_ts", pa.float64()),
        ("end_ts", pa.float64()),
        ("start_step", pa.int64()),
        ("end_step", pa.int64()),
        ("slowdown", pa.float64()),  # ratio of slowed to baseline time
        ("views", pa.string()),  # "temporal", "peer", "temporal+peer", "host+temporal"
        ("confidence", pa.float64()),  # 0..1
        ("fault_id", pa.string()),  # nullable
        ("source", pa.string()),  # injected | observed | injected-unmanifested
        ("cause", pa.string()),  # fault type, or inferred cause, or "unknown"
        ("evidence", pa.string()),  # JSON: baseline, peer median, etc.
    ]
)

ALARMS = pa.schema(
    [
        ("component", pa.string()),
        ("start_ts", pa.float64()),
        ("end_ts", pa.float64()),
        ("score", pa.float64()),
    ]
)

TABLES: dict[str, pa.Schema] = {
    "steps": STEPS,
    "host": HOST,
    "injections": INJECTIONS,
    "labels": LABELS,
    "alarms": ALARMS,
}


def empty(name: str):
    """An empty pandas DataFrame with the columns and dtypes of table ``name``.

    Raises KeyError for an unknown table name.
    """
    return TABLES[name].empty_table().to_pandas()


def to_table(name: str, df) -> pa.Table:
    """Convert a pandas DataFrame to the Arrow table of ``name``, casting columns.

    Raises ValueError naming the missing column when ``df`` lacks one.
    """
    schema = TABLES[name]
    for col, fill in OPTIONAL.get(name, {}).items():
        if col not in df.columns:
            df = df.assign(**{col: fill})
    missing = [f.name for f in schema if f.name not in df.columns]
    if missing:
        raise ValueError(f"{name} table: missing column(s) {', '.join(missing)}")
    return pa.Table.from_pandas(df[[f.name for f in schema]], schema=schema, preserve_index=False)


def _kind(t: pa.DataType) -> str:
    """A column type as what it holds: text, integer, number, true/false (or its name)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_floating(t):
        return "number"
    if pa.types.is_boolean(t):
        return "true/false"
    return str(t)


def mismatch(have: pa.Schema, want: pa.Schema, optional=()) -> str | None:
    """The first reason the columns ``have`` (a Parquet file's) cannot be read as the
    table ``want``: a column of ``want`` that is missing (unless in ``optional``) or
    holds another kind of value (text, integer, number, true/false; an integer column
    may stand for a number, an all-null column for any). None when it fits.

    Readers check this before a column is used, so a file of another table (a
    ``labels`` file swapped for an ``injections`` one) is refused in one line, never a
    KeyError deep in scoring."""
    for f in want:
        i = have.get_field_index(f.name)
        if i < 0:
            if f.name in optional:
                continue
            return f"column {f.name!r} is missing"
        got, need = _kind(have.field(i).type), _kind(f.type)
        if got != need and not pa.types.is_null(have.field(i).type) and not (need == "number" and got == "integer"):
            return f"column {f.name!r} holds {got}, not {need}"
    return None


def json_safe(x):
    """``x`` made fit for strict JSON: NaN/inf as None, numpy scalars as Python
    numbers, mapping keys as str; lists, tuples and dicts converted recursively."""


    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if math.isfinite(x) else None
    return x
