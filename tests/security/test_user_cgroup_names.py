"""A user whose cgroup subtree is theirs (systemd's ``user@UID.service`` is delegated
to its user on cgroup v2; an admin may delegate one on v1) can make cgroups named
like faultlab's there. Such a cgroup is that user's: root's host view never takes it
for an orphan of root's (``status`` listed it as a fault to recover, ``recover``
swept it and wrote its parent's files), nor for the cgroup of root's own fault of
that id (any user reads root's fault ids: ``revert ID`` said the fault was not
reverted, exit 1). A cgroup of faultlab's whose record and watchdog are gone is its
maker's orphan: that user's ``recover`` removes it.

Real: root's commands run in the sandbox of ``tests.helpers.sandboxed_root_beside_records``
(private namespaces, a tmpfs over ``/sys/fs/cgroup``, so no cgroup of the host is
made or touched), where nobody owns a folder of the cpu hierarchy, as its delegated
cgroup, and makes ``faultlab-cpu-0e0e0e`` in it.
"""

from __future__ import annotations

import json
import os
import sys

from tests.helpers import needs_root, sandboxed_root_beside_records

pytestmark = needs_root

FID = "cpu-0e0e0e"
USERS = "/sys/fs/cgroup/cpu/user.slice/user-65534.slice"

# $1 root's record of fault FID to write first ("" for none), $2 the faultlab command
# to run after status; then "$@" faultlab. Prints one JSON line: status's rows, its
# stderr, the command's exit code and output, and whether nobody's cgroup is still
# there with nobody's own list of processes as it wrote it.
_PLANT_THEN = r"""
set -e
record=$1; command=$2; shift 2
mkdir -p /sys/fs/cgroup/cpu/user.slice/user-65534.slice
touch /sys/fs/cgroup/cpu/cgroup.procs /sys/fs/cgroup/cpu/user.slice/cgroup.procs {USERS}/cgroup.procs
chown -R 65534:65534 {USERS}
setpriv --reuid=65534 --regid=65534 --clear-groups sh -ec 'mkdir "$1"; echo 4242 > "$1/cgroup.procs"' sh {USERS}/faultlab-{FID}
if [ -n "$record" ]; then
  mkdir -p /run/faultlab/leases; printf '%s' "$record" > /run/faultlab/leases/{FID}.json
fi
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
"$@" status --json > "$out/status.out" 2> "$out/status.err" || true
set +e
"$@" $command > "$out/cmd.out" 2>&1; rc=$?
/usr/bin/python3 -c '
import json, os, sys
d, o = sys.argv[2] + "/faultlab-" + sys.argv[3], sys.argv[4]
print(json.dumps({"rows": json.loads(open(o + "/status.out").read() or "[]"), "status_err": open(o + "/status.err").read(),
                  "rc": int(sys.argv[1]), "out": open(o + "/cmd.out").read(), "kept": os.path.isdir(d),
                  "parent_procs": open(sys.argv[2] + "/cgroup.procs").read()}))
' "$rc" {USERS} {FID} "$out"
""".replace("{USERS}", USERS).replace("{FID}", FID)


def _run(record: dict | None, command: str) -> dict:
    cp = sandboxed_root_beside_records(0, ["sh", "-c", _PLANT_THEN, "sh", json.dumps(record) if record else "", command,
                                           sys.executable, "-P", "-m", "faultlab.cli"], timeout=300)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    return json.loads(cp.stdout.splitlines()[-1])


def test_a_cgroup_another_user_named_like_faultlabs_is_no_orphan_of_roots_and_recover_leaves_it():
    got = _run(None, "recover")
    planted = f"{USERS}/faultlab-{FID}"
    assert not [r for r in got["rows"] if planted in " ".join(r.get("orphan_objects", []))], got["rows"]
    assert planted in got["status_err"] and "uid 65534" in got["status_err"], got["status_err"]
    assert "Traceback" not in got["out"] + got["status_err"], got
    assert got["kept"], "root's recover removed a cgroup another user made"
    assert "4242" not in got["parent_procs"], "root's recover moved the processes another user listed"
    assert got["rc"] == 0, got["out"]


def test_roots_revert_of_its_fault_is_not_failed_by_another_users_cgroup_of_that_name():
    record = {"fault_id": FID, "fault_type": "cpu-contention", "deadline_ts": 4102444800, "created_ts": 1,
              "node": "local", "target": "pid:1", "uid": 0, "revert": ["true"]}
    got = _run(record, f"revert {FID}")
    assert got["rc"] == 0 and f"{FID}: reverted" in got["out"], got["out"]
    assert got["kept"], "root's revert removed a cgroup another user made"


# as root in the sandbox: nobody's delegated folder holding its orphan faultlab cgroup;
# /root (where this interpreter lives) made reachable for nobody; then nobody's own
# status --json and recover ("$@" faultlab, run as nobody with its lease folder in /run/user)
_NOBODYS_ORPHAN = r"""
set -e
mkdir -p {USERS}
touch /sys/fs/cgroup/cpu/cgroup.procs /sys/fs/cgroup/cpu/user.slice/cgroup.procs {USERS}/cgroup.procs
chown -R 65534:65534 {USERS}
top=/root/$(echo "$1" | cut -d/ -f3); shift
mount --bind "$top" /mnt; mount -t tmpfs -o mode=0755 tmpfs /root; mkdir -p "$top"; mount --move /mnt "$top"
mkdir -m 0700 /run/user/65534 && chown 65534:65534 /run/user/65534
cd /
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT; chown 65534:65534 "$out"
setpriv --reuid=65534 --regid=65534 --clear-groups env -i PATH="$PATH" XDG_RUNTIME_DIR=/run/user/65534 OUT="$out" sh -ec '
mkdir {USERS}/faultlab-{FID}
"$@" status --json > "$OUT/n-status.out"
"$@" recover > "$OUT/n-recover.out" 2>&1 || true
' sh "$@"
/usr/bin/python3 -c '
import json, os, sys
o = sys.argv[1]
print(json.dumps({"rows": json.loads(open(o + "/n-status.out").read()), "recover": open(o + "/n-recover.out").read(),
                  "kept": os.path.isdir("{USERS}/faultlab-{FID}")}))
' "$out"
""".replace("{USERS}", USERS).replace("{FID}", FID)


def test_a_users_own_orphan_faultlab_cgroup_is_theirs_to_recover():
    cp = sandboxed_root_beside_records(0, ["sh", "-c", _NOBODYS_ORPHAN, "sh", os.path.realpath(sys.executable), sys.executable, "-P", "-m", "faultlab.cli"],
                                       timeout=300)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    got = json.loads(cp.stdout.splitlines()[-1])
    row = next(r for r in got["rows"] if r["fault_id"] == FID)
    assert row["uid"] == 65534 and row["can_revert"] and row["orphan_objects"], row
    assert not got["kept"], got["recover"]
