"""The dataset folder layout (docs/datasets.md), and reading it run by run.

::

    NAME/
      README.md            dataset card (Hugging Face YAML header + datasheet)
      croissant.json       MLCommons Croissant metadata
      schema.json          the tables' columns, types and units
      splits.json          {"seed", "test_fraction", "train": [run ids], "test": [...]}
      runs.json            per run: run_id, meta.json fields, fault types, label counts
      build.json           the card texts and split settings it was built with (for relabel)
      MANIFEST.sha256      sha256sum lines of every other file
      CITATION.cff         how to cite it (Citation File Format 1.2)
      data/<table>/run=<run_id>/part-0.parquet   table in steps, host, injections, labels,
                           step_labels (is_straggler per rank and step, faultlab.datasets.steplabels)
      campaign/            the campaign and scenario files that made it
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import weakref
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from faultlab import inputfile, parquetbound, safefs, schema
from faultlab.datasets import registry
from faultlab.datasets.steplabels import DATASET_LABELS, STEP_LABELS
from faultlab.errors import BadInput, printable
from faultlab.rundata import RunData

TABLES = ("steps", "host", "injections", "labels", "step_labels")
#: the tables of a run (faultlab.rundata.RunData); step_labels derive from steps and labels
RUN_TABLES = ("steps", "host", "injections", "labels")


def table_schema(table: str) -> pa.Schema:
    """The Arrow schema of a dataset table: faultlab.schema's, the labels with their
    ``label_id``, and ``step_labels`` (faultlab.datasets.steplabels)."""
    if table == "labels":
        return DATASET_LABELS
    if table == "step_labels":
        return STEP_LABELS
    return schema.TABLES[table]
SPLITS = ("train", "test")
#: columns a table file may lack (written before they were added): faultlab.schema's
#: optional ones, and the labels' ``label_id`` (derived from the row's place)
OPTIONAL_COLUMNS = {**{t: tuple(cols) for t, cols in schema.OPTIONAL.items()}, "labels": ("label_id",)}

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
    "fault_type": "fault type (nic-slow, cpu-contention, process-pause, io-slow, mem-bw, gc-storm, ...; seq-imbalance, gc-uncoordinated, stage-imbalance, slow-shard for workload knobs)",
    "target": "what on the node was hit (interface, rank:N, PIDs; ranks:0,1,2,3 for a workload knob on several ranks)",
    "start_ts": "unix time (s) the interval began",
    "end_ts": "unix time (s) the interval ended",
    "params": "fault parameters, JSON with units in the keys",
    "severity": "type-specific severity of the fault",
    "kind": "injected (a fault injector) | workload (a straggler knob of the workload: seq-imbalance, gc-uncoordinated, gc-planned, stage-imbalance, slow-shard)",
    "status": "how the fault ended: reverted | expired | revert-failed | run-end (a workload knob in force to the end of the run)",
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
    "label_id": "the label's id, RUN_ID#K (K: its row in the run's labels, in start order)",
    "is_straggler": "an effect label (injected or observed) of this rank or of the job covers the step's start",
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


#: what to do about a dataset file that cannot be read or has the wrong shape
FIX = "rebuild the dataset with faultlab dataset build, or restore it: faultlab dataset verify names what changed"


def _read_json(path: Path, shape_ok: Callable[[object], bool], shape: str, root_fd: int | None = None):
    """The JSON of the dataset file ``path`` when ``shape_ok`` accepts it, read with no
    link followed, only when a regular file of at most ``inputfile.JSON_BYTES``
    (:func:`faultlab.safefs.read_below`). Raises BadInput (field: the file's name)
    naming the file when it is a link, no regular file or larger, cannot be read, is
    not JSON, nests too deeply or is too large to parse, or is not ``shape``.
    ``root_fd``: the folder ``path.parent`` named when it was opened (read instead)."""
    try:
        data = safefs.parse_json(safefs.read_below(path.parent, path.name, inputfile.JSON_BYTES, root_fd), str(path))
    except safefs.UntrustedPath as e:
        raise BadInput(e.reason, field=path.name, fix=FIX) from None
    except json.JSONDecodeError as e:
        raise BadInput(f"{path} is not JSON ({e})", field=path.name, fix=FIX) from None
    except UnicodeDecodeError as e:
        raise BadInput(f"{path} is not UTF-8 text (byte {e.start})", field=path.name, fix=FIX) from None
    except ValueError as e:  # parse_json's: too deep or too large, naming the file
        raise BadInput(str(e), field=path.name, fix=FIX) from None
    except OSError as e:
        raise BadInput(f"{path} could not be read ({e.strerror or e})", field=path.name, fix=FIX) from None
    if not shape_ok(data):
        raise BadInput(f"{path} is not {shape}", field=path.name, fix=FIX)
    return data


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _integer(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _strings(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _splits_ok(d) -> bool:
    return (isinstance(d, dict) and all(_strings(d.get(s)) for s in SPLITS)
            and (d.get("seed") is None or _integer(d.get("seed")))
            and _number(d.get("test_fraction", 0.3)))


def _run_ok(r) -> bool:
    return (isinstance(r, dict) and isinstance(r.get("run_id"), str) and _strings(r.get("fault_types", []))
            and isinstance(r.get("labels_by_source", {}), dict)
            and all(isinstance(k, str) and _number(v) for k, v in r.get("labels_by_source", {}).items())
            and _number(r.get("duration_s", 0)))


def _build_ok(d) -> bool:
    return (isinstance(d, dict) and all(isinstance(d.get(k, ""), str) for k in ("description", "license", "note"))
            and _number(d.get("test_fraction", 0.3)) and _integer(d.get("seed", 0)) and isinstance(d.get("import") or "", str))


def _plain_name(rid: str) -> bool:
    """A run id that names one folder ``run=ID``: one path component of
    ``[A-Za-z0-9._-]``, not ``.`` or ``..`` (:func:`faultlab.safefs.is_plain_name`),
    at most 255 characters: run ids are joined to table paths."""
    return safefs.is_plain_name(rid) and len(rid) <= 255


def read_splits(path: Path, root_fd: int | None = None) -> dict:
    """``splits.json`` of the dataset folder ``path``: an object with lists of run ids
    ``train`` and ``test``, an integer ``seed`` (or null) and a number
    ``test_fraction``; each run id a plain name (one path component of ``[A-Za-z0-9._-]``, at most 255
    characters) listed once in one split. Raises BadInput naming the file (and the run
    listed twice or in both splits) otherwise."""
    sp = _read_json(Path(path) / "splits.json", _splits_ok,
                    "an object with lists of run ids 'train' and 'test', an integer 'seed' and a number 'test_fraction'", root_fd)
    seen: dict[str, str] = {}
    for split in SPLITS:
        for rid in sp[split]:
            if not _plain_name(rid):
                raise BadInput(f"run id {printable(rid, 80)!r} of {split} in {Path(path) / 'splits.json'} is not a plain name (one path component of [A-Za-z0-9._-], not . or ..)",
                               field="splits.json", fix=FIX)
            if rid in seen:
                where = f"twice in {split}" if seen[rid] == split else f"in both {seen[rid]} and {split}"
                raise BadInput(f"run {rid} is listed {where} in {Path(path) / 'splits.json'}: a run belongs to one split, once",
                               field="splits.json", fix=FIX)
            seen[rid] = split
    return sp


def read_runs(path: Path, root_fd: int | None = None) -> list[dict]:
    """``runs.json`` of the dataset folder ``path``: a list of run objects, each with a
    string ``run_id`` and, where present, a list of strings ``fault_types``, an object
    of counts ``labels_by_source`` and a number ``duration_s``. Raises BadInput naming
    the file otherwise."""
    runs = _read_json(Path(path) / "runs.json", lambda d: isinstance(d, list) and all(map(_run_ok, d)),
                      "a list of run objects (run_id, fault_types, labels_by_source, duration_s)", root_fd)
    seen = set()
    for r in runs:
        if not _plain_name(r["run_id"]):
            raise BadInput(f"run id {printable(r['run_id'], 80)!r} in {Path(path) / 'runs.json'} is not a plain name (one path component of [A-Za-z0-9._-], not . or ..)",
                           field="runs.json", fix=FIX)
        if r["run_id"] in seen:
            raise BadInput(f"run {printable(r['run_id'], 80)} is listed twice in {Path(path) / 'runs.json'}", field="runs.json", fix=FIX)
        seen.add(r["run_id"])
    return runs


def read_build(path: Path, root_fd: int | None = None) -> dict:
    """``build.json`` of the dataset folder ``path``: an object whose ``description``,
    ``license`` and ``note`` are strings, ``test_fraction`` a number, ``seed`` an
    integer and ``import`` (the format of a public collection) a string or null, where
    present. Raises BadInput naming the file otherwise. ``root_fd``: the folder's
    descriptor (:attr:`Dataset.fd`), read below instead of ``path`` as named now."""
    return _read_json(Path(path) / "build.json", _build_ok,
                      "an object of strings description, license, note, a number test_fraction, an integer seed and a string or null import",
                      root_fd)


def read_croissant(path: Path, root_fd: int | None = None) -> dict:
    """``croissant.json`` of the dataset folder ``path``: an object whose
    ``description``, where present, is a string. Raises BadInput naming the file
    otherwise. ``root_fd``: as :func:`read_build`'s."""
    return _read_json(Path(path) / "croissant.json", lambda d: isinstance(d, dict) and isinstance(d.get("description", ""), str),
                      "an object with a string 'description'", root_fd)


#: the most rows, and decoded bytes, a dataset's part file may state in its footer (a
#: run's table is well under both): a file that states more (a Parquet bomb: a few MB
#: of run-length-encoded values that decode to GBs) is refused before it is decoded
MAX_PART_ROWS = 1 << 25
MAX_PART_BYTES = 1 << 31


class _OwnedParquet(pq.ParquetFile):
    """A ParquetFile of a file it owns (``owner``, the file object pyarrow does not
    read itself): closing it closes the file too."""

    def __init__(self, source, owner, **kw):
        super().__init__(source, **kw)
        self._raw = owner

    def close(self, force: bool = False) -> None:
        super().close(force=force)
        self._raw.close()


def _hashed_copy(raw, p: Path, rel: str, want: str | None):
    """A private copy of the part ``raw`` (open as ``p``, closed here), in an anonymous
    memory file no other process holds, whose sha256 is ``want``: a part is read as the
    bytes the manifest check vouched for, never as its owner rewrote them after. Raises
    BadInput naming it when it differs, is not listed (``want`` None) or holds more than
    :data:`MAX_PART_BYTES` (what a part may decode to)."""
    h, copy = hashlib.sha256(), os.fdopen(os.memfd_create("faultlab-part", os.MFD_CLOEXEC), "w+b")
    with raw:
        left = MAX_PART_BYTES + 1
        while left > 0 and (chunk := raw.read(min(1 << 20, left))):
            h.update(chunk)
            copy.write(chunk)
            left -= len(chunk)
    why = ("is not listed in MANIFEST.sha256" if want is None else f"holds more than {MAX_PART_BYTES} bytes" if left <= 0
           else "changed since MANIFEST.sha256 was checked (replaced or rewritten while it was read)" if h.hexdigest() != want else None)
    if why is not None:
        copy.close()
        raise BadInput(f"{p} {why}", field=rel, fix=FIX)
    copy.seek(0)
    return copy


def _check_footer(p: Path, rel: str, held: parquetbound.Held) -> None:
    """Raise BadInput naming the part file ``p`` (held open as ``held``) when its footer
    states more than :data:`MAX_PART_ROWS` rows, more than :data:`MAX_PART_BYTES`
    decoded bytes, or more than ``parquetbound.DECODED_RATIO`` times its size
    (:func:`faultlab.parquetbound.footer_over`)."""
    over = parquetbound.footer_over(held.metadata, held.size, MAX_PART_ROWS, MAX_PART_BYTES)
    if over:
        raise BadInput(f"{p}: {over}: more than a dataset's part file holds", field=rel, fix=FIX)


def _check_text_decoded(p: Path, rel: str, held: parquetbound.Held) -> None:
    """Raise BadInput naming the part file ``p`` when its text columns decode to more
    than :data:`MAX_PART_BYTES` (:func:`faultlab.parquetbound.text_over`: the footer's
    sizes count a dictionary-encoded column as stored, and a 10 KB part of 200,000 rows
    naming one 1 MiB peer group had ``score`` allocate 200 GB)."""
    if parquetbound.text_over(held, MAX_PART_BYTES):
        raise BadInput(f"{p}: its text columns decode to more than {MAX_PART_BYTES} bytes (a dictionary value every row names)",
                       field=rel, fix=FIX)


class Dataset:
    """The published dataset named ``path`` when it is a bare name that one of the
    registry's folders holds (:func:`faultlab.datasets.registry.published`:
    ``$FAULTLAB_DATASETS``, else the installed package's data, then ``./datasets``;
    it wins over a folder of that name in the working folder), else the dataset
    folder at ``path``. ``path`` as the user typed it: ``./NAME`` (a ``str``; a
    ``pathlib.Path`` drops the ``./``) names the folder. ``lookup=False``: ``path``
    is the folder, never a name (a caller that has resolved the name already and
    holds a Path, in which ``./NAME`` would read as the bare name ``NAME``).

    Raises BadInput (field ``--dataset``) when the folder has no ``splits.json`` and
    no published dataset has that name, and naming the file when it is malformed
    (:func:`read_splits`).

    The folder is held by a descriptor from here on (:attr:`fd`), and every file of it
    is read below that descriptor: a build or relabel of the same name that swaps a
    new dataset in meanwhile never has one command read part of each (an export or a
    score of files of two datasets, under the first one's checked manifest); when the
    held folder is removed under the reader, the read is one line saying so."""

    def __init__(self, path: str | Path, *, lookup: bool = True):
        # a published name over a folder of the working folder
        self.path = (registry.published(path) if lookup else None) or Path(path)
        if not (self.path / "splits.json").is_file():
            # only a bare name as given is looked up by name: Path("./NAME") is "NAME"
            if lookup and registry.is_bare_name(path) and not self.path.exists():
                self.path = registry.find(path)
            else:
                raise BadInput(f"{self.path} is not a faultlab dataset (no splits.json)", field="--dataset",
                               fix="give a folder written by faultlab dataset build")
        self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        weakref.finalize(self, os.close, self.fd)
        sp = read_splits(self.path, self.fd)
        self.splits = {s: list(sp[s]) for s in SPLITS}
        self.seed = sp.get("seed")
        self.pinned: dict[str, str] | None = None

    def pin(self, digests: dict[str, str]) -> None:
        """Read every part from now on only as the bytes whose sha256 ``digests`` names
        (relative path -> hex: what :func:`faultlab.datasets.manifest.require_intact`
        checked): :meth:`open_part` hashes a private copy and reads that copy. The
        dataset's owner may rename another table over a part, or rewrite it in place,
        after the check: its scores were recorded under the manifest's digest."""
        self.pinned = dict(digests)

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
        """runs.json (read once; none when the file is missing). Raises BadInput
        naming it when it is malformed (:func:`read_runs`) or does not name the runs
        of splits.json, each once."""
        if not hasattr(self, "_runs_info"):
            runs = read_runs(self.path, self.fd) if self.has("runs.json") else []
            ids, split_ids = {r["run_id"] for r in runs}, set(self.run_ids("all"))
            if runs and ids != split_ids:
                rid, where = (min(ids - split_ids), "runs.json but in no split") if ids - split_ids else (min(split_ids - ids), "a split but not in runs.json")
                raise BadInput(f"run {printable(rid, 80)} of {self.path} is in {where}", field="runs.json", fix=FIX)
            self._runs_info = runs
        return self._runs_info

    def has(self, name: str) -> bool:
        """Whether the held folder has an entry ``name`` that is no folder (a link or
        anything else is refused when read)."""
        try:
            st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return not stat.S_ISDIR(st.st_mode)

    def _replaced(self) -> BadInput | None:
        """The error to give when the held folder was removed or no longer has the
        dataset's name (another command swapped a dataset in), else None."""
        mine = os.fstat(self.fd)
        try:
            now = os.stat(self.path)
        except OSError:
            now = None
        if mine.st_nlink and now is not None and (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
            return None
        return BadInput(f"{self.path} was replaced or removed while it was read (a dataset build --force or relabel of it ran meanwhile)",
                        field="--dataset", fix="run the command again once that one has ended")

    def check(self) -> int:
        """Check that the dataset's files fit together, reading no table's data but
        its ``run_id`` column: splits.json and runs.json name the same runs, each
        once (:meth:`runs_info`), and every run has each table, whose columns are that
        table's and whose rows are that run's (:meth:`open_part`; ``host`` and
        ``step_labels`` may be absent). Returns the number of table files checked.

        Raises BadInput naming the first file that does not fit (and the column)."""
        self.runs_info()
        n = 0
        for rid in self.run_ids("all"):
            for t in TABLES:
                if (f := self.open_part(t, rid)) is not None:
                    f.close()
                    n += 1
        return n

    def open_part(self, table: str, run_id: str) -> pq.ParquetFile | None:
        """The Parquet file of ``table`` for run ``run_id``, checked before any
        column is used: its columns are that table's
        (:func:`faultlab.schema.mismatch` against :func:`table_schema`, less
        :data:`OPTIONAL_COLUMNS`) and its
        ``run_id`` column holds ``run_id`` only. None for an absent ``host`` or
        ``step_labels`` file (a run may have none).

        Raises BadInput (field: the file, relative to the dataset) when the file is
        missing, not Parquet, of another table or of another run: a file swapped for
        another, even under a rewritten manifest, is refused here, the one place
        every reader of a dataset's tables goes through."""
        p = part_path(self.path, table, run_id)
        rel = str(p.relative_to(self.path))
        try:
            raw = safefs.open_below(self.path, rel, root_fd=self.fd)  # no link followed below the dataset folder, a regular file only
        except FileNotFoundError:
            if (gone := self._replaced()) is not None:
                raise gone from None
            if table in ("host", "step_labels"):
                return None
            raise BadInput(f"{p} is missing", field=rel, fix="faultlab dataset verify names every changed file") from None
        except safefs.UntrustedPath as e:
            raise BadInput(e.reason, field=rel, fix=e.fix) from None
        if self.pinned is not None:
            raw = _hashed_copy(raw, p, rel, self.pinned.get(rel))
        f = None
        try:
            held = parquetbound.Held(raw)  # one file, checked and read through one descriptor and footer
            _check_footer(p, rel, held)
            _check_text_decoded(p, rel, held)
            f = held(_OwnedParquet, owner=raw)  # no dataset discovery (pq.read_table's)
            why = schema.mismatch(f.schema_arrow, table_schema(table), optional=OPTIONAL_COLUMNS.get(table, ()))
            if why is None:
                ids = f.read(columns=["run_id"]).column(0).unique().to_pylist()
                if ids and ids != [run_id]:
                    other = next(str(x) for x in ids if x != run_id)
                    why = f"its rows are of run {printable(other, 80)}, not of {run_id}"
        except (pa.ArrowException, OSError, ValueError, BadInput) as e:
            if f is not None:
                f.close()
            raw.close()
            if isinstance(e, BadInput):
                raise
            raise BadInput(f"{p} could not be read as Parquet ({e})", field=rel, fix=FIX) from None
        if why is not None:
            f.close()
            raise BadInput(f"not the {table} table of run {run_id}: {why}", field=rel, fix=FIX)
        return f

    def read_run(self, run_id: str):
        """The :class:`faultlab.rundata.RunData` of one run. Raises BadInput naming
        the file that is missing, cannot be read, is a link or no regular file, or is
        not that run's table (:meth:`open_part`), or the run id when it is not a plain
        name."""
        if not _plain_name(run_id):
            raise BadInput(f"{self.path}: run id {printable(str(run_id), 80)!r} is not a plain name (one path component of [A-Za-z0-9._-])",
                           field="run_id", fix=FIX)
        frames = {}
        for t in RUN_TABLES:
            f = self.open_part(t, run_id)
            if f is None:
                frames[t] = schema.empty(t)
                continue
            try:
                with f:
                    frames[t] = f.read().to_pandas()
            except (pa.ArrowException, OSError, ValueError) as e:
                p = part_path(self.path, t, run_id)
                raise BadInput(f"{p} could not be read as Parquet ({e})", field=str(p.relative_to(self.path)), fix=FIX) from None
        meta = next((r for r in self.runs_info() if str(r.get("run_id")) == run_id), {})
        return RunData(run_id, frames["steps"], frames["host"], frames["labels"], frames["injections"], meta)

    def iter_runs(self, split: str = "test") -> Iterator:
        for rid in self.run_ids(split):
            yield self.read_run(rid)
