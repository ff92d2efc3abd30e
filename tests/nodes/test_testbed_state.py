"""Testbed state files are untrusted until checked: a planted file (another user's, a
symlink, a path in its id, names faultlab never makes) is reported by ``recover`` /
``status`` and never acted on; a real testbed of a dead controller is removed."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from faultlab.cli import app
from faultlab.nodes.backends import recover_testbeds
from faultlab.nodes.testbed import NetnsTestbed, load_states, state_dir, untrusted_states
from tests.helpers import needs_root



@pytest.fixture
def sdir(tmp_path, monkeypatch):
    """A fresh state folder (FAULTLAB_STATE_DIR=tmp/st, so testbeds live in tmp/st/testbeds)."""
    monkeypatch.setenv("FAULTLAB_STATE_DIR", str(tmp_path / "st"))
    monkeypatch.setenv("FAULTLAB_LEASE_DIR", str(tmp_path / "leases"))  # recover must touch no real lease
    d = state_dir()
    d.mkdir(parents=True, mode=0o755)
    return d


@pytest.fixture
def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.fixture
def real_netns():
    """A real namespace with a faultlab-looking name nobody listed for us (another
    user's testbed, or anyone's namespace); removed afterwards."""
    made = []

    def make(name: str) -> str:
        subprocess.run(["ip", "netns", "add", name], check=True)
        made.append(name)
        return name

    yield make
    for n in made:
        subprocess.run(["ip", "netns", "del", n], capture_output=True)


def _netns_exists(name: str) -> bool:
    return name in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()


def _plant(d, name: str, obj) -> str:
    p = d / name
    p.write_text(json.dumps(obj))
    return str(p)


def test_id_with_a_path_deletes_nothing(sdir, tmp_path, dead_pid):
    """A state file whose ``"id"`` is a path (``"../../x/victim"``) never makes
    recover unlink ``state_dir/../../x/victim.json`` (a root-only file)."""
    victim = tmp_path / "x" / "victim.json"
    victim.parent.mkdir()
    victim.write_text("root only")
    os.chmod(victim, 0o600)
    assert (sdir / "../../x/victim.json").resolve() == victim.resolve()
    path = _plant(sdir, "evil.json", {"id": "../../x/victim", "pid": dead_pid, "netns": [], "links": []})
    assert recover_testbeds(only_dead=True) == []
    assert victim.read_text() == "root only"
    bad = untrusted_states()
    assert len(bad) == 1 and path in bad[0] and "id" in bad[0] and "not acted on" in bad[0]


@needs_root
def test_another_users_state_file_is_not_acted_on(sdir, dead_pid, real_netns):
    """A state file planted by another user never makes root's recover run ``ip netns
    del`` on the names in it."""
    tb_id = secrets.token_hex(2)
    ns = real_netns(f"fl{tb_id}n0")
    path = _plant(sdir, f"{tb_id}.json", {"id": tb_id, "subnet": "10.213.7.0/24", "pid": dead_pid,
                                          "netns": [ns], "links": [], "iptables": None})
    os.chown(path, pwd.getpwnam("nobody").pw_uid, -1)
    assert recover_testbeds(only_dead=True) == []
    assert _netns_exists(ns)
    bad = untrusted_states()
    assert len(bad) == 1 and path in bad[0] and "owned by uid" in bad[0]


@needs_root
@pytest.mark.parametrize("field", ["netns", "links", "iptables"])
def test_names_faultlab_never_makes_are_not_acted_on(sdir, dead_pid, real_netns, field):
    """A root-owned (trusted-owner) file whose names are not this testbed's own: the
    schema rejects it before anything runs."""
    tb_id = secrets.token_hex(2)
    victim = real_netns(f"victim{tb_id}")
    state = {"id": tb_id, "subnet": "10.213.7.0/24", "pid": dead_pid, "netns": [], "links": [], "iptables": None}
    state[field] = {"netns": [victim], "links": ["lo"],
                    "iptables": ["INPUT", "-j", "ACCEPT"]}[field]
    path = _plant(sdir, f"{tb_id}.json", state)
    assert recover_testbeds(only_dead=True) == []
    assert _netns_exists(victim)
    bad = untrusted_states()
    assert len(bad) == 1 and path in bad[0] and field in bad[0]


@pytest.mark.parametrize("obj", [{"id": "ab12", "pid": "1"}, {"id": "ab12", "pid": 1, "extra": 1}, [1], "x"])
def test_schema_errors_name_the_field(sdir, obj):
    _plant(sdir, "ab12.json", obj)
    states, bad = load_states()
    assert states == [] and len(bad) == 1 and "not acted on" in bad[0] and "\n" not in bad[0]


def test_file_name_must_match_its_id(sdir, dead_pid):
    _plant(sdir, "ab12.json", {"id": "cd34", "pid": dead_pid})
    states, bad = load_states()
    assert states == [] and "names testbed cd34" in bad[0]


def test_symlinked_state_file_is_not_followed(sdir, tmp_path, dead_pid):
    real = tmp_path / "elsewhere.json"
    real.write_text(json.dumps({"id": "ab12", "pid": dead_pid}))
    (sdir / "ab12.json").symlink_to(real)
    states, bad = load_states()
    assert states == [] and "symlink" in bad[0]
    assert recover_testbeds() == [] and real.exists()


def test_untrusted_state_folder_is_not_read(sdir, dead_pid):
    _plant(sdir, "ab12.json", {"id": "ab12", "pid": dead_pid})
    os.chmod(sdir, 0o777)
    states, bad = load_states()
    assert states == [] and len(bad) == 1 and "folder not trusted" in bad[0] and "writable" in bad[0]


def test_recover_cli_reports_and_exits_nonzero(sdir, tmp_path, dead_pid):
    victim = tmp_path / "x" / "victim.json"
    victim.parent.mkdir()
    victim.write_text("root only")
    path = _plant(sdir, "evil.json", {"id": "../../x/victim", "pid": dead_pid})
    r = CliRunner().invoke(app, ["recover"])
    assert r.exit_code == 1, r.output
    assert path in r.output and "not acted on" in r.output  # (CliRunner mixes stderr into output)
    assert victim.exists()
    r = CliRunner().invoke(app, ["recover", "--json"])
    assert r.exit_code == 1 and path in json.loads(r.stdout)["skipped"][0]
    r = CliRunner().invoke(app, ["status"])
    assert r.exit_code == 0 and path in r.output


@needs_root
def test_recover_removes_a_real_testbed_of_a_dead_controller(sdir, dead_pid):
    """recover_testbeds on a real testbed: kept while its controller lives, removed
    (namespace, links, state file) once the PID in its state is gone."""
    tb = NetnsTestbed(1).up()
    try:
        assert tb.id in [s.id for s in load_states()[0]]
        assert recover_testbeds(only_dead=True) == []  # our own, live controller
        assert _netns_exists(f"fl{tb.id}n0")
        f = sdir / f"{tb.id}.json"
        st = json.loads(f.read_text())
        assert st["starttime"] and (os.stat(f).st_mode & 0o777) == 0o644
        st["pid"] = dead_pid
        f.write_text(json.dumps(st))
        assert recover_testbeds(only_dead=True) == [tb.id]
        assert not _netns_exists(f"fl{tb.id}n0") and not f.exists()
        assert not os.path.exists(f"/sys/class/net/flbr{tb.id}")
    finally:
        tb.down()


@needs_root
def test_reused_controller_pid_does_not_keep_a_testbed(sdir):
    """A state whose PID is alive but has another start time (a reused PID) is dead."""
    tb = NetnsTestbed(1).up()
    try:
        f = sdir / f"{tb.id}.json"
        st = json.loads(f.read_text())
        st["starttime"] -= 1
        f.write_text(json.dumps(st))
        assert recover_testbeds(only_dead=True) == [tb.id]
    finally:
        tb.down()
