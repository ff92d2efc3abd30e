"""A testbed's folder on the host holds its nodes' work folders, which a node's root
fills as it likes: removing the testbed removes any of it, or says what is left."""

from __future__ import annotations

import os

from faultlab.nodes import docker_testbed
from faultlab.nodes.docker_testbed import DockerTestbed


def _deep_tree(root, depth: int) -> None:
    """``root/d/d/.../d`` ``depth`` folders deep (past PATH_MAX: made by descriptors),
    a FIFO and a link at the bottom."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.mkfifo("fifo", dir_fd=fd)
    os.symlink("/etc", "etc", dir_fd=fd)
    os.close(fd)


def _testbed(tmp_path, monkeypatch) -> tuple[DockerTestbed, object]:
    """A testbed object whose state folder is ``tmp_path`` (its folder ``tmp_path/tb``
    made, its state file ``tmp_path/tb.json`` written); no container."""
    monkeypatch.setattr(docker_testbed, "docker_state_dir", lambda: tmp_path)
    tb = DockerTestbed.__new__(DockerTestbed)
    tb.id = "tb"
    tb.folder.mkdir()
    state = tmp_path / "tb.json"
    state.write_text("{}")
    return tb, state


def test_a_work_folder_thousands_of_folders_deep_is_removed_with_the_testbed(tmp_path, monkeypatch):
    tb, state = _testbed(tmp_path, monkeypatch)
    (tb.folder / "n0-work").mkdir()
    _deep_tree(tb.folder / "n0-work", 3000)
    assert tb._forget([]) == []
    assert not tb.folder.exists() and not state.exists()
    assert os.path.isdir("/etc"), "a link inside was followed"


def test_nothing_is_forgotten_while_a_node_is_left(tmp_path, monkeypatch):
    tb, state = _testbed(tmp_path, monkeypatch)
    assert tb._forget(["container n0: still running"]) == ["container n0: still running"]
    assert tb.folder.exists() and state.exists(), "nothing is forgotten while a node is left"
