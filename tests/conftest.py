"""Shared fixtures. Every test leaves the machine as it found it: the session checks
that no faultlab namespace, link, qdisc, cgroup, lease or process is left behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from faultlab.datasets.synthetic import make_run
from faultlab.nodes import dockerd as docker_daemon
from faultlab.nodes.testbed import NetnsTestbed
from tests.helpers import ROOT, left_since, residue


@pytest.fixture(scope="session", autouse=True)
def _isolated_state(tmp_path_factory):
    """Leases and testbed state of this session live in a temporary folder, so tests
    never see or touch the faults of a real user on the same machine."""
    d = tmp_path_factory.mktemp("faultlab-state")
    os.environ["FAULTLAB_LEASE_DIR"] = str(d / "leases")
    os.environ["FAULTLAB_STATE_DIR"] = str(d)
    yield d


@pytest.fixture(scope="session", autouse=True)
def _no_residue_after_session(_isolated_state):
    before = residue()
    dockerd_before = _dockerd_running()
    yield
    left = left_since(before)
    if _dockerd_running() and not dockerd_before and _dockerd_started_by(_isolated_state):
        docker_daemon.stop()
        left["dockerd"] = {"faultlab's dockerd, started by this session and left running (stopped now)"}
    assert not left, f"the test session left faultlab state behind: {left}"


def _dockerd_started_by(state_dir: Path) -> bool:
    """Whether faultlab's running dockerd was started from the session whose state
    folder is ``state_dir``: it inherits the environment of the process that started it,
    ``FAULTLAB_STATE_DIR`` included. A dockerd another test session started meanwhile on
    the same host (its own state folder) is that session's to stop."""
    pid = docker_daemon._our_pid()
    if pid is None:
        return False
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"FAULTLAB_STATE_DIR={state_dir}".encode() in env


def _dockerd_running() -> bool:
    """Whether faultlab's own dockerd answers (False where it cannot: no root, no SDK)."""
    if not ROOT or not shutil.which("dockerd"):
        return False
    try:
        return docker_daemon.running()
    except Exception:  # the docker SDK missing: no daemon of faultlab's can be asked
        return False


@pytest.fixture
def no_residue():
    """Assert that the test itself left nothing behind (compared with its start)."""
    before = residue()
    yield
    left = left_since(before)
    assert not left, f"left behind: {left}"


def _netns_testbed(n: int):
    if not ROOT:
        pytest.skip("needs root")
    tb = NetnsTestbed(n).up()
    try:
        yield tb
    finally:
        assert tb.down() == []


@pytest.fixture
def testbed2():
    """Two netns nodes on a faultlab bridge, torn down afterwards."""
    yield from _netns_testbed(2)


@pytest.fixture
def testbed3():
    """Three netns nodes on a faultlab bridge, torn down afterwards."""
    yield from _netns_testbed(3)


@pytest.fixture
def busy_loop():
    """A CPU-bound child process (pure-Python busy loop); killed by its PID after."""
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield p
    finally:
        p.kill()
        p.wait()


@pytest.fixture(scope="session")
def dockerd():
    """faultlab's own dockerd (``--iptables=false``, its own socket and data root),
    started when none answers and stopped after the session if this session started
    it. Skips without root or dockerd (fails under CI=true: CI installs docker.io)."""
    if not ROOT or not shutil.which("dockerd"):
        if os.environ.get("CI"):
            pytest.fail("CI needs root and dockerd (apt-get install docker.io)")
        pytest.skip("needs root and dockerd")
    started = docker_daemon.ensure_started()
    yield docker_daemon.client()
    if started:
        docker_daemon.stop()


@pytest.fixture
def nobody_dir():
    """A folder owned by nobody (0755, under the sticky /tmp): a lease folder, or where
    another user plants files; removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix="fl-nobody-"))
    os.chown(d, 65534, 65534)
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def two_runs(tmp_path) -> list[str]:
    """Two synthetic runs (their folders, as strings) to build datasets from."""
    return [str(make_run(tmp_path / f"r{i}", f"r{i}", seed=i)) for i in range(2)]
