"""A lease record another user writes holds up to 1 MiB, its ``target``, ``node`` and
``fault_type`` any text: root's ``status`` shows each such field cut at
``errors.FIELD_CHARS`` characters. Printed whole, one record's million-character target
kept rich's line wrapping busy for hours (40 such records of nobody's: root's
``faultlab status`` still printing after 14 minutes).

Real: nobody writes the records in its default lease folder; root's ``status`` runs in
the sandbox of ``tests.helpers.sandboxed_root_beside_records`` (private namespaces,
fresh tmpfs over faultlab's host-wide places), so it sees only them."""

from __future__ import annotations

import shutil
import sys

import pytest

from faultlab.errors import FIELD_CHARS
from tests.helpers import NOBODY_LEASES, needs_root, sandboxed_root_beside_records

pytestmark = [needs_root, pytest.mark.skipif(not shutil.which("unshare") or not shutil.which("setpriv"),
                                             reason="needs unshare and setpriv (util-linux)")]

# as nobody: five records with a target of a million characters; then root's status
_HUGE_THEN_STATUS = r"""
setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c '
import json, os, sys
d = sys.argv[1]
for i in range(5):
    fid = "process-%06x" % (0xa0 + i)
    with open(os.path.join(d, fid + ".json"), "w") as f:
        json.dump({"fault_id": fid, "deadline_ts": 4102444800, "created_ts": 1, "fault_type": "process-pause" + "T" * 300,
                   "node": "local", "target": "A" * 1000000, "revert": ["true"]}, f)
' "$1"
shift
exec timeout 120 "$@" status
"""


def test_status_shows_a_users_huge_record_fields_cut():
    cp = sandboxed_root_beside_records(0, ["sh", "-c", _HUGE_THEN_STATUS, "sh", NOBODY_LEASES, sys.executable, "-P", "-m", "faultlab.cli"],
                                       timeout=300)
    assert cp.returncode == 0, (cp.returncode, cp.stdout[-1000:], cp.stderr[-1000:])
    lines = [ln for ln in cp.stdout.splitlines() if ln.startswith("process-0000a")]
    assert len(lines) == 5, cp.stdout[-2000:]
    for ln in lines:
        assert len(ln) < 4 * FIELD_CHARS + 300 and "A" * FIELD_CHARS + "..." in ln and "T" * 300 not in ln, ln[:400]
