"""The one reader of the files a user names as input: scenarios and campaigns,
inventories, ``--campaign-file``, peer-group mappings, score baselines, leaderboard
files to verify, scores files to report, a campaign's ``campaign.json`` and a trace's
meta file.

A name can be anything: a FIFO (reading it waits for a writer for ever), a device
(``/dev/zero`` never ends; opening some has effects), a folder, or a regular file of
gigabytes (a YAML parser holds a node per value: 4 MiB of YAML took 1.4 GiB and
minutes). :func:`read_text` refuses each in one line before reading anything of it:
the path is checked with ``stat``, opened non-blocking without becoming a
controlling terminal, checked again on the open descriptor (what is read is what was
checked), and read to at most its limit.

Limits (far above any real input of each kind): :data:`YAML_BYTES` for YAML, whose
pure-Python parse costs about 350 bytes of memory per byte of text; :data:`JSON_BYTES`
for JSON and CSV files, parsed in C.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from faultlab import safefs
from faultlab.errors import BadInput

#: the largest YAML input read (scenario, campaign, inventory, campaign file, trace meta)
YAML_BYTES = 1 << 20
#: the largest JSON or CSV input read (baselines, scores files, peer groups, campaign.json)
JSON_BYTES = 16 << 20
#: the largest data file of an imported trace opened (the public traces' files are MBs;
#: a sparse file of terabytes is refused unopened)
DATA_BYTES = 1 << 34

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket"))


def _size_text(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"


def _check(p: Path, st: os.stat_result, field: str, limit: int, fix: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise BadInput(f"{p} is {kind}, not a regular file: nothing of it was read", field=field,
                       fix=f"{fix} (save the input to a regular file first)")
    if st.st_size > limit:
        raise BadInput(f"{p} holds {st.st_size} bytes, over the {_size_text(limit)} an input file of this kind may hold", field=field,
                       fix=f"{fix}; nothing of it was read")


def read_text(path: str | Path, field: str, *, limit: int, fix: str) -> str:
    """The UTF-8 text of the input file ``path``, refused before any of it is read
    when it is not a regular file (a FIFO, device, folder, socket) or holds more than
    ``limit`` bytes (:data:`YAML_BYTES`, :data:`JSON_BYTES`). A link is followed (the
    user named it); the file opened is checked again on its descriptor, and a file
    that grows past ``limit`` while read is refused too.

    Raises BadInput (field ``field``, fix ``fix``) naming the path and what is wrong:
    missing or unreadable (the OS error), not a regular file, too large, not UTF-8."""
    p = Path(path)
    try:
        _check(p, os.stat(p), field, limit, fix)
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        raise BadInput(f"cannot read {p}: {e.strerror or e}", field=field, fix=fix) from None
    try:
        with os.fdopen(fd, "rb") as f:
            _check(p, os.fstat(f.fileno()), field, limit, fix)
            data = f.read(limit + 1)
    except OSError as e:
        raise BadInput(f"cannot read {p}: {e.strerror or e}", field=field, fix=fix) from None
    if len(data) > limit:
        raise BadInput(f"{p} grew past {_size_text(limit)} while read", field=field, fix=fix)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"{p} is not UTF-8 text (byte {e.start})", field=field, fix=f"{fix}, saved as UTF-8") from None


def open_data(path: str | Path, field: str, *, below: str | Path | None = None, limit: int = DATA_BYTES):
    """A binary file object of the data file ``path`` of a trace to import (CSV,
    Parquet, a license or answer file), a folder someone else may have handed over:
    opened with no link on any component below ``below`` (default: ``path``'s own
    folder, so no link at its name), only when a regular file of at most ``limit``
    bytes (:func:`faultlab.safefs.open_below`): a link left in the folder never makes
    faultlab read a file its owner could not, and a FIFO or device is never opened.

    Raises BadInput (field ``field``) naming the file and what is wrong."""
    p = Path(path)
    root = Path(below) if below is not None else p.parent
    try:
        return safefs.open_below(root, p.relative_to(root).as_posix(), limit)
    except safefs.UntrustedPath as e:
        raise BadInput(e.reason, field=field, fix="give the trace's own files as published: faultlab reads them only as regular files, never through links") from None
    except OSError as e:
        raise BadInput(f"cannot read {p}: {e.strerror or e}", field=field) from None
