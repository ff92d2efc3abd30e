"""``faultlab label``: label a run directory, or import public fail-slow data
(registered on the main typer app by :func:`register`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from faultlab import inputfile, safefs
from faultlab.cliopts import Quiet, progress_console, refuse_together
from faultlab.errors import FIELD_CHARS, BadInput, FaultlabError, printable
from faultlab.importformats import formats_help  # names only: no pandas

# Lazy imports: the CLI imports this module to register ``faultlab label``; the labeler
# (pandas, pyarrow, dask) is imported inside the command, so ``faultlab --help`` stays fast.

out = Console(soft_wrap=True, highlight=False, width=None if sys.stdout.isatty() else 160)
#: the lines of a run with --json (stdout carries the JSON)
err_out = Console(stderr=True, soft_wrap=True, highlight=False, width=None if sys.stderr.isatty() else 160)


def _fail(err: Exception) -> None:
    print(f"faultlab: error: {err}", file=sys.stderr)
    raise typer.Exit(getattr(err, "exit_code", 1))


def label(
    ctx: typer.Context,
    run_dir: Path = typer.Argument(..., metavar="PATH", help="a run directory; with --import, the file or dataset folder to import"),
    import_format: Optional[str] = typer.Option(None, "--import", metavar="FORMAT", help="import public fail-slow data instead: " + formats_help()),
    out_dir: Optional[Path] = typer.Option(None, "--out", metavar="DIR", help="with --import: folder for labels.parquet (and whatif.json, components.parquet)"),
    peer_groups_file: Optional[Path] = typer.Option(None, "--peer-groups", metavar="FILE", help="the ranks' peer groups: a JSON object or a CSV component,group (a run directory, or --import long | pai-minibatch); default: declared, else discovered"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", metavar="tls://HOST:PORT", help="label out of core on this Dask scheduler, over TLS on this host (default $DASK_SCHEDULER_ADDRESS, else an embedded LocalCluster)"),
    out_of_core: bool = typer.Option(False, "--out-of-core", help="label out of core on Dask whatever the run's size (default: from 16.8M rank-steps; --scheduler implies it)"),
    in_memory: bool = typer.Option(False, "--in-memory", help="label in memory whatever the run's size (default: below 16.8M rank-steps)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object on stdout: the labels' count, the files written and the peer groups used; progress goes to stderr"),
    quiet: Quiet = False,
):
    """Label a run directory (writes labels.parquet and whatif.json there), or import
    public data: --import FORMAT PATH --out DIR writes DIR/labels.parquet (and
    DIR/whatif.json where a what-if slowdown applies, DIR/components.parquet where the
    format judges whole components: long). Prints the peer groups the peer view used
    (--peer-groups FILE, else the declared ones, else discovered).

    Outputs are written all or nothing. Bad input (a folder that is no run directory, an
    unreadable or malformed file or column) and an unwritable output folder are one
    line, exit 2."""
    refuse_together(ctx, {"--in-memory": in_memory, "--out-of-core": out_of_core})
    refuse_together(ctx, {"--in-memory": in_memory, "--scheduler": scheduler is not None})  # a scheduler labels out of core
    con = err_out if as_json else out
    mapping = None
    if peer_groups_file is not None:
        from faultlab.labeler.peergroups import read_mapping  # the labeler loads pandas: imported when run (CLI start-up)

        try:
            mapping = read_mapping(peer_groups_file)
        except FaultlabError as e:
            _fail(e)
    if import_format is None:
        force = True if out_of_core else False if in_memory else None
        info = _label_run_dir(run_dir, out_dir, scheduler, force, mapping, con, progress_console(quiet, con))
    else:
        info = _import(import_format, run_dir, out_dir, mapping, con)
    if as_json:
        print(json.dumps(info, indent=1, default=str))


def _label_run_dir(run_dir: Path, out_dir: Optional[Path], scheduler: Optional[str], out_of_core: Optional[bool], mapping, con: Console,
                   progress_con: Console) -> dict:
    """Label the run directory ``run_dir`` in place, lines on ``con``, the blocks'
    progress on ``progress_con``; returns what ``--json`` prints: ``{run_dir, labels,
    labels_path, peer_groups}``."""
    from faultlab.labeler import label_run  # the labeler loads pandas: imported when run (CLI start-up)
    from faultlab.rundir import RunDir  # pandas, pyarrow: imported when run, as the labeler is

    if out_dir is not None:
        _fail(BadInput("--out is only for --import (a run directory is labeled in place)", field="--out"))
    if not run_dir.is_dir():
        what = "is not a directory" if run_dir.exists() else "does not exist"
        _fail(BadInput(f"{run_dir} {what}", field="PATH", fix="give a run directory, or --import FORMAT PATH --out DIR for public data"))
    try:
        with _BlockProgress(progress_con) as progress:
            labels = label_run(run_dir, out_of_core=True if scheduler else out_of_core, scheduler=scheduler,
                               progress=progress, peer_groups=mapping)
    except FaultlabError as e:
        _fail(e)
    except OSError as e:  # labels.parquet and whatif.json are then both as before
        _fail(BadInput(f"cannot write {e.filename or run_dir}: {e.strerror or e}", field="PATH",
                       fix="check the folder's permissions and free space; nothing half-written is left"))
    con.print(f"{len(labels)} label(s) -> {run_dir / 'labels.parquet'}", markup=False)
    try:  # read as every file of a run folder is (no link, regular, bounded): the folder may be another user's
        doc = safefs.parse_json(RunDir(run_dir).read_file("whatif.json", inputfile.JSON_BYTES, "relabel the run") or b"{}", "whatif.json")
        groups = (doc.get("peer_groups") if isinstance(doc, dict) else None) or []
    except (FaultlabError, ValueError):
        groups = []
    _print_groups(groups, con)
    return {"run_dir": str(run_dir), "labels": len(labels), "labels_path": str(run_dir / "labels.parquet"), "peer_groups": groups}


def _import(import_format: str, path: Path, out_dir: Optional[Path], mapping, con: Console) -> dict:
    """Import public data at ``path`` in ``import_format`` into ``out_dir``, lines on
    ``con``; returns what ``--json`` prints: ``{format, labels, components, written,
    persistent, peer_groups}`` (``whatif`` where the format has a what-if slowdown)."""
    from faultlab.labeler.importers import import_path, write_outputs  # pandas: imported when run (CLI start-up)

    if out_dir is None:
        _fail(BadInput("give the output folder", field="--out", fix="--import FORMAT PATH --out DIR"))
    if mapping is not None and import_format not in ("long", "pai-minibatch"):
        _fail(BadInput(f"--peer-groups does not apply to --import {import_format}", field="--peer-groups",
                       fix="give it with a run directory or --import long | pai-minibatch"))
    try:
        res = import_path(import_format, path, None if mapping is None else {"peer_groups": mapping})
    except FaultlabError as e:
        _fail(e)
    except OSError as e:  # a damaged or unreadable input file (pyarrow's reader errors are OSErrors too)
        _fail(BadInput(f"cannot read {e.filename or path}: {e.strerror or e}", field="PATH",
                       fix="give an intact, readable file or folder as published; nothing was written"))
    try:
        written = write_outputs(res, out_dir)
    except FaultlabError as e:
        _fail(e)
    except OSError as e:  # write_outputs is all or nothing: the folder's files are as before
        _fail(BadInput(f"cannot write {e.filename or out_dir}: {e.strerror or e}", field="--out",
                       fix="give a writable folder; nothing half-written is left"))
    labels = res.labels
    comps = sorted(set(labels["component"].astype(str))) if len(labels) else []
    info = {"format": import_format, "labels": len(labels), "components": comps, "written": {k: str(v) for k, v in written.items()},
            "persistent": None, "peer_groups": []}
    con.print(printable(f"{import_format}: {len(labels)} label(s) on {len(comps)} component(s) -> {written['labels.parquet']}"), markup=False)
    if res.info.get("skipped_line"):  # nothing dropped in silence (also in import.json)
        info["skipped_line"] = res.info["skipped_line"]
        con.print(printable(f"  {res.info['skipped_line']}"), markup=False)
    if comps:
        shown = ", ".join(printable(c, FIELD_CHARS) for c in comps[:8]) + (f", ... ({len(comps) - 8} more)" if len(comps) > 8 else "")
        con.print(printable(f"  labeled: {shown}"), markup=False)
    if res.whatif is not None and "slowdown_by_trace" in res.whatif:
        info["whatif"] = {"slowdown_by_trace": res.whatif["slowdown_by_trace"]}
        shown = ", ".join(f"{k} {v:.4f}" for k, v in res.whatif["slowdown_by_trace"].items())
        con.print(printable(f"  what-if slowdown S by trace: {shown} -> {written['whatif.json']}"), markup=False)
    elif res.whatif is not None:
        info["whatif"] = {"slowdown": res.whatif.get("slowdown")}
        con.print(f"  what-if slowdown S = {res.whatif.get('slowdown', float('nan')):.4f} -> {written['whatif.json']}", markup=False)
    if res.components is not None:
        pers = res.components.loc[res.components["persistent"], "component"].astype(str).tolist()
        info["persistent"] = pers
        shown = ", ".join(printable(c, FIELD_CHARS) for c in pers[:8]) + (f", ... ({len(pers) - 8} more)" if len(pers) > 8 else "")
        con.print(printable(f"  persistently slow: {shown or 'none'} ({len(res.components)} component(s) judged) "
                            f"-> {written['components.parquet']}"), markup=False)
    if res.components is not None and "group_members" in res.components.columns:
        c = res.components.drop_duplicates("peer_group").sort_values(["group_vs_fastest", "peer_group"])
        info["peer_groups"] = [{"group": r.peer_group, "members": str(r.group_members).split(","), "vs_fastest": float(r.group_vs_fastest),
                                "source": r.group_source} for r in c.itertuples()]
        _print_groups(info["peer_groups"], con)
    for name in sorted(set(written) - {"labels.parquet", "whatif.json", "components.parquet"}):
        con.print(printable(f"  {name} -> {written[name]}"), markup=False)
    return info


def _print_groups(groups: list[dict], con: Console) -> None:
    """One line per peer group the labeler used (``PeerGroups.summary`` rows): its
    name, size, first members and its typical local time against the fastest group's.
    Names come from the run's or trace's data: each line goes through
    ``errors.printable`` (no escape sequence reaches the terminal), each name cut at
    ``errors.FIELD_CHARS`` characters."""
    for g in groups:
        mem = list(g.get("members") or [])
        shown = ", ".join(printable(m, FIELD_CHARS) for m in mem[:6]) + (f", ... ({len(mem) - 6} more)" if len(mem) > 6 else "")
        vs = g.get("vs_fastest")
        ratio = f"{vs:.2f}x the fastest" if isinstance(vs, (int, float)) and vs == vs else "level unknown"
        con.print(printable(f"  peer group {printable(g.get('group'), FIELD_CHARS)} ({g.get('source')}, {len(mem)}): {ratio}; {shown}"), markup=False)


class _BlockProgress:
    """A progress bar of the out-of-core labeler's blocks (``progress(done, total,
    what)``) on the terminal ``con``; on a log, one line per pass."""

    def __init__(self, con: Console):
        self.con = con

    def __enter__(self):
        from faultlab.progress import is_live  # imported when the command runs (CLI start-up)

        self.bar = self.task = None
        self.live = is_live(self.con)
        self.said: set = set()
        return self.update

    def update(self, done: int, total: int, what: str) -> None:
        if not self.live:
            if done == total and what not in self.said:
                self.said.add(what)
                self.con.print(f"  {what}: {total} block(s)", markup=False)
            return
        if self.bar is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # a live terminal only

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                console=self.con, transient=False)
            self.bar.start()
            self.task = self.bar.add_task(what, total=total)
        self.bar.update(self.task, completed=done, total=total, description=what)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


def register(app: typer.Typer) -> None:
    """Add ``label`` to ``app``."""
    app.command("label")(label)
