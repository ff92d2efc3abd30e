"""``faultlab leaderboard``: rank every detector on every dataset, or re-score a
submitted scores file (``--verify``); registered in faultlab/cli.py."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import List, Optional

import typer

from faultlab import safefs
from faultlab.cliopts import Quiet
from faultlab.datasets import registry
from faultlab.errors import BadInput, FaultlabError, printable

# Lazy imports: the CLI imports this module to register the command; scoring (numpy,
# pandas) and the page (matplotlib, jinja2) are imported inside it, so
# ``faultlab --help`` stays fast.

OUT_FILES = ("leaderboard.md", "leaderboard.json", "leaderboard.html")


def _write(out: Path, texts: dict[str, str]) -> None:
    """Write each ``name -> text`` into the folder ``out`` (made; no link followed on
    any component; each file atomically). Raises BadInput (``--out``) when it cannot."""
    try:
        with safefs.open_dir_nofollow(out, create=True) as folder:
            for name, text in texts.items():
                folder.write_atomic(name, text, 0o644)
    except safefs.UntrustedPath as e:
        raise BadInput(str(e), field="--out", fix="give a folder with no symlink on its path") from None
    except OSError as e:
        raise BadInput(f"cannot write into {out} ({e.strerror or e})", field="--out", fix="give a writable folder") from None


def leaderboard_cmd(
    dataset: List[str] = typer.Option([], "--dataset", help="a dataset folder (./NAME for one in the working folder) or a name from faultlab dataset list (repeatable; with --card a folder's path only); with --verify, where to find a dataset the file names"),
    detector: List[str] = typer.Option([], "--detector", help="a detector to rank (repeatable; default: every built-in and installed one)"),
    mode: str = typer.Option("offline", "--mode", help="offline (whole run at once) | replay (online, a clock; measures latency)"),
    split: str = typer.Option("test", "--split", help="test (the default, as faultlab score: fit on train, score test) | train | all (no fitting)"),
    window: str = typer.Option("10s", "--window", help="cell width of the window-level metrics"),
    tick: str = typer.Option("1s", "--tick", help="replay clock step"),
    boot: int = typer.Option(1000, "--boot", min=0, help="bootstrap resamples for the CIs and the paired comparison (0: none)"),
    seed: int = typer.Option(0, "--seed", help="seed of the bootstrap"),
    out: Optional[Path] = typer.Option(None, "--out", help="folder to write leaderboard.md, leaderboard.json (the scores file) and leaderboard.html into"),
    as_json: bool = typer.Option(False, "--json", help="print leaderboard.json instead of the tables"),
    brief: bool = typer.Option(False, "--brief", help="print one short table of every dataset (rank, window MCC with its CI, the paired mark), as in the README"),
    card: bool = typer.Option(False, "--card", help="also write each dataset's table into its card (DIR/README.md, the leaderboard section; one table per mode) and the card's digest into DIR/MANIFEST.sha256; each --dataset by its folder's path (./NAME, datasets/NAME), a bare name refused"),
    verify: Optional[Path] = typer.Option(None, "--verify", help="a submitted leaderboard.json: re-score it with its own detectors and settings (the other options are not used); exit 1 naming the first number that differs"),
    quiet: Quiet = False,
):
    """Rank detectors on datasets: window MCC (ranks), event F1, VUS-PR, Acc@1,
    latency (replay) and false alarms per component-hour, each with its 95% CI; a
    paired bootstrap over runs marks each row better than the next or not."""
    from faultlab.scoring.leaderboard import compute, render, verify as verifying
    from faultlab.units import parse_duration

    try:
        if verify is not None:
            if detector or out is not None or as_json or brief or card:
                raise BadInput("--verify re-scores the file with its own detectors and settings", field="--verify",
                               fix="give --verify FILE alone, or with --dataset DIR to find a dataset it names")
            boards = verifying.verify(verify, dataset)
            # the datasets' names come from the submitted file's paths: printable only
            print(printable(f"{verify}: reproduced: {sum(len(b.rows) for b in boards)} rows on {', '.join(b.name for b in boards)}, every number the same"))
            return
        if not dataset:
            raise BadInput("give at least one --dataset DIR", field="--dataset", fix="e.g. --dataset datasets/faultlab-hw-v1")
        if card and detector:
            raise BadInput("a card carries every detector", field="--card", fix="leave out --detector, or leave out --card")
        if card:  # --card writes into each folder: a bare name (the published dataset, to reads) is refused before any is scored
            for d in dataset:
                registry.require_folder_path(d, "--dataset")
        window_s, tick_s = parse_duration(window, "--window"), parse_duration(tick, "--tick")

        def progress(db):
            if not quiet:
                print(printable(f"{db.name}: {db.n_runs} runs, {len(db.rows)} detectors scored in {db.wall_s:.1f} s"), file=sys.stderr, flush=True)

        board = compute.build(dataset, detector or None, on_dataset=progress, mode=mode, split=split, window_s=window_s,
                              tick_s=tick_s, n_boot=boot, seed=seed)
        md, js = render.markdown(board), render.to_json(board)
        if out is not None:
            from faultlab.scoring.leaderboard.html import html  # lazy: matplotlib only when a page is written

            _write(out, {"leaderboard.md": "# faultlab leaderboard\n\n" + md, "leaderboard.json": js, "leaderboard.html": html(board)})
        if card:
            from faultlab.datasets import cardtable

            for db in board.datasets:
                cardtable.put_table(db.path, board.settings["mode"], render.card_table(db, board.settings))
    except FaultlabError as e:
        print(f"faultlab: error: {e}", file=sys.stderr)
        raise typer.Exit(e.exit_code)
    if as_json:
        print(js)
    else:  # the table names the datasets' folders (anyone's names): printable, as the files keep them
        shown = dataclasses.replace(board, datasets=[dataclasses.replace(db, name=printable(db.name)) for db in board.datasets])
        print("\n".join(printable(line) for line in (render.brief_markdown(shown) if brief else render.markdown(shown)).splitlines()))
    if out is not None and not quiet:
        print(f"wrote {', '.join(str(out / n) for n in OUT_FILES)}", file=sys.stderr)
    if card:
        print(printable(f"wrote the {board.settings['mode']} table into {', '.join(str(Path(db.path) / 'README.md') for db in board.datasets)}"), file=sys.stderr)


def register(app: typer.Typer) -> None:
    """Add ``leaderboard`` to the faultlab CLI."""
    app.command("leaderboard")(leaderboard_cmd)
