"""A container's root, which may run its processes as any uid of the host, neither
escapes the bound on what root reads of other users' lease folders nor uses up a
user's share of it.

Root reads the lease folder each watchdog candidate holds, as its uid's, at most
``MAX_USER_FOLDERS`` folders and ``MAX_USER_RECORDS`` records of each uid. A
container's root is uid 0 on the host (faultlab's dockerd has no user-namespace remap)
and keeps ``CAP_SETUID``: its look-alikes may run as any host uid, each holding a
folder; the path root reads is the one the process sees in its own mount namespace,
so it may name any host path. A bound per uid alone bounds nothing then (a real
testbed container's 40 look-alikes of 40 uids would have root read 40 folders), and 16
look-alikes of a user's uid, listed before that user's watchdog, would keep that user's
real fault's record unread, root's status calling their watchdog a look-alike.

Here the container's root is played by root in a PID namespace of its own inside
root's sandbox (``sandboxed_root_beside_records``: private PID, mount and network
namespaces, tmpfs over ``/run/user``): what root's host view tells a container's
process by, its PID namespace, is the same.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from faultlab.lifecycle.hostview import MAX_USER_FOLDERS
from tests.helpers import needs_root, sandboxed_root_beside_records

pytestmark = [needs_root, pytest.mark.skipif(not shutil.which("unshare") or not shutil.which("setpriv"),
                                             reason="needs unshare and setpriv (util-linux)")]

# the container's root: in a PID namespace of its own, $1 look-alike watchdogs, the k-th
# running as uid $2 + k ($3 = same: all as uid $2), each holding a folder of that uid's
# under /run/user/c; then /run/user/c/started
_CONTAINER = r"""
import os, subprocess, sys, time
n, base, same = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "same"
os.makedirs("/run/user/c", mode=0o755)
for k in range(n):
    uid = base if same else base + k
    d = "/run/user/c/%d" % k
    os.mkdir(d, 0o700)
    os.chown(d, uid, uid)
    fd = os.open(d, os.O_RDONLY)
    def drop(uid=uid):
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    subprocess.Popen(["sh", "-c", "sleep 300; :", "faultlab-watchdog", "nic-c%05x" % k, "9999999999", "3"],
                     pass_fds=(fd,), preexec_fn=drop, start_new_session=True)
    os.close(fd)
open("/run/user/c/started", "w").close()
time.sleep(300)
"""

_WITH_CONTAINER = r"""
set -e
unshare --pid --fork /usr/bin/python3 -c "$CONTAINER" "$1" "$2" "$3" &
for i in $(seq 100); do [ -e /run/user/c/started ] && break; sleep 0.1; done
[ -e /run/user/c/started ]
shift 3
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
print(json.dumps({"read": [f for f, o in read if f.startswith("/run/user/c/")], "problems": problems,
                  "rows": [{"fault_id": r["fault_id"], "uid": r["uid"], "watchdog": r["watchdog_alive"]} for r in rows]}))
"""


def _root_status_beside_container(n: int, base_uid: int, mode: str, then: str = "") -> dict:
    env = {k: v for k, v in os.environ.items() if k != "FAULTLAB_LEASE_DIR"}
    env["CONTAINER"] = _CONTAINER
    argv = ["sh", "-c", _WITH_CONTAINER, "sh", str(n), str(base_uid), mode]
    if then:
        argv += ["sh", "-c", then, "sh"]
    argv += [sys.executable, "-c", _COUNTED_STATUS]
    cp = sandboxed_root_beside_records(0, argv, env=env, timeout=300)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    return json.loads(cp.stdout.splitlines()[-1])


def test_a_containers_look_alikes_of_many_uids_cost_root_one_bounded_read():
    """40 look-alikes in a container, each of its own uid and holding its own folder:
    root reads at most MAX_USER_FOLDERS of those folders in all, and says so in one line."""
    got = _root_status_beside_container(40, 30000, "each")
    assert len(got["read"]) <= MAX_USER_FOLDERS, f"root read {len(got['read'])} folders held by the container's look-alikes"
    cut = [p for p in got["problems"] if "other PID namespaces" in p and "the rest not read" in p]
    assert len(cut) == 1 and "\n" not in cut[0], [p for p in got["problems"] if "look-alike" not in p][:8]


# nobody's real fault whose lease folder is not a default one (FAULTLAB_LEASE_DIR): its
# watchdog (a session leader holding the folder on descriptor 3) and the record naming
# its PID and start time, made after the container's look-alikes (so /proc lists them first)
_NOBODYS_FAULT = r"""
set -e
setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c '
import json, os, subprocess
d = "/run/user/65534/elsewhere"
os.makedirs(d, mode=0o700)
fd = os.open(d, os.O_RDONLY)
w = subprocess.Popen(["sh", "-c", "sleep 300; :", "faultlab-watchdog", "nic-aaaaaa", "9999999999", "3"],
                     pass_fds=(fd,), start_new_session=True)
start = int(open("/proc/%d/stat" % w.pid).read().rpartition(")")[2].split()[19])
with open(d + "/nic-aaaaaa.json", "w") as f:
    json.dump({"fault_id": "nic-aaaaaa", "deadline_ts": 4102444800, "created_ts": 1, "fault_type": "nic-slow",
               "node": "local", "target": None, "revert": ["true"], "watchdog_pid": w.pid, "watchdog_starttime": start}, f)
os.chmod(d + "/nic-aaaaaa.json", 0o600)
'
exec "$@"
"""


def test_a_containers_look_alikes_of_a_users_uid_never_hide_that_users_fault():
    """20 look-alikes of nobody's uid in a container, listed before nobody's own
    watchdog (whose lease folder is not a default one): root's status still reads
    nobody's record and finds its watchdog, never calling it a look-alike."""
    got = _root_status_beside_container(20, 65534, "same", then=_NOBODYS_FAULT)
    mine = [r for r in got["rows"] if r["fault_id"] == "nic-aaaaaa"]
    called = [p for p in got["problems"] if "nic-aaaaaa" in p]
    assert mine == [{"fault_id": "nic-aaaaaa", "uid": 65534, "watchdog": True}] and not called, (mine, called)
