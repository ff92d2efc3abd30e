"""A user whose cgroup subtree is theirs (systemd delegates ``user@UID.service`` on
cgroup v2; an admin may on v1) makes as many cgroups named like faultlab's there as
they like, and writes up to ``hostview.MAX_USER_RECORDS`` lease records of up to
1 MiB of revert lines each. Root's host view must not look for each such cgroup in
all of that user's lines: that cost root (their cgroups) x (their lines).

Real: root's host view runs in the sandbox of ``tests.helpers.sandboxed_root_beside_records``
(private namespaces, a tmpfs over ``/sys/fs/cgroup``: no cgroup of the host is made),
where nobody owns a folder of the cpu hierarchy, as its delegated cgroup."""

from __future__ import annotations

import json
import sys

from faultlab.lifecycle.hostview import MAX_USER_CGROUPS
from tests.helpers import needs_root, sandboxed_root_beside_records

pytestmark = needs_root

USERS = "/sys/fs/cgroup/cpu/user.slice/user-65534.slice"
RECORDS = 16
CGROUPS = 64

# nobody's delegated cgroup holds CGROUPS folders named like faultlab's (ids of none of
# its records); then "$@"
_PLANT = r"""
set -e
mkdir -p {USERS}
chown -R 65534:65534 {USERS}
setpriv --reuid=65534 --regid=65534 --clear-groups sh -ec 'i=0; while [ $i -lt $2 ]; do mkdir "$1/faultlab-cpu-f$(printf %05x $i)"; i=$((i+1)); done' sh {USERS} {CGROUPS}
exec "$@"
""".replace("{USERS}", USERS).replace("{CGROUPS}", str(CGROUPS))

# root's host view, counting how often one of nobody's cgroups is matched against one
# of nobody's faults (each match reads all of that fault's revert lines)
_COUNTED_VIEW = r"""
import json
from faultlab.lifecycle import hostview
checks = 0
real = hostview._claims
def counted(v, o):
    global checks
    if o.kind == "cgroup" and v.uid == 65534:
        checks += 1
    return real(v, o)
hostview._claims = counted
views, problems = hostview.host_view()
print(json.dumps({"checks": checks, "theirs": sum("made by uid 65534" in p for p in problems)}))
"""


def test_another_users_cgroups_are_each_matched_against_one_fault_of_theirs_at_most():
    """nobody's 64 cgroups named like faultlab's, beside 16 records of its own: root's
    host view matches each cgroup against at most the one fault of nobody's its name
    names (a fault's cgroup is named for its id), never against all nobody's faults'
    lines (each against each, with 256 records of 1 MiB of lines, would cost root a
    search through 256 MiB per cgroup), and still reports each in one line."""
    cp = sandboxed_root_beside_records(RECORDS, ["sh", "-c", _PLANT, "sh", sys.executable, "-c", _COUNTED_VIEW], timeout=300)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    got = json.loads(cp.stdout.splitlines()[-1])
    assert got["theirs"] == CGROUPS, got
    assert got["checks"] <= CGROUPS, got


# nobody's record process-000000 holds about 1 MiB of revert lines, each empty (the most
# lines a record of 1 MiB can hold), and its delegated cgroup holds SAME cgroups named
# for that fault, each in a folder of its own; then "$@"
SAME = 64
_PLANT_SAME = r"""
set -e
mkdir -p {USERS}
chown -R 65534:65534 {USERS}
setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c '
import json, os
p = "/run/user/65534/faultlab/leases/process-000000.json"
rec = {"fault_id": "process-000000", "deadline_ts": 4102444800, "created_ts": 1, "fault_type": "process-pause",
       "node": "local", "target": "pid:1", "revert": []}
rec["revert"] = [""] * ((1048576 - len(json.dumps(rec))) // 3)
with open(p + ".tmp", "w") as f:
    json.dump(rec, f, separators=(",", ":"))
os.chmod(p + ".tmp", 0o600)
os.rename(p + ".tmp", p)
'
setpriv --reuid=65534 --regid=65534 --clear-groups sh -ec 'i=0; while [ $i -lt $2 ]; do mkdir -p "$1/a$i/faultlab-process-000000"; i=$((i+1)); done' sh {USERS} {SAME}
exec "$@"
""".replace("{USERS}", USERS).replace("{SAME}", str(SAME))

# root's host view, counting how often the revert lines of one of nobody's faults are
# gone through, and how long the view took
_PASSES_VIEW = r"""
import json, time
from faultlab.lifecycle import hostview
passes = 0
real = hostview._lines
def counted(v):
    global passes
    if v.uid == 65534:
        passes += 1
    return real(v)
hostview._lines = counted
t = time.monotonic()
views, problems = hostview.host_view()
took = time.monotonic() - t
fault = [v for v in views if v.fault_id == "process-000000" and v.uid == 65534]
print(json.dumps({"passes": passes, "took_s": round(took, 2), "objects": len(fault[0].objects) if fault else None}))
"""


def test_a_users_cgroups_named_for_their_fault_cost_root_one_pass_over_its_lines_a_view():
    """nobody's record holds 1 MiB of revert lines (about 350,000 empty ones) and nobody
    names 64 cgroups of its delegated subtree for that fault: root's host view goes
    through that record's lines a bounded number of times, not once per cgroup (each
    pass is a Python loop of 350,000 substring tests, 50 to 200 ms on a loaded host:
    every cgroup the user made cost root that much, a thousand of them minutes a view)."""
    cp = sandboxed_root_beside_records(1, ["sh", "-c", _PLANT_SAME, "sh", sys.executable, "-c", _PASSES_VIEW], timeout=600)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    got = json.loads(cp.stdout.splitlines()[-1])
    print(got)
    assert got["objects"] == SAME, got  # each is still that fault's cgroup
    assert got["passes"] <= 4, got


# nobody makes MAX_USER_CGROUPS + 40 cgroups named like faultlab's, ids of none of its
# records; root's host view counts its matches of them and its problem lines
_CAPPED_VIEW = r"""
import json
from faultlab.lifecycle import hostview
checks = 0
real = hostview._claims
def counted(v, o):
    global checks
    if o.kind == "cgroup" and o.uid == 65534:
        checks += 1
    return real(v, o)
hostview._claims = counted
views, problems = hostview.host_view()
print(json.dumps({"checks": checks, "problems": [p for p in problems if "65534" in p]}))
"""


def test_a_users_cgroups_past_max_user_cgroups_are_one_line_in_roots_view():
    """A user may make any number of cgroups named like faultlab's in a subtree of
    theirs: root's host view looks at ``MAX_USER_CGROUPS`` of them, one line each, and
    names the rest in one line (without the bound, 100,000 cgroups would be 100,000
    lines of root's status)."""
    n = MAX_USER_CGROUPS + 40
    plant = _PLANT.replace(f"sh {USERS} {CGROUPS}", f"sh {USERS} {n}")
    cp = sandboxed_root_beside_records(1, ["sh", "-c", plant, "sh", sys.executable, "-c", _CAPPED_VIEW], timeout=600)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    got = json.loads(cp.stdout.splitlines()[-1])
    capped = [p for p in got["problems"] if f"more than {MAX_USER_CGROUPS} cgroups" in p]
    theirs = [p for p in got["problems"] if "made by uid 65534" in p and p not in capped]
    assert len(theirs) == MAX_USER_CGROUPS, len(theirs)
    assert len(capped) == 1, got["problems"][-3:]
    assert got["checks"] <= MAX_USER_CGROUPS, got["checks"]
