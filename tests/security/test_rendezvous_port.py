"""Another local user cannot take a local run's rendezvous port.

Rank 0's port is in every rank's argv (``--master-port P``, readable by anyone in
``/proc/PID/cmdline``). A real second user (``nobody``, via ``setpriv``) polls /proc
and binds 127.0.0.1:P as soon as it shows: the run's controller already listens there
and hands that socket to rank 0 (benchmarks.launch.listen_rendezvous), so the bind is
refused and the run trains and exits 0.
"""

from __future__ import annotations

import io
import subprocess

import pytest
from rich.console import Console

from faultlab.runner import run
from faultlab.scenario import Scenario

pytestmark = pytest.mark.root

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
        if b"--master-port" in a and sys.argv[1].encode() in a:
            port = int(a[a.index(b"--master-port") + 1])
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
                s.listen(16)
                print("bound", port, flush=True)
                time.sleep(300)
            except OSError as e:
                print("refused", port, e.errno, flush=True)
                sys.exit(0)
    time.sleep(0.01)
"""


def test_another_user_cannot_take_the_rendezvous_port(tmp_path, no_residue):
    run_id = f"rdv-{tmp_path.name[-6:]}".replace("_", "-")
    atk = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/bin/python3", "-I", "-c",
                            ATTACKER, run_id], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        sc = Scenario.model_validate({"name": "rdv", "seed": 1, "testbed": {"backend": "local", "nodes": 2},
                                      "workload": {"kind": "ddp", "steps": 20, "hidden": 32, "batch": 16}})
        res = run(sc, tmp_path / "run", console=Console(file=io.StringIO()), progress=False, run_id=run_id)
        out, _ = atk.communicate(timeout=60)
    finally:
        if atk.poll() is None:
            atk.kill()
            atk.wait()
    assert out.startswith("refused ") and " 98" in out, out  # EADDRINUSE: the controller holds it
    assert res.code == 0
