"""Files read back on another node (ssh, docker) get the same trust checks as on this
host (faultlab.nodefs.read_on_node: owner and mode of the whole path, no symlink,
checked on the node in the same command that reads): agent heartbeats and commands
(injectors/gc.py) and lease records (lifecycle/lease_remote.py)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from faultlab import nodefs, safefs
from faultlab.errors import Refused
from faultlab.nodes import LocalNode

NODE = LocalNode("local")


@pytest.fixture
def private(tmp_path):
    """A 0700 folder whose whole path is root's (pytest's base under /tmp)."""
    d = tmp_path / "priv"
    d.mkdir(mode=0o700)
    os.chmod(tmp_path, 0o755)
    return d


def test_read_on_node_reads_a_trusted_file(private):
    (private / "a.json").write_text('{"x": 1}')
    os.chmod(private / "a.json", 0o600)
    assert json.loads(nodefs.read_on_node(NODE, str(private / "a.json"))) == {"x": 1}
    with pytest.raises(FileNotFoundError):
        nodefs.read_on_node(NODE, str(private / "missing.json"))


def test_read_on_node_refuses_symlinks_anywhere_on_the_path(private, tmp_path):
    target = tmp_path / "victim"
    target.write_text("{}")
    (private / "l.json").symlink_to(target)
    with pytest.raises(safefs.UntrustedPath, match="l.json: on node local: .*l.json: is a symlink"):
        nodefs.read_on_node(NODE, str(private / "l.json"))
    (tmp_path / "dirlink").symlink_to(private)
    (private / "a.json").write_text("{}")
    with pytest.raises(safefs.UntrustedPath, match="dirlink: is a symlink"):
        nodefs.read_on_node(NODE, str(tmp_path / "dirlink" / "a.json"))


def test_read_on_node_refuses_foreign_owner_writable_and_shared_folders(private, tmp_path):
    f = private / "a.json"
    f.write_text("{}")
    os.chown(f, 65534, 65534)
    with pytest.raises(safefs.UntrustedPath, match="is owned by uid 65534"):
        nodefs.read_on_node(NODE, str(f))
    assert nodefs.read_on_node(NODE, str(f), uids=(65534,)) == "{}"  # the target's user, when told
    os.chown(f, 0, 0)
    os.chmod(f, 0o622)
    with pytest.raises(safefs.UntrustedPath, match="writable by group or others"):
        nodefs.read_on_node(NODE, str(f))
    os.chmod(f, 0o600)
    os.chmod(private, 0o755)
    with pytest.raises(safefs.UntrustedPath, match="must be 0700"):
        nodefs.read_on_node(NODE, str(f))
    assert nodefs.read_on_node(NODE, str(f), private=False) == "{}"
    os.chmod(private, 0o700)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # sticky, world-writable: never the file's own folder
    (shared / "a.json").write_text("{}")
    with pytest.raises(safefs.UntrustedPath, match="shared: is writable by group or others"):
        nodefs.read_on_node(NODE, str(shared / "a.json"), private=False)


@pytest.fixture(scope="module")
def dnode(dockerd):
    """One docker testbed node, removed afterwards."""
    from faultlab.nodes.docker_testbed import DockerTestbed

    tb = DockerTestbed(1).up()
    try:
        yield tb.nodes[0]
    finally:
        assert tb.down() == []


@pytest.mark.root
def test_docker_node_gc_storm_refuses_a_planted_heartbeat_symlink(dnode, private, tmp_path, no_residue):
    """A rank-like process in a docker node's container; its agent folder holds a
    heartbeat that is a symlink (to a well-formed, fresh heartbeat elsewhere). The
    gc-storm probe on the docker node must refuse it (the read never follows the link,
    so the heartbeat behind it is never accepted)."""
    from faultlab.benchmarks import agent as agent_mod
    from faultlab.injectors.gc import GcStorm

    p = dnode.spawn_workload(["sleep", "60"])
    try:
        start = agent_mod.parse_starttime(Path(f"/proc/{p.pid}/stat").read_text())
        real = tmp_path / "elsewhere.json"
        real.write_text(json.dumps({"pid": p.pid, "starttime": start, "heartbeat_ts": time.time(), "python": "3.11"}))
        (private / f"{p.pid}.agent").symlink_to(real)
        inj = GcStorm(dnode, p.pid, 5, 10, 10, agent_dir=str(private))
        with pytest.raises(Refused, match=r"--target: the agent control folder is not trusted: .*is a symlink"):
            inj.probe()
        # the same heartbeat as a plain file of its folder is accepted (the check is the link)
        (private / f"{p.pid}.agent").unlink()
        (private / f"{p.pid}.agent").write_text(real.read_text())
        assert inj.probe()["heartbeat_path"] == str(private / f"{p.pid}.agent")
    finally:
        p.kill()
        p.wait(10)


@pytest.mark.root
def test_remote_lease_records_behind_a_symlinked_folder_are_not_loaded(dnode, private, tmp_path, monkeypatch):
    """lease_remote.load_leases on a docker node whose lease folder is reached through
    a symlink: the record (well-formed, revert lines and all) is never loaded, so
    recover never runs its lines (the listing never follows the folder link)."""
    from faultlab.lifecycle import lease_remote

    rec = {"fault_id": "cpu-abc123", "revert": ["touch /tmp/should-never-run"], "created_ts": 1, "deadline_ts": 2}
    (private / "cpu-abc123.json").write_text(json.dumps(rec))
    link = tmp_path / "leases"
    link.symlink_to(private)
    # (the ssh backend's lease folder; a docker node keeps its leases on this host, so it
    # is pointed at these folders here: its commands run through the same node.run)
    monkeypatch.setattr(dnode, "command_timeout_s", 30, raising=False)
    monkeypatch.setattr(type(dnode), "lease_dir", lambda self: link)
    assert lease_remote.load_leases(dnode) == []
    monkeypatch.setattr(type(dnode), "lease_dir", lambda self: private)
    assert [le.fault_id for le in lease_remote.load_leases(dnode)] == ["cpu-abc123"]
