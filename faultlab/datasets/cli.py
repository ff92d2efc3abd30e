"""``faultlab dataset build|relabel|verify|info|export|list`` (registered in faultlab/cli.py)."""

from __future__ import annotations

import json
import os
import stat
import sys
from collections import Counter
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape as rich_escape
from rich.table import Table

from faultlab.cliopts import renamed
from faultlab.datasets import manifest
from faultlab.errors import BadInput, FaultlabError, printable
from faultlab.importformats import formats_help

# Lazy imports: the CLI imports this module to register ``faultlab dataset``; each command
# imports what it runs (pyarrow, the labeler) inside its function, so ``faultlab --help`` stays fast.

app = typer.Typer(no_args_is_help=True, help="Build, verify, describe and export labeled datasets (Parquet by run, card, Croissant).")
out = Console(soft_wrap=True, highlight=False)


def _fail(e: FaultlabError):
    print(f"faultlab: error: {e}", file=sys.stderr)
    raise typer.Exit(e.exit_code)


def _os_error(e: OSError, dest: Path, option: str) -> BadInput:
    """An OSError of a dataset command as one line: naming ``option`` when the file is
    under ``dest`` (the output), else the input file that could not be read."""
    f = Path(e.filename) if e.filename else None
    try:
        ours = f is None or f.resolve().is_relative_to(Path(dest).resolve())
    except OSError:
        ours = True
    if ours:
        return BadInput(f"cannot write {f or dest}: {e.strerror or e}", field=option, fix="give a writable folder with free space")
    return BadInput(f"cannot read {f}: {e.strerror or e}", field="input", fix="check that file and its permissions")


@app.command("build")
def build_cmd(
    run_dirs: List[Path] = typer.Argument(None, help="labeled run directories"),
    campaign: List[Path] = typer.Option([], "--campaign", metavar="DIR", help="a folder of runs (faultlab campaign --out), repeatable"),
    name: str = typer.Option(..., "--name", help="dataset name, e.g. faultlab-hw-v1"),
    split: str = typer.Option("test=0.3", "--split", help="test fraction of the runs, e.g. test=0.3 (split by run, seeded)"),
    seed: int = typer.Option(0, "--seed", help="seed of the split"),
    out_root: Optional[Path] = typer.Option(None, "--out", metavar="DIR", help="the dataset goes to DIR/NAME (default: datasets)"),
    out_root_old: Optional[Path] = typer.Option(None, "--out-root", hidden=True, callback=renamed("--out-root", "--out")),
    campaign_file: List[Path] = typer.Option([], "--campaign-file", metavar="FILE", help="campaign/scenario YAML copied into campaign/, repeatable"),
    relabel: bool = typer.Option(False, "--relabel", help="re-label every run with this checkout's labeler first"),
    import_fmt: Optional[str] = typer.Option(None, "--import", metavar="FORMAT", help="build from a public trace instead (PATH as the argument): " + formats_help()),
    description: str = typer.Option("", "--description", help="one paragraph for the card"),
    license: str = typer.Option("cc-by-4.0", "--license", help="license id for the card (an --import of a known source takes the source's)"),
    note: str = typer.Option("", "--note", help="a paragraph for the card's collection section (what to know about these runs)"),
    force: bool = typer.Option(False, "--force", help="replace an existing dataset of that name"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object on stdout: the dataset folder, its runs (train, test) and size in bytes"),
):
    """Build DIR/NAME: Parquet tables by run, seeded split, schema.json, runs.json,
    README.md card, croissant.json, MANIFEST.sha256."""
    from faultlab.datasets.build import build, check_campaign_files, collect_runs, parse_split
    from faultlab.datasets.public import import_collection
    from faultlab.datasets.layout import read_splits

    out_root = out_root or out_root_old or Path("datasets")
    try:
        frac = parse_split(split)
        check_campaign_files(campaign_file)  # before runs are read: BadInput, exit 2
        if import_fmt:
            if len(run_dirs or []) != 1 or campaign:
                raise FaultlabError("--import takes one PATH and no --campaign", field="--import", fix="faultlab dataset build --import perseus PATH --name NAME")
            runs = import_collection(import_fmt, run_dirs[0])
        else:
            dups: list = []
            links: list = []
            runs = collect_runs(run_dirs or [], campaign, duplicates=dups, links=links)
            for link in links:
                print(printable(f"faultlab: note: {link}: a symlink, not followed (a folder of runs is read only through its own folders)"),
                      file=sys.stderr)
            if dups:
                print(f"faultlab: note: {len(dups)} run folder(s) given more than once, built once: "
                      + ", ".join(f"{d} (same as {k})" if str(d) != str(k) else str(d) for d, k in dups), file=sys.stderr)
        p = build(runs, name, out_root, test_fraction=frac, seed=seed, campaign_files=campaign_file, relabel=relabel,
                  description=description, license=license, source_note=note, force=force)
    except FaultlabError as e:
        _fail(e)
    except OSError as e:  # build removes its half-built folder first
        _fail(_os_error(e, out_root, "--out"))
    size = _size(p)
    sp = read_splits(p)
    if as_json:
        print(json.dumps({"dataset": str(p), "runs": len(sp["train"]) + len(sp["test"]), "train": len(sp["train"]),
                          "test": len(sp["test"]), "bytes": size}, indent=2))
        return
    out.print(f"{p}: {len(sp['train']) + len(sp['test'])} runs ({len(sp['train'])} train, {len(sp['test'])} test), {size / 1e6:.2f} MB", markup=False)


@app.command("relabel")
def relabel_cmd(
    datasets: List[str] = typer.Argument(..., help="dataset folders, each by its path (./NAME, datasets/NAME): a bare name, which means the published dataset to the commands that read, is refused"),
    note: Optional[str] = typer.Option(None, "--note", help="a new paragraph for the card's collection section (default: keep it)"),
    as_json: bool = typer.Option(False, "--json", help="a JSON list on stdout, one object per dataset: its folder, runs, labels by source and size in bytes"),
):
    """Re-label every run of each dataset with this checkout's labeler and rebuild it
    in place (same runs, split and campaign files; new labels, runs.json, card,
    croissant.json, MANIFEST.sha256). It takes folders by path only: a bare NAME is
    the published dataset to score, info and export, so it is refused here (exit 2)
    rather than rewrite the installed package's data; give ./NAME or datasets/NAME."""
    from faultlab.datasets.build import relabel
    from faultlab.datasets.layout import read_runs
    from faultlab.datasets.registry import require_folder_path

    try:  # every argument before the first dataset is rewritten: a bare name among them is refused with none written
        for d in datasets:
            require_folder_path(d, "DATASET")
    except FaultlabError as e:
        _fail(e)
    done = []
    for d in datasets:
        try:
            p = relabel(d, note=note)
            runs = read_runs(p)
        except FaultlabError as e:
            _fail(e)
        size = _size(p)
        src = {}
        for r in runs:
            for k, v in r.get("labels_by_source", {}).items():
                src[k] = src.get(k, 0) + v
        done.append({"dataset": str(p), "runs": len(runs), "labels_by_source": src, "bytes": size})
        if not as_json:
            out.print(f"{p}: re-labeled {len(runs)} runs, labels by source {src}, {size / 1e6:.2f} MB", markup=False)
    if as_json:
        print(json.dumps(done, indent=2))


@app.command("verify")
def verify_cmd(dataset: str = typer.Argument(..., help="a dataset folder (./NAME for one in the working folder), or a name from faultlab dataset list"),
               as_json: bool = typer.Option(False, "--json", help="one JSON object on stdout: dataset, ok, and the changed, missing and extra files")):
    """Check every file against MANIFEST.sha256 (exit 1 naming each changed, missing or
    extra file), then that they fit together: splits and runs.json name the same runs
    once each, and each table file holds its table's columns and its run's rows (exit 2,
    one line naming the file)."""
    from faultlab.datasets.layout import Dataset
    from faultlab.datasets.manifest import verify
    from faultlab.datasets.registry import published

    where = published(dataset) or dataset  # the published dataset of a bare name; the text as typed otherwise (./NAME)
    try:
        r = verify(where)
    except FaultlabError as e:
        _fail(e)
    differ = any(r[k] for k in ("changed", "missing", "extra"))
    problem = None
    if not differ:  # the files are as written: do they fit together (tables, splits, runs)?
        try:
            files = Dataset(where).check()
        except FaultlabError as e:
            problem = e
    if as_json:
        print(json.dumps({"dataset": str(dataset), "ok": not differ and problem is None, **{k: list(r[k]) for k in ("changed", "missing", "extra")},
                          "problem": None if problem is None else str(problem)}, indent=2))
        raise typer.Exit(1 if differ else problem.exit_code if problem else 0)
    if problem is not None:
        _fail(problem)
    for kind in ("changed", "missing", "extra"):
        for f in r[kind]:
            print(printable(f"{kind}: {f}"), file=sys.stderr)  # names another party chose
    if differ:
        print(printable(f"faultlab: error: {dataset}: {sum(len(v) for v in r.values())} file(s) differ from MANIFEST.sha256"), file=sys.stderr)
        raise typer.Exit(1)
    out.print(printable(f"{dataset}: every file matches MANIFEST.sha256, and its {files} table files are its runs' tables"), markup=False)


@app.command("info")
def info_cmd(dataset: str = typer.Argument(..., help="a dataset folder (./NAME for one in the working folder), or a name from faultlab dataset list"),
             as_json: bool = typer.Option(False, "--json", help="the same figures as one JSON object on stdout")):
    """Runs, splits, fault types and labels of a dataset."""

    from faultlab.datasets.layout import Dataset

    try:
        ds = Dataset(dataset)
        ds.check()
        runs = ds.runs_info()
        size = _size(ds.path)
    except FaultlabError as e:
        _fail(e)
    ft, src = Counter(), Counter()
    for r in runs:
        ft.update(r.get("fault_types", []))
        src.update(r.get("labels_by_source", {}))
    info = {"name": ds.name, "runs": len(runs), "train": len(ds.splits["train"]), "test": len(ds.splits["test"]), "seed": ds.seed,
            "fault_types": dict(ft), "labels_by_source": dict(src), "size_mb": round(size / 1e6, 3),
            "duration_s": round(sum(r.get("duration_s", 0) for r in runs), 1)}
    if as_json:
        print(json.dumps(info, indent=2))
        return
    out.print(info_table(info))


def _size(root: Path) -> int:
    """Bytes of the regular files in the folder ``root``, links neither followed nor
    counted: a dataset may be another user's, whose link to a root-only file would
    tell them its size."""
    total = 0
    for p in manifest.entries(root):
        st = os.lstat(p)
        total += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return total


def info_table(info: dict) -> Table:
    """``dataset info``'s figures as a rich Table of two columns (what, value); counts
    by fault type and by label source one per line. Names read from the dataset go
    through ``errors.printable`` and show rich markup as it is (a ``[link=URL]`` in a
    folder's name would be a hyperlink in root's terminal)."""
    t = Table(title=f"dataset {rich_escape(printable(info['name']))}", show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value", overflow="fold")
    t.add_row("runs", f"{info['runs']} ({info['train']} train, {info['test']} test; split seed {info['seed']})")
    t.add_row("training time", f"{info['duration_s']:g} s")
    t.add_row("size", f"{info['size_mb']:g} MB")
    for title, key in (("fault types (runs)", "fault_types"), ("labels by source", "labels_by_source")):
        t.add_row(title, "\n".join(rich_escape(printable(f"{k}: {v}")) for k, v in sorted(info[key].items())) or "-")
    return t


@app.command("export")
def export_cmd(
    dataset: str = typer.Argument(..., help="a dataset folder (./NAME for one in the working folder), or a name from faultlab dataset list"),
    fmt: str = typer.Option("timeeval", "--format", help="timeeval (a train file, a test CSV per rank of each test run, datasets.csv) or tsb-ad (one CSV per run and rank named as TSB-AD names its files, File-List.csv)"),
    out_dir: Optional[Path] = typer.Option(None, "--out", metavar="DIR", help="output folder (default ./NAME-FORMAT in the current folder)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object on stdout: the dataset, the format, the output folder and its index file"),
):
    """Export a dataset (a folder, or a name from faultlab dataset list) for another
    toolkit."""
    from faultlab.datasets.export import export

    dest = out_dir or Path(f"{Path(dataset).name}-{fmt}")  # never beside a published dataset (package data)
    try:
        idx = export(dataset, dest, fmt)
    except FaultlabError as e:
        _fail(e)
    except OSError as e:
        _fail(_os_error(e, dest, "--out"))
    if as_json:
        print(json.dumps({"dataset": str(dataset), "format": fmt, "out": str(dest), "index": str(idx)}, indent=2))
        return
    out.print(f"{idx}", markup=False)


@app.command("list")
def list_cmd(as_json: bool = typer.Option(False, "--json", help="a JSON list of {name, path, root, shadowed, shadowed_by}")):
    """The published datasets faultlab finds by name ($FAULTLAB_DATASETS, else the
    installed package's data, then ./datasets when only root or you can write it),
    each folder once; of two folders of one name the first wins, and
    `faultlab score --dataset NAME` takes it."""
    from faultlab.datasets.registry import list_datasets, local_problem, roots

    found = list_datasets()
    if not os.environ.get("FAULTLAB_DATASETS") and (why := local_problem()):
        print(printable(f"faultlab: note: {why}"), file=sys.stderr)
    if as_json:
        print(json.dumps(found, indent=2))
        return
    if not found:
        out.print(printable(f"no datasets found (looked in {', '.join(map(str, roots()))})"), markup=False)
        return
    for d in found:
        shadow = printable(f"  (shadowed: {d['name']} is {d['shadowed_by']}, found first)") if d["shadowed"] else ""
        out.print(f"{printable(d['name'])}\t{printable(d['path'])}{shadow}", markup=False)


def register(root: typer.Typer) -> None:
    """Add ``dataset`` to the faultlab CLI."""
    root.add_typer(app, name="dataset")
