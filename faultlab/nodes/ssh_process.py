"""Processes and channel output of the ``ssh`` backend (faultlab.nodes.ssh).

``RemoteProcess`` is a process on an ssh node shaped like ``subprocess.Popen``
(attached to a paramiko channel, or detached and polled with ``kill -0``);
``drain`` reads a channel's stdout and stderr to its EOF within a deadline.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import threading
import time
from faultlab.errors import NodeError
from faultlab.nodes.base import Node, copy_log


class RemoteProcess:
    """A process on an ssh node, shaped like ``subprocess.Popen`` for the workload
    launcher and the throughput probe: ``pid`` (on the node), ``poll``, ``wait``,
    ``communicate``, ``send_signal``, ``kill``, ``stdout`` (with ``stdout=PIPE``)."""

    def __init__(self, node: Node, pid: int, chan, stdout, out_file=None):
        self.node, self.pid, self._chan = node, pid, chan
        self.returncode: int | None = None
        self.args = []
        self.stdout = self.stderr = None
        self._pump = None
        if chan is None:
            return
        if stdout is subprocess.PIPE:
            self.stdout = out_file
            self.stderr = chan.makefile_stderr("rb")
        elif stdout is not None and hasattr(stdout, "fileno"):
            chan.set_combine_stderr(True)
            fd = os.dup(stdout.fileno())
            self._pump = threading.Thread(target=_copy, args=(out_file, fd), daemon=True)
            self._pump.start()

    def poll(self) -> int | None:
        """The exit code, or None while the process runs (``Popen.poll``). Attached:
        the channel's exit status (255 when the remote side gave none, e.g. killed by
        a signal or the connection lost). Detached: one ``kill -0 PID`` on the node
        (at most 10 s); gone reads 0, since its real exit code cannot be known.
        Raises NodeError when the node cannot be reached (detached only)."""
        if self.returncode is not None:
            return self.returncode
        if self._chan is None:
            alive = self.node.run(["kill", "-0", str(self.pid)], timeout=10).returncode == 0
            if not alive:
                self.returncode = 0
            return self.returncode
        if self._chan.exit_status_ready():
            self.returncode = self._chan.recv_exit_status()
            if self.returncode == -1:
                self.returncode = 255
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Poll every 0.05 s until the process ends; returns its exit code (as
        :meth:`poll`). ``timeout``: seconds (None: no limit); raises
        ``subprocess.TimeoutExpired`` when it passes (the process is left running).
        Then waits up to 5 s for the output copy to a file (``stdout=FILE``) to end."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.05)
        if self._pump is not None:
            self._pump.join(5)
        return self.returncode

    def communicate(self, timeout: float | None = None):
        """``(stdout bytes, stderr bytes)`` read to EOF (``b""`` for a stream not
        piped), then :meth:`wait` with ``timeout`` (s). Unlike ``Popen.communicate``
        the reads come first and are not bounded by ``timeout``; no input is sent."""
        out = self.stdout.read() if self.stdout is not None else b""
        err = self.stderr.read() if self.stderr is not None else b""
        self.wait(timeout)
        return out, err

    def send_signal(self, sig: int) -> None:
        """``kill -SIG PID`` on the node (one command, at most 10 s) unless the
        process is known to have ended; a node that cannot be reached is ignored
        (NodeError swallowed: the process then ends with its ranks or its own
        deadline). ``sig``: a signal number (``signal.SIGTERM``)."""
        if self.returncode is None:
            try:
                self.node.run(["kill", f"-{int(sig)}", str(self.pid)], timeout=10)
            except NodeError:
                pass

    def terminate(self) -> None:
        self.send_signal(15)

    def kill(self) -> None:
        self.send_signal(9)


def _copy(src, fd: int) -> None:
    """The channel's output into the rank's log, bounded as a docker rank's is."""
    try:
        copy_log(iter(lambda: src.read1(65536) if hasattr(src, "read1") else src.read(65536), b""), fd)
    except Exception:
        pass
    finally:
        os.close(fd)


def drain(chan, deadline: float, limit: int | None = None) -> tuple[bytes, bytes]:
    """stdout and stderr of a channel until its EOF (sshd may send the exit status
    before the last output, so EOF, not the exit status, ends the output).
    ``limit``: stop reading once stdout or stderr holds more than that many bytes
    (returned at once, without the exit status: the caller refuses the output)."""
    out, err = io.BytesIO(), io.BytesIO()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        chan.settimeout(min(1.0, left))
        try:
            data = chan.recv(65536)
        except socket.timeout:
            data = None
        while chan.recv_stderr_ready() and (limit is None or err.tell() <= limit):
            err.write(chan.recv_stderr(65536))
        if limit is not None and err.tell() > limit:
            return out.getvalue(), err.getvalue()
        if data == b"":
            break
        if data:
            out.write(data)
            if limit is not None and out.tell() > limit:
                return out.getvalue(), err.getvalue()
    while not chan.exit_status_ready():  # EOF came; the status follows
        if time.monotonic() > deadline:
            raise TimeoutError
        time.sleep(0.002)
    while chan.recv_stderr_ready():
        err.write(chan.recv_stderr(65536))
    return out.getvalue(), err.getvalue()
