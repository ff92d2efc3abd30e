"""What an ssh node says reaches `faultlab doctor`'s terminal printable only.

The node here is a real SSH server on 127.0.0.1 (paramiko in server mode, in this
process) that answers every command as a node's root may: the Python version it
reports and the error text of its other commands carry terminal escape sequences (ESC
c, a full reset that clears root's screen; an OSC title; a screen clear). `faultlab
doctor --inventory` must print the report with no ESC in it, the version still shown.
"""

from __future__ import annotations

import pytest

from tests.helpers import fl

paramiko = pytest.importorskip("paramiko")
from tests.ssh_answering import Answer, AnsweringNodes  # noqa: E402 - after the skip without paramiko

ESC = "\x1b"
PY_OUT = f"3.11.7{ESC}c{ESC}]0;node-title{ESC}\\ False False\n"
ERR = f"no such thing{ESC}[2J{ESC}[H\n"


def _answer(cmd: str) -> Answer:
    """The Python probe's report, or the error of any other command."""
    if "importlib.util" in cmd:
        return PY_OUT.encode(), b"", 0
    return b"", ERR.encode(), 1


@pytest.fixture
def evil_node(tmp_path):
    """(inventory path): an SSH server on a loopback port whose host key is pinned."""
    nodes = AnsweringNodes(tmp_path)
    yield nodes(_answer)
    nodes.close()


def test_doctor_prints_what_a_node_says_printable_only(evil_node):
    cp = fl("doctor", "--inventory", evil_node, "--node", "evil", timeout=120)
    assert cp.returncode == 0, cp.stderr[-2000:]
    assert "python 3.11.7" in cp.stdout, cp.stdout[:500]
    assert ESC not in cp.stdout + cp.stderr, repr(cp.stdout[:500])
