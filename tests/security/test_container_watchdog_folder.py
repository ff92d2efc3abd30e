"""A container's process is never taken for the watchdog of root's fault whose record
names no watchdog PID, by the name of the lease folder it holds.

A record written before records named their watchdog (PID and start time) is matched
to the watchdog holding its lease folder. The path root reads of a process's folder
is the one that process sees in its own mount namespace, so a container's root (uid 0
on the host) that makes its own ``/run/faultlab/leases`` and holds it, under a
look-alike of the fault's id, held root's: root's status said the fault's watchdog was
alive (it would revert at its deadline) when it was gone, never asking root to run
``recover``. Only a candidate of faultlab's own PID namespace is matched by its folder.

Here the container's root is root in a PID namespace of its own inside root's sandbox
(private PID, mount and network namespaces, tmpfs over ``/run/faultlab``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from tests.helpers import needs_root, sandboxed_root_beside_records

pytestmark = [needs_root, pytest.mark.skipif(not shutil.which("unshare"), reason="needs unshare (util-linux)")]

# root's fault of an older version (its record names no watchdog), whose watchdog is
# gone; then the container's root holds a folder of that name under a look-alike
_OLD_RECORD_AND_CONTAINER = r"""
set -e
mkdir -p -m 0700 /run/faultlab/leases
/usr/bin/python3 -c '
import json
json.dump({"fault_id": "nic-0dd001", "deadline_ts": 4102444800, "created_ts": 1, "fault_type": "nic-slow",
           "node": "local", "target": None, "revert": ["true"]}, open("/run/faultlab/leases/nic-0dd001.json", "w"))
'
chmod 0600 /run/faultlab/leases/nic-0dd001.json
unshare --pid --fork setsid sh -c 'sleep 300; :' faultlab-watchdog nic-0dd001 9999999999 3 3</run/faultlab/leases &
sleep 1
exec "$@"
"""

_STATUS = r"""
import json
from faultlab.lifecycle import commands
rows, problems = commands.status_rows()
print(json.dumps({"rows": [{"fault_id": r["fault_id"], "watchdog": r["watchdog_alive"]} for r in rows if r["fault_id"] == "nic-0dd001"],
                  "problems": [p for p in problems if "nic-0dd001" in p]}))
"""


def test_a_containers_process_holding_a_folder_of_the_lease_folders_name_is_no_watchdog_of_roots_fault():
    env = {k: v for k, v in os.environ.items() if k != "FAULTLAB_LEASE_DIR"}
    cp = sandboxed_root_beside_records(0, ["sh", "-c", _OLD_RECORD_AND_CONTAINER, "sh", sys.executable, "-c", _STATUS], env=env, timeout=120)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    got = json.loads(cp.stdout.splitlines()[-1])
    assert got["rows"] == [{"fault_id": "nic-0dd001", "watchdog": False}], got
    assert any("look-alike" in p for p in got["problems"]), got["problems"]
