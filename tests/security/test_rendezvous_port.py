"""Another local user can neither reach nor take a local or netns run's rendezvous.

torch.distributed's TCP store has no authentication, and it bounds a value (8 MiB) but
not the number of keys: a user who connected to rank 0's store on 127.0.0.1 could
break the run, or grow root's rank 0 by 8 MiB a key for as long as they liked; a
netns run's store on node 0's address was as reachable through the testbed's bridge.
The ranks of a local or netns run (nodes of this host's file system) rendezvous through a ``FileStore`` in a fresh 0700 folder of
root's instead (``--store-file``, in every rank's argv, readable by anyone in
``/proc/PID/cmdline``). A real second user (``nobody``, via ``setpriv``) polls /proc
for the ranks: it can open no store file and connects to no store port (the rank's
``--master-addr``, ``--master-port``); the run trains and exits 0.
"""

from __future__ import annotations

import io
import subprocess

import pytest
from rich.console import Console

from faultlab.runner import run
from faultlab.scenario import Scenario

pytestmark = pytest.mark.root

#: nobody's look at the first rank of run argv[1] it finds: its store file (open it) and
#: its rendezvous port (connect to it, tried while that rank runs); one line for each
ATTACKER = r"""
import os, socket, sys, time
end = time.time() + 300
while time.time() < end:
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            a = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"--master-port" not in a or sys.argv[1].encode() not in a:
            continue
        if b"--store-file" in a:
            path = a[a.index(b"--store-file") + 1].decode()
            try:
                open(path, "rb").close()
                print("store-file opened", path)
            except OSError as e:
                print("store-file refused", e.errno)
        port = int(a[a.index(b"--master-port") + 1])
        addr = a[a.index(b"--master-addr") + 1].decode()
        err = None
        while os.path.exists(f"/proc/{p}"):  # the store may not listen yet: tried while that rank runs
            try:
                socket.create_connection((addr, port), timeout=5).close()
                print("store joined", port)
                sys.exit(0)
            except OSError as e:
                err = e.errno
            time.sleep(0.01)
        print("store unreachable", port, err)
        sys.exit(0)
    time.sleep(0.01)
"""


@pytest.mark.parametrize("backend", ["local", "netns"])
def test_another_user_can_neither_reach_nor_take_a_runs_rendezvous_on_this_host(tmp_path, no_residue, backend):
    run_id = f"rdv-{tmp_path.name[-6:]}".replace("_", "-")
    atk = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/bin/python3", "-I", "-c",
                            ATTACKER, run_id], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        sc = Scenario.model_validate({"name": "rdv", "seed": 1, "testbed": {"backend": backend, "nodes": 2},
                                      "workload": {"kind": "ddp", "steps": 20, "hidden": 32, "batch": 16}})
        res = run(sc, tmp_path / "run", console=Console(file=io.StringIO()), progress=False, run_id=run_id)
        out, _ = atk.communicate(timeout=60)
    finally:
        if atk.poll() is None:
            atk.kill()
            atk.wait()
    assert "store-file refused 13" in out, out  # EACCES: the store's folder is root's, 0700
    assert "store joined" not in out and "store-file opened" not in out, out
    assert res.code == 0
