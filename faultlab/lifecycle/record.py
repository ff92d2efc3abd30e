"""Lease records: which ids they carry, their schema, where root's live, and the
one-line error for a lease folder that cannot be used. Shared by the leases of this
host (``lease``) and of ssh nodes (``lease_remote``)."""

from __future__ import annotations

import errno
import math
import re

from faultlab.errors import NodeError

#: lease ids: fault ids (``nic-3f9a1c``) and testbed leases (``testbed-1a2b``)
LEASE_ID = re.compile(r"^[a-z]+-[0-9a-f]{4,12}$")
#: root's lease folder: read by every user's ``faultlab status`` (one view of the host)
ROOT_LEASE_DIR = "/run/faultlab/leases"


def _fix_for(err: OSError, folder: str) -> str:
    e = err.errno
    if e == errno.ENOSPC or e == errno.EDQUOT:
        return f"free space in {folder}, or point FAULTLAB_LEASE_DIR at a folder with room; nothing was applied"
    if e == errno.EROFS:
        return f"{folder} is on a read-only mount: remount it read-write or point FAULTLAB_LEASE_DIR at a writable private folder; nothing was applied"
    if e in (errno.EACCES, errno.EPERM):
        return f"run as the folder's owner (root for {ROOT_LEASE_DIR}) or point FAULTLAB_LEASE_DIR at a private folder of yours; nothing was applied"
    return "point FAULTLAB_LEASE_DIR at a writable private folder; nothing was applied"


def lease_folder_error(err: OSError, folder: str, what: str) -> NodeError:
    """The one-line error for a lease folder that cannot be used (``what`` failed)."""
    why = err.strerror or str(err)
    name = errno.errorcode.get(err.errno or 0, "")
    return NodeError(f"lease folder {folder}: cannot {what}: {why}{f' ({name})' if name else ''}",
                     field="FAULTLAB_LEASE_DIR", fix=_fix_for(err, folder))


def valid_record(rec, name: str | None = None) -> str | None:
    """Why ``rec`` (parsed JSON) is not a lease record, or None when it is one: a
    dict with a ``fault_id`` matching LEASE_ID (and the file name), string fields,
    a numeric deadline, and a list of string revert lines."""
    if not isinstance(rec, dict):
        return "not a JSON object"
    fid = rec.get("fault_id")
    if not isinstance(fid, str) or not LEASE_ID.match(fid):
        return "no valid fault_id"
    if name is not None and name != f"{fid}.json":
        return f"its fault_id {fid} does not match its file name"
    dl = rec.get("deadline_ts")
    if not _finite(dl):
        return "no numeric deadline_ts (a finite number of unix seconds)"
    rv = rec.get("revert", [])
    if not isinstance(rv, list) or not all(isinstance(x, str) for x in rv):
        return "revert is not a list of command lines"
    for k in ("fault_type", "node", "target"):
        if rec.get(k) is not None and not isinstance(rec.get(k), str):
            return f"{k} is not a string"
    ts = rec.get("created_ts")  # records are sorted by it
    if ts is not None and not _finite(ts):
        return "created_ts is not a number"
    return None


def _finite(x) -> bool:
    """Whether ``x`` is a JSON number a float can hold: not a bool, not NaN or
    infinite, and not an integer too large for a float (``10**400`` is valid JSON)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(float(x))
    except OverflowError:
        return False
