"""``faultlab report`` and ``faultlab export`` (registered on the main typer app by
:func:`register`). Heavy imports (matplotlib, jinja2) happen only when a command runs."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from faultlab.errors import BadInput, FaultlabError

# Lazy imports: the CLI imports this module to register its commands; matplotlib and
# jinja2 are imported inside each command, so ``faultlab --help`` stays fast.


def _fail(err: Exception) -> None:
    print(f"faultlab: error: {err}", file=sys.stderr)
    raise typer.Exit(getattr(err, "exit_code", 1))


def _write(writer, src: Path, out: Optional[Path]) -> Path:
    """``writer(src, out)`` (returns the path written); a FaultlabError, or an OSError
    as a bad ``--out``, ends the command with one line (:func:`_fail`)."""
    try:
        return writer(src, out)
    except FaultlabError as e:
        _fail(e)
    except OSError as e:
        _fail(BadInput(f"cannot write {e.filename or out}: {e.strerror or e}", field="--out", fix="give a writable file path"))


def report(
    path: str = typer.Argument(..., metavar="RUN_DIR|DATASET|SCORES.json",
                                help="a run directory, a folder of runs (campaign), a dataset folder or the name of a published one (faultlab dataset list), a scores JSON file or a leaderboard.json"),
    out: Optional[Path] = typer.Option(None, "--out", metavar="FILE", help="where to write the page (default: PATH/report.html; ./NAME-report.html for a dataset; SCORES.html beside a JSON file)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object on stdout: the page written, its size in bytes and the seconds it took"),
):
    """Write the HTML report of a run, a folder of runs, a dataset, a scores file or a leaderboard.

    One self-contained page (plots embedded, nothing loaded from the network): per-rank step and compute time with faults, labels and alarms; the
    what-if slowdown; host metrics per node; the tables of faults, labels, alarms and
    scores. For a folder of runs or a dataset: a thumbnail per run and the score table
    with bootstrap 95% CIs (a dataset's published scores, datasets/scores-NAME.json,
    and its whole card). A scores file: what was scored (dataset, split, mode, window,
    parameters), the table and window-level bars. A leaderboard.json: the leaderboard's
    page."""
    from faultlab.report.html import write_report

    t = time.perf_counter()
    written = _write(write_report, path, out)
    size, took = written.stat().st_size, time.perf_counter() - t
    if as_json:
        print(json.dumps({"report": str(written), "bytes": size, "seconds": round(took, 3)}, indent=1))
        return
    print(f"report -> {written} ({size / 1e6:.2f} MB, {took:.1f}s)")


def export(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="a run directory"),
    format: str = typer.Option("perfetto", "--format", metavar="FORMAT", help="perfetto: Chrome trace JSON (ui.perfetto.dev, chrome://tracing)"),
    out: Optional[Path] = typer.Option(None, "--out", metavar="FILE", help="where to write (default: RUN_DIR/trace.json)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object on stdout: the trace written and its size in bytes"),
):
    """Export a run as a Perfetto timeline (Chrome trace JSON).

    One process per node, a track per rank with compute
    and comm slices per step, faults and labels on their own tracks, host metrics as
    counters. Open the file in https://ui.perfetto.dev (it is read in the browser)."""
    from faultlab.report.perfetto import export_trace

    if format != "perfetto":
        _fail(BadInput(f"unknown format {format!r}", field="--format", fix="use --format perfetto"))
    written = _write(export_trace, run_dir, out)
    if as_json:
        print(json.dumps({"trace": str(written), "format": format, "bytes": written.stat().st_size}, indent=1))
        return
    print(f"perfetto trace -> {written} ({written.stat().st_size / 1e6:.1f} MB)")


def register(app: typer.Typer) -> None:
    """Add ``report`` and ``export`` to ``app``."""
    app.command("report")(report)
    app.command("export")(export)
