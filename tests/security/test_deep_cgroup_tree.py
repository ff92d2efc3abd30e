"""A user whose cgroup subtree is theirs (systemd delegates ``user@UID.service`` to
its user on cgroup v2; an admin may on v1; a host-like docker node's root writes its
cpu and blkio hierarchies) can make a chain of cgroups as deep as they like. Root's
host view walks every cgroup hierarchy for faultlab's cgroups, and a subtree for
another PID namespace's processes (``hostview._in_container_cgroup``): a walk that
recursed once a folder (``os.walk``, ``Path.glob("**")`` on Python 3.11) ended past
Python's recursion limit (about 1,000 folders deep) in a RecursionError, and with it
root's ``status``, ``revert`` and ``recover`` on the whole host.

Real: root's ``faultlab status`` and ``recover`` run in the sandbox of
``tests.helpers.sandboxed_root_beside_records`` (private namespaces, a tmpfs over
``/sys/fs/cgroup``: no cgroup of the host is made), where nobody owns a folder of the
cpu hierarchy, as its delegated cgroup, and makes a chain 1,200 folders deep in it;
root's orphan cgroup lies at its bottom (as one of root's faults, made inside
nobody's target's cgroup and lost, would)."""

from __future__ import annotations

import sys

from tests.helpers import needs_root, sandboxed_root_beside_records

pytestmark = needs_root

USERS = "/sys/fs/cgroup/cpu/user.slice/user-65534.slice"
DEPTH = 1200

# nobody's delegated cgroup holds a chain DEPTH folders deep (one-letter names: the
# path stays under PATH_MAX); root's orphan faultlab-cpu-0d0d0d at its bottom; then
# root's status and recover, each command's exit code and output after a line of its own
_PLANT = r"""
set -e
mkdir -p {USERS}
chown -R 65534:65534 {USERS}
setpriv --reuid=65534 --regid=65534 --clear-groups sh -ec 'cd "$1"; i=0; while [ $i -lt $2 ]; do mkdir a; cd a; i=$((i+1)); done' sh {USERS} {DEPTH}
cd {USERS}
i=0; while [ $i -lt {DEPTH} ]; do cd a; i=$((i+1)); done
mkdir faultlab-cpu-0d0d0d
cd /
for cmd in status recover; do
  echo "== $cmd"
  set +e
  "$@" $cmd 2>&1
  echo "== rc $?"
  set -e
done
""".replace("{USERS}", USERS).replace("{DEPTH}", str(DEPTH))


def test_a_users_cgroup_chain_deeper_than_pythons_recursion_limit_is_walked_by_roots_status_and_recover():
    """nobody's chain of 1,200 cgroups: root's ``status`` exits 0 and lists root's
    orphan cgroup at its bottom, and ``recover`` removes it, with no traceback."""
    cp = sandboxed_root_beside_records(0, ["sh", "-c", _PLANT, "sh", sys.executable, "-P", "-m", "faultlab.cli"], timeout=600)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    out = cp.stdout
    status, recover = out.split("== recover")
    assert "Traceback" not in out and "RecursionError" not in out, out[-3000:]
    assert "== rc 0" in status, status[-3000:]
    assert "cpu-0d0d0d" in status and "NO LEASE" in status, status[-3000:]
    assert "== rc 0" in recover and "cpu-0d0d0d" in recover, recover[-3000:]
