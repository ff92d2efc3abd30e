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
