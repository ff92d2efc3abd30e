"""Work folders and temporaries of one faultlab process, named for that process, and
the sweep of those whose process is gone.

A process killed with SIGKILL removes nothing: the out-of-core labeler's maps folder
(about 32 bytes a rank-step, some 32 GB for a run of 1e9) and its cluster's scratch
folder, ``relabel``'s copies of a dataset's campaign files, ``write_together``'s private
folder and the temporaries it stages in a run folder, a steps table's block folder
and staged file in a run folder (``steptable``), the node image's debootstrap folder
(some 300 MB) and the chaos test's state folder all stay. Each name carries its
maker's PID and start time (``PREFIX<pid>-<start>-<random>``: :func:`make`,
:func:`tag`), so the next process of the same user that makes one with that prefix
removes those whose maker no longer runs, and never one of a live process (a PID
reused since has another start time).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
import tempfile
from pathlib import Path
from typing import Iterator

from faultlab import procid, safefs

#: the random part of a folder's name (``tempfile.mkdtemp``'s 8 characters) and of a
#: staged temporary's (``safefs.TrustedDir.stage``: 12 hex digits)
_RANDOM = {False: r"[a-z0-9_]{8}", True: r"[0-9a-f]{12}"}


def tag() -> str:
    """``<pid>-<start>-``: this process's PID and start time, the part of a name
    :func:`sweep` reads its maker from."""
    return f"{os.getpid()}-{procid.starttime() or 0}-"


def make(parent: str | os.PathLike, prefix: str) -> str:
    """A fresh 0700 folder in ``parent`` named ``PREFIX<pid>-<start>-<random>`` for this
    process (``tempfile.mkdtemp``). Returns its path."""
    return tempfile.mkdtemp(prefix=f"{prefix}{tag()}", dir=parent)


#: the characters of a folder name's random part (``tempfile.mkdtemp``'s, which :func:`sweep` matches)
_RANDOM_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"


def fresh_name(prefix: str) -> str:
    """A name ``PREFIX<pid>-<start>-<random>`` for this process, as :func:`make` names
    its folders (so :func:`sweep` removes it once this process is gone), for a caller
    that makes the folder itself."""
    return f"{prefix}{tag()}" + "".join(secrets.choice(_RANDOM_CHARS) for _ in range(8))


@contextlib.contextmanager
def private(prefix: str, parent: str | os.PathLike | None = None) -> Iterator[Path]:
    """A fresh 0700 folder of this process in ``parent`` (the temporary folder when
    None; :func:`make`), for the ``with`` block; those of its prefix whose maker is
    gone are removed first (:func:`sweep`), this one at the block's end (through
    descriptors, no link followed), as ``tempfile.TemporaryDirectory`` would."""
    parent = tempfile.gettempdir() if parent is None else os.fspath(parent)
    sweep(parent, prefix)
    path = Path(make(parent, prefix))
    try:
        yield path
    finally:
        with contextlib.suppress(OSError), safefs.open_dir_nofollow(path.parent) as folder:
            folder.remove_tree(path.name)


def sweep(parent, prefix: str, *, files: str | None = None) -> list[str]:
    """Remove the folders :func:`make` made in ``parent`` (a path, or a folder open as
    ``safefs.TrustedDir``) with ``prefix`` whose maker is gone (its PID and start time no
    longer run): only real folders (no link) owned by this user, each removed through
    descriptors with no link followed (``TrustedDir.remove_tree``). With ``files`` (a
    suffix), the regular files named ``PREFIX`` :func:`tag` ``<12 hex>FILES`` instead
    (temporaries staged with that tag). Returns the names removed; what cannot be
    listed or removed is left as it is (raises nothing)."""
    if isinstance(parent, safefs.TrustedDir):
        return _sweep_in(parent, prefix, files)
    try:
        folder = safefs.open_dir_nofollow(os.path.abspath(parent))
    except OSError:  # UntrustedPath is an OSError too: a link on the path is not swept through
        return []
    with folder:
        return _sweep_in(folder, prefix, files)


def _sweep_in(folder: safefs.TrustedDir, prefix: str, files: str | None) -> list[str]:
    name_re = re.compile(re.escape(prefix) + r"([1-9][0-9]{0,9})-([0-9]{1,20})-" + _RANDOM[files is not None]
                         + re.escape(files or ""))
    kind = stat.S_ISDIR if files is None else stat.S_ISREG
    gone: list[str] = []
    try:
        names = folder.listdir()
    except OSError:
        return gone
    for name in names:
        m = name_re.fullmatch(name)
        if not m:
            continue
        st = folder.lstat(name)
        if st is None or not kind(st.st_mode) or st.st_uid != os.geteuid():
            continue
        if procid.alive(int(m.group(1)), int(m.group(2)) or None):
            continue
        with contextlib.suppress(OSError):
            if files is None:
                folder.remove_tree(name)
            else:
                os.unlink(name, dir_fd=folder.fd)
            gone.append(name)
    return gone
