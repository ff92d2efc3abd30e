"""What a node's throughput sink prints costs nic-slow's verify a bounded time and
memory, and is taken only as a measure: one NodeError line otherwise.

The sink runs on the node (over ssh on a host-like or inventory node), so that node's
root writes what it prints. Here nobody (a real second uid) stands in for that root:
the receiver node's sink is nobody's program, which prints nothing and holds its
output open, prints a line that never ends, or, after taking the sender's bytes as the
real sink does, answers a measure of the wrong shape. Root's ``measure_throughput``
must end within its timeout with one ``NodeError`` line each time, never hang, read
without bound (its peak memory grows by less than 64 MiB), or hand back (or trace
back on) something that is not a measure.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
import sys
import threading

import pytest

from faultlab.errors import NodeError
from faultlab.nodes.local import LocalNode
from faultlab.probe import measure_throughput
from tests.helpers import ROOT

pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("setpriv"), reason="needs root (to act as nobody) and setpriv")

#: nobody's sink: argv[1] says what it answers
SINK = r"""
import json, socket, sys, time
mode = sys.argv[1]
out = sys.stdout.buffer
if mode == "silent":
    time.sleep(40)
    sys.exit()
if mode == "endless-first":
    for _ in range(4096):
        out.write(b"x" * 65536)
    sys.exit()
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen()
out.write(json.dumps({"port": srv.getsockname()[1], "token": "0" * 32}).encode() + b"\n")
out.flush()
c, _ = srv.accept()
while c.recv(1 << 16):
    pass
c.close()
answers = {"deep": b"[" * 100000 + b"]" * 100000, "not-a-measure": b'{"bytes": 1, "elapsed_s": 1, "bit_per_s": "fast"}',
           "a-list": b"[1, 2]", "endless-measure": b"x" * (256 << 20)}
out.write(answers[mode] + b"\n")
"""


class _NodeRootsSink(LocalNode):
    """A receiver node whose sink is nobody's :data:`SINK`, answering as ``mode``."""

    def __init__(self, mode: str):
        super().__init__("receiver")
        self.mode = mode

    def spawn(self, argv, **kw):
        return subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-I", "-c", SINK, self.mode],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("mode", ["silent", "endless-first", "deep", "not-a-measure", "a-list", "endless-measure"])
def test_what_a_nodes_sink_prints_is_a_measure_or_one_node_error_in_time(mode):
    got: list = []

    def probe():
        try:
            got.append(measure_throughput(LocalNode("sender"), _NodeRootsSink(mode), "127.0.0.1", 1 << 20, timeout_s=4))
        except Exception as e:  # noqa: BLE001 - what it raises is the point
            got.append(e)

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(30)
    grew_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024
    assert got, f"root's probe still waits on the sink that answers {mode!r}"
    assert isinstance(got[0], NodeError), repr(got[0])[:300]
    assert "\n" not in str(got[0]) and len(str(got[0])) < 1000, str(got[0])[:300]
    assert grew_mib < 64, f"root's probe took {grew_mib:.0f} MiB of what the sink printed"
