"""An inventory someone else wrote never makes root's ``--accept-new-host-key`` append a
host key line to a file that is not a known_hosts file: its ``known_hosts:`` may name
any file of a root folder (``/etc/sudoers``: sudo then refuses to run), and the key is
pinned before any login.

The inventory is nobody's (uid 65534); its node is an SSH server on loopback that
offers a host key and refuses every login (paramiko in server mode, a real TCP SSH
handshake: it stands in for an sshd the user runs on a high port). Root's real
``faultlab inject`` must refuse to pin into ``sudoers`` (root's 0440 file in a root
folder) and leave it unchanged; the same inventory naming a ``known_hosts`` of root's
pins the key, so the server is reached and the refusal is the name's.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading

import pytest

from tests.helpers import ROOT, fl, give_to_nobody

paramiko = pytest.importorskip("paramiko", reason="ssh nodes are the 'ssh' extra: pip install -e '.[ssh]'")
pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("setpriv"), reason="needs root (the user's file is nobody's)")

SUDOERS = b"root ALL=(ALL:ALL) ALL\n"


class _Deny(paramiko.ServerInterface):
    def get_allowed_auths(self, username):
        return "publickey"


@pytest.fixture
def sshd():
    """``port`` of an SSH server on 127.0.0.1 that shows a fresh host key and lets nobody in."""
    key = paramiko.RSAKey.generate(2048)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    stop = threading.Event()

    def one(conn):
        t = paramiko.Transport(conn)
        t.add_server_key(key)
        try:
            t.start_server(server=_Deny())
            t.accept(10)
        except (paramiko.SSHException, OSError, EOFError):
            pass
        finally:
            t.close()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = s.accept()
            except OSError:
                return
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield s.getsockname()[1]
    finally:
        stop.set()
        s.close()


def _inject(inv):
    return fl("inject", "--inventory", inv, "--node", "evil", "--type", "cpu-contention", "--cpu-fraction", "0.5",
              "--target", "4242", "--duration", "5s", "--accept-new-host-key")


@pytest.mark.parametrize("name", ["sudoers", "known_hosts"])
def test_a_host_key_is_pinned_only_into_a_known_hosts_file(sshd, nobody_dir, tmp_path, name):
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o755)
    target = etc / name
    target.write_bytes(SUDOERS if name == "sudoers" else b"")
    os.chmod(target, 0o440 if name == "sudoers" else 0o600)
    inv = nobody_dir / "inv.yaml"
    inv.write_text(f"known_hosts: {target}\ndefaults: {{user: nobody, connect_timeout_s: 10}}\n"
                   f"nodes:\n  evil: {{address: 127.0.0.1, port: {sshd}}}\n")
    give_to_nobody(nobody_dir)
    cp = _inject(inv)
    err = (cp.stdout + cp.stderr).strip().splitlines()
    assert cp.returncode != 0 and len(err) == 1, (cp.returncode, cp.stdout[-400:], cp.stderr[-800:])
    if name == "sudoers":
        assert target.read_bytes() == SUDOERS and "no known_hosts file" in err[0], err[0]
    else:
        assert f"[127.0.0.1]:{sshd} ssh-rsa " in target.read_text(), err[0]
