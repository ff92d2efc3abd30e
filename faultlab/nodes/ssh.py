"""The ``ssh`` backend: a real host reached over SSH (paramiko).

- **Host keys are pinned.** Only the node's ``known_hosts`` file is loaded (never the
  user's by surprise) and paramiko's ``RejectPolicy`` refuses a host whose key is not
  there; a *changed* key is always refused (paramiko ``BadHostKeyException``). Either
  is a one-line ``NodeError`` before any command runs. ``accept_new=True`` (CLI
  ``--accept-new-host-key``) pins the key of a host not yet in the file, and only
  then (an ``ssh -o StrictHostKeyChecking=accept-new`` analogue; Fabric's
  ``Connection`` auto-adds by default, which this never does).
- Key authentication only (``key``; no agent, no password, no look-up of
  ``~/.ssh/id_*``), ``connect_timeout_s`` for TCP + banner + auth and
  ``command_timeout_s`` for every command.
- Every command is an argv joined with ``shlex.join`` into one remote shell line,
  prefixed with ``sudo -n --`` when ``sudo`` (the login user is not root).
- The node *is* its own lease host: ``argv()`` returns the argv unchanged, so revert
  lines rendered for the lease run in the node's own ``sh`` (faultlab.lifecycle.lease
  keeps the record and the watchdog there; they need only sh and coreutils).
- Connections are shared by the threads of one controller (one transport a node; a
  paramiko transport multiplexes channels); ``faultlab.lifecycle.fanout`` bounds how
  many nodes are connected at once (sshd's ``MaxStartups`` drops unauthenticated
  connections beyond 10 by default).
"""

from __future__ import annotations

import logging
import os
import signal
import shlex
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from faultlab import safefs
from faultlab.errors import NodeError, printable
from faultlab.nodes.base import LEASE_ON_NODE, Node
from faultlab.nodes.ssh_process import RemoteProcess, drain
from faultlab.telemetry import collect

#: where ranks on an ssh node write telemetry (collected back)
WORK_DIR = "/var/lib/faultlab/work"
#: the most bytes of stdout (and of stderr) taken from a command whose caller sets no
#: ``limit``: the node (its root) chooses what its commands print, and 55 s of one
#: command's output held root's ``status --inventory`` at 8.5 GB; faultlab's own
#: commands there print some KB (a process's ``cmdline``: at most a few MB)
OUTPUT_BYTES = 16 << 20
_ENV_PREFIXES = ("FAULTLAB_", "PYTHON", "OMP_", "MKL_", "GLOO_", "TORCH_", "NCCL_")

# paramiko's transport thread logs a failed handshake (no SSH banner, a reset) at ERROR
# with its traceback; with no handler configured, Python's last-resort handler wrote
# those ~20 lines to stderr before faultlab's one-line NodeError. Every paramiko
# failure faultlab meets becomes that NodeError, so paramiko's own log is dropped here
# (a program that wants it sets ``logging.getLogger("paramiko").propagate = True``).
_PARAMIKO_LOG = logging.getLogger("paramiko")
_PARAMIKO_LOG.addHandler(logging.NullHandler())
_PARAMIKO_LOG.propagate = False


@dataclass
class SshNode(Node):
    """A host reached over SSH. ``address``/``port``/``user``/``key`` as for ssh;
    ``known_hosts``: the pinned host keys; ``accept_new``: pin an unknown key (never a
    changed one); ``sudo``: prefix commands with ``sudo -n``; ``group_labels``: the
    labels that declare its rank's peer group (an inventory's, see
    :func:`faultlab.nodes.inventory.ssh_nodes`)."""

    port: int = 22
    user: str = "root"
    key: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    accept_new: bool = False
    sudo: bool = False
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 60.0
    group_labels: dict[str, str] = field(default_factory=dict)
    collects_telemetry = True

    def __post_init__(self):
        self.kind = "ssh"
        self._lock = threading.Lock()
        self._client = None

    def describe(self) -> str:
        return f"ssh:{self.name}"

    def lease_host(self) -> str:
        """The node itself: record and watchdog live on the node."""
        return LEASE_ON_NODE

    # -- connection ----------------------------------------------------------------------
    def connect(self):
        """The connected paramiko client (connecting once). Raises NodeError naming the
        node: unknown or changed host key, auth failure, timeout, unreachable."""
        import paramiko  # optional dependency (faultlab[ssh]): only ssh nodes need it

        with self._lock:
            if self._client is not None and self._client.get_transport() and self._client.get_transport().is_active():
                return self._client
            kh = Path(os.path.abspath(os.path.expanduser(self.known_hosts)))
            c = paramiko.SSHClient()
            try:
                load_known_hosts(c.get_host_keys(), kh)
            except safefs.UntrustedPath as e:
                c.close()
                raise NodeError(f"ssh node {self.name}: known_hosts refused, nothing applied: {e}", field="--node") from None
            c.set_missing_host_key_policy(_PinNew(kh) if self.accept_new else paramiko.RejectPolicy())
            where = f"{self.address}:{self.port}"
            try:
                c.connect(self.address, port=self.port, username=self.user, key_filename=self.key and os.path.expanduser(self.key),
                          timeout=self.connect_timeout_s, banner_timeout=self.connect_timeout_s, auth_timeout=self.connect_timeout_s,
                          allow_agent=False, look_for_keys=False)
            except safefs.UntrustedPath as e:  # raised by _PinNew: before OSError, which it also is
                c.close()
                raise NodeError(f"ssh node {self.name}: known_hosts refused, host key not pinned, nothing applied: {e}", field="--node") from None
            except paramiko.BadHostKeyException:
                c.close()
                raise NodeError(f"host key of ssh node {self.name} ({where}) has CHANGED from the one pinned in {kh}: refused, nothing applied",
                                field="--node", fix=f"if the host was really reinstalled, remove its line from {kh} and pin the new key") from None
            except paramiko.SSHException as e:
                c.close()
                if "not found in known_hosts" in str(e):
                    raise NodeError(f"host key of ssh node {self.name} ({where}) is not pinned in {kh}: refused, nothing applied",
                                    field="--node", fix="add it to the known_hosts file, or pass --accept-new-host-key to pin it now") from None
                raise NodeError(f"ssh node {self.name} ({where}): {e}", field="--node", fix="check the user, key and sshd there") from None
            except (OSError, EOFError) as e:
                c.close()
                why = "timed out" if "timed out" in str(e) else (getattr(e, "strerror", None) or str(e) or type(e).__name__)
                raise NodeError(f"ssh node {self.name} ({where}) unreachable: {why} (connect timeout {self.connect_timeout_s:g}s)",
                                field="--node", fix="check the address, port and network") from None
            c.get_transport().set_keepalive(5)
            # a node whose sshd stops reading its socket while making root's client answer (a
            # flood of requests wanting replies) blocked paramiko's one writer for good, and
            # every command on the connection with it: unsent data waits at most the command timeout
            c.get_transport().sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, max(1000, int(self.command_timeout_s * 1000)))
            if self.sudo:
                self._check_sudo(c)
            self._client = c
            return c

    def _check_sudo(self, c) -> None:
        """Refuse a node whose login cannot ``sudo -n`` (no NOPASSWD rule): one line
        naming the fix, before any command of a fault runs. Closes ``c`` on refusal."""
        try:  # bounded in time and bytes as every command's output is (drain)
            chan = c.get_transport().open_session(timeout=self.command_timeout_s)
            _bound_buffers(chan)
            exec_within(chan, shlex.join(["sudo", "-n", "--", "true"]), self.command_timeout_s)
            chan.shutdown_write()
            _, err = drain(chan, time.monotonic() + self.command_timeout_s, limit=OUTPUT_BYTES)
            rc = chan.recv_exit_status() if chan.exit_status_ready() else -1
            chan.close()
            why = [printable(x, 200) for x in err[-4096:].decode(errors="replace").strip().splitlines()]
        except Exception as e:  # noqa: BLE001 - any failure of the check is a refusal
            rc, why = -1, [f"{type(e).__name__}: {e}"]
        if rc != 0:
            c.close()
            raise NodeError(f"sudo -n refused on ssh node {self.name} for user {self.user}: {why[-1] if why else 'rc=' + str(rc)}; nothing applied",
                            field="--node", fix=f"give {self.user} passwordless sudo (a sudoers line '{self.user} ALL=(root) NOPASSWD: ALL'), or log in as root")

    def check_access(self) -> str:
        """Connect (pinned host key, key auth, ``sudo -n`` when asked) and say how the
        node is reached. Raises NodeError as :meth:`connect`."""
        self.connect()
        return (f"{self.user}@{self.address}:{self.port}, host key pinned in {self.known_hosts}"
                + (", commands through sudo -n" if self.sudo else ""))

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def line(self, argv: list[str], env: dict | None = None) -> str:
        """The remote shell line of ``argv``: ``shlex.join``, with ``sudo -n --``."""
        pre = ["sudo", "-n", "--"] if self.sudo else []
        envs = ["env", *[f"{k}={v}" for k, v in sorted((env or {}).items())]] if env else []
        return shlex.join([*pre, *envs, *argv])

    # -- the node interface ----------------------------------------------------------------
    def run(self, argv, *, scope="host", timeout=None, input=None, check=False, limit=None) -> subprocess.CompletedProcess:
        """Node.run over the connection; ``limit``: past that many bytes of stdout (or
        stderr) the channel is closed, the output cut and the returncode -9. With no
        ``limit``, output past OUTPUT_BYTES is a NodeError (none of it is used)."""
        timeout = self.command_timeout_s if timeout is None else timeout
        cmd = self.line(list(argv))
        chan = self._open(cmd, timeout)
        deadline = time.monotonic() + timeout
        try:
            if input:
                _send_within(chan, input, deadline)
            chan.shutdown_write()
            out, err = drain(chan, deadline, limit=OUTPUT_BYTES if limit is None else limit)
        except TimeoutError:
            _close(chan)
            raise NodeError(f"{' '.join(list(argv)[:4])} ... timed out after {timeout:g}s on ssh node {self.name}", field="node") from None
        except (OSError, EOFError) as e:  # the connection ended under the command
            self.close()
            raise NodeError(f"{' '.join(list(argv)[:4])} ... on ssh node {self.name}: connection lost ({type(e).__name__})", field="node") from None
        if limit is None and (len(out) > OUTPUT_BYTES or len(err) > OUTPUT_BYTES):
            chan.close()
            raise NodeError(f"{' '.join(list(argv)[:2])[:80]} ... on ssh node {self.name} printed more than {OUTPUT_BYTES} bytes: refused, none of it used",
                            field="node", fix="see what prints that much on that node (faultlab's own commands print a few KB)")
        if limit is not None and (len(out) > limit or len(err) > limit):
            out, err, rc = out[:limit + 1], err[:limit + 1], -signal.SIGKILL
        else:
            rc = chan.recv_exit_status()
        chan.close()
        cp = subprocess.CompletedProcess(list(argv), rc, out.decode(errors="replace"), err.decode(errors="replace"))
        if check and rc != 0:
            msg = (cp.stderr.strip() or cp.stdout.strip()).splitlines()
            raise NodeError(f"{argv[0]} failed on ssh node {self.name}: {msg[-1] if msg else 'rc=' + str(rc)}")
        return cp

    def _open(self, cmd: str, timeout: float):
        """A channel running ``cmd``. One the node refuses (``ChannelException``: e.g.
        sshd's MaxSessions reached while other commands run) is retried for up to
        ~2 s and never closes the connection: the ranks and samplers on its other
        channels live on it (closing it killed them, exit -1). Only a connection that is
        no longer active is dropped. Raises NodeError naming the node."""
        import paramiko  # optional dependency (faultlab[ssh]): only ssh nodes need it

        attempt = 0
        while True:
            attempt += 1
            tr = self.connect().get_transport()
            chan = None
            try:
                chan = tr.open_session(timeout=timeout)
                _bound_buffers(chan)
                chan.settimeout(timeout)
                exec_within(chan, cmd, timeout)
                return chan
            except paramiko.ChannelException as e:
                if attempt <= 10 and tr.is_active():
                    time.sleep(0.2)
                    continue
                raise NodeError(f"ssh node {self.name}: cannot run a command: {e or type(e).__name__}", field="node") from None
            except TimeoutError as e:
                raise NodeError(f"ssh node {self.name}: {e}", field="node", fix="check the sshd of that node") from None
            except Exception as e:
                if chan is not None:
                    chan.close()
                if not tr.is_active():
                    self.close()
                raise NodeError(f"ssh node {self.name}: cannot run a command: {e or type(e).__name__}", field="node") from None

    def spawn(self, argv, *, scope="net", env=None, stdout=None, stderr=None, new_session=False):
        """Start ``argv`` on the node. ``new_session``: fully detached (setsid, stdio
        on /dev/null; it outlives this connection; the watchdog); else attached to a
        channel whose output comes back (``stdout=PIPE``: readable; a file: copied)."""
        keep = {k: v for k, v in (env or {}).items() if k.startswith(_ENV_PREFIXES)} if env else None
        if new_session:
            inner = self.line(list(argv), keep)
            cp = self.run(["sh", "-c", 'setsid sh -c "$1" </dev/null >/dev/null 2>&1 & echo $!', "sh", inner], timeout=self.command_timeout_s)
            try:
                pid = int(cp.stdout.split()[0])
            except (IndexError, ValueError):
                raise NodeError(f"could not start a detached process on ssh node {self.name}: {cp.stderr.strip()[:200]}", field="node") from None
            return RemoteProcess(self, pid, None, None)
        cmd = self.line(["sh", "-c", 'echo $$; exec "$@"', "sh", *argv], keep)
        chan = self._open(cmd, self.command_timeout_s)
        out = chan.makefile("rb")
        try:  # the PID the shell echoes, within the command timeout: the node may send no line, or one without end
            first = _first_line(chan, out, 64, time.monotonic() + self.command_timeout_s)
            pid = int(first) if first.endswith(b"\n") else 0
            if pid <= 0:
                raise ValueError(first[:64])
        except (ValueError, OSError):
            chan.close()
            raise NodeError(f"could not start {argv[0]} on ssh node {self.name}", field="node") from None
        chan.settimeout(None)
        return RemoteProcess(self, pid, chan, stdout, out)

    def spawn_workload(self, argv, *, env=None, stdout=None, stderr=None):
        return self.spawn(argv, env=env, stdout=stdout, stderr=stderr)

    def write_file(self, path, data, mode: int = 0o600) -> None:
        data = data.encode() if isinstance(data, str) else data
        script = 'umask 077; t="$1.tmp.$$"; cat > "$t" && chmod "$2" "$t" && mv -f "$t" "$1"'
        self.run(["sh", "-c", script, "sh", str(path), format(mode, "o")], input=data, check=True)

    def read_file(self, path) -> str:
        cp = self.run(["cat", "--", str(path)])
        if cp.returncode != 0:
            if "No such file" in cp.stderr:
                raise FileNotFoundError(str(path))
            raise OSError(f"cannot read {path} on ssh node {self.name}: {cp.stderr.strip()[:200]}")
        return cp.stdout

    def exists(self, path) -> bool:
        return self.run(["test", "-e", str(path)]).returncode == 0

    def writable(self, path) -> bool:
        return self.run(["test", "-w", str(path)]).returncode == 0

    def has_program(self, name: str) -> bool:
        return self.run(["sh", "-c", 'command -v "$1" >/dev/null', "sh", name]).returncode == 0

    def lease_dir(self) -> PurePosixPath:
        """Lease records live on the node: ``/run/faultlab/leases`` there."""
        return PurePosixPath("/run/faultlab/leases")

    # -- telemetry written on the node -------------------------------------------------------
    def workload_out(self, run_id: str, local_dir: Path) -> str:
        return f"{WORK_DIR}/{run_id}"

    def telemetry_files(self, run_id: str) -> list[str]:
        """Regular files of the run's telemetry folder on the node (no link), at most
        collect.MAX_FILES + 1 of them."""
        cp = self.run(["sh", "-c", 'cd "$1" 2>/dev/null || exit 0; for f in *; do [ -f "$f" ] && [ ! -L "$f" ] && printf "%s\\n" "$f"; done | head -n "$2"; exit 0',
                       "sh", f"{WORK_DIR}/{run_id}", str(collect.MAX_FILES + 1)], timeout=30, limit=(collect.MAX_FILES + 1) * 256)
        return [x for x in cp.stdout.splitlines()[:collect.MAX_FILES + 1] if x and x != "*"]

    def remove_telemetry(self, run_id: str) -> None:
        self.run(["rm", "-rf", "--", f"{WORK_DIR}/{run_id}"], timeout=60, check=True)

    def read_telemetry(self, run_id: str, name: str, offset: int) -> bytes:
        """At most collect.CHUNK_BYTES of telemetry file ``name`` from ``offset`` on
        (``head -c`` on the node bounds what comes back). Raises safefs.TooLarge for
        a file over collect.MAX_FILE_BYTES (never read), UntrustedPath for a link or
        a non-regular file, NodeError when the node cannot run the command."""
        path = f"{WORK_DIR}/{run_id}/{name}"
        argv = ["sh", "-c", _READ_TELEMETRY_SH, "sh", path, str(int(offset)), str(collect.MAX_FILE_BYTES), str(collect.CHUNK_BYTES)]
        chan = self._open(self.line(argv), 30)
        try:
            chan.shutdown_write()
            out, err = drain(chan, time.monotonic() + 30, limit=collect.CHUNK_BYTES)
            if len(out) > collect.CHUNK_BYTES:
                raise safefs.UntrustedPath(path, f"on ssh node {self.name}: sent more than the {collect.CHUNK_BYTES} bytes asked for",
                                           "check the node's sh, tail and head")
            rc = chan.recv_exit_status()
        except TimeoutError:
            raise NodeError(f"reading {path} timed out after 30s on ssh node {self.name}", field="node") from None
        finally:
            chan.close()
        why = err.decode(errors="replace").strip().splitlines()
        why = why[-1] if why else f"exit {rc}"
        if rc == 5:
            raise safefs.TooLarge(path, f"on ssh node {self.name}: {why}", "it is skipped; keep the run shorter or its records smaller")
        if rc != 0:
            raise safefs.UntrustedPath(path, f"on ssh node {self.name}: {why}", "faultlab copies only regular files, never through links")
        return out


def _close(chan) -> None:
    """``chan.close()``; a connection already lost (paramiko's EOFError, OSError) is no
    error here: the channel is gone with it."""
    try:
        chan.close()
    except (OSError, EOFError):
        pass


def _bound_buffers(chan) -> None:
    """Keep at most twice the window this side grants (``chan.in_window_size``) unread in
    each of ``chan``'s receive buffers (stdout, stderr); what the node sends past that is
    dropped. An sshd may send only as much as the window granted, and the window grows
    back only as the output is read, but paramiko buffers whatever arrives: a node's
    sshd that ignored the window put 3.2 GiB into root's controller in 10 s, on the
    stderr of a process started with ``stdout=PIPE`` that nobody read then (the
    throughput sink's)."""
    cap = 2 * chan.in_window_size
    for pipe in (chan.in_buffer, chan.in_stderr_buffer):
        def feed(data, pipe=pipe, real=pipe.feed):
            room = cap - len(pipe)
            if room > 0:
                real(data[:room])
        pipe.feed = feed


def exec_within(chan, cmd: str, timeout: float) -> None:
    """``chan.exec_command(cmd)``, waiting at most ``timeout`` seconds for the node to
    answer the request: paramiko waits for that answer with no timeout, and a node whose
    sshd never answers would hold the caller (every command, root's ``status
    --inventory`` included) for good. Past it the channel is closed. Raises TimeoutError
    then, and what ``exec_command`` raises otherwise."""
    lock = threading.Lock()
    state = {"answered": False, "expired": False}

    def expire():
        with lock:
            if not state["answered"]:
                state["expired"] = True
                chan.close()

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        chan.exec_command(cmd)
    except Exception:
        if not state["expired"]:
            raise
    finally:
        timer.cancel()
        with lock:
            state["answered"] = True
    if state["expired"]:
        raise TimeoutError(f"no answer to a command within {timeout:g}s")


def _send_within(chan, data: bytes, deadline: float) -> None:
    """``chan.sendall(data)`` by ``deadline`` (monotonic s). The node's sshd grants what
    may be sent (its window) and paramiko waits for each grant up to the channel's
    timeout: a node that grants one byte just inside it held a lease record's write some
    hours (each wait here is the time left instead). Raises TimeoutError, and OSError
    when the node closed the channel."""
    sent = 0
    while sent < len(data):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        chan.settimeout(left)
        sent += chan.send(data[sent:])
        if chan.closed:
            raise OSError("the node closed the channel")


def _first_line(chan, out, size: int, deadline: float) -> bytes:
    """The channel's first line, at most ``size`` bytes, read from ``out`` (the
    channel's file, which keeps what follows for the process's reader) a byte at a
    time by ``deadline`` (monotonic s): each read's timeout is the time left, so a
    node that sends a byte now and then cannot stretch the wait to ``size`` reads'
    timeouts. Raises TimeoutError."""
    line = b""
    while len(line) < size and not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        chan.settimeout(left)
        b = out.read(1)
        if not b:
            break
        line += b
    return line


#: $1 a telemetry file, $2 the offset, $3 the largest size read, $4 the most bytes
#: printed: a link or non-regular file exits 3, one over $3 bytes exits 5 (unread).
_READ_TELEMETRY_SH = r"""
f=$1
[ -L "$f" ] && { echo "is a symlink" >&2; exit 3; }
[ -f "$f" ] || { echo "is not a regular file" >&2; exit 3; }
n=$(stat -c %s -- "$f") || exit 3
[ "$n" -le "$3" ] || { echo "is $n bytes, more than the $3 faultlab copies of a file" >&2; exit 5; }
tail -c "+$(($2 + 1))" -- "$f" | head -c "$4"
"""


#: the end of the name of every file a host key is pinned into (``known_hosts``,
#: ``testbed.known_hosts``)
KNOWN_HOSTS_SUFFIX = "known_hosts"


def load_known_hosts(keys, path: Path) -> None:
    """Add the host keys pinned in ``path`` to ``keys`` (a paramiko ``HostKeys``).

    The file is read through its folder opened as a trusted folder (faultlab.safefs:
    no symlink on any component, every folder owned by root or us and closed to
    others) with ``O_NOFOLLOW``, and must be a regular file of root's or ours, not
    group/other-writable: another user's known_hosts (or a link to one) could
    otherwise pin the key of a host of their choosing. A missing file or folder pins
    nothing. Malformed lines are skipped (as ssh does). Raises UntrustedPath."""
    from paramiko.hostkeys import HostKeyEntry  # optional dependency (faultlab[ssh])

    try:
        with safefs.open_dir(path.parent) as d:
            text = d.read_text(path.name)
    except FileNotFoundError:
        return
    for i, line in enumerate(text.splitlines()):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            e = HostKeyEntry.from_line(line, i + 1)
        except Exception:  # noqa: BLE001 - an unreadable line pins nothing, as in ssh
            continue
        if e is not None:
            for h in e.hostnames:
                keys.add(h, e.key.get_name(), e.key)


class _PinNew:
    """paramiko policy: pin an *unknown* host key into the known_hosts file (explicit
    opt-in only). A changed key never reaches a policy (paramiko refuses it). The line
    is appended through the file's trusted folder (made 0700 when missing), to a
    regular file of ours (made 0600) or to none: a symlink, another user's file or a
    folder someone else can write is refused (UntrustedPath), never written through.
    The file's name must end in ``known_hosts``: an inventory someone else wrote
    could otherwise name any file of a root folder (``/etc/sudoers``,
    ``/etc/ld.so.preload``) and have a host key line appended to it."""

    def __init__(self, path: Path):
        self.path = path

    def missing_host_key(self, client, hostname, key):
        if not self.path.name.endswith(KNOWN_HOSTS_SUFFIX):
            raise safefs.UntrustedPath(str(self.path), f"is no known_hosts file (its name does not end in {KNOWN_HOSTS_SUFFIX})",
                                       "name a known_hosts file in the inventory's known_hosts (default ~/.ssh/known_hosts)")
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with safefs.open_dir(self.path.parent, create=True, mode=0o700) as d:
            if d.lstat(self.path.name) is not None:
                d.check_file(self.path.name)
            d.append(self.path.name, line.encode(), 0o600)
        client.get_host_keys().add(hostname, key.get_name(), key)
