"""Work folders of one labeling process (the out-of-core labeler's memory maps, its
embedded Dask cluster's scratch), named for that process, and the sweep of those whose
process is gone.

A labeler killed with SIGKILL removes nothing: its maps folder (about 32 bytes a
rank-step, some 32 GB for a run of 1e9) stays in the run folder or the temporary
folder, and its cluster's scratch folder in the temporary folder. Each folder's name
carries its maker's PID and start time (``PREFIX<pid>-<start>-<random>``), so the next
labeler of the same user removes those whose maker no longer runs, and never one of a
live labeler (a PID reused since has another start time).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile

from faultlab import procid, safefs


def make(parent: str | os.PathLike, prefix: str) -> str:
    """A fresh 0700 folder in ``parent`` named ``PREFIX<pid>-<start>-<random>`` for this
    process (``tempfile.mkdtemp``). Returns its path."""
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-{procid.starttime() or 0}-", dir=parent)


def sweep(parent: str | os.PathLike, prefix: str) -> list[str]:
    """Remove the folders :func:`make` made in ``parent`` with ``prefix`` whose maker is
    gone (its PID and start time no longer run): only real folders (no link) owned by
    this user, each removed through descriptors with no link followed
    (``TrustedDir.remove_tree``). Returns the names removed; what cannot be listed or
    removed is left as it is (raises nothing)."""
    name_re = re.compile(re.escape(prefix) + r"([1-9][0-9]{0,9})-([0-9]{1,20})-[a-z0-9_]{8}")
    gone = []
    try:
        folder = safefs.open_dir_nofollow(os.path.abspath(parent))
    except OSError:  # UntrustedPath is an OSError too: a link on the path is not swept through
        return gone
    with folder:
        try:
            names = folder.listdir()
        except OSError:
            return gone
        for name in names:
            m = name_re.fullmatch(name)
            if not m:
                continue
            st = folder.lstat(name)
            if st is None or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                continue
            if procid.alive(int(m.group(1)), int(m.group(2)) or None):
                continue
            with contextlib.suppress(OSError):
                folder.remove_tree(name)
                gone.append(name)
    return gone
