"""The lease code of remote nodes (injectors/lease_remote.py, remoteview.py), run with
this host as the node: every command goes through ``node.run``, so folder checks,
records, watchdog processes and reverts run here for real as on an ssh node; only the
transport differs. A damaged record is a warning line and never used, a record that
cannot be written leaves no watchdog, and the node-lock folder gets the lease folder's
checks."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path, PurePosixPath

import psutil
import pytest
from rich.console import Console

from faultlab.errors import NodeError
from faultlab.injectors.base import Cmd
from faultlab.lifecycle.watchdog import REMOTE_WATCHDOG_SH
from faultlab.lifecycle.lease_remote import RemoteLease, node_lock
from faultlab.lifecycle.remoteview import remote_faults, remote_view, revert_remote
from faultlab.lifecycle import remotecmds
from faultlab.nodes import LEASE_ON_NODE, LocalNode
from faultlab.nodes.ssh import SshNode


def _node_on(folder: Path):
    """This host as its own lease host whose lease folder is ``folder``: the ssh nodes'
    lease code (``lease_remote``, ``remoteview``) runs every command through
    ``node.run``, so it runs here for real; only the transport differs."""
    n = LocalNode("local")
    n.lease_dir = lambda: PurePosixPath(str(folder))
    n.lease_host = lambda: LEASE_ON_NODE
    n.command_timeout_s = 30
    return n


@pytest.fixture
def private_leases(tmp_path) -> Path:
    """A 0700 folder whose whole path is root's (pytest's base under /tmp)."""
    os.chmod(tmp_path, 0o755)
    d = tmp_path / "leases"
    d.mkdir(mode=0o700)
    return d


def _record(fid: str, **over) -> dict:
    return {"fault_id": fid, "fault_type": "cpu-contention", "node": "ssh:a", "target": "pid 1", "created_ts": time.time(),
            "deadline_ts": time.time() + 600, "controller_pid": 1, "controller": "elsewhere", "revert": ["true"], **over}


BAD_REMOTE = {"cpu-aaaa01": ({"revert": ["true", 7]}, "revert is not a list of command lines"),
              "cpu-aaaa02": ({"watchdog_pid": "x"}, "watchdog_pid is not a PID"),
              "cpu-aaaa03": ({"deadline_ts": "soon"}, "no numeric deadline_ts"),
              "cpu-aaaa04": ({"controller_pid": [1]}, "controller_pid is not a PID")}


def test_remote_lease_records_get_the_local_schema_check(private_leases, capsys):
    """Remote lease records get the local record's schema check: a non-string revert
    line, ``watchdog_pid: "x"``, a string ``deadline_ts`` or a list controller_pid is a
    warning line naming the file and why, never used (no traceback from ``faultlab
    status|revert|recover --inventory``); a valid record beside them is shown and
    reverted."""
    for fid, (over, _why) in BAD_REMOTE.items():
        (private_leases / f"{fid}.json").write_text(json.dumps(_record(fid, **over)))
    (private_leases / "cpu-aaaa09.json").write_text(json.dumps(_record("cpu-aaaa09")))
    node = _node_on(private_leases)
    faults = remote_faults(node)
    rows = [f.row() for f in faults]
    assert [r["fault_id"] for r in rows] == ["cpu-aaaa09"], rows
    _, problems = remote_view(node)
    assert len(problems) == len(BAD_REMOTE), problems
    for fid, (_over, why) in BAD_REMOTE.items():
        assert any(f"{fid}.json" in p and why in p for p in problems), (fid, problems)
    capsys.readouterr()
    assert remotecmds.status([node], Console(file=None, soft_wrap=True), False) == 0
    err = capsys.readouterr().err
    assert err.count("faultlab: warning:") == len(BAD_REMOTE) and "Traceback" not in err, err
    assert all("\n" not in p for p in problems)
    # the valid one is reverted (its watchdog is gone: its recorded line runs) and removed;
    # the damaged ones are left as they are, never run
    assert revert_remote(faults[0]) == []
    assert sorted(p.stem for p in private_leases.iterdir()) == sorted(BAD_REMOTE)


def _watchdogs_naming(path: Path) -> list:
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] != psutil.STATUS_ZOMBIE and str(path) in (p.info["cmdline"] or []) and "faultlab-watchdog" in p.info["cmdline"]:
            out.append(p)
    return out


def test_remote_lease_whose_record_cannot_be_written_leaves_no_watchdog(private_leases):
    """RemoteLease.create_for starts the watchdog, then writes the record; when the
    write fails the watchdog is ended, never left on the node until its deadline. Here
    the record's path is taken by a folder, so the write fails for real."""
    rec = private_leases / "cpu-bbbb01.json"
    rec.mkdir()
    node = _node_on(private_leases)
    try:
        with pytest.raises(OSError):
            RemoteLease.create_for(node, "cpu-bbbb01", "cpu-contention", "pid 1", {}, [Cmd(("true",))], time.time() + 120, REMOTE_WATCHDOG_SH)
        end = time.monotonic() + 5
        while _watchdogs_naming(rec) and time.monotonic() < end:
            time.sleep(0.1)
        left = _watchdogs_naming(rec)
        assert not left, [p.pid for p in left]
    finally:
        for p in _watchdogs_naming(rec):  # the watchdog this test started, by PID
            os.killpg(p.pid, signal.SIGTERM)


@pytest.mark.parametrize("case", ["symlink", "group-writable"])
def test_node_lock_folder_gets_the_lease_folder_checks(tmp_path, case):
    """The controller's ``node-locks`` folder is opened through faultlab.safefs (owner,
    mode, no symlink), so a link there never makes root create lock files where it
    points: one-line NodeError naming the folder, nothing created."""
    os.chmod(tmp_path, 0o755)
    base = tmp_path / "fl"
    base.mkdir(mode=0o755)
    (base / "leases").mkdir(mode=0o755)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if case == "symlink":
        (base / "node-locks").symlink_to(elsewhere)
    else:
        (base / "node-locks").mkdir()
        os.chmod(base / "node-locks", 0o770)
    node = SshNode("a", address="127.0.0.1")
    with pytest.raises(NodeError) as e:
        with node_lock(node, base / "leases"):
            pass
    assert "node-locks" in str(e.value) and "\n" not in str(e.value)
    assert list(elsewhere.iterdir()) == [] and (case == "symlink" or list((base / "node-locks").iterdir()) == [])
    # a fresh folder is made private and used
    (base / "node-locks").unlink() if case == "symlink" else (base / "node-locks").rmdir()
    with node_lock(node, base / "leases"):
        assert (base / "node-locks").stat().st_mode & 0o777 == 0o700
