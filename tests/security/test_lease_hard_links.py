"""Root's host view against a hard link another user makes in a lease folder of theirs
to a lease record of root's. The kernel lets any user link any file they can see
where ``fs.protected_hardlinks`` is 0 (its default; systemd sets 1), into a folder of
theirs on the same file system: the record then keeps root's owner, mode and text
under a name of theirs, also once root's fault has ended and removed its own name.

Real second user (nobody), root's commands in private namespaces (the tests'
sandbox); root makes the link itself, as protected_hardlinks=1 on this host would
refuse it to nobody."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from tests.helpers import needs_root, sandboxed_root_beside_records

pytestmark = [needs_root, pytest.mark.skipif(not shutil.which("unshare") or not shutil.which("setpriv"),
                                             reason="needs unshare and setpriv (util-linux)")]

FID = "cpu-0a0a0a"

# As root: a fault of root's (its revert line touches $MARK), whose record nobody links
# into its default lease folder while it is in force; then the fault ends (release
# removes root's name of the record) and its controller exits.
_ROOTS_FAULT = r"""
import os, sys, time
from faultlab.lifecycle.cmd import Cmd
from faultlab.lifecycle.lease import Lease
from faultlab.nodes import LocalNode
fid, mark, theirs = sys.argv[1:4]
le = Lease.create_for(LocalNode("local"), fid, "cpu-contention", "pid:1", {}, [Cmd(("touch", mark))], time.time() + 300)
os.link(le.path, os.path.join(theirs, fid + ".json"))
le.release()
"""

# In the sandbox: nobody's default lease folder on the file system of root's lease
# folder (link(2) needs one mount: the sandbox's /run/user becomes a folder of its
# /run/faultlab tmpfs), root's ended fault linked there, then root's status and recover.
_DRIVER = r"""
import json, os, subprocess, sys
fid, py = sys.argv[1], sys.argv[2]
users = "/run/faultlab/users"
os.makedirs(users + "/65534", mode=0o755)
os.chmod(users + "/65534", 0o700)
os.chown(users + "/65534", 65534, 65534)
subprocess.run(["mount", "--bind", users, "/run/user"], check=True)
subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "mkdir", "-p", "-m", "0700",
                "/run/user/65534/faultlab/leases"], check=True)
mark = "/run/faultlab/ran"
subprocess.run([py, "-c", sys.argv[3], fid, mark, users + "/65534/faultlab/leases"], check=True)
fl = [py, "-P", "-m", "faultlab.cli"]
st = subprocess.run([*fl, "status", "--json"], capture_output=True, text=True)
rc = subprocess.run([*fl, "recover"], capture_output=True, text=True)
print(json.dumps({"st": st.returncode, "st.out": st.stdout, "st.err": st.stderr, "rc": rc.returncode,
                  "rc.out": rc.stdout, "rc.err": rc.stderr, "ran": os.path.exists(mark)}))
"""


def test_roots_ended_record_hard_linked_into_another_users_folder_is_no_fault_of_roots():
    """nobody's hard link to the record of root's ended fault is one problem line in
    root's ``status`` (a file of root's in nobody's folder), never a fault of root's
    whose watchdog is lost: as one, root's ``recover`` would fail on it (exit 1, 'not
    fully reverted') for as long as nobody kept the link, since root runs no record's
    lines under a folder of another user's."""
    cp = sandboxed_root_beside_records(0, [sys.executable, "-c", _DRIVER, FID, sys.executable, _ROOTS_FAULT], timeout=300)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    got = json.loads(cp.stdout.splitlines()[-1])
    assert "Traceback" not in got["st.err"] + got["rc.err"], got["st.err"][-2000:] + got["rc.err"][-2000:]
    assert got["st"] == 0, got
    assert [r for r in json.loads(got["st.out"]) if r["fault_id"] == FID] == [], got["st.out"]
    named = [ln for ln in got["st.err"].splitlines() if f"/run/user/65534/faultlab/leases/{FID}.json" in ln]
    assert len(named) == 1 and "owned by uid 0, not by its folder's owner (uid 65534)" in named[0], got["st.err"]
    assert got["rc"] == 0, got["rc.out"] + got["rc.err"]
    assert not got["ran"], "root ran the revert line of a record in another user's folder"
