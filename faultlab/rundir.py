"""The run directory: everything one run leaves behind, readable by a person.

Layout::

    RUN_DIR/
      meta.json          versions, host, seed, run_id, complete (bool), times
      scenario.yaml      the scenario as resolved
      events.jsonl       append-only journal: one JSON object a line, with "ts" (unix s)
      telemetry/         raw per-rank step records (JSONL), flushed as the job runs
      steps.parquet      per-rank per-step times (faultlab.schema.STEPS); a large run:
                         steps/step_block=K/part-N.parquet (faultlab.steptable)
      host.parquet       host metrics, long format (faultlab.schema.HOST)
      injections.parquet what was injected (faultlab.schema.INJECTIONS)
      labels.parquet     what the labeler found (faultlab.schema.LABELS)

A run killed half-way keeps ``meta.json`` with ``complete: false`` and its journal and
raw telemetry; ``read_steps`` falls back to the raw JSONL when no Parquet was written.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import platform
import secrets
import shutil
import socket
import stat
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from faultlab import parquetbound, safefs, schema, steprecords, steptable, workdirs
from faultlab.errors import BadInput
from faultlab.steps import unix_time


#: the largest meta.json read (bytes): faultlab writes a few KB
META_BYTES = 1 << 20
#: the largest events.jsonl read (bytes): a run journals a few lines a fault
EVENTS_BYTES = 16 << 20
#: the most bytes the text columns of one table file of a run folder may decode to
#: (:mod:`faultlab.parquetbound`; the steps table's are bounded by steptable.TEXT_BYTES)
TABLE_TEXT_BYTES = 1 << 31
#: the most rows, and decoded bytes, one table file of a run folder (not its steps
#: table: steptable.FILE_ROWS) may state in its footer, a dataset part's bounds
#: (datasets.layout.MAX_PART_ROWS): a few MB of run-length-encoded numbers decode to GBs
TABLE_ROWS = 1 << 25
TABLE_BYTES = 1 << 31


def new_run_id(name: str) -> str:
    """A run id: ``NAME-YYYYmmdd-HHMMSS-XXXX`` (local time, 4 random hex digits so
    runs started in the same second differ). Made once per run: the default run
    folder is named by it and meta.json and every table carry it."""
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


class RunDir:
    """A run directory at ``path`` (created if missing)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        #: faultlab.steprecords.Skip of the last read_raw_steps: records a node sent of ranks not placed on it
        self.steps_skipped: list = []

    # -- creation --------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | Path, *, run_id: str, scenario: dict, seed: int | None = None) -> "RunDir":
        """Make the folder, write scenario.yaml and an incomplete meta.json.

        Raises BadInput (field ``--out``) when ``path`` exists and is not empty, or
        cannot be made or written (an OSError: a read-only or missing parent, no
        space); a folder this call made is removed again then. The folder is opened
        (and made) as a trusted folder (faultlab.safefs.open_dir: no symlink on any
        component, each owned by root or us and not writable by others but a root
        sticky parent such as /tmp): what the run writes into it later by path can
        then not be redirected; else UntrustedPath naming the component."""
        rd = cls(path)
        try:
            existed = os.path.lexists(rd.path)
            with safefs.open_dir(rd.path, create=True, mode=0o755) as d:
                if existed and d.listdir():
                    raise BadInput(f"{rd.path} exists and is not empty", field="--out", fix="give a new folder; a run never writes over another")
        except safefs.NotAFolder as e:
            raise BadInput(f"cannot make {rd.path}: {e.path} is not a folder", field="--out", fix="give a writable folder") from None
        except safefs.UntrustedPath:
            raise
        except OSError as e:
            raise BadInput(f"cannot make {e.filename or rd.path}: {e.strerror or e}", field="--out", fix="give a writable folder") from None
        try:
            rd._write_first_files(run_id, scenario, seed)
        except OSError as e:
            rd._remove_first_files(folder_too=not existed)
            raise BadInput(f"cannot write {e.filename or rd.path}: {e.strerror or e}", field="--out", fix="give a writable folder with free space") from None
        return rd

    def _remove_first_files(self, *, folder_too: bool) -> None:
        """Undo a failed ``create``: what it wrote, and the folder when it made it."""
        for n in ("scenario.yaml", "meta.json", "meta.json.tmp"):
            try:
                (self.path / n).unlink(missing_ok=True)
            except OSError:
                pass
        for d in (self.path / "telemetry", self.path) if folder_too else (self.path / "telemetry",):
            try:
                d.rmdir()
            except OSError:
                pass

    def _write_first_files(self, run_id: str, scenario: dict, seed: int | None) -> None:
        rd = self
        (rd.path / "telemetry").mkdir(exist_ok=True)
        (rd.path / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
        rd.write_meta(
            {
                "run_id": run_id,
                "schema_version": schema.SCHEMA_VERSION,
                "complete": False,
                "started_ts": time.time(),
                "seed": seed,
                "host": socket.gethostname(),
                "platform": platform.platform(),
                "python": sys.version.split()[0],
                "faultlab": _version(),
            }
        )

    # -- files of the folder ---------------------------------------------------------
    def read_file(self, name: str, limit: int, fix: str) -> bytes | None:
        """The bytes of the run folder's file ``name`` (``meta.json``, ``events.jsonl``,
        ``whatif.json``...; None when absent), read as its tables are read
        (:func:`faultlab.safefs.read_below`): no link followed below the run folder,
        only a regular file (never a FIFO or device), at most ``limit`` bytes. The
        folder may be another user's, who may plant anything at that name.

        Raises BadInput (field ``name``) naming the file: a link, not a regular file,
        over ``limit`` bytes (nothing of it read), or unreadable (fix ``fix``)."""
        try:
            return safefs.read_below(self.path, name, limit)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except safefs.UntrustedPath as e:
            raise BadInput(e.reason, field=name, fix=e.fix) from None
        except OSError as e:
            raise BadInput(f"{self.path / name} could not be read ({e.strerror or e})", field=name, fix=fix) from None

    # -- meta ------------------------------------------------------------------------
    @property
    def meta(self) -> dict:
        """meta.json as a dict ({} when absent), read by :meth:`read_file` (at most
        :data:`META_BYTES`).

        Raises BadInput (field ``meta.json``) when it is not a JSON object or cannot be
        read (a link, no regular file, too large)."""
        p = self.path / "meta.json"
        fix = "restore it, or remove it and the folder name becomes the run_id"
        data = self.read_file("meta.json", META_BYTES, fix)
        if data is None:
            return {}
        try:
            m = safefs.parse_json(data, str(p))
        except ValueError as e:  # bad UTF-8, bad or too deeply nested JSON
            raise BadInput(f"{p} could not be read ({type(e).__name__}: {e})", field="meta.json", fix=fix) from None
        if not isinstance(m, dict):
            raise BadInput(f"{p} holds a JSON {type(m).__name__}, not an object", field="meta.json", fix=fix)
        return m

    def write_meta(self, meta: dict) -> None:
        """Replace meta.json (a fresh temporary renamed over it, no link followed)."""
        safefs.write_file_nofollow(self.path / "meta.json", json.dumps(meta, indent=2, sort_keys=True), 0o644)

    def update_meta(self, **fields) -> None:
        m = self.meta
        m.update(fields)
        self.write_meta(m)

    @property
    def run_id(self) -> str:
        return self.meta.get("run_id", self.path.name)

    def time_origin(self, steps: pd.DataFrame | None = None) -> float:
        """The run's time origin, unix s: every printed or plotted run time ("+12.3s")
        counts from it. It is the first training step's start as the runner recorded
        it (meta.json ``t0``, else the ``training-start`` event), else the earliest
        ``t_start`` of ``steps`` (read when not given), else meta's ``started_ts``.
        Raises BadInput naming the file when the time it gives is a number but no unix
        time (:func:`faultlab.steps.unix_time`: 1e400 read as infinity, -1e300): every
        run time then ended the report in a traceback."""
        m = self.meta
        if isinstance(m.get("t0"), (int, float)):
            return self._origin(m["t0"], "meta.json", "t0")
        for ev in self.events():
            if ev.get("event") == "training-start" and isinstance(ev.get("t0"), (int, float)):
                return self._origin(ev["t0"], "events.jsonl", "training-start t0")
        steps = self.read_table("steps") if steps is None else steps
        if len(steps):
            return float(steps["t_start"].min())
        return self._origin(m.get("started_ts") or 0.0, "meta.json", "started_ts")

    def _origin(self, v, name: str, what: str) -> float:
        t = unix_time(v)
        if t is None:
            raise BadInput(f"{self.path / name}: {what} {v!r:.24} is no unix time (seconds from 0 to 1e11)", field=name,
                           fix="restore it, or remove the value")
        return t

    def finish(self, **fields) -> None:
        """Mark the run complete (meta.json ``complete: true``)."""
        self.update_meta(complete=True, finished_ts=time.time(), **fields)

    # -- journal ---------------------------------------------------------------------
    def event(self, kind: str, **fields) -> dict:
        """Append one event to events.jsonl (flushed and fsynced) and return it."""
        ev = {"ts": time.time(), "event": kind, **fields}
        safefs.append_file_nofollow(self.path / "events.jsonl", json.dumps(ev, default=str) + "\n")
        return ev

    def events(self) -> list[dict]:
        """The journal's events in order ([] when absent), read by :meth:`read_file` (at
        most :data:`EVENTS_BYTES`); a torn last line (a killed run) ends it. Raises
        BadInput (field ``events.jsonl``) when it cannot be read."""
        p = self.path / "events.jsonl"
        data = self.read_file("events.jsonl", EVENTS_BYTES, "restore it, or remove it (the run's journal)")
        out = []
        for line in (data or b"").decode("utf-8", errors="replace").splitlines():
            try:
                out.append(safefs.parse_json(line, f"{p} line {len(out) + 1}"))
            except ValueError:
                break  # a torn last line of a killed run
        return out

    # -- tables ----------------------------------------------------------------------
    def table_path(self, name: str) -> Path:
        return self.path / f"{name}.parquet"

    def write_table(self, name: str, df: pd.DataFrame) -> Path:
        """Write ``df`` as ``NAME.parquet`` with the schema of table ``name`` (a fresh
        temporary renamed over it, no link followed); a ``steps`` table of
        :data:`faultlab.steptable.PARTITION_ROWS` rows or more as the partitioned
        layout (:func:`faultlab.steptable.write_steps`)."""
        if name == "steps" and len(df) >= steptable.PARTITION_ROWS:
            return steptable.write_steps(self.path, df)
        p = self.table_path(name)
        buf = pa.BufferOutputStream()
        pq.write_table(schema.to_table(name, df), buf)
        safefs.write_file_nofollow(p, buf.getvalue().to_pybytes(), 0o644)
        stale = self.path / steptable.STEPS_DIR
        if name == "steps" and stale.is_dir() and not stale.is_symlink():  # the other layout
            shutil.rmtree(stale)
        return p

    def read_table(self, name: str, max_rows: int | None = None) -> pd.DataFrame:
        """Read table ``name``; an empty frame with the right columns when absent;
        a stored steps table of at most ``max_rows`` rows
        (:func:`faultlab.steptable.iter_blocks`).

        Raises BadInput naming the file (``NAME.parquet``) when it cannot be read (not
        Parquet, truncated, unreadable), or the steps table past ``max_rows``; see also
        :meth:`read_raw_steps` and :attr:`meta`."""
        p = self.table_path(name)
        src = steptable.steps_source(self.path) if name == "steps" else None
        if src is not None:
            return steptable.read_table(src, max_rows=max_rows)
        if p.exists() or p.is_symlink():
            try:
                with safefs.open_below(self.path, p.name) as f:  # a regular file, no link followed; checked and read as one file
                    held = parquetbound.Held(f)
                    over = parquetbound.footer_over(held.metadata, held.size, TABLE_ROWS, TABLE_BYTES)
                    if over:  # before anything is decoded, the text check's dictionary indices too
                        raise BadInput(f"{p}: {over}: more than a run's table holds", field=p.name, fix="restore the file faultlab wrote")
                    if parquetbound.text_over(held, TABLE_TEXT_BYTES):  # before a dictionary value is decoded for every row
                        raise BadInput(f"{p}: its text columns decode to more than {TABLE_TEXT_BYTES} bytes (a dictionary value every row names)",
                                       field=p.name, fix="restore the file faultlab wrote")
                    return held().read().to_pandas()
            except safefs.UntrustedPath as e:
                raise BadInput(e.reason, field=p.name, fix=e.fix) from None
            except (pa.ArrowException, OSError, ValueError) as e:
                raise unreadable(p, e) from None
        if name == "steps":
            return self.read_raw_steps()
        if name == "injections":
            return self.read_journal_injections()
        return schema.empty(name)

    def read_journal_injections(self) -> pd.DataFrame:
        """Injections rebuilt from events.jsonl (for a run killed before it wrote
        injections.parquet): a reverted fault's row as recorded at its revert; a fault
        with no revert event was ended by its lease (status ``expired``, end_ts the
        lease deadline is not known here: NaN)."""
        rows, open_ = [], {}
        for ev in self.events():
            if ev.get("event") == "inject":
                open_[ev["fault_id"]] = ev
            elif ev.get("event") == "revert" and "row" in ev:
                rows.append(ev["row"])
                open_.pop(ev.get("fault_id"), None)
        for fid, ev in open_.items():
            rows.append({
                "run_id": self.run_id, "fault_id": fid, "fault_type": ev.get("type"), "node": ev.get("node"),
                "target": ev.get("target"), "start_ts": ev.get("start_ts", ev["ts"]), "end_ts": float("nan"),
                "params": json.dumps(ev.get("params", {}), sort_keys=True), "severity": float(ev.get("severity") or "nan"),
                "status": "expired", "verified": bool((ev.get("verify") or {}).get("ok", False)),
                "evidence": json.dumps({"verify": ev.get("verify")}, default=str),
            })
        if not rows:
            return schema.empty("injections")
        return schema.to_table("injections", pd.DataFrame(rows)).to_pandas()

    def telemetry_dir(self) -> Path:
        return self.path / "telemetry"

    def read_raw_steps(self) -> pd.DataFrame:
        """Merge the raw per-rank JSONL step records, sorted by step, then rank: the
        files root's own ranks wrote (``telemetry/steps-*.jsonl``) and those collected
        from each node (``telemetry/NODE/steps-*.jsonl``), parsed in bounded memory
        (faultlab.steprecords). A node's file keeps the records of the ranks the run
        placed on it (meta ``placement``), ``node`` set to it; the other records are
        counted in :attr:`steps_skipped` (faultlab.steprecords.Skip, one line each).

        Raises:
            BadInput (field ``telemetry/steps-*.jsonl``, or the column) naming the file
            when it cannot be read, a record is not a faultlab.schema.STEPS object or
            misses a column, a value does not fit its type, or a bound is passed.
        """
        sources = [steprecords.Source(p, root=self.path) for p in sorted(self.telemetry_dir().glob("steps-*.jsonl"))]
        placement = self.meta.get("placement") or {}
        placement = placement if isinstance(placement, dict) else {}
        for node, folder in self.node_telemetry_dirs():
            ranks = frozenset(int(r) for r in placement.get(node, []))
            sources += [steprecords.Source(p, node, ranks, root=self.path) for p in sorted(folder.glob("steps-*.jsonl"))]
        tbl, self.steps_skipped = steprecords.read(sources, self.run_id)
        return tbl.to_pandas().sort_values(["step", "rank"], kind="stable").reset_index(drop=True)

    def node_telemetry_dirs(self) -> list[tuple[str, Path]]:
        """(node name, folder) of the telemetry collected from each node
        (``telemetry/NODE/``, faultlab.telemetry.collect), links left out."""
        out = []
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            with os.scandir(self.telemetry_dir()) as it:
                out = [(e.name, Path(e.path)) for e in it if e.is_dir(follow_symlinks=False)]
        return sorted(out)


def write_together(folder: str | Path, writers: dict, remove: tuple | list = ()) -> dict[str, Path]:
    """Write several files into ``folder`` all or nothing, with no link followed.

    ``writers`` maps a file name to a function that writes the file's content to the
    path it is given. Each writes into a private temporary folder of this process;
    only when every one is written are their contents staged in ``folder`` (opened with
    no symlink on any component, each an ``O_EXCL`` temporary) and renamed into place;
    then the files named in ``remove`` (stale outputs of an earlier write) are deleted.
    A folder another user owns can swap nothing under the writers: they never write
    into it by path. When a write fails, every temporary is removed and the error is
    raised: the folder's files are as before. The private folder and the staged
    temporaries are named for this process (:mod:`faultlab.workdirs`): those a writer
    SIGKILLed left (in the temporary folder, and ``.NAME.<pid>-<start>-<hex>.tmp`` of
    these names in ``folder``) are removed here once their maker is gone. Returns
    ``{name: final path}``.

    Raises:
        OSError when the folder cannot be written (``IsADirectoryError`` when a target
        is a directory), UntrustedPath when a component of ``folder`` is a symlink, or
        what a writer raises.
    """
    folder = Path(folder)
    names = [safefs.check_name(n) for n in writers]
    with workdirs.private("faultlab-write-") as private, safefs.open_dir_nofollow(folder) as d:
        for name in names:  # a rename onto a directory would fail half-way: refuse first
            st = d.lstat(name)
            if st is not None and stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "Is a directory", str(folder / name))
        for name, write in writers.items():
            write(private / name)
        for name in names:  # what a writer killed between staging and renaming left
            workdirs.sweep(d, f".{name}.", files=".tmp")
        staged: list[tuple[str, str]] = []
        try:
            for name in names:
                staged.append((d.stage(name, (private / name).read_bytes(), 0o644, tag=workdirs.tag()), name))
            for tmp, name in staged:
                os.rename(tmp, name, src_dir_fd=d.fd, dst_dir_fd=d.fd)
            staged.clear()
        finally:
            for tmp, _ in staged:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=d.fd)
        for name in remove:
            st = d.lstat(safefs.check_name(name))
            if st is not None and not stat.S_ISDIR(st.st_mode):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=d.fd)
    return {name: folder / name for name in names}


def unreadable(p: Path, err: BaseException | None = None) -> BadInput:
    """The BadInput for a table file of a run directory that cannot be read (``err``:
    the reader's exception, summed up on the same line)."""
    fixes = {
        "steps.parquet": "restore it, or remove it to relabel from the raw step records in telemetry/",
        "injections.parquet": "restore it, or remove it to rebuild it from events.jsonl",
        "host.parquet": "restore it, or remove it: only the localization of job-wide slowdowns uses it",
    }
    why = f": {type(err).__name__}: {' '.join(str(err).split())}"[:300] if err is not None else ""
    return BadInput(f"{p} could not be read as Parquet{why}", field=p.name,
                    fix=fixes.get(p.name, "restore or remove it"))


def _version() -> str:
    try:
        return version("faultlab")
    except Exception:
        return "unknown"
