"""Finding published datasets by name: ``faultlab dataset list``, ``faultlab score
--dataset NAME`` and the pytest plugin's ``faultlab_score(det, NAME)``.

Where: the folders of ``$FAULTLAB_DATASETS`` (``os.pathsep``-separated) when it is set;
otherwise the installed package's data (the import package ``faultlab.published``,
which is the checkout's ``datasets/`` folder: the published datasets ship inside the
faultlab wheel as package data), then ``./datasets`` when it is a trusted folder
(:func:`local_problem`: owned by root or the caller all the way from ``/``, closed
to others, no symlink; so root in another user's folder never takes their dataset
for the name it asked for). Each folder is searched once: one reached by two paths
(the package data and ``./datasets`` from a checkout's root, a link) counts at its first
place. The first folder holding ``NAME/splits.json`` wins. The public collections a user builds
(``examples/public/build.sh``) are found the same way, in the checkout's ``datasets/``
or a folder of ``$FAULTLAB_DATASETS``; the wheel never holds them (docs/datasets.md).

Package data, not a separate ``faultlab-datasets`` wheel: one ``pip install faultlab``
gives the scorer and the data it scores on, at the versions that belong together
(a relabel with a new labeler ships with that labeler), and the datasets are small
(Parquet with zstd; the card says each one's size). Should they outgrow a wheel, the
same import package ``faultlab.published`` can move into a wheel of its own and every
lookup here stays as it is.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import faultlab
from faultlab import safefs
from faultlab.errors import BadInput

#: the import package whose folder holds the published datasets (package data)
PACKAGE = "faultlab.published"


def package_dir() -> Path | None:
    """The folder of the installed ``faultlab.published`` package data: found by import
    (a wheel install puts it in ``faultlab/published/``), else, for faultlab run from a
    checkout (an editable install, whose finder maps no data folder under a package),
    the checkout's ``datasets/``; None without either."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    locs = list(spec.submodule_search_locations or []) if spec else []
    if locs:
        return Path(locs[0])
    checkout = Path(faultlab.__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file() and (checkout / "datasets").is_dir():
        return checkout / "datasets"
    return None


#: the working folder's datasets, searched last when trusted (:func:`local_problem`)
LOCAL = Path("datasets")


def local_problem() -> str | None:
    """Why ``./datasets`` is not searched (one line), or None when it is searched: it
    must be a trusted folder (:func:`faultlab.safefs.check_dir`: every component from
    ``/`` owned by root or the caller, not writable by group or others but a root
    sticky parent such as ``/tmp``, no symlink). A name looked up there is then one
    that only root or the caller can have put there, wherever the caller stands (a
    shared folder of another user's). A missing folder is no problem and not searched."""
    try:
        safefs.check_dir(LOCAL.absolute())
    except FileNotFoundError:
        return None
    except (safefs.UntrustedPath, OSError) as e:
        return f"./datasets is not searched: {getattr(e, 'reason', None) or e}"
    return None


def roots() -> list[Path]:
    """The folders searched for datasets by name, in order (the module docstring), each
    folder once (:func:`distinct`: from a checkout's root the package data and
    ``./datasets`` are one folder)."""
    env = os.environ.get("FAULTLAB_DATASETS")
    if env:
        return distinct([Path(p) for p in env.split(os.pathsep) if p])
    pkg = package_dir()
    local = [LOCAL] if local_problem() is None else []
    return distinct(([pkg] if pkg else []) + local)


def identity(path: Path) -> tuple[int, int] | None:
    """``(device, inode)`` of the folder ``path`` names (links followed), None when it
    cannot be looked at: what tells one folder reached by two names."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def distinct(paths: list[Path]) -> list[Path]:
    """``paths`` in order without those naming a folder an earlier one names (same
    device and inode); a path that cannot be looked at is kept (nothing is found there)."""
    seen: set[tuple[int, int]] = set()
    out = []
    for p in paths:
        key = identity(p)
        if key is not None and key in seen:
            continue
        if key is not None:
            seen.add(key)
        out.append(p)
    return out


def is_dataset(path: Path) -> bool:
    return (Path(path) / "splits.json").is_file()


def is_bare_name(name: str | os.PathLike) -> bool:
    """Whether ``name`` is a dataset name rather than a path: one component, not
    starting with ``.`` (``./x`` and ``dir/x`` are paths)."""
    return len(Path(name).parts) == 1 and not str(name).startswith(".")


def published(name: str | os.PathLike) -> Path | None:
    """``ROOT/name`` in the first of :func:`roots` that holds dataset ``name`` when
    ``name`` is a bare name (:func:`is_bare_name`), else None. A published name wins
    over a folder of that name in the working folder, which whoever may write there
    can have put: ``./NAME`` names that folder."""
    if not is_bare_name(name):
        return None
    for r in roots():
        if is_dataset(r / name):
            return r / name
    return None


def find(name: str | os.PathLike) -> Path:
    """The folder of dataset ``name``: :func:`published` for a bare name, else
    ``name`` itself when it is a dataset folder. Raises BadInput (field
    ``--dataset``) naming every folder looked in.

    ``name`` as the user typed it (a ``str``): ``Path("./NAME")`` is ``NAME``, a
    bare name, so a command that converts what it was given to a Path first looks
    up the published dataset the user's ``./NAME`` did not mean."""
    p = Path(name)
    if (hit := published(name)) is not None:
        return hit
    if is_dataset(p):
        return p
    tried = [str(r / p) for r in roots()] if is_bare_name(name) else []
    where = f"looked in {', '.join(tried)}" if tried else "it is not a dataset folder"
    if tried and not os.environ.get("FAULTLAB_DATASETS") and (why := local_problem()):
        where += f"; {why}"
    raise BadInput(f"dataset {str(name)!r} not found ({where})", field="--dataset",
                   fix="give a dataset folder, or a name from faultlab dataset list (set FAULTLAB_DATASETS to add folders)")


#: what a command that writes into a dataset folder says to one given a bare name
PATH_FIX = "give the folder's path, e.g. ./{name} or datasets/{name}"


def require_folder_path(name: str | os.PathLike, field: str) -> None:
    """Refuse a bare name (:func:`is_bare_name`) given to a command that writes into
    the dataset folder it names (``dataset relabel``, ``leaderboard --card``): to every
    command that reads, a bare name is the published dataset of that name (the
    installed package's data or a folder of ``$FAULTLAB_DATASETS``), never the folder
    of that name in the working folder, so a writer taking it would either rewrite the
    published data or act on another folder than ``dataset info NAME`` describes. A
    path (``./NAME``, ``datasets/NAME``) names the folder and is written; a published
    dataset is rewritten only through its folder's path.

    Raises BadInput (field ``field``) naming the fix, the published folder of that
    name when there is one."""
    if not is_bare_name(name):
        return
    hit = published(name)
    means = f"the published dataset at {hit}" if hit is not None else "a published dataset, looked up by name"
    raise BadInput(f"{str(name)!r} is a bare name, which means {means} to the commands that read; "
                   "a command that writes into a dataset takes its folder's path", field=field,
                   fix=PATH_FIX.format(name=str(name)))


def list_datasets() -> list[dict]:
    """Every dataset found in :func:`roots`, each folder once (a dataset folder reached
    again through a link is left out): ``name``, ``path``, ``root``; the first of a
    name wins (what ``--dataset NAME`` scores), a later, different folder of that name
    is listed with ``shadowed`` true and ``shadowed_by``, the winner's path."""
    winner: dict[str, str] = {}
    folders: set[tuple[int, int]] = set()
    out = []
    for r in roots():
        if not r.is_dir():
            continue
        for d in sorted(r.iterdir()):
            if not (d.is_dir() and is_dataset(d)):
                continue
            key = identity(d)
            if key is not None and key in folders:
                continue
            if key is not None:
                folders.add(key)
            out.append({"name": d.name, "path": str(d), "root": str(r), "shadowed": d.name in winner,
                        "shadowed_by": winner.get(d.name)})
            winner.setdefault(d.name, str(d))
    return out
