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

from faultlab.lifecycle.hostview import MAX_USER_FOLDERS, MAX_USER_RECORDS
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


# nobody makes 4 folders of 100 made-up records each, and one look-alike watchdog (a
# session leader whose argv is a watchdog's) holding each folder on its descriptor 3;
# then root's status reads the host view
_FOLDERS = r"""
set -e
for k in 0 1 2 3; do
  setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c '
import json, os, sys
d = "/run/user/65534/flood/d" + sys.argv[1]
os.makedirs(d, mode=0o700, exist_ok=True)
os.chmod(os.path.dirname(d), 0o700)
for i in range(100):
    fid = "process-%s%05x" % (sys.argv[1], i)
    with open(os.path.join(d, fid + ".json"), "w") as f:
        json.dump({"fault_id": fid, "deadline_ts": 4102444800, "created_ts": 1, "fault_type": "process-pause",
                   "node": "local", "target": "pid:1", "revert": ["true"]}, f)
    os.chmod(os.path.join(d, fid + ".json"), 0o600)
' $k
  setpriv --reuid=65534 --regid=65534 --clear-groups setsid sh -c 'sleep 300; :' faultlab-watchdog nic-a00$k 9999999999 3 3</run/user/65534/flood/d$k &
done
sleep 1
exec "$@"
"""

_STATUS = r"""
import json
from faultlab.lifecycle import commands
rows, problems = commands.status_rows()
print(json.dumps({"rows": sum(r["uid"] == 65534 for r in rows), "problems": problems}))
"""


def test_a_users_look_alikes_holding_many_folders_cost_root_one_bounded_read():
    """The bound is per user, not per folder: four folders of 100 records, each held
    by a look-alike of nobody's, make root read at most MAX_USER_RECORDS of them (it
    read 400, and a user may run as many look-alikes as processes, each holding a
    folder of 256 hard links of one 1 MiB record: 16 of them held root's status for
    4 minutes), and the folder where the reading stopped is named in one line."""
    cp = sandboxed_root_beside_records(0, ["sh", "-c", _FOLDERS, "sh", sys.executable, "-c", _STATUS], timeout=300)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    got = json.loads(cp.stdout.splitlines()[-1])
    assert got["rows"] == MAX_USER_RECORDS, got["rows"]
    capped = [p for p in got["problems"] if "/run/user/65534/flood/d" in p and "the rest not read" in p]
    assert len(capped) >= 1 and all("\n" not in p for p in capped), got["problems"][:8]


# nobody's folder of 20,000 names (hard links of one file, no record among them) and
# one record, held by a look-alike; then root's status reads the host view
_NAMES = r"""
set -e
setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c '
import os
d = "/run/user/65534/names"
os.makedirs(d, mode=0o700)
open(d + "/x", "w").close()
for i in range(20000):
    os.link(d + "/x", "%s/n%05d" % (d, i))
'
setpriv --reuid=65534 --regid=65534 --clear-groups setsid sh -c 'sleep 300; :' faultlab-watchdog nic-b000 9999999999 3 3</run/user/65534/names &
sleep 1
exec "$@"
"""


def test_a_look_alikes_folder_of_countless_names_is_listed_only_so_far():
    """Names cost a user no more than directory blocks; root looks at no more than
    MAX_LISTED (4096) entries of another user's folder, and one line names the folder."""
    cp = sandboxed_root_beside_records(0, ["sh", "-c", _NAMES, "sh", sys.executable, "-c", _STATUS], timeout=300)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    got = json.loads(cp.stdout.splitlines()[-1])
    cut = [p for p in got["problems"] if "/run/user/65534/names" in p and "entries; the rest not looked at" in p]
    assert len(cut) == 1, got["problems"][:8]


# nobody makes a folder 1,000 deep with 100 empty folders at its bottom, and 100
# look-alike watchdogs each holding one of those as its stdin (descriptor 0); then root's
# status, counting the folders it reads (each opened from / one component at a time)
_DEEP_HELD = r"""
set -e
setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c '
import os, subprocess
os.makedirs("/run/user/65534/deep", mode=0o755)
fd = os.open("/run/user/65534/deep", os.O_RDONLY)
for i in range(1000):
    os.mkdir("a", 0o755, dir_fd=fd)
    fd = os.open("a", os.O_RDONLY, dir_fd=fd)
for i in range(100):
    os.mkdir("l%d" % i, 0o755, dir_fd=fd)
    leaf = os.open("l%d" % i, os.O_RDONLY, dir_fd=fd)
    subprocess.Popen(["sh", "-c", "sleep 300; :", "faultlab-watchdog", "nic-d%05x" % i, "9999999999", "0"],
                     stdin=leaf, start_new_session=True)
    os.close(leaf)
'
sleep 1
exec "$@"
"""

_COUNTED_STATUS = r"""
import json
from faultlab.lifecycle import commands, hostview
read = []
real = hostview.read_records
def counted(folder, **k):
    read.append((folder, k.get("owner")))
    return real(folder, **k)
hostview.read_records = counted
rows, problems = commands.status_rows()
print(json.dumps({"nobodys": sum(o == 65534 for _, o in read), "problems": problems}))
"""


def test_a_users_look_alikes_holding_many_deep_folders_cost_root_a_bounded_number_of_folders():
    """Each folder root reads is opened from ``/`` one component at a time, and a
    look-alike may hold one 2,000 deep: root reads at most MAX_USER_FOLDERS of another
    user's folders, and says so in one line (1,000 look-alikes each holding its own
    folder 1,900 deep would otherwise hold root's status for a minute)."""
    cp = sandboxed_root_beside_records(0, ["sh", "-c", _DEEP_HELD, "sh", sys.executable, "-c", _COUNTED_STATUS], timeout=300)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    got = json.loads(cp.stdout.splitlines()[-1])
    assert got["nobodys"] <= MAX_USER_FOLDERS, got["nobodys"]
    cut = [p for p in got["problems"] if "uid 65534" in p and f"more than {MAX_USER_FOLDERS} lease folders" in p]
    assert len(cut) == 1, [p for p in got["problems"] if "look-alike" not in p][:8]
