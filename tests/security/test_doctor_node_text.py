"""What an ssh node says reaches `faultlab doctor`'s terminal printable only.

The node here is a real SSH server on 127.0.0.1 (paramiko in server mode, in this
process) that answers every command as a node's root may: the Python version it
reports and the error text of its other commands carry terminal escape sequences (ESC
c, a full reset that clears root's screen; an OSC title; a screen clear). `faultlab
doctor --inventory` must print the report with no ESC in it, the version still shown.
"""

from __future__ import annotations

import socket
import subprocess
import threading

import pytest

from tests.helpers import fl

paramiko = pytest.importorskip("paramiko")

ESC = "\x1b"
PY_OUT = f"3.11.7{ESC}c{ESC}]0;node-title{ESC}\\ False False\n"
ERR = f"no such thing{ESC}[2J{ESC}[H\n"


class _Node(paramiko.ServerInterface):
    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED

    def check_channel_exec_request(self, channel, command):
        cmd = command.decode(errors="replace") if isinstance(command, bytes) else command
        threading.Thread(target=_answer, args=(channel, cmd), daemon=True).start()
        return True


def _answer(channel, cmd: str) -> None:
    """Output, exit status and EOF; the client closes the channel (a close from this
    side could reach it before the reply to its exec request)."""
    try:
        if "importlib.util" in cmd:
            channel.sendall(PY_OUT.encode())
            channel.send_exit_status(0)
        else:
            channel.sendall_stderr(ERR.encode())
            channel.send_exit_status(1)
        channel.shutdown_write()
    except OSError:
        pass


@pytest.fixture
def evil_node(tmp_path):
    """(inventory path): an SSH server on a loopback port whose host key is pinned."""
    host_key = paramiko.Ed25519Key.from_private_key_file(_keygen(tmp_path / "hostkey"))
    _keygen(tmp_path / "id_ed25519")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    (tmp_path / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key.get_name()} {host_key.get_base64()}\n")
    (tmp_path / "inv.yaml").write_text(f"known_hosts: {tmp_path}/known_hosts\n"
                                       f"defaults: {{user: root, port: {port}, key: {tmp_path}/id_ed25519, connect_timeout_s: 5}}\n"
                                       "nodes:\n  evil: {address: 127.0.0.1}\n")
    transports = []

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            t = paramiko.Transport(conn)
            t.add_server_key(host_key)
            transports.append(t)
            t.start_server(server=_Node())
            threading.Thread(target=lambda t=t: [t.accept(1) for _ in iter(t.is_active, False)], daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield tmp_path / "inv.yaml"
    finally:
        srv.close()
        for t in transports:
            t.close()


def _keygen(path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return str(path)


def test_doctor_prints_what_a_node_says_printable_only(evil_node):
    cp = fl("doctor", "--inventory", evil_node, "--node", "evil", timeout=120)
    assert cp.returncode == 0, cp.stderr[-2000:]
    assert "python 3.11.7" in cp.stdout, cp.stdout[:500]
    assert ESC not in cp.stdout + cp.stderr, repr(cp.stdout[:500])
