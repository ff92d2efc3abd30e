"""``MANIFEST.sha256``: one ``sha256sum`` line (``HEX  relative/path``) per file of the
dataset folder except the manifest itself; ``sha256sum -c MANIFEST.sha256`` checks it
too."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path, PurePosixPath

from faultlab import safefs
from faultlab.errors import BadInput, printable

NAME = "MANIFEST.sha256"
#: the card: the dataset's documentation, refreshed in place (its leaderboard section,
#: :func:`faultlab.datasets.card.put_leaderboard`) without changing what is scored;
#: checked like every file, left out of the identity (:func:`digest`)
CARD_FILES = ("README.md", "CITATION.cff")


#: the deepest a dataset's files lie below its folder: faultlab's lie 4 deep
#: (``data/TABLE/run=ID/part-0.parquet``); a folder nested 2,500 deep in a dataset
#: someone handed over ended every walk of it (verify, score, info) in a RecursionError
MAX_DEPTH = 32


def entries(root: Path) -> list[Path]:
    """Every entry below the folder ``root`` that is not a folder (files, links, FIFOs),
    walked without recursion and into no link. Raises BadInput (field ``--dataset``)
    naming a folder more than :data:`MAX_DEPTH` below ``root`` or one that cannot be
    listed."""
    out, stack = [], [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise BadInput(f"its folder {printable(folder.relative_to(root).as_posix(), 200)} lies more than {MAX_DEPTH} folders deep",
                           field="--dataset",
                           fix="remove it: a dataset's files lie 4 folders deep (data/TABLE/run=ID/part-0.parquet)")
        try:
            with os.scandir(folder) as it:
                found = list(it)
        except OSError as e:
            raise BadInput(f"its folder {printable(folder.relative_to(root).as_posix(), 200)} could not be listed "
                           f"({e.strerror or type(e).__name__})", field="--dataset",
                           fix="remove it, or restore the dataset") from None
        for e in found:
            if e.is_dir(follow_symlinks=False):
                stack.append((Path(e.path), depth + 1))
            else:
                out.append(Path(e.path))
    return out


def _files(root: Path) -> list[Path]:
    return sorted(p for p in entries(root) if p.is_file() and p.name != NAME and not any(part.startswith(".") for part in p.relative_to(root).parts))


def _held(root: Path, root_fd: int | None) -> Path:
    """The folder to list and measure: ``root`` as named, or the folder ``root_fd``
    holds (whatever ``root`` names now)."""
    return root if root_fd is None else Path(f"/proc/self/fd/{root_fd}")


#: the largest dataset file hashed (bytes): a part file is MBs, a sparse file of
#: terabytes listed in the manifest is refused, not hashed for hours
MAX_FILE_BYTES = 1 << 32
#: the most bytes the files a manifest lists may hold all together (the published
#: datasets are MBs): each file is bounded, not their number, and a manifest listing any
#: number of sparse files just under 4 GiB (no disk) had root hash every one
MAX_DATASET_BYTES = 1 << 36


def sha256(p: Path, root: Path | None = None, root_fd: int | None = None) -> str:
    """The sha256 (hex) of file ``p``; below ``root`` when given, opened with no link
    followed and only when a regular file of at most :data:`MAX_FILE_BYTES`
    (:func:`faultlab.safefs.open_below`: UntrustedPath naming it otherwise)."""
    h = hashlib.sha256()
    src = safefs.open_below(root, Path(p).relative_to(root).as_posix(), MAX_FILE_BYTES, root_fd) if root is not None else open(p, "rb")
    with src as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def text(digests: dict[str, str]) -> str:
    """The manifest of the files ``digests`` names (``{relative/path: hex digest}``, as
    written; hidden files left out as :func:`verify` leaves them out), sorted by path.
    The caller writes it as ``NAME`` in the dataset folder."""
    keep = [rel for rel in digests if not any(part.startswith(".") for part in PurePosixPath(rel).parts) and PurePosixPath(rel).name != NAME]
    return "\n".join(f"{digests[rel]}  {rel}" for rel in sorted(keep, key=PurePosixPath)) + "\n"


#: the largest MANIFEST.sha256 read (bytes): a line of about 100 bytes a file, so
#: room for some 160,000 files; a larger (or sparse) one is refused unread
MAX_MANIFEST_BYTES = 16 << 20


def _manifest_text(root: Path, root_fd: int | None = None) -> str:
    """The text of ``root/MANIFEST.sha256``, read with no link followed and only when a
    regular file of at most :data:`MAX_MANIFEST_BYTES` (:func:`faultlab.safefs.read_below`).
    Raises BadInput (field ``MANIFEST.sha256``) naming it otherwise."""
    p = root / NAME
    try:
        data = safefs.read_below(root, NAME, MAX_MANIFEST_BYTES, root_fd)
    except (FileNotFoundError, NotADirectoryError):
        raise BadInput(f"{p} is missing", field=NAME, fix="rebuild the dataset, or restore the file") from None
    except safefs.UntrustedPath as e:
        raise BadInput(e.reason, field=NAME, fix=e.fix) from None
    except OSError as e:
        raise BadInput(f"{p} could not be read ({e.strerror or type(e).__name__})", field=NAME, fix="restore the file") from None
    try:
        return data.decode()
    except UnicodeDecodeError as e:
        raise BadInput(f"{p} could not be read ({type(e).__name__})", field=NAME, fix="restore the file") from None


def digest(root: str | Path, root_fd: int | None = None) -> str:
    """The dataset's identity: the sha256 (hex) of its ``MANIFEST.sha256`` lines
    for the data files (every line but the card's, ``CARD_FILES``), which name each
    file's digest, so two folders with the same data have the same digest wherever
    they lie and whatever their card says. Raises BadInput (field
    ``MANIFEST.sha256``) when it is missing or cannot be read (a link, no regular
    file, over :data:`MAX_MANIFEST_BYTES`)."""
    lines = _manifest_text(Path(root), root_fd).splitlines()
    data = [line for line in lines if line.partition("  ")[2] not in CARD_FILES]
    return hashlib.sha256(("\n".join(data) + "\n").encode()).hexdigest()


def read(root: Path, root_fd: int | None = None) -> dict[str, str]:
    """relative path -> hex digest. Raises BadInput (field ``MANIFEST.sha256``) when
    it is missing, cannot be read (a link, no regular file, over
    :data:`MAX_MANIFEST_BYTES`) or a line is malformed."""
    out = {}
    for i, line in enumerate(_manifest_text(Path(root), root_fd).splitlines(), 1):
        if not line.strip():
            continue
        h, sep, rel = line.partition("  ")
        if not sep or len(h) != 64 or any(c not in "0123456789abcdef" for c in h):
            raise BadInput(f"line {i} is not 'SHA256  PATH'", field=NAME, fix="restore the file")
        out[rel] = h
    return out


def verify(root: str | Path, root_fd: int | None = None) -> dict[str, list[str]]:
    """Check every file against the manifest.

    Returns: ``{"changed": [...], "missing": [...], "extra": [...]}`` (relative paths;
    all empty = intact). Raises BadInput when the manifest is missing or malformed, or
    naming a listed file that is a link, no regular file, or larger than
    :data:`MAX_FILE_BYTES` (never hashed), or when the files it lists hold more than
    :data:`MAX_DATASET_BYTES` all together (none hashed). ``root_fd``: the folder
    ``root`` named when it was opened (:func:`faultlab.safefs.open_below`), checked
    instead of ``root`` as named now."""
    root = Path(root)
    want = read(root, root_fd)
    held = _held(root, root_fd)
    have = {p.relative_to(held).as_posix(): root / p.relative_to(held) for p in _files(held)}
    _check_total(root, [held / rel for rel in want if rel in have])
    try:
        changed = sorted(rel for rel, h in want.items() if rel in have and sha256(have[rel], root, root_fd) != h)
    except safefs.UntrustedPath as e:
        raise BadInput(e.reason, fix=e.fix) from None
    missing = sorted(rel for rel in want if rel not in have)
    extra = sorted(rel for rel in have if rel not in want)
    return {"changed": changed, "missing": missing, "extra": extra}


#: how ``score`` uses a dataset as it is (the default advice of :func:`require_intact`)
SCORE_OVERRIDE = "or pass --no-verify (faultlab_score(..., verify=False)) to use it as it is"


def require_intact(root: str | Path, override: str = SCORE_OVERRIDE, ignore: tuple = (), root_fd: int | None = None) -> dict[str, str]:
    """Refuse a dataset whose files differ from its manifest, before anything reads it
    (a changed file that still decodes would otherwise be scored without a word).
    Returns the manifest's digests (relative path -> hex), which the files matched: a
    reader pins them (:meth:`faultlab.datasets.layout.Dataset.pin`) so that what it
    reads later is what was checked here.

    Raises BadInput (exit 2, field ``--dataset``) naming the first changed or missing
    file (and how many more), or when ``MANIFEST.sha256`` is missing or malformed.
    Files the manifest does not list are not judged (scoring never reads them).
    ``override``: the advice on using the dataset anyway ("" for a command that has
    no such option); ``ignore``: files whose change is not judged (the card, for scoring);
    ``root_fd``: as :func:`verify`'s (the folder a reader holds and reads)."""
    root = Path(root)
    skip = override or "then run it again"
    try:
        want = read(root, root_fd)
    except BadInput as e:
        raise BadInput(f"{root}: cannot verify the dataset: {e}", field="--dataset",
                       fix=f"restore MANIFEST.sha256 or rebuild the dataset, {skip}") from None
    r = verify(root, root_fd)  # a listed file that is a link, no regular file or too large: BadInput naming it
    parts = []
    for kind in ("changed", "missing"):
        files = [f for f in r[kind] if f not in ignore]
        if files:
            more = f" (and {len(files) - 3} more)" if len(files) > 3 else ""
            parts.append(f"{', '.join(files[:3])}{more} {'is' if len(files) == 1 else 'are'} {kind}")
    if parts:
        raise BadInput(f"{root}: {'; '.join(parts)} since MANIFEST.sha256 was written", field="--dataset",
                       fix=f"restore the file(s) or rebuild the dataset (faultlab dataset verify {root} lists them all), {skip}")
    return want


def _check_total(root: Path, files: list[Path]) -> None:
    """Raise BadInput (field ``MANIFEST.sha256``) when the regular ``files`` (lstat: a
    link counts nothing; it is refused when hashed) hold more than
    :data:`MAX_DATASET_BYTES` all together, before any is hashed."""
    total = 0
    for p in files:
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_size <= MAX_FILE_BYTES:  # a larger one is refused by name when hashed
            total += st.st_size
        if total > MAX_DATASET_BYTES:  # (the sum is not shown: a linked folder may hold root's files)
            break
    if total > MAX_DATASET_BYTES:
        raise BadInput(f"{root}: the files {NAME} lists hold more than {MAX_DATASET_BYTES} bytes all together "
                       "(the most faultlab hashes of one dataset)", field=NAME,
                       fix="rebuild the dataset, or check it with sha256sum -c MANIFEST.sha256 if its size is what you expect")
