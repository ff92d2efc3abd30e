"""On another node (ssh, docker) root's gc-storm writes the agent's command into a
control folder the target process's user owns, as the node's acting user (root with
sudo): there it is written through descriptors (``nodefs.write_on_node_argv``), never
by a path that user may swap. ``WRITE_SH`` run there as root let them relink the fresh
``mktemp`` temporary between its creation and the write or the ``chmod 644``: root
overwrote its own 0600 file with the command and made it world-readable (the red team
won the race at its fifth try), and a folder swapped for a link got root's files.

The node stands in for an ssh node (a LocalNode of kind ``ssh``: the remote code path,
its commands run as root here as a sudo node's are); the workload's user is nobody."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from faultlab.injectors.gc import GcStorm
from faultlab.nodes import LocalNode
from tests.helpers import needs_root
from tests.security.test_agent_files import FAKE_AGENT, GOOD_HEARTBEAT, GOOD_STATUS, NOBODY, nobody_folder  # noqa: F401 (fixture)

pytestmark = needs_root

AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
SECRET = b"root's own\n"

# nobody's racer: every fresh temporary in the folder $1 becomes a link to $2, swapped in
# atomically (rename over it)
RACER = r"""
import os, sys
d, victim = sys.argv[1], sys.argv[2]
while True:
    for e in os.scandir(d):
        if ".tmp." in e.name and not e.is_symlink():
            try:
                os.symlink(victim, d + "/.l")
                os.rename(d + "/.l", e.path)
            except OSError:
                try:
                    os.unlink(d + "/.l")
                except OSError:
                    pass
"""


def _remote(node_name: str = "n1") -> LocalNode:
    node = LocalNode(node_name)
    node.kind = "ssh"  # the remote code path: files read and written on the node as its acting user
    return node


@pytest.fixture
def agent(nobody_folder):  # noqa: F811
    p = subprocess.Popen([*AS_NOBODY, "sh", "-c", FAKE_AGENT, "sh", str(nobody_folder), GOOD_HEARTBEAT, GOOD_STATUS, GOOD_HEARTBEAT],
                         stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert p.stdout.readline().strip() == "ready"
    yield p
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def _victim(tmp_path):
    v = tmp_path / "victim"
    v.write_bytes(SECRET)
    os.chmod(v, 0o600)
    return v


def test_a_remote_command_write_never_goes_through_a_relinked_temporary(agent, nobody_folder, tmp_path):  # noqa: F811
    victim = _victim(tmp_path)
    inj = GcStorm(_remote(), agent.pid, 50, 1, 30, agent_dir=str(nobody_folder))
    facts = inj.probe()
    line = list(inj.plan(facts).inject[0].argv)
    racer = subprocess.Popen([*AS_NOBODY, sys.executable, "-I", "-c", RACER, str(nobody_folder), str(victim)], start_new_session=True)
    try:
        for _ in range(40):
            inj.node.run(line, timeout=60)
            assert victim.read_bytes() == SECRET and stat.S_IMODE(victim.stat().st_mode) == 0o600
            os.unlink(facts["cmd_path"])  # may be a link the racer renamed in: never written through
    finally:
        os.killpg(racer.pid, signal.SIGKILL)
        racer.wait()
    cp = inj.node.run(line, timeout=60)
    st = os.lstat(facts["cmd_path"])
    assert cp.returncode == 0 and stat.S_ISREG(st.st_mode) and st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o644
    assert b'"fault_id"' in open(facts["cmd_path"], "rb").read()


@pytest.fixture
def nobody_home():
    """``BASE/home/agents``: nobody's folder (0755) holding their control folder
    (0700), so that nobody may rename the control folder, under a root folder."""
    base = Path(tempfile.mkdtemp(prefix="fl-remote-agent-"))
    os.chmod(base, 0o755)
    home = base / "home"
    (home / "agents").mkdir(parents=True)
    os.chmod(home / "agents", 0o700)
    for d in (home, home / "agents"):
        os.chown(d, NOBODY, NOBODY)
    yield home / "agents"
    shutil.rmtree(base, ignore_errors=True)


def test_a_remote_command_write_refuses_a_control_folder_swapped_for_a_link(nobody_home, tmp_path):
    """After probe checked it, nobody moves the folder away and links its name to a
    root folder: the write refuses in one line and nothing is made in root's folder."""
    target = tmp_path / "root-folder"
    target.mkdir(mode=0o700)
    agent = subprocess.Popen([*AS_NOBODY, "sh", "-c", FAKE_AGENT, "sh", str(nobody_home), GOOD_HEARTBEAT, GOOD_STATUS, GOOD_HEARTBEAT],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert agent.stdout.readline().strip() == "ready"
        inj = GcStorm(_remote(), agent.pid, 50, 1, 30, agent_dir=str(nobody_home))
        facts = inj.probe()
        line = list(inj.plan(facts).inject[0].argv)
        subprocess.run([*AS_NOBODY, "sh", "-c", 'mv "$1" "$1.away" && ln -s "$2" "$1"', "sh", str(nobody_home), str(target)], check=True)
        cp = inj.node.run(line, timeout=60)
    finally:
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
    assert cp.returncode != 0 and "symlink" in cp.stderr, (cp.returncode, cp.stderr)
    assert list(target.iterdir()) == []
