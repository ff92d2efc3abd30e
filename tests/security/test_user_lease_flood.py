"""Another user's lease folder full of made-up records (valid records of faults that do
not exist; no process needed) costs root's ``recover`` and ``status`` a bounded read:
at most ``MAX_USER_RECORDS`` records of that folder, named in one problem line, and two
host views per sweep whatever the number of faults (not one a fault).

Real: the records are written by ``nobody`` (65534) in its default lease folder
``/run/user/65534/faultlab/leases``; root's sweep runs in private PID, mount and
network namespaces (``unshare``) with fresh tmpfs over faultlab's host-wide places,
so it sees only this test's records and never another agent's faults."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from faultlab.lifecycle.hostview import MAX_USER_RECORDS
from tests.helpers import NOBODY_LEASES, needs_root, sandboxed_root_beside_records

pytestmark = [needs_root, pytest.mark.skipif(not shutil.which("unshare") or not shutil.which("setpriv"),
                                             reason="needs unshare and setpriv (util-linux)")]

NOBODY = 65534

# root's recover sweep, counting the host views it reads, then status as it prints
_SWEEP = r"""
import io, json
from rich.console import Console
from faultlab.lifecycle import commands, hostrevert, hostview, views
calls = []
real = hostview.host_view
def counted(*a, **k):
    calls.append(1)
    return real(*a, **k)
hostrevert.host_view = views.host_view = counted
done, refused, held = commands.revert_faults(None, mode="recover")
sweep_views = len(calls)
rows, problems = commands.status_rows()
out = io.StringIO()
commands.print_status(rows, [], Console(file=out, width=400))
print(json.dumps({"host_views": sweep_views, "done": sum(d["uid"] == 65534 for d in done),
                  "rows": sum(r["uid"] == 65534 for r in rows), "problems": problems,
                  "status": [ln for ln in out.getvalue().splitlines() if "(uid 65534" in ln]}))
"""


def _root_sweep(n: int) -> dict:
    """Root's recover and status over ``n`` made-up records of nobody's, in the sandbox."""
    cp = sandboxed_root_beside_records(n, [sys.executable, "-c", _SWEEP])
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    return json.loads(cp.stdout.splitlines()[-1])


def test_a_users_made_up_records_cost_root_a_bounded_read_and_two_host_views():
    n = MAX_USER_RECORDS + 44
    got = _root_sweep(n)
    folder = NOBODY_LEASES
    # two host views for the whole sweep (the faults in force, then what is left)
    assert got["host_views"] == 2, got["host_views"]
    # at most MAX_USER_RECORDS of the folder read, and one line says so, naming it
    assert got["done"] == MAX_USER_RECORDS and got["rows"] == MAX_USER_RECORDS
    capped = [p for p in got["problems"] if folder in p and f"more than {MAX_USER_RECORDS}" in p]
    assert len(capped) == 1, got["problems"][:5]
    # status tells root that nobody's record is nobody's to end, not "run faultlab recover"
    assert got["status"] and all(f"faultlab recover as uid {NOBODY}" in ln and "run faultlab recover" not in ln
                                 for ln in got["status"]), got["status"][:3]
