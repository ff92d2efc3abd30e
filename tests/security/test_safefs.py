"""faultlab.safefs on real folders, symlinks, modes and owners (as root, another user
is simulated by chown to nobody)."""

from __future__ import annotations

import os
import pwd
import subprocess

import pytest

from faultlab import safefs
from faultlab.safefs import UntrustedPath, open_dir
from tests.helpers import needs_root



def nobody() -> int:
    return pwd.getpwnam("nobody").pw_uid


@pytest.fixture
def base(tmp_path):
    d = tmp_path / "base"
    d.mkdir(mode=0o700)
    return d


def test_create_read_write_roundtrip(base):
    with open_dir(base / "a" / "b", create=True) as d:
        assert (os.stat(base / "a" / "b").st_mode & 0o777) == 0o700
        d.write_json("x.json", {"k": 1})
        assert d.read_json("x.json") == {"k": 1}
        assert (os.stat(base / "a" / "b" / "x.json").st_mode & 0o777) == 0o600
        assert d.listdir() == ["x.json"]
        d.rename("x.json", "y.json")
        assert d.unlink("y.json") is True
        assert d.unlink("y.json") is False
        assert d.listdir() == []


def test_symlink_in_path_is_refused(base, tmp_path):
    real = base / "real"
    real.mkdir()
    (base / "link").symlink_to(real)
    with pytest.raises(UntrustedPath, match="symlink"):
        open_dir(base / "link")
    with pytest.raises(UntrustedPath, match="symlink"):
        open_dir(base / "link" / "sub", create=True)
    assert not (real / "sub").exists()


def test_other_writable_component_is_refused(base):
    mid = base / "mid"
    (mid / "leaf").mkdir(parents=True)
    os.chmod(mid, 0o777)
    with pytest.raises(UntrustedPath, match=r"mid: is writable by group or others \(mode 0777\)"):
        open_dir(mid / "leaf")
    os.chmod(mid, 0o775)
    with pytest.raises(UntrustedPath, match="writable"):
        open_dir(mid / "leaf")


@needs_root
def test_root_sticky_folder_only_as_parent(base):
    sticky = base / "tmpish"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    (sticky / "mine").mkdir(mode=0o700)
    open_dir(sticky / "mine").close()  # sticky root-owned parent: fine
    with pytest.raises(UntrustedPath, match="writable"):
        open_dir(sticky)  # as the folder itself: refused
    os.chown(sticky, nobody(), -1)  # sticky but not root's: refused as a parent too
    with pytest.raises(UntrustedPath, match="owned by uid"):
        open_dir(sticky / "mine")


@needs_root
def test_foreign_owner_is_refused_anywhere_on_the_path(base):
    (base / "p" / "q").mkdir(parents=True)
    os.chown(base / "p", nobody(), -1)
    with pytest.raises(UntrustedPath, match=rf"/p: is owned by uid {nobody()}, not root"):
        open_dir(base / "p" / "q")
    os.chown(base / "p", 0, -1)
    os.chown(base / "p" / "q", nobody(), -1)
    with pytest.raises(UntrustedPath, match="owned by uid"):
        open_dir(base / "p" / "q")


def test_private_requires_0700(base):
    d = base / "priv"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    open_dir(d).close()
    with pytest.raises(UntrustedPath, match="must be 0700"):
        open_dir(d, private=True)
    os.chmod(d, 0o700)
    open_dir(d, private=True).close()


def test_missing_folder_without_create(base):
    with pytest.raises(FileNotFoundError):
        open_dir(base / "nope")


def test_symlinked_file_is_not_read(base, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("root only")
    (base / "s.json").symlink_to(secret)
    with open_dir(base) as d:
        with pytest.raises(UntrustedPath, match="s.json: is a symlink"):
            d.read_bytes("s.json")
        with pytest.raises(UntrustedPath, match="symlink"):
            d.check_file("s.json")
        d.unlink("s.json")  # removes the link, not the target
    assert secret.read_text() == "root only"


@needs_root
def test_foreign_or_writable_file_is_not_read(base):
    f = base / "x.json"
    f.write_text("{}")
    os.chown(f, nobody(), -1)
    with open_dir(base) as d:
        with pytest.raises(UntrustedPath, match="x.json: is owned by uid"):
            d.read_json("x.json")
        os.chown(f, 0, -1)
        os.chmod(f, 0o666)
        with pytest.raises(UntrustedPath, match="writable"):
            d.read_json("x.json")


def test_fifo_and_oversize_are_refused(base):
    os.mkfifo(base / "fifo")
    (base / "big").write_bytes(b"x" * 100)
    with open_dir(base) as d:
        with pytest.raises(UntrustedPath, match="not a regular file"):
            d.read_bytes("fifo")  # O_NONBLOCK: does not hang
        with pytest.raises(UntrustedPath, match="more than 10"):
            d.read_bytes("big", max_bytes=10)


def test_write_never_follows_a_planted_link(base, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.chmod(victim, 0o600)
    # a link at the final name and at every predictable temporary name
    (base / "cmd.json").symlink_to(victim)
    (base / "cmd.json.tmp").symlink_to(victim)
    with open_dir(base) as d:
        d.write_atomic("cmd.json", b"new")
        assert d.read_bytes("cmd.json") == b"new"
    assert victim.read_text() == "keep"
    assert not (base / "cmd.json").is_symlink()


def test_folder_swapped_after_open_is_not_used(base, tmp_path):
    (base / "d").mkdir()
    with open_dir(base / "d") as d:
        os.rename(base / "d", base / "moved")
        evil = tmp_path / "evil"
        evil.mkdir()
        (base / "d").symlink_to(evil)
        d.write_atomic("f", b"1")
    assert (base / "moved" / "f").read_bytes() == b"1"
    assert not (evil / "f").exists()


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".", "", "x\0y"])
def test_names_are_one_component(base, name):
    with open_dir(base) as d, pytest.raises(UntrustedPath, match="not a plain file name"):
        d.write_atomic(name, b"")


def test_error_is_one_line_naming_path_and_fix(base):
    (base / "l").symlink_to(base)
    with pytest.raises(UntrustedPath) as e:
        open_dir(base / "l")
    msg = str(e.value)
    assert "\n" not in msg and str(base / "l") in msg and "(remove it" in msg


def test_private_runtime_base_is_never_shared_tmp(monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    assert not safefs.private_runtime_base().startswith("/tmp")


@needs_root
def test_foreign_listing_counts_links_and_fifos_toward_its_limit(nobody_dir):
    """nobody's folder of one regular file, 300 links and 100 FIFOs: every entry counts
    toward ``regular_files``' limit, so a limit under the entries is one TooLarge line
    naming the folder, and a limit over them lists only the regular file."""
    run = nobody_dir / "run"
    script = ('mkdir "$1" && echo "{}" > "$1/steps-0.jsonl" && i=0; while [ $i -lt 300 ]; do ln -s /etc/shadow "$1/l$i"; '
              'i=$((i+1)); done; i=0; while [ $i -lt 100 ]; do mkfifo "$1/p$i"; i=$((i+1)); done')
    subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-ec", script, "sh", str(run)],
                   check=True, timeout=60)
    with safefs.open_dir_nofollow(nobody_dir) as top, top.foreign_subdir("run") as d:
        with pytest.raises(safefs.TooLarge, match="holds more than 256 entries") as e:
            d.regular_files(limit=256)
        assert str(run) in str(e.value) and "\n" not in str(e.value)
        assert d.regular_files(limit=401) == ["steps-0.jsonl"]
