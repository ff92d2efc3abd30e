"""``faultlab dataset build``: labeled run directories -> a dataset folder
(:mod:`faultlab.datasets.layout`), written run by run, into a temporary folder renamed
into place only when complete (a failed build leaves no half dataset).

Steps: collect the runs (:func:`collect_runs`), optionally re-label them with the
labeler of this checkout, write each run's tables as Parquet partitions, draw the
seeded split by run (:func:`draw_split`), then ``runs.json``, ``splits.json``,
``schema.json``, the campaign files, the card (:mod:`faultlab.datasets.card`),
``croissant.json`` (:mod:`faultlab.datasets.croissant`) and last ``MANIFEST.sha256``
(:mod:`faultlab.datasets.manifest`).

The output root may be a folder other users write (a shared ``/tmp`` folder): it is
opened from ``/`` with no symlink on any component, the temporary folder is made in
it and held by its descriptor, and every file and folder of the dataset is made
relative to its parent's descriptor (:class:`_Tree`), so that no name another user
swaps or links redirects what is written.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import random
from collections import Counter
from pathlib import Path, PurePosixPath
from typing import NamedTuple

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from faultlab import inputfile, safefs, schema, workdirs, yamlsafe
from faultlab.datasets import card, croissant, manifest, registry
from faultlab.datasets.public import Collection
from faultlab.datasets.layout import (COLUMN_DOCS, FIX, RUN_TABLES, TABLES, Dataset, open_output, part_path, read_build, read_croissant,
                                     read_splits, table_schema)
from faultlab.datasets.steplabels import step_labels, with_label_ids
from faultlab.errors import BadInput
from faultlab.labeler import LabelerConfig, label
from faultlab.rundata import RunData, read_run_dir
from faultlab.rundir import RunDir
from faultlab.scenario import Campaign, Scenario, parse

def collect_runs(run_dirs=(), campaigns=(), duplicates: list | None = None, links: list | None = None) -> list[Path]:
    """Run directories given directly and those inside campaign folders (children with
    ``meta.json``), sorted by name, no duplicates: a folder given again (the same
    resolved path) is kept once, and ``(dropped path, kept path)`` is appended to
    ``duplicates`` when a list is given (the CLI says so). A child of a campaign folder
    that is a link (``lstat``) is never followed, and is appended to ``links`` when a
    list is given (the CLI says so): the folder may be another user's, whose link to a
    root-only run folder would put that run's tables into a dataset they can read.
    Raises BadInput (field ``--campaign`` / ``RUN_DIRS``) naming a folder that is
    neither."""
    out: list[Path] = []
    for c in campaigns:
        c = Path(c)
        if not c.is_dir():
            raise BadInput(f"{c} is not a folder", field="--campaign", fix="give the --out folder of faultlab campaign")
        kids = []
        with os.scandir(c) as it:
            for e in it:
                if e.is_symlink():
                    if links is not None:
                        links.append(Path(e.path))
                elif e.is_dir(follow_symlinks=False) and (Path(e.path) / "meta.json").is_file():
                    kids.append(Path(e.path))
        kids.sort()
        if not kids:
            raise BadInput(f"{c} holds no run directories", field="--campaign", fix="give the --out folder of faultlab campaign")
        out += kids
    for r in run_dirs:
        r = Path(r)
        if not (r / "meta.json").is_file():
            raise BadInput(f"{r} is not a run directory (no meta.json)", field="RUN_DIRS")
        out.append(r)
    seen: dict[Path, Path] = {}
    uniq = []
    for p in out:
        k = p.resolve()
        if k not in seen:
            seen[k] = p
            uniq.append(p)
        elif duplicates is not None:
            duplicates.append((p, seen[k]))
    if not uniq:
        raise BadInput("no runs given", field="RUN_DIRS", fix="give run directories or --campaign DIR")
    return uniq


def draw_split(run_ids: list[str], test_fraction: float, seed: int) -> dict:
    """Seeded split by run: the sorted ids shuffled with ``random.Random(seed)``; the
    first ``round(test_fraction * n)`` (at least 1 and at most n - 1 when n >= 2) are
    the test split. Raises BadInput for a fraction outside (0, 1)."""
    if not 0 < test_fraction < 1:
        raise BadInput(f"test fraction {test_fraction} is not in (0, 1)", field="--split", fix="e.g. --split test=0.3")
    ids = sorted(run_ids)
    random.Random(seed).shuffle(ids)
    n = len(ids)
    k = min(max(1, round(test_fraction * n)), n - 1) if n >= 2 else 0
    return {"seed": seed, "test_fraction": test_fraction, "train": sorted(ids[k:]), "test": sorted(ids[:k])}


def parse_split(text: str) -> float:
    """``test=0.3`` -> 0.3. Raises BadInput (field ``--split``) otherwise."""
    key, eq, val = text.partition("=")
    try:
        f = float(val)
    except ValueError:
        f = float("nan")
    if key.strip() != "test" or not eq or not 0 < f < 1:
        raise BadInput(f"{text!r} is not test=FRACTION", field="--split", fix="e.g. --split test=0.3")
    return f


def schema_doc() -> dict:
    """schema.json: per table its columns (name, Arrow type, description)."""
    return {
        "schema_version": schema.SCHEMA_VERSION,
        "tables": {t: [{"name": f.name, "type": str(f.type), "nullable": f.nullable, "description": COLUMN_DOCS.get(f.name, "")}
                       for f in table_schema(t)] for t in TABLES},
        "units": "*_s: seconds; *_ts and t_start: unix time in seconds; slowdown: ratio; host metric units in the metric name",
    }


def _run_info(rd_path: Path, run, campaign: str | None) -> dict:
    steps, inj, lab = run.steps, run.injections, run.labels
    src = Counter(lab["source"].astype(str)) if len(lab) else Counter()
    meta = run.meta or {}
    return {
        "run_id": run.run_id, "campaign": meta.get("campaign", campaign),
        "scenario": meta.get("scenario_name") or meta.get("scenario") or rd_path.name,
        "complete": bool((run.meta or {}).get("complete", False)), "seed": (run.meta or {}).get("seed"),
        "n_ranks": int(steps["rank"].nunique()) if len(steps) else 0, "n_steps": int(steps["step"].nunique()) if len(steps) else 0,
        "duration_s": float((steps["t_start"] + steps["step_s"]).max() - steps["t_start"].min()) if len(steps)
        else float(run.host["ts"].max() - run.host["ts"].min()) if run.host is not None and len(run.host) else 0.0,
        "fault_types": sorted(set(inj["fault_type"].astype(str))) if len(inj) else [],
        "n_faults": int(len(inj)), "n_labels": int(len(lab)), "labels_by_source": dict(src),
        "n_workload_faults": int((inj["kind"].astype(str) == "workload").sum()) if len(inj) and "kind" in inj else 0,
        "n_step_rows": int(len(steps)),
        "n_host_rows": int(len(run.host)) if run.host is not None else 0,
        "host_metrics": sorted({str(m).split(":", 1)[0] for m in run.host["metric"].unique()}) if run.host is not None and len(run.host) else [],
        "faultlab": (run.meta or {}).get("faultlab"),
    }


class _Tree:
    """A folder being built, held by its descriptor (``root``): each file is written
    relative to its folder's descriptor (folders made or opened one by one with no
    link followed) as a fresh temporary renamed into place; ``digests`` keeps each
    file's SHA-256 for the manifest."""

    def __init__(self, root: safefs.TrustedDir):
        self.root = root
        self.digests: dict[str, str] = {}

    def put(self, rel: str, data: bytes | str) -> int:
        """Write ``data`` as ``rel`` (a relative ``a/b/name`` path); returns its size."""
        data = data.encode() if isinstance(data, str) else data
        parts = PurePosixPath(rel).parts
        with contextlib.ExitStack() as held:
            d = self.root
            for name in parts[:-1]:
                d = held.enter_context(d.subdir(name, create=True, mode=0o755))
            d.write_atomic(safefs.check_name(parts[-1]), data, 0o644, durable=False)
        self.digests[PurePosixPath(*parts).as_posix()] = hashlib.sha256(data).hexdigest()
        return len(data)


def write_run(tree: _Tree, run) -> int:
    """Write one run's tables (its four, the labels with their ``label_id``, and the
    per-step labels, :mod:`faultlab.datasets.steplabels`) as
    ``data/<table>/run=<id>/part-0.parquet`` into ``tree`` (an empty table as a file of
    its schema and no row group); returns bytes written.
    Raises BadInput naming the table whose columns do not fit, UntrustedPath for a run
    id that is not one plain name."""
    total = 0
    frames = {t: (schema.empty(t) if getattr(run, t) is None else getattr(run, t)).copy() for t in RUN_TABLES}
    for t in RUN_TABLES:
        if "run_id" in schema.TABLES[t].names:
            frames[t]["run_id"] = run.run_id
    frames["labels"] = with_label_ids(frames["labels"], run.run_id)
    frames["step_labels"] = step_labels(frames["steps"], frames["labels"], run.run_id)
    for t in TABLES:
        df = frames[t]
        try:
            tbl = schema.to_table(t, df) if t in schema.TABLES and t != "labels" else _to_table(table_schema(t), df)
        except (ValueError, TypeError) as e:
            raise BadInput(f"run {run.run_id}: {t} does not fit faultlab.schema ({e})", field=t) from None
        buf = pa.BufferOutputStream()
        if tbl.num_rows:
            pq.write_table(tbl, buf, compression="zstd")
        else:  # no row group at all: the `datasets` library refuses a file whose row group is empty
            pq.ParquetWriter(buf, tbl.schema, compression="zstd").close()
        total += tree.put(part_path(Path(), t, run.run_id).as_posix(), buf.getvalue().to_pybytes())
    return total


def _to_table(sch: pa.Schema, df: pd.DataFrame) -> pa.Table:
    """``df`` as an Arrow table of ``sch`` (its columns, cast). Raises ValueError naming
    a missing column."""
    missing = [f.name for f in sch if f.name not in df.columns]
    if missing:
        raise ValueError(f"missing column(s) {', '.join(missing)}")
    return pa.Table.from_pandas(df[[f.name for f in sch]], schema=sch, preserve_index=False)


def _check_replaceable(final: Path) -> None:
    """``--force`` replaces only an earlier faultlab dataset: a real folder (no
    symlink) holding ``splits.json`` and ``MANIFEST.sha256``. Anything else (a folder
    of the user's, ``--out / --name etc``) is refused: BadInput, nothing removed."""
    if final.is_symlink() or not final.is_dir() or not (final / "splits.json").is_file() or not (final / "MANIFEST.sha256").is_file():
        raise BadInput(f"{final} exists and is not a faultlab dataset (no splits.json and MANIFEST.sha256); --force replaces only a dataset",
                       field="--name", fix="give another name or --out, or remove that folder yourself")


class CampaignFile(NamedTuple):
    """A campaign/scenario file checked for a dataset: its ``name`` and the ``data``
    that was checked, which is what the dataset gets."""

    name: str
    data: bytes


def check_campaign_files(files) -> list[CampaignFile]:
    """The campaign/scenario files for a dataset's ``campaign/`` folder, each checked
    with the scenario loader (``faultlab.scenario.parse``, a campaign or a scenario) so
    that only faultlab's own YAML is ever copied into a dataset meant for publishing
    (``--campaign-file /etc/shadow`` was copied as it was). Each file is read once,
    and the text checked is the text kept: its owner may swap the path for a link to
    a root-only file after the check, and a second read would copy that file.

    Returns: one :class:`CampaignFile` per file, in order.
    Raises: BadInput (field ``--campaign-file``) for a missing file, one that is not
    a regular file or is over :data:`faultlab.inputfile.YAML_BYTES`, one the loader
    refuses (its first problem quoted) or two files of the same name."""


    fix = "give the YAML the runs were made from; faultlab scenario validate FILE checks one"
    keys = set(Scenario.model_fields) | set(Campaign.model_fields)
    out, seen = [], set()
    for f in map(Path, files):
        text = inputfile.read_text(f, "--campaign-file", limit=inputfile.YAML_BYTES, fix=fix)
        try:  # the loader's message quotes keys: shown only once the top level is faultlab's (never a line of another file)
            top = _top_keys(text)
        except yamlsafe.TooDeep as e:
            raise BadInput(f"{f} is not a faultlab campaign or scenario file (YAML {e})", field="--campaign-file", fix=fix) from None
        except (OSError, yaml.YAMLError, ValueError):
            top = None
        if top is None or not top <= keys:
            raise BadInput(f"{f} is not a faultlab campaign or scenario file (not YAML whose top level is a scenario's or campaign's fields)",
                           field="--campaign-file", fix=fix)
        try:
            parse(text, f, "auto")
        except BadInput as e:
            raise BadInput(f"{f} is not a valid faultlab campaign or scenario file: {e}", field="--campaign-file", fix=fix) from None
        if f.name in seen:
            raise BadInput(f"two files named {f.name}", field="--campaign-file", fix="give each file once, or rename one")
        seen.add(f.name)
        out.append(CampaignFile(f.name, text.encode()))
    return out


def _top_keys(text: str) -> set[str] | None:
    """The keys at the top of the YAML ``text`` (None when its top is no mapping),
    read from its node tree: nothing else of the file is built. Raises
    ``yamlsafe.TooDeep`` or another ``yaml.YAMLError``."""
    root = yamlsafe.compose(text)
    if not isinstance(root, yaml.MappingNode):
        return None
    return {str(k.value) for k, _ in root.value if k.tag != "tag:yaml.org,2002:merge"}


def build(runs, name: str, out_root: str | Path = "datasets", *, test_fraction: float = 0.3, seed: int = 0,
          campaign_files=(), relabel: bool = False, description: str = "", license: str = "cc-by-4.0",
          source_note: str = "", force: bool = False, split: dict | None = None) -> Path:
    """Build ``out_root/name`` from labeled run directories ``runs`` (paths), or from a
    public collection (:class:`faultlab.datasets.public.Collection`).

    Args:
        runs: run directory paths (see :func:`collect_runs`), or a Collection: its runs,
            its ``import/`` and ``upstream/`` files, and its provenance for the card
            (whose license is then the source's).
        name: dataset name (a folder name: letters, digits, ``-_.``).
        test_fraction, seed: the split (:func:`draw_split`).
        campaign_files: campaign/scenario YAML files copied into ``campaign/``.
        relabel: re-label every run with this checkout's labeler first (its
            ``labels.parquet`` is not touched; the dataset gets the new labels).
        force: replace an existing dataset folder of that name.
        split: ``{"train": [...], "test": [...]}`` to keep (a relabel) instead of
            drawing one; it must name exactly the runs given.

    Returns: the dataset folder.
    Raises: BadInput for a bad name, an existing folder without ``force``, a campaign
    file the scenario loader refuses (:func:`check_campaign_files`), an ``out_root``
    where the folder cannot be made (field ``--out``), a run without labels, or a
    table that does not fit the schema. Nothing is left in ``out_root`` on an error.
    """
    if not name or any(ch not in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_." for ch in name) or name.startswith("."):
        raise BadInput(f"{name!r} is not a dataset name", field="--name", fix="letters, digits, - _ . e.g. faultlab-hw-v1")
    campaign_files = check_campaign_files(campaign_files)
    out_root = Path(out_root)
    final = out_root / name
    # each build's own folder (two builds or relabels of one name at once each finish
    # their own, and the last swapped in wins): named for this process, so a build
    # killed leaves one that the next build of the name removes once its maker is gone
    prefix = building_prefix(name)
    building = workdirs.fresh_name(prefix)
    with open_output(out_root, "--out") as parent:
        if parent.lstat(name) is not None:
            if not force:
                raise BadInput(f"{final} exists", field="--name", fix="give another name, or --force to replace it")
            _check_replaceable(final)
        workdirs.sweep(parent.path, prefix)
        with contextlib.suppress(OSError):  # that name without a maker's tag: no live build's
            parent.remove_tree(f".{name}.building")
        tree = _Tree(_fresh_folder(parent, building))
        try:
            with tree.root:
                _write_dataset(tree, runs, name, test_fraction=test_fraction, seed=seed, campaign_files=campaign_files,
                               relabel=relabel, description=description, license=license, source_note=source_note, split=split)
                _check_still_there(parent, building, tree.root)
            replaced = parent.lstat(name) is not None and _swap_in(parent, building, name)
            if not replaced:
                if parent.lstat(name) is not None:
                    parent.remove_tree(name)
                parent.rename(building, name)
        except BaseException:
            with contextlib.suppress(OSError):
                parent.remove_tree(building)
            raise
        if replaced:  # the old dataset, now under the building name
            with contextlib.suppress(OSError):  # a build killed here leaves it for the next one to remove
                parent.remove_tree(building)
    return final


def building_prefix(name: str) -> str:
    """The start of the name of the hidden folder a build of dataset ``name`` writes
    into (``.NAME.building-<pid>-<start>-<random>``, :func:`workdirs.fresh_name`)."""
    return f".{name}.building-"


def _swap_in(parent: safefs.TrustedDir, building: str, name: str) -> bool:
    """Put the finished ``building`` folder in the place of the dataset ``name`` in one
    step, the old one then under ``building`` (``TrustedDir.exchange``): a build or
    relabel killed at any moment leaves ``name`` whole, old or new, never the old half
    removed beside the new one that the next build removes. False where the file
    system cannot swap (the old one is then removed first, as before)."""
    try:
        parent.exchange(building, name)
    except OSError as e:
        if e.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            return False
        raise
    return True


def _fresh_folder(parent: safefs.TrustedDir, name: str) -> safefs.TrustedDir:
    """An empty folder ``name`` of ours in ``parent`` (one left by a failed build
    removed first), held by its descriptor. Raises BadInput when it cannot be made,
    UntrustedPath when a link or another user's folder takes its name meanwhile."""
    path = f"{parent.path.rstrip('/')}/{name}"
    try:
        parent.remove_tree(name)
        return parent.subdir(name, create=True, mode=0o755)
    except safefs.UntrustedPath:
        raise
    except OSError as e:  # before anything is written: nothing half-applied
        raise BadInput(f"cannot make {path}: {e.strerror or e}", field="--out", fix="give a writable folder") from None


def _check_still_there(parent: safefs.TrustedDir, name: str, held: safefs.TrustedDir) -> None:
    """Raise UntrustedPath unless ``name`` in ``parent`` is still the folder ``held``:
    whoever may write ``parent`` can move it away and put something else there, which
    is then never renamed into the dataset's place."""
    st, mine = parent.lstat(name), os.fstat(held.fd)
    if st is None or (st.st_dev, st.st_ino) != (mine.st_dev, mine.st_ino):
        raise safefs.UntrustedPath(held.path, "was moved or replaced while the dataset was written into it",
                                   "build into a folder that only you can write (--out)")


def _write_dataset(tree: _Tree, runs, name: str, *, test_fraction: float, seed: int, campaign_files: list[CampaignFile], relabel: bool,
                   description: str, license: str, source_note: str, split: dict | None) -> None:
    """Write every file of the dataset ``name`` into ``tree`` (see :func:`build`),
    ``MANIFEST.sha256`` last."""
    coll = runs if isinstance(runs, Collection) else None
    if coll is not None:
        runs = coll.runs
        if coll.provenance is not None:
            license = coll.provenance["license"]
        for rel, data in coll.files.items():
            tree.put(rel, data)

    infos, ids = [], []
    for p in runs:
        if isinstance(p, RunData):  # an imported trace
            run, p = p, Path(str(p.meta.get("source", p.run_id)))
        elif relabel:
            p = Path(p)
            run = _relabeled(p)
        else:
            p = Path(p)
            run = read_run_dir(p)
        if run.run_id in ids:
            raise BadInput(f"run_id {run.run_id} appears twice ({p})", field="RUN_DIRS", fix="give each run once")
        write_run(tree, run)
        ids.append(run.run_id)
        infos.append(_run_info(p, run, p.parent.name))
        del run
    if split is not None:
        if sorted(split["train"] + split["test"]) != sorted(ids):
            raise BadInput("the split to keep does not name exactly the runs given", field="splits.json", fix="rebuild with faultlab dataset build")
        split = {"seed": seed, "test_fraction": test_fraction, "train": sorted(split["train"]), "test": sorted(split["test"])}
    else:
        split = draw_split(ids, test_fraction, seed) if len(ids) >= 2 else {"seed": seed, "test_fraction": test_fraction, "train": ids, "test": []}
    tree.put("runs.json", json.dumps(infos, indent=1, default=str))
    tree.put("splits.json", json.dumps(split, indent=1))
    tree.put("schema.json", json.dumps(schema_doc(), indent=1))
    tree.put("build.json", json.dumps({"name": name, "description": description, "license": license, "note": source_note,
                                       "test_fraction": test_fraction, "seed": seed, "relabeled": bool(relabel),
                                       "import": coll.provenance["format"] if coll is not None and coll.provenance else None}, indent=1))
    for f in campaign_files:  # contents only: a published file gets mode 0644, not the source's
        tree.put(f"campaign/{safefs.check_name(f.name)}", f.data)
    cfg = _labeler_config()
    meta = card.card_meta(name, infos, split, labeler=cfg, description=description, license=license, source_note=source_note, relabeled=relabel,
                          provenance=coll.provenance if coll is not None else None)
    tree.put("README.md", card.render(meta))
    tree.put("CITATION.cff", card.citation_cff(meta))
    tree.put("croissant.json", json.dumps(croissant.build(meta, tree.digests), indent=1))
    tree.put(manifest.NAME, manifest.text(tree.digests))


def relabel(dataset: str | Path, *, note: str | None = None) -> Path:
    """Re-label every run of a dataset folder with this checkout's labeler and rebuild
    the folder in place: the same runs (their steps, host and injections tables as
    stored), the same split, the same campaign files (those its manifest lists) and card texts (description,
    license, note: from ``build.json``, for a dataset built before it from
    ``croissant.json`` and the card's header), new labels, ``runs.json``, card,
    ``croissant.json`` and ``MANIFEST.sha256``. Runs are read and labeled one at a
    time; the new folder replaces the old only once complete.

    Args:
        dataset: the dataset folder's path (``./NAME``, ``datasets/NAME``, a ``str`` as
            typed): a bare name is refused (:func:`registry.require_folder_path`), as it
            means the published dataset of that name to every command that reads.
        note: a new paragraph for the card's collection section (default: keep it).

    Returns: the dataset folder.
    Raises: BadInput for a bare name, a folder that is no dataset, one whose files differ from its
    ``MANIFEST.sha256``, a run's table that is missing or unreadable, or what the labeler raises for a bad table.
    """
    registry.require_folder_path(dataset, "DATASET")
    ds = Dataset(dataset)
    manifest.require_intact(ds.path, override="", root_fd=ds.fd)  # rebuilt in place: only from the files the build wrote
    ds.check()  # files that do not fit together are refused before a run is relabeled
    st = build_settings(ds)
    if st["import"]:
        raise BadInput(f"{ds.path} was imported from a public trace ({st['import']}): its labels are that importer's, not this labeler's",
                       field="DATASET", fix=f"rebuild it with faultlab dataset build --import {st['import']} (docs/datasets.md)")
    order = [str(r["run_id"]) for r in ds.runs_info()] or ds.run_ids("all")
    if sorted(order) != sorted(ds.run_ids("all")):
        order = ds.run_ids("all")
    with workdirs.private("faultlab-relabel-") as keep:  # named for this process: a SIGKILLed relabel's is removed by the next
        camp = _listed_campaign_files(ds.path, keep, ds.fd)
        runs = (_relabel_run(ds.read_run(rid)) for rid in order)
        return build(runs, ds.name, ds.path.parent, test_fraction=st["test_fraction"], seed=st["seed"], campaign_files=camp,
                     relabel=True, description=st["description"], license=st["license"],
                     source_note=st["note"] if note is None else note, force=True, split=ds.splits)


def _listed_campaign_files(root: Path, keep: Path, root_fd: int | None = None) -> list[Path]:
    """Copies in ``keep`` of the dataset's campaign files that its manifest lists (those
    :func:`manifest.require_intact` checked), each read with no link followed, only when
    a regular file of at most ``inputfile.YAML_BYTES`` (:func:`safefs.read_below`): a
    file the manifest does not list is not the build's and is left out, so a link
    another user adds to ``campaign/`` never brings a file of root's into the rebuilt
    dataset. Raises BadInput naming a listed file that cannot be read so."""
    out = []
    for rel in sorted(manifest.read(root, root_fd)):
        parts = PurePosixPath(rel).parts
        if len(parts) != 2 or parts[0] != "campaign":
            continue
        try:
            data = safefs.read_below(root, rel, inputfile.YAML_BYTES, root_fd)
        except (safefs.UntrustedPath, OSError) as e:
            raise BadInput(f"{root / rel} could not be read ({getattr(e, 'reason', None) or e})", field="DATASET", fix=FIX) from None
        dst = keep / safefs.check_name(parts[1])
        dst.write_bytes(data)
        out.append(dst)
    return out


def build_settings(ds: Dataset) -> dict:
    """The card texts and split settings the dataset ``ds`` was built with (and
    ``import``: the format of a public collection, else None): ``build.json``, or for a
    folder built before it, the description of ``croissant.json``, the license of the
    card's YAML header and the split's seed and fraction (note empty). Each is read
    below the folder ``ds`` holds (:attr:`Dataset.fd`), as its tables are: its name
    swapped for a link meanwhile (to a dataset of root's) never brings that one's card
    texts into the relabeled dataset.

    Raises BadInput naming a file that cannot be read or has the wrong shape."""
    path = ds.path
    if ds.has("build.json"):
        d = read_build(path, ds.fd)
        return {k: d.get(k, v) for k, v in (("description", ""), ("license", "cc-by-4.0"), ("note", ""), ("test_fraction", 0.3), ("seed", 0),
                                            ("import", None))}
    sp = read_splits(path, ds.fd)
    desc = read_croissant(path, ds.fd).get("description", "") if ds.has("croissant.json") else ""
    return {"description": desc, "license": _card_license(path / "README.md", root_fd=ds.fd), "note": "",
            "test_fraction": float(sp.get("test_fraction", 0.3)), "seed": sp.get("seed") or 0, "import": None}


def _card_license(card_path: Path, default: str = "cc-by-4.0", root_fd: int | None = None) -> str:
    """The ``license`` of the card's YAML header (``default`` without a card, a header
    or a license). The card is read with no link followed, only when a regular file of
    at most ``card.CARD_BYTES`` (:func:`faultlab.safefs.read_below`): the dataset may be
    another user's, who may leave ``README.md`` out of its manifest. ``root_fd``: the
    dataset folder's descriptor, read below instead of the folder as named now. Raises
    BadInput naming the card when it or its header cannot be read."""
    try:
        data = safefs.read_below(card_path.parent, card_path.name, card.CARD_BYTES, root_fd)
    except FileNotFoundError:
        return default
    except safefs.UntrustedPath as e:
        raise BadInput(e.reason, field=card_path.name, fix=FIX) from None
    try:
        text = data.decode()
        head = yamlsafe.load(text.split("---", 2)[1]) if text.startswith("---") else {}
    except (ValueError, yaml.YAMLError) as e:  # bad UTF-8 is a ValueError; too deep a yamlsafe.TooDeep
        raise BadInput(f"{card_path}: its YAML header could not be read ({type(e).__name__})", field=card_path.name, fix=FIX) from None
    head = head or {}
    lic = head.get("license", default) if isinstance(head, dict) else None
    if not isinstance(lic, str):
        raise BadInput(f"{card_path}: its YAML header is not a mapping with a string license", field=card_path.name, fix=FIX)
    return lic


def _relabel_run(run):
    """``run`` (RunData) with labels from this checkout's labeler (steps, injections
    and host as given)."""

    run.labels = label(run.steps, injections=run.injections, host=run.host)
    return run


def _relabeled(p: Path):

    rd = RunDir(p)
    steps, inj, host = rd.read_table("steps"), rd.read_table("injections"), rd.read_table("host")
    lab = label(steps, injections=inj, host=host)
    return RunData(str(rd.run_id), steps, host, lab, inj, rd.meta)


def _labeler_config() -> dict:

    try:
        return LabelerConfig().to_dict()
    except Exception:  # a labeler without to_dict: its repr
        return {"repr": repr(LabelerConfig())}
