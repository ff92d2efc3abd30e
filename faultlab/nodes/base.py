"""Node backends: the hosts that run ranks and receive faults.

Every backend offers the same small interface, so an injector written once works on
all of them:

- ``node.argv(argv, scope)``: the argv that runs ``argv`` on the node, as executed
  from the node's *lease host* (the machine whose ``sh`` runs the node's watchdog).
  ``scope="net"`` runs inside the node's network namespace (tc, ip); ``scope="host"``
  runs where the node's processes and cgroups are visible.
- ``node.run(argv, scope=..., timeout=...)``: run and wait; returns CompletedProcess.
- ``node.spawn(argv, ...)``: start a process (a rank, a sink) and return its Popen.
- ``node.write_file`` / ``node.read_file``: files on the node.

Commands are argv lists, never shell strings built by concatenation.

This module holds the interface (``Node``) and where lease records live; each
backend is its own module of this package: ``local`` (this host), ``netns`` (a network
namespace on this host, its processes visible to the host; ``testbed`` makes them).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from faultlab import safefs
from faultlab.errors import NodeError

#: ``Node.lease_host()`` of a node whose lease host is this host: its lease records in
#: this host's lease folder, its watchdog a process here (its processes and cgroups are
#: visible here: local, netns and docker nodes)
LEASE_HERE = "here"
#: ``Node.lease_host()`` of a node that is its own lease host: record and watchdog on
#: the node, reached through ``run`` (an ssh node: a cut network does not stop a revert)
LEASE_ON_NODE = "node"


@dataclass
class Node:
    """A host that runs ranks and receives faults.

    Attributes: ``name`` (as it appears in tables), ``address`` (IPv4 peers reach it at,
    or None), ``iface`` (its main network interface, or None when unknown).
    """

    name: str
    address: str | None = None
    iface: str | None = None
    kind: str = field(default="local", init=False)

    # -- the interface injectors use -------------------------------------------------
    def argv(self, argv: list[str], scope: str = "host") -> list[str]:
        """``argv`` wrapped to run on this node from its lease host. Pure."""
        return list(argv)

    def run(
        self,
        argv: list[str],
        *,
        scope: str = "host",
        timeout: float = 30.0,
        input: bytes | None = None,
        check: bool = False,
        limit: int | None = None,
    ) -> subprocess.CompletedProcess:
        """Run ``argv`` on the node and wait at most ``timeout`` seconds.

        Returns the CompletedProcess (stdout/stderr as text). Its stdin is ``input``,
        else ``/dev/null``. ``limit``: the most bytes
        of stdout (and of stderr) taken; a command that writes more is killed, its
        output cut just past ``limit`` and its returncode -9, so what another party
        controls never fills memory. Raises NodeError when the program is missing, the
        command times out, or ``check`` and rc != 0.
        """
        full = self.argv(argv, scope)
        try:
            # stdin never this process's (a terminal: a command run as another user
            # could read root's keystrokes from it or type into it)
            cp = (subprocess.run(full, input=input, stdin=None if input is not None else subprocess.DEVNULL,
                                 capture_output=True, timeout=timeout) if limit is None
                  else run_bounded(full, input=input, timeout=timeout, limit=limit))
        except FileNotFoundError:
            raise NodeError(f"{full[0]!r} not found on node {self.name}", field="node", fix=f"install {full[0]} there") from None
        except subprocess.TimeoutExpired:
            raise NodeError(f"{' '.join(full[:4])} ... timed out after {timeout:g}s on node {self.name}", field="node") from None
        out = subprocess.CompletedProcess(full, cp.returncode, cp.stdout.decode(errors="replace"), cp.stderr.decode(errors="replace"))
        if check and out.returncode != 0:
            msg = (out.stderr.strip() or out.stdout.strip()).splitlines()
            raise NodeError(f"{argv[0]} failed on node {self.name}: {msg[-1] if msg else 'rc=' + str(out.returncode)}")
        return out

    def spawn(self, argv: list[str], *, scope: str = "net", env: dict | None = None, stdout=None, stderr=None, new_session: bool = False,
              pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
        """Start ``argv`` on the node without waiting; returns its Popen (local handle).
        ``pass_fds``: descriptors of this process the child inherits (same numbers)."""
        return subprocess.Popen(
            self.argv(argv, scope),
            env=env,
            stdout=stdout if stdout is not None else subprocess.DEVNULL,
            stderr=stderr if stderr is not None else subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=new_session,
            pass_fds=pass_fds,
        )

    def spawn_workload(self, argv: list[str], *, env: dict | None = None, stdout=None, stderr=None, **kw):
        """Start a workload rank on the node (where its processes belong: a container's
        own namespaces and cgroup on docker); returns a Popen-like handle whose ``pid``
        is the rank's PID as the lease host sees it. Here: ``spawn(scope="net")``
        (``kw``: ``pass_fds`` for a node on this host)."""
        return self.spawn(argv, scope="net", env=env, stdout=stdout, stderr=stderr, **kw)

    def workload_out(self, run_id: str, local_dir: Path) -> str:
        """Where a rank on this node writes its telemetry: ``local_dir`` for nodes on
        this host; a node-local folder for nodes whose files the collector brings back."""
        return str(local_dir)

    #: whether ranks on this node write telemetry the collector must bring back
    collects_telemetry = False

    def telemetry_files(self, run_id: str) -> list[str]:
        """Names of the telemetry files of run ``run_id`` on the node."""
        return []

    def read_telemetry(self, run_id: str, name: str, offset: int) -> bytes:
        """The bytes of telemetry file ``name`` from ``offset`` on."""
        return b""

    def remove_telemetry(self, run_id: str) -> None:
        """Remove the node's telemetry folder of run ``run_id`` (a plain name) once it
        is collected. Nodes on this host write into the run directory: nothing."""

    def write_file(self, path: str | Path, data: str | bytes, mode: int = 0o600) -> None:
        """Write ``data`` to ``path`` on the node atomically (temp file + rename)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, p)

    def read_file(self, path: str | Path) -> str:
        """Read a text file on the node. Raises FileNotFoundError."""
        return Path(path).read_text()

    def exists(self, path: str | Path) -> bool:
        """Whether ``path`` exists on the node."""
        return Path(path).exists()

    def has_net_admin(self) -> bool:
        """Whether commands on the node hold CAP_NET_ADMIN (bit 12 of CapEff), which
        tc and ip need; without it they fail with EPERM."""
        try:
            status = self.read_file("/proc/self/status")
        except OSError:
            return False
        for line in status.splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) & (1 << 12))
        return False

    def writable(self, path: str | Path) -> bool:
        """Whether the node's commands may write in ``path`` (cgroup folders)."""
        return os.access(path, os.W_OK)

    def lease_host(self) -> str:
        """Where this node's leases live and its ranks are sampled: ``LEASE_HERE`` (this
        host) or ``LEASE_ON_NODE`` (the node itself)."""
        return LEASE_HERE

    def lease_dir(self) -> Path:
        """Folder for lease records on the lease host (root: /run/faultlab/leases)."""
        return lease_dir()

    def has_program(self, name: str) -> bool:
        """Whether ``name`` is on PATH on the node."""
        return shutil.which(name) is not None

    def describe(self) -> str:
        return f"{self.kind}:{self.name}"


#: the most bytes of stdout (and of stderr) taken from one inject or revert line: a
#: line may run as another user (gc-storm's), whose process may write without end
LINE_OUTPUT_BYTES = 64 * 1024
#: the most bytes of a rank's output written to its log on this host (a ``docker exec``
#: stream, an ssh channel): a rank prints some lines a minute and a traceback or two, a
#: few MB a day; the node's root chooses what it prints, so the rest is read and dropped
MAX_LOG_BYTES = 64 << 20


def copy_log(chunks: Iterable[bytes], fd: int | None) -> None:
    """Write the byte strings ``chunks`` to descriptor ``fd`` (None: nowhere) up to
    MAX_LOG_BYTES, then one line saying the rest was dropped. Every chunk is still
    taken, so the node's process never blocks on a full pipe."""
    left = MAX_LOG_BYTES
    for chunk in chunks:
        if fd is None or not chunk or left < 0:
            continue
        if len(chunk) > left:
            chunk = chunk[:left] + f"\n[faultlab: output past {MAX_LOG_BYTES} bytes dropped]\n".encode()
            left = -1
        else:
            left -= len(chunk)
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view):]


def run_bounded(full: list[str], *, input: bytes | None, timeout: float, limit: int) -> subprocess.CompletedProcess:
    """``subprocess.run(full, capture_output=True)`` taking at most ``limit`` + 1 bytes
    of stdout and of stderr: past that the process is killed and its returncode is
    -9 whatever it exits with. Raises FileNotFoundError, subprocess.TimeoutExpired (the
    process killed), and whatever a signal handler raises while it waits (the process
    killed, as ``subprocess.run`` does; a child of it that holds the pipes is left to
    the reader threads, which close them)."""
    p = subprocess.Popen(full, stdin=subprocess.PIPE if input else subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    over = threading.Event()
    outs: dict[int, bytes] = {}

    def take(stream, key: int) -> None:
        buf = bytearray()
        try:
            while chunk := stream.read1(65536):
                buf += chunk
                if len(buf) > limit:
                    over.set()
                    p.kill()
                    break
        finally:
            stream.close()  # here, never under a read of another thread
        outs[key] = bytes(buf[:limit + 1])

    readers = [threading.Thread(target=take, args=(p.stdout, 1), daemon=True),
               threading.Thread(target=take, args=(p.stderr, 2), daemon=True)]
    for t in readers:
        t.start()
    if input:
        try:
            p.stdin.write(input)
        except BrokenPipeError:
            pass
        p.stdin.close()
    try:
        rc = p.wait(timeout)
    except BaseException:  # timed out, or a signal's exception (an interrupt, a hand-over)
        p.kill()
        p.wait()
        raise
    for t in readers:
        t.join(5)
    return subprocess.CompletedProcess(full, -signal.SIGKILL if over.is_set() else rc, outs.get(1, b""), outs.get(2, b""))


def lease_dir() -> Path:
    """Where lease records live on this host: $FAULTLAB_LEASE_DIR, else /run/faultlab/leases
    as root, else $XDG_RUNTIME_DIR/faultlab/leases (or ~/.cache/faultlab/leases without
    it; never a folder under a shared /tmp: ``safefs.private_runtime_base``)."""
    return safefs.runtime_dir("FAULTLAB_LEASE_DIR", "leases")
