"""The dataset folder layout (DESIGN.md "Scoring metrics"), and reading it run by run.

::

    NAME/
      README.md            dataset card (Hugging Face YAML header + datasheet)
      croissant.json       MLCommons Croissant metadata
      schema.json          the tables' columns, types and units
      splits.json          {"seed", "test_fraction", "train": [run ids], "test": [...]}
      runs.json            per run: run_id, meta.json fields, fault types, label counts
      build.json           the card texts and split settings it was built with (for relabel)
      MANIFEST.sha256      sha256sum lines of every other file
      data/<table>/run=<run_id>/part-0.parquet   table in steps, host, injections, labels
      campaign/            the campaign and scenario files that made it
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from faultlab import safefs, schema
from faultlab.errors import BadInput
from faultlab.rundata import RunData

TABLES = ("steps", "host", "injections", "labels")
SPLITS = ("train", "test")

#: per table column, its meaning and unit (schema.json, the card and croissant.json)
COLUMN_DOCS = {
    "run_id": "run identifier (one run = one training job)",
    "rank": "global rank of the training process",
    "node": "testbed node the rank ran on",
    "peer_group": "ranks that do the same work (data-parallel group or pipeline stage)",
    "step": "training step (0-based)",
    "t_start": "unix time (s) the step began on the rank",
    "compute_s": "forward + backward + optimizer (+ checkpoint) time, s, local work only",
    "comm_s": "time inside the gradient all-reduce incl. waiting for peers, s",
    "step_s": "whole step, s",
    "gc_s": "Python GC time during the step, s (NaN if not measured)",
    "tokens": "tokens the rank processed (sequence-length knob), NaN otherwise",
    "dataloader_s": "building / reading the step's batch, s (NaN if not measured)",
    "ts": "unix time (s) of the sample",
    "metric": "metric name, unit in the name (cpu_util_pct, net_tx_bytes_per_s, tcp_rtt_ms:n2 ...)",
    "value": "metric value, in the unit its name gives",
    "fault_id": "identifier of the injected fault",
    "fault_type": "fault type (nic-slow, cpu-contention, process-pause, io-slow, mem-bw, gc-storm, ...)",
    "target": "what on the node was hit (interface, rank, PIDs)",
    "start_ts": "unix time (s) the interval began",
    "end_ts": "unix time (s) the interval ended",
    "params": "fault parameters, JSON with units in the keys",
    "severity": "type-specific severity of the fault",
    "status": "how the fault ended: reverted | expired | revert-failed",
    "verified": "the measured check said the fault was in force",
    "evidence": "JSON: the measurements behind the row",
    "component": "what was slowed: rank:N, node:NAME or job",
    "component_kind": "rank | node | job",
    "start_step": "first step of the label",
    "end_step": "last step of the label",
    "slowdown": "ratio of slowed to baseline time (1.0 = not slowed)",
    "views": "labeler views that flagged it: temporal, peer, temporal+peer",
    "confidence": "labeler confidence, 0..1",
    "source": "injected (matches a fault) | observed (no fault) | injected-unmanifested (a fault that slowed nothing)",
    "cause": "fault type or inferred cause, or unknown",
}



def open_output(path: Path, field: str) -> safefs.TrustedDir:
    """The output folder ``path`` of a dataset command, made when missing and opened
    from ``/`` with no symlink on any component (``safefs.open_dir_nofollow``): what is
    written relative to it cannot be redirected by a name someone else swaps or links.

    Raises BadInput (``field``) when it cannot be made (a component is a file, no
    permission, a read-only file system): nothing is written then; UntrustedPath (one
    line naming it) when a component is a symlink."""
    try:
        return safefs.open_dir_nofollow(path, create=True, mode=0o755)
    except safefs.NotAFolder as e:
        raise BadInput(f"cannot make {path}: {e.path} is not a folder", field=field, fix="give a writable folder") from None
    except safefs.UntrustedPath:
        raise
    except OSError as e:
        raise BadInput(f"cannot make {path}: {e.strerror or e}", field=field, fix="give a writable folder") from None


def part_path(root: Path, table: str, run_id: str) -> Path:
    return root / "data" / table / f"run={run_id}" / "part-0.parquet"


class Dataset:
    """A dataset folder at ``path``.

    Raises BadInput (field ``--dataset``) when the folder has no ``splits.json`` or
    it is malformed."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        p = self.path / "splits.json"
        if not p.is_file():
            raise BadInput(f"{self.path} is not a faultlab dataset (no splits.json)", field="--dataset",
                           fix="give a folder written by faultlab dataset build")
        try:
            sp = json.loads(p.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise BadInput(f"{p} could not be read ({type(e).__name__}: {e})", field="splits.json") from None
        if not isinstance(sp, dict) or not all(isinstance(sp.get(s), list) for s in SPLITS):
            raise BadInput(f"{p} needs lists 'train' and 'test'", field="splits.json", fix="rebuild with faultlab dataset build")
        self.splits = {s: [str(x) for x in sp[s]] for s in SPLITS}
        self.seed = sp.get("seed")

    @property
    def name(self) -> str:
        return self.path.name

    def run_ids(self, split: str = "test") -> list[str]:
        """Run ids of ``split`` (train | test | all). Raises BadInput for another name."""
        if split == "all":
            return self.splits["train"] + self.splits["test"]
        if split not in SPLITS:
            raise BadInput(f"unknown split {split!r}", field="--split", fix="one of test, train, all")
        return list(self.splits[split])

    def runs_info(self) -> list[dict]:
        """runs.json (read once)."""
        if not hasattr(self, "_runs_info"):
            p = self.path / "runs.json"
            try:
                info = json.loads(p.read_text()) if p.is_file() else []
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                raise BadInput(f"{p} could not be read ({type(e).__name__}: {e})", field="runs.json",
                               fix="restore it (faultlab dataset verify names every changed file) or rebuild the dataset") from None
            if not isinstance(info, list) or not all(isinstance(r, dict) for r in info):
                raise BadInput(f"{p} is not a list of run objects", field="runs.json",
                               fix="restore it (faultlab dataset verify names every changed file) or rebuild the dataset")
            self._runs_info = info
        return self._runs_info

    def read_run(self, run_id: str):
        """The :class:`faultlab.rundata.RunData` of one run. Raises BadInput naming
        the file that is missing or cannot be read."""
        frames = {}
        for t in TABLES:
            p = part_path(self.path, t, run_id)
            if not p.is_file():
                if t == "host":
                    frames[t] = schema.empty(t)
                    continue
                raise BadInput(f"{p} is missing", field=str(p.relative_to(self.path)), fix="faultlab dataset verify names every changed file")
            try:
                with pq.ParquetFile(p) as f:  # one file: no dataset discovery (pq.read_table's)
                    frames[t] = f.read().to_pandas()
            except (pa.ArrowException, OSError, ValueError) as e:
                raise BadInput(f"{p} could not be read as Parquet ({e})", field=str(p.relative_to(self.path))) from None
        meta = next((r for r in self.runs_info() if str(r.get("run_id")) == run_id), {})
        return RunData(run_id, frames["steps"], frames["host"], frames["labels"], frames["injections"], meta)

    def iter_runs(self, split: str = "test") -> Iterator:
        for rid in self.run_ids(split):
            yield self.read_run(rid)
