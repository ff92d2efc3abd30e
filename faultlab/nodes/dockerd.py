"""faultlab's own docker daemon: started on demand, apart from any daemon of the user.

``dockerd`` (Debian's ``docker.io``) is started with its own socket, data root, exec
root and PID file under ``/run/faultlab/dockerd`` and ``/var/lib/faultlab/docker``, so
faultlab never touches a user's containers, and with ``--iptables=false
--ip-masq=false --bridge=none``: a stock dockerd sets the iptables FORWARD policy to
DROP and adds NAT rules, which would cut bridged traffic of netns testbeds. Testbed
networks are user-defined *internal* bridges, so nodes need none of those rules.

``$FAULTLAB_DOCKER_HOST`` (e.g. ``unix:///var/run/docker.sock``) points faultlab at an
existing daemon instead; faultlab then never starts or stops one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from faultlab import procid
from faultlab.errors import FaultlabError
from faultlab.nodes import extras

RUN_DIR = Path("/run/faultlab/dockerd")
DATA_ROOT = Path("/var/lib/faultlab/docker")
SOCKET = RUN_DIR / "docker.sock"
PIDFILE = RUN_DIR / "docker.pid"


def docker_host() -> str:
    """The daemon URL faultlab uses: ``$FAULTLAB_DOCKER_HOST`` or its own socket."""
    return os.environ.get("FAULTLAB_DOCKER_HOST") or f"unix://{SOCKET}"


def client(timeout_s: float = 60.0):
    """A docker SDK client of faultlab's daemon. Raises FaultlabError (with the fix)
    when the SDK is missing or the daemon does not answer."""
    try:
        import docker  # optional dependency (faultlab[docker]): a missing SDK is one line below
    except ImportError:
        raise FaultlabError("the docker SDK is not installed", field="--backend", fix="pip install 'faultlab[docker]'") from None
    try:
        c = docker.DockerClient(base_url=docker_host(), timeout=int(timeout_s))
        c.ping()
    except Exception as e:
        raise FaultlabError(f"no docker daemon answers at {docker_host()} ({type(e).__name__})", field="--backend",
                            fix="run `faultlab testbed up --backend docker` (it starts one), or set FAULTLAB_DOCKER_HOST") from None
    return c


def running() -> bool:
    """Whether a daemon answers at ``docker_host()``."""
    try:
        client(timeout_s=5)
        return True
    except FaultlabError:
        return False


def ensure_started(wait_s: float = 60.0) -> bool:
    """Start faultlab's dockerd unless one answers already. Returns True when this
    call started it (the caller may ``stop()`` it later). Raises FaultlabError when
    dockerd is missing, we are not root, or it does not come up within ``wait_s`` (then
    the dockerd it started is stopped); BadInput, before anything starts, when the
    docker SDK (faultlab[docker]) that would talk to it is not installed."""
    extras.require("docker")
    if running():
        return False
    if os.environ.get("FAULTLAB_DOCKER_HOST"):
        raise FaultlabError(f"FAULTLAB_DOCKER_HOST={docker_host()} does not answer", field="FAULTLAB_DOCKER_HOST", fix="start that daemon, or unset the variable")
    exe = shutil.which("dockerd")
    if exe is None:
        raise FaultlabError("dockerd not found", field="--backend", fix="apt-get install docker.io")
    if os.geteuid() != 0:
        raise FaultlabError("starting dockerd needs root", field="--backend", fix="run as root")
    RUN_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
    DATA_ROOT.mkdir(parents=True, exist_ok=True, mode=0o700)
    log = open(RUN_DIR / "dockerd.log", "ab")
    argv = [exe, "--iptables=false", "--ip-masq=false", "--ip6tables=false", "--bridge=none", "-H", f"unix://{SOCKET}",
            "--data-root", str(DATA_ROOT), "--exec-root", str(RUN_DIR / "exec"), "--pidfile", str(PIDFILE)]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            held = _our_pid()
            if held is not None:  # ours from before, alive but silent: it holds the PID file
                raise FaultlabError(f"faultlab's dockerd (PID {held}) runs but does not answer at {SOCKET}", field="--backend",
                                    fix=f"stop it (kill {held}) and try again; see {RUN_DIR / 'dockerd.log'}")
            raise FaultlabError(f"dockerd exited with {proc.returncode}", field="--backend", fix=f"see {RUN_DIR / 'dockerd.log'}")
        if running():
            return True
        time.sleep(0.3)
    proc.terminate()  # started for this call and of no use to it: not left behind
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    raise FaultlabError(f"dockerd did not answer within {wait_s:g}s (stopped again)", field="--backend", fix=f"see {RUN_DIR / 'dockerd.log'}")


def left_running() -> str:
    """The line said when a command started faultlab's dockerd and leaves it running
    (for the next testbed): that it does, and how to stop it."""
    return f"faultlab's dockerd, started for this command, is left running (stop it: kill $(cat {PIDFILE}))"


def _our_pid() -> int | None:
    """The PID of faultlab's own dockerd (from its PID file, checked to be a live
    dockerd on our socket, run by root in this PID namespace), None when there is none.
    dockerd killed (SIGKILL, the OOM killer) leaves its PID file, and any user, or a
    container's root, may then run a process under that PID with dockerd's argv."""
    try:
        pid = int(PIDFILE.read_text().strip())
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        uid = procid.real_uid(Path(f"/proc/{pid}/status").read_text())
        here = os.stat(f"/proc/{pid}/ns/pid").st_ino == os.stat("/proc/self/ns/pid").st_ino
    except (OSError, ValueError):
        return None
    if not cmd or not cmd[0].endswith(b"dockerd") or f"unix://{SOCKET}".encode() not in cmd or uid != 0 or not here:
        return None
    return pid


def stop(wait_s: float = 30.0) -> None:
    """Stop faultlab's own dockerd (by the PID in its PID file, checked to be dockerd
    with our socket). Never touches another daemon."""
    pid = _our_pid()
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not _exited(pid):
        time.sleep(0.2)


def _exited(pid: int) -> bool:
    """Whether dockerd ``pid`` has exited: gone, or a zombie whose parent has not
    reaped it yet (reaped here when that parent is this process, which started it)."""
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    fields = procid.read_stat(pid)
    return fields is None or fields[0] == "Z"
