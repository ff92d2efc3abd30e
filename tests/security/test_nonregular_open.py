"""Root refuses another user's FIFO or device node without opening it.

Each read of a file in a folder faultlab trusts (``TrustedDir.read_bytes``: lease
records, agent files of another user), a file copied from a node
(``read_from``) and a table below a run or dataset folder (``open_below``,
``steprecords``) refused a non-regular file only after ``open``: opening a FIFO wakes
the process blocked writing to it, and opening a device node acts on the device (a hard
link of one in a user's folder, where ``fs.protected_hardlinks`` is 0). A real second
user (``nobody``) makes a FIFO named like a record in their folder and blocks opening
it for writing; root's reads must refuse it and leave the writer blocked: the writer
prints a line only once a reader opened the FIFO.
"""

from __future__ import annotations

import os
import select
import subprocess

import pytest

from faultlab import safefs

pytestmark = pytest.mark.root

#: nobody's writer: make the FIFO, say so, block opening it for writing, say it was opened
WRITER = 'mkfifo "$1" && echo made && exec 3>"$1" && echo opened'


def _blocked_writer(path):
    """nobody's writer process, once its FIFO exists (its first line read)."""
    w = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", WRITER, "sh", str(path)],
                         stdout=subprocess.PIPE, text=True)
    assert w.stdout.readline() == "made\n"
    return w


def _opened_within(w, seconds: float) -> bool:
    """Whether the writer says its open returned within ``seconds``."""
    ready, _, _ = select.select([w.stdout], [], [], seconds)
    return bool(ready) and w.stdout.readline() == "opened\n"


@pytest.mark.parametrize("read", ["read_bytes", "read_from", "open_below"])
def test_roots_read_of_another_users_fifo_refuses_it_without_waking_its_writer(nobody_dir, read):
    w = _blocked_writer(nobody_dir / "fault-0a0a0a.json")
    try:
        with pytest.raises(safefs.UntrustedPath, match="not a regular file") as e:
            if read == "open_below":
                with safefs.open_below(nobody_dir, "fault-0a0a0a.json"):
                    pass
            elif read == "read_bytes":
                with safefs.open_dir(nobody_dir, uids=frozenset({0, 65534})) as d:
                    d.read_bytes("fault-0a0a0a.json")
            else:
                with safefs.open_dir_nofollow(nobody_dir.parent) as top, top.foreign_subdir(nobody_dir.name) as d:
                    d.read_from("fault-0a0a0a.json", 0, 1024, 1024)
        assert "\n" not in str(e.value)
        assert not _opened_within(w, 2.0), "root's read opened nobody's FIFO: its writer woke"
    finally:
        w.kill()
        w.wait()


def test_a_regular_file_read_through_its_o_path_descriptor_is_its_content(nobody_dir):
    rec = nobody_dir / "fault-0b0b0b.json"
    subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", 'printf "{}" > "$1"', "sh",
                    str(rec)], check=True, timeout=30)
    with safefs.open_dir(nobody_dir, uids=frozenset({0, 65534})) as d:
        assert d.read_bytes(rec.name) == b"{}"
    fd = safefs.open_file(str(rec))
    try:
        assert os.read(fd, 10) == b"{}"
    finally:
        os.close(fd)
