"""Another user who connects first to the throughput sink (nic-slow's verify probe) is
neither measured nor able to fail the probe: the sink measures only the connection
that sends the probe's token, which reaches the sender through a pipe, never an argv.

nobody (a real second uid) connects to the sink's port before root's sender starts
and sends 20 KB, or resets its connection at once; root's probe must still measure
exactly the bytes its sender sent.
"""

from __future__ import annotations

import shutil
import sys

import pytest

from faultlab.nodes.local import LocalNode
from faultlab.probe import measure_throughput
from tests.helpers import ROOT, as_nobody

pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("setpriv"), reason="needs root (to act as nobody) and setpriv")

#: nobody's client: connect to 127.0.0.1:PORT, send 20 KB (or until the sink closes it)
FIRST = """
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
try:
    for _ in range(20):
        s.sendall(b"x" * 1000)
except OSError:
    pass
s.close()
print("connected")
"""


#: nobody's client: connect to 127.0.0.1:PORT and close with a reset (SO_LINGER 0), nothing sent
RESET = """
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
s.close()
print("connected")
"""


class _FirstComesNobody(LocalNode):
    """The sender node: before it runs the sender, nobody connects to the port the
    sender is given and runs its client ``script`` (:data:`FIRST` by default)."""

    script = FIRST

    def run(self, argv, **kw):
        port = argv[argv.index("--port") + 1]
        cp = as_nobody([sys.executable, "-I", "-c", self.script, port], env={}, timeout=30)
        assert cp.stdout.strip() == "connected", cp.stderr
        return super().run(argv, **kw)


class _FirstNobodyResets(_FirstComesNobody):
    script = RESET


def test_a_connection_without_the_token_is_not_measured():
    nbytes = 1 << 20
    got = measure_throughput(_FirstComesNobody("sender"), LocalNode("receiver"), "127.0.0.1", nbytes, timeout_s=20)
    assert got["bytes"] == nbytes


def test_a_connection_reset_before_the_token_does_not_end_the_sink():
    """A reset connection made the sink's read of it raise ConnectionResetError, which
    ended the sink: one RST of any local user failed nic-slow's verify, root's sender
    then saying "Connection refused"."""
    nbytes = 1 << 20
    got = measure_throughput(_FirstNobodyResets("sender"), LocalNode("receiver"), "127.0.0.1", nbytes, timeout_s=20)
    assert got["bytes"] == nbytes
