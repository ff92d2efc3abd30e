"""A real SSH server on a loopback port that answers every command as a node's root
may (paramiko in server mode, in the test's process): the stand-in for a hostile ssh
node in the tests of what root's controller takes from one."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import paramiko

#: an answer: (stdout, stderr, exit status); stdout may be an iterable of chunks; or a
#: callable given the command's channel, which answers on it by itself (reads its input)
Answer = tuple[object, bytes, int] | Callable


class _Node(paramiko.ServerInterface):
    def __init__(self, answer: Callable[[str], Answer]):
        self.answer = answer

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED

    def check_channel_exec_request(self, channel, command):
        threading.Thread(target=_reply, args=(channel, self.answer(command.decode(errors="replace"))), daemon=True).start()
        return True


def _reply(channel, answer: Answer) -> None:
    """Output, errors, exit status and EOF; the client closes the channel (a close from
    this side could reach it before the reply to its exec request)."""
    if callable(answer):
        answer(channel)
        return
    out, err, rc = answer
    try:
        for chunk in [out] if isinstance(out, bytes) else out:
            channel.sendall(chunk)
        channel.sendall_stderr(err)
        channel.send_exit_status(rc)
        channel.shutdown_write()
    except (OSError, EOFError):
        pass


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return str(path)


class AnsweringNodes:
    """``start(answer, window=None) -> inventory path``: a server per call, its host key
    pinned in the inventory's known_hosts (node ``evil`` at 127.0.0.1), every command
    answered with ``answer(command line)``; ``window``: the bytes of input each channel
    is granted at first and again as the answer reads them (paramiko's server grants at
    least 32 KiB; a node's own sshd may grant one); :meth:`close` ends every server and
    connection."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.servers: list[tuple[socket.socket, list]] = []

    def __call__(self, answer: Callable[[str], Answer], window: int | None = None) -> Path:
        d = self.folder
        host_key = paramiko.Ed25519Key.from_private_key_file(_keygen(d / "hostkey"))
        _keygen(d / "id_ed25519")
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        port = srv.getsockname()[1]
        (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key.get_name()} {host_key.get_base64()}\n")
        (d / "inv.yaml").write_text(f"known_hosts: {d}/known_hosts\n"
                                    f"defaults: {{user: root, port: {port}, key: {d}/id_ed25519, connect_timeout_s: 5,"
                                    " command_timeout_s: 60}\n"
                                    "nodes:\n  evil: {address: 127.0.0.1}\n")
        transports: list = []

        def serve():
            while True:
                try:
                    conn, _ = srv.accept()
                except OSError:
                    return
                t = paramiko.Transport(conn)
                t.add_server_key(host_key)
                if window is not None:
                    t.default_window_size = window  # after the constructor, which clamps it
                transports.append(t)
                t.start_server(server=_Node(answer))
                threading.Thread(target=lambda t=t: [t.accept(1) for _ in iter(t.is_active, False)], daemon=True).start()

        threading.Thread(target=serve, daemon=True).start()
        self.servers.append((srv, transports))
        return d / "inv.yaml"

    def close(self) -> None:
        for srv, transports in self.servers:
            srv.close()
            for t in transports:
                t.close()
