"""Files read back on another node are checked on the descriptor that is read, and
every node backend bounds a command's output.

The file's own folder may belong to a trusted user who is not root (gc-storm agent
files: the target process's user). That user swaps the file's name for a symlink, a
FIFO or a hard link in a tight ``renameat2(RENAME_EXCHANGE)`` loop while root reads
(faultlab.nodefs.read_on_node): root must never return what the link names, never more
than MAX_READ_BYTES, and never wait on a FIFO. The attacker is a real process of uid
65534; the reader runs the real node command.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from faultlab import nodefs, safefs
from faultlab.nodes import LocalNode
from faultlab.nodes.netns import NetnsNode

pytestmark = pytest.mark.root
NODE = LocalNode("local")
SECRET = b'{"pid": 4242, "heartbeat_ts": 1, "secret": "ROOT-ONLY"}'

SWAPPER = r"""
import ctypes, os, sys, time
os.chdir(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
end = time.time() + float(sys.argv[2])
names = [n.encode() for n in sys.argv[3:]]
while time.time() < end:
    for other in names:
        for _ in range(500):
            libc.renameat2(-100, b"4242.agent", -100, other, 2)  # RENAME_EXCHANGE
"""


@pytest.fixture
def raced():
    """``/tmp/faultlab-test-swap-*/agents/4242.agent``: nobody's heartbeat in nobody's 0700 folder,
    swapped with a link to a root-only file, a link to a 64 MiB file, a FIFO and a
    hard link to root's file (when the kernel lets nobody make one) for 8 s."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    tmp_path = Path(tempfile.mkdtemp(prefix="faultlab-test-swap-", dir="/tmp"))  # a folder nobody can reach
    os.chmod(tmp_path, 0o755)
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    (secret / "s.json").write_bytes(SECRET)
    os.chmod(secret / "s.json", 0o600)
    with open(secret / "big", "wb") as f:
        f.truncate(64 << 20)
    agents = tmp_path / "agents"
    agents.mkdir(mode=0o700)
    (agents / "4242.agent").write_text('{"pid": 4242, "heartbeat_ts": 1}')
    os.symlink(secret / "s.json", agents / "x1")
    os.symlink(secret / "big", agents / "x2")
    os.mkfifo(agents / "x3")
    os.link(secret / "s.json", agents / "x4")  # root makes it: protected_hardlinks would stop nobody
    for n in ("", "/4242.agent", "/x3"):
        os.chown(f"{agents}{n}", 65534, 65534)
    for n in ("x1", "x2"):
        os.chown(agents / n, 65534, 65534, follow_symlinks=False)
    p = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-I", "-c", SWAPPER,
                          str(agents), "8", "x1", "x2", "x3", "x4"])
    time.sleep(0.3)
    try:
        yield agents / "4242.agent"
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(tmp_path)


def test_a_swapped_in_link_fifo_or_hard_link_is_never_read(raced):
    got, refused, slowest = [], 0, 0.0
    end = time.monotonic() + 6
    while time.monotonic() < end:
        t = time.monotonic()
        try:
            got.append(nodefs.read_on_node(NODE, str(raced), uids=(65534,)))
        except (safefs.UntrustedPath, FileNotFoundError) as e:
            assert "\n" not in str(e)
            refused += 1
        slowest = max(slowest, time.monotonic() - t)
    assert refused > 0 and len(got) + refused >= 8
    assert not [t for t in got if "ROOT-ONLY" in t], "read through a planted link or hard link"
    assert max(map(len, got), default=0) <= safefs.MAX_READ_BYTES
    assert set(got) <= {'{"pid": 4242, "heartbeat_ts": 1}'}
    assert slowest < 5, f"a read waited {slowest:.1f}s (a FIFO opened blocking)"


@pytest.mark.parametrize("node", [NODE, NetnsNode("host", netns="")], ids=["local", "netns-host-scope"])
def test_node_run_limit_kills_and_cuts_a_flood(node):
    t = time.monotonic()
    cp = node.run(["sh", "-c", "cat /dev/zero; echo done"], timeout=20, limit=1 << 20)
    assert time.monotonic() - t < 15
    assert cp.returncode == -9 and len(cp.stdout) == (1 << 20) + 1
    cp = node.run(["sh", "-c", "cat /dev/zero >&2"], timeout=20, limit=1 << 16)
    assert cp.returncode == -9 and len(cp.stderr) == (1 << 16) + 1
    cp = node.run(["sh", "-c", "printf 12345; echo oops >&2; exit 3"], timeout=20, limit=5)
    assert (cp.returncode, cp.stdout, cp.stderr) == (3, "12345", "oops\n")


def test_an_ssh_nodes_run_is_bounded_and_read_on_node_works_there(dockerd, no_residue):
    """On a real ssh node: a flood on stdout or stderr is cut just past ``limit`` (the
    channel closed, returncode -9); read_on_node reads a trusted file there and
    refuses a link."""
    from faultlab.nodes.backends import SshTestbed
    from faultlab.nodes.dockerd import client
    from tests.helpers import docker_residue

    before = docker_residue(dockerd)
    tb = SshTestbed(1).up()
    try:
        node = tb.nodes[0]
        cp = node.run(["sh", "-c", "cat /dev/zero"], timeout=60, limit=1 << 20)
        assert cp.returncode == -9 and len(cp.stdout) == (1 << 20) + 1
        cp = node.run(["sh", "-c", "cat /dev/zero >&2"], timeout=60, limit=1 << 16)
        assert cp.returncode == -9 and len(cp.stderr) <= (1 << 16) + 1
        cp = node.run(["sh", "-c", "printf 12345; exit 3"], timeout=60, limit=5)
        assert (cp.returncode, cp.stdout) == (3, "12345")
        rc, out = client().containers.get(tb.inner.nodes[0].container).exec_run(
            ["sh", "-c", "mkdir -m 0700 /root/rt && printf '{\"a\": 1}' > /root/rt/ok.json && ln -s /etc/shadow /root/rt/l.json"])
        assert rc == 0, out
        assert nodefs.read_on_node(node, "/root/rt/ok.json") == '{"a": 1}'
        with pytest.raises(safefs.UntrustedPath, match="l.json: is a symlink"):
            nodefs.read_on_node(node, "/root/rt/l.json")
    finally:
        tb.nodes[0].close()
        assert tb.down() == []
        assert docker_residue(dockerd) - before == set()
