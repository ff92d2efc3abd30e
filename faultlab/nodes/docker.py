"""The ``docker`` backend: a container is a node.

The container needs no NET_ADMIN and no tools of its own: everything a fault does is
run on the docker host (the node's *lease host*, where its watchdog runs).

- ``scope="net"`` (tc, ip, the throughput probe): ``nsenter --net=SANDBOX`` on the
  host, where SANDBOX is docker's bind mount of the container's network namespace
  (``NetworkSettings.SandboxKey``), checked at lookup to be the namespace of the
  container's init PID (``/proc/PID/ns/net``, same device and inode). A bind mount
  rather than ``/proc/PID/ns/net``: a revert line run late by the watchdog can never
  enter the namespace of another process that reused the PID; once the container is
  gone the file is gone and the line fails harmlessly (the namespace died with it).
- ``scope="host"``: the host itself, where the container's processes (host PIDs) and
  its cgroup (``/docker/<id>`` in every v1 hierarchy, or v2) are visible; a CPU quota
  fault nests its ``faultlab-<id>`` cgroup inside the container's own, so the
  container's limits stay as they were and still apply.
- Workload ranks run *inside* the container (``docker exec`` through the SDK); their
  host PID (``ExecInspect.Pid``) is what injectors and the host sampler use, and the
  container PID is mapped from ``/proc/PID/status`` ``NSpid`` when needed.
- Telemetry is written on the node, in ``/var/lib/faultlab/work`` of the container (a
  host folder of the testbed mounted there); the runner's collector copies it back,
  reading that folder through descriptors with no link followed (the container's
  root writes it) and bounded in size (faultlab.telemetry.collect).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from faultlab import safefs
from faultlab.errors import BadInput, NodeError
from faultlab.nodes.base import Node, copy_log
from faultlab.nodes.dockerd import client
from faultlab.telemetry import collect

#: where ranks in a node container write telemetry (a host folder mounted there)
WORK_DIR = "/var/lib/faultlab/work"
#: environment variables passed into a rank's ``docker exec`` (the host's others stay out)
_ENV_PREFIXES = ("FAULTLAB_", "PYTHON", "OMP_", "MKL_", "GLOO_", "TORCH_", "NCCL_")


@dataclass
class DockerNode(Node):
    """A running container. ``container``: its id; ``sandbox``: its network namespace
    file on the host; ``init_pid``: its PID 1 as the host sees it; ``work_host``: the
    host folder mounted at WORK_DIR (None: telemetry is not collected)."""

    container: str = ""
    sandbox: str = ""
    init_pid: int = 0
    work_host: str | None = None

    def __post_init__(self):
        self.kind = "docker"

    def argv(self, argv: list[str], scope: str = "host") -> list[str]:
        if scope == "net":
            return ["nsenter", f"--net={self.sandbox}", "--", *argv]
        return list(argv)

    def describe(self) -> str:
        return f"docker:{self.name}"

    # -- the workload ------------------------------------------------------------------
    def spawn_workload(self, argv: list[str], *, env: dict | None = None, stdout=None, stderr=None) -> "ContainerProcess":
        """Start a rank inside the container; returns a Popen-like handle whose ``pid``
        is the rank's host PID."""
        keep = {k: v for k, v in (env or os.environ).items() if k.startswith(_ENV_PREFIXES)}
        return ContainerProcess(client(), self.container, argv, keep, stdout)

    def workload_out(self, run_id: str, local_dir: Path) -> str:
        return f"{WORK_DIR}/{run_id}"

    @property
    def collects_telemetry(self) -> bool:
        return bool(self.work_host)

    def _run_folder(self, run_id: str) -> safefs.ForeignDir:
        """The host side of the run's telemetry folder: ``work_host`` opened as a
        trusted folder (root's, closed to others, no symlink on the way), then the
        run's folder in it with ``O_DIRECTORY|O_NOFOLLOW`` relative to its descriptor.
        The container's root writes that folder: a symlink it plants there (to a host
        path) is refused, never followed. Raises FileNotFoundError or UntrustedPath."""
        with safefs.open_dir(self.work_host or "/nonexistent") as host:
            return host.foreign_subdir(run_id)

    def telemetry_files(self, run_id: str) -> list[str]:
        """Regular files in the host side of the node's telemetry folder (links,
        folders, FIFOs and devices are left out). Raises safefs.TooLarge when the
        folder holds more than collect.MAX_ENTRIES entries of any kind (not listed)."""
        try:
            with self._run_folder(run_id) as d:
                return d.regular_files(limit=collect.MAX_ENTRIES)
        except FileNotFoundError:
            return []

    def remove_telemetry(self, run_id: str) -> None:
        """Remove the host side of the run's folder (written by the container: every
        folder opened relative to its parent's descriptor, links removed, never
        followed)."""
        try:
            host = safefs.open_dir(self.work_host or "/nonexistent")
        except FileNotFoundError:
            return
        with host:
            host.remove_tree(run_id)

    def read_telemetry(self, run_id: str, name: str, offset: int) -> bytes:
        """At most collect.CHUNK_BYTES of the regular file ``name`` from ``offset``,
        read through the run folder's descriptor (:meth:`_run_folder`) with
        ``O_NOFOLLOW``. Raises safefs.TooLarge for a file over collect.MAX_FILE_BYTES,
        UntrustedPath for a link or a non-regular file."""
        with self._run_folder(run_id) as d:
            return d.read_from(name, offset, collect.CHUNK_BYTES, collect.MAX_FILE_BYTES)

    def container_pid(self, host_pid: int) -> int | None:
        """The PID ``host_pid`` has inside the container (last ``NSpid`` field)."""
        try:
            for line in Path(f"/proc/{host_pid}/status").read_text().splitlines():
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
        except (OSError, ValueError):
            return None
        return None


class ContainerProcess:
    """A process started with ``docker exec`` (SDK), shaped like ``subprocess.Popen``
    for faultlab.benchmarks.launch: ``pid`` (host PID), ``poll``, ``wait``,
    ``send_signal``, ``terminate``, ``kill``, ``returncode``.

    Output goes to ``stdout`` (a file; its descriptor is duplicated, the caller may
    close it), at most ``base.MAX_LOG_BYTES`` and then one line saying the rest was dropped (the
    stream is still read to its end, so the rank never blocks on a full pipe). Signals
    go to the process this exec started, through a pidfd opened as soon as docker names
    its host PID: the stream (what ``poll`` waits on) outlives that process while
    anything in the container holds its output, and its PID may by then be another
    host process's (the container's root can end the rank, keep its output open and
    cycle the host's PIDs)."""

    def __init__(self, cli, container: str, argv: list[str], env: dict, stdout=None):
        self.args = list(argv)
        self.returncode: int | None = None
        self._api = cli.api
        try:
            self._id = self._api.exec_create(container, self.args, environment=env, workdir="/")["Id"]
            stream = self._api.exec_start(self._id, stream=True)
        except Exception as e:
            raise NodeError(f"docker exec in {container[:12]} failed: {e}", field="node") from None
        self._fd = os.dup(stdout.fileno()) if stdout is not None and hasattr(stdout, "fileno") else None
        self._pump = threading.Thread(target=self._copy, args=(stream,), daemon=True)
        self._pump.start()
        self.pid = 0
        self._pidfd = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            info = self._api.exec_inspect(self._id)
            if info.get("Pid"):
                self.pid = int(info["Pid"])
                with contextlib.suppress(ProcessLookupError):  # gone already: nothing to signal
                    self._pidfd = os.pidfd_open(self.pid)
                break
            if not info.get("Running") and info.get("ExitCode") is not None and not self._pump.is_alive():
                break
            time.sleep(0.02)

    def _copy(self, stream) -> None:
        try:
            copy_log(stream, self._fd)
        except Exception:
            pass
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if self._pump.is_alive():
            return None
        info = self._api.exec_inspect(self._id)
        if info.get("Running"):
            return None
        self.returncode = int(info.get("ExitCode") or 0)
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._pump.join(0.05)
            if not self._pump.is_alive():
                time.sleep(0.02)
        return self.returncode

    def ended(self) -> bool:
        """Whether the process this exec started has ended (its pidfd readable), whatever
        its output stream, what ``poll`` waits on, still does: from then on its host PID
        may be another host process's, and no fault may take it for the rank's. The host
        sampler asks from its own thread while ``poll`` may close the pidfd: it is read
        once, and one closed meanwhile polls as ended (``POLLNVAL``)."""
        fd = self._pidfd
        if self.returncode is not None or fd is None:
            return True
        p = select.poll()
        p.register(fd, select.POLLIN)
        return bool(p.poll(0))

    def send_signal(self, sig: int) -> None:
        """``sig`` to the process this exec started, never to another that has its PID
        now (a process gone is left alone)."""
        if self.returncode is None and self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def node_from_container(ct, name: str | None = None, work_host: str | None = None) -> DockerNode:
    """A DockerNode of the running container ``ct`` (docker SDK object). Raises
    NodeError when it is not running or its namespace file is not its init PID's."""
    ct.reload()
    st = ct.attrs["State"]
    if not st.get("Running"):
        raise NodeError(f"container {ct.name} is not running", field="--node", fix=f"docker start {ct.name}")
    pid = int(st["Pid"])
    sandbox = ct.attrs["NetworkSettings"]["SandboxKey"]
    try:
        a, b = os.stat(sandbox), os.stat(f"/proc/{pid}/ns/net")
    except OSError as e:
        raise NodeError(f"cannot reach the network namespace of container {ct.name}: {e}", field="--node") from None
    if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
        raise NodeError(f"{sandbox} is not the network namespace of container {ct.name}'s PID {pid}", field="--node")
    nets = ct.attrs["NetworkSettings"].get("Networks") or {}
    addr = next((n.get("IPAddress") for n in nets.values() if n.get("IPAddress")), None)
    return DockerNode(name=name or ct.name, address=addr, iface="eth0" if nets else None,
                      container=ct.id, sandbox=sandbox, init_pid=pid, work_host=work_host)


def resolve_docker(name: str) -> DockerNode:
    """``docker:NAME``: the running container NAME (id or name) of faultlab's daemon.
    A faultlab testbed container is named by its node name in tables (``n0``)."""
    import docker as docker_sdk  # optional dependency (faultlab[docker]): only docker nodes need it

    try:
        ct = client().containers.get(name)
    except docker_sdk.errors.NotFound:
        raise BadInput(f"no container {name!r}", field="--node", fix="see `faultlab testbed status`, or docker ps") from None
    labels = ct.labels or {}
    return node_from_container(ct, name=labels.get("faultlab.node") or ct.name, work_host=labels.get("faultlab.work_host"))
