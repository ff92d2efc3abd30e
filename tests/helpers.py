"""Helpers shared by the test modules: root-only marks, the residue check (what
faultlab-made objects exist now), the CLI as a subprocess, polling and the one-line
error check."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from faultlab.errors import BadInput
from faultlab.injectors.io import block_device_of
from faultlab.lifecycle.hostview import cgroups_named
from faultlab.nodes import LocalNode, dockerd
from faultlab.nodes.image import IMAGE

#: the tests' folder, the repository root, recorded step tables and stand-in programs
TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
DATA = TESTS / "data"
FAKES = TESTS / "fakes"
EXAMPLES = REPO / "examples"
#: the published software-straggler dataset of this repository (tests skip without it)
SW_DATASET = REPO / "datasets" / "faultlab-sw-v1"
#: the public traces: $FAULTLAB_PUBLIC_DATA, else ../shared/datasets/public beside the checkout
PUBLIC = Path(os.environ.get("FAULTLAB_PUBLIC_DATA") or REPO.parent / "shared" / "datasets" / "public")
#: the page that says where the public traces come from (a skip's reason names it)
PUBLIC_DOC = "docs/importing.md"
#: what a test skipped for want of the public traces tells the reader to do
PUBLIC_HINT = f"set FAULTLAB_PUBLIC_DATA to the folder of the public traces ({PUBLIC_DOC})"
#: the public collections examples/public/build.sh builds from the public traces, and
#: the source folders it reads (the repository commits none of them: docs/datasets.md)
PUBLIC_COLLECTIONS = ("public-st", "public-pai", "public-perseus-a")
PUBLIC_SOURCES = ("straggler-trace-ST", "alibaba-pai-minibatch", "perseus-cluster_A")
PUBLIC_BUILD = EXAMPLES / "public" / "build.sh"
#: every published dataset by name: the testbed's (committed in datasets/) and the public collections (built)
PUBLISHED = sorted(p.name for p in (REPO / "datasets").glob("faultlab-*") if (p / "splits.json").is_file()) + list(PUBLIC_COLLECTIONS)
#: an example campaign
EXAMPLE_CAMPAIGN = EXAMPLES / "software-stragglers.yaml"
#: whether this session runs as root (namespaces, qdiscs, cgroups, other users)
ROOT = os.geteuid() == 0
#: a qdisc line of a faultlab fault (handles fXXX:/eXXX:, see faultlab.injectors.nic)
FAULT_QDISC = re.compile(r"qdisc \w+ [ef][0-9a-f]{3}: ")


def public_sources_present() -> bool:
    """The public traces examples/public/build.sh reads are all there."""
    return all((PUBLIC / d).is_dir() for d in PUBLIC_SOURCES)


needs_root = pytest.mark.skipif(not ROOT, reason="needs root (namespaces, qdiscs, cgroups)")


# -- the CLI as a user runs it -------------------------------------------------------------

#: the faultlab CLI as a command line, run by this interpreter; -P: the working folder (a test
#: may stand in nobody's) is not on sys.path, as it is not for the installed `faultlab` command
FL = [sys.executable, "-P", "-m", "faultlab.cli"]


def fl(*args, env: dict | None = None, timeout: float = 120, cwd=None) -> subprocess.CompletedProcess:
    """Run ``faultlab ARGS`` and capture its output as text; ``env`` adds to this
    process's environment."""
    return subprocess.run([*FL, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=None if env is None else {**os.environ, **env})


#: one child process runs each command line of a JSON list on stdin through faultlab's
#: entry point (:func:`faultlab.cli.main`: :func:`faultlab.cliopts.run` on the typer
#: app), capturing its stdout, stderr and exit code
_MANY = r"""
import contextlib, io, json, sys
import typer
from faultlab import cliopts
from faultlab.cli import app

res = []
for argv in json.load(sys.stdin):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cliopts.run(typer.main.get_command(app), args=argv)
            code = 0
        except SystemExit as e:
            code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
    res.append({"argv": argv, "code": code, "out": out.getvalue(), "err": err.getvalue()})
sys.__stdout__.write(json.dumps(res))
"""


def fl_many(argvs: list[list[str]], timeout: float = 300, cwd=None) -> list[subprocess.CompletedProcess]:
    """Run ``faultlab ARGV`` for each command line of ``argvs``, in order, all in ONE
    child process through the same entry point as the console script (one interpreter
    start for many refusals); returns what :func:`fl` returns for each."""
    cp = subprocess.run([sys.executable, "-c", _MANY], input=json.dumps([list(map(str, a)) for a in argvs]),
                        capture_output=True, text=True, timeout=timeout, cwd=cwd)
    assert cp.returncode == 0, cp.stderr[-3000:]
    return [subprocess.CompletedProcess([*FL, *r["argv"]], r["code"], r["out"], r["err"]) for r in json.loads(cp.stdout)]


def one_line_error(cp: subprocess.CompletedProcess, *names: str, code: int = 2) -> str:
    """Assert that a CLI run was refused the way faultlab refuses bad input: exit
    ``code``, no traceback, one line of output naming each of ``names``; returns it."""
    out = (cp.stdout + cp.stderr).strip()
    assert "Traceback" not in out, out[-2000:]
    assert cp.returncode == code, (cp.returncode, out[-2000:])
    assert len(out.splitlines()) == 1, out
    for n in names:
        assert n in out, out
    return out


def wait_for(pred, timeout: float, step: float = 0.1) -> bool:
    """Poll ``pred()`` every ``step`` seconds until it is true or ``timeout`` seconds
    have passed; returns its last value as a bool."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())


def end_groups(procs) -> None:
    """SIGKILL the process group of each of ``procs`` (Popens this test started with
    ``start_new_session=True``: a Dask scheduler or worker and the processes it
    forked) and reap it; a group already gone is passed over."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def holds_open(pid: int, fd: int, path) -> bool:
    """Whether process ``pid``'s descriptor ``fd`` names ``path`` now. A launcher such as
    ``setpriv`` briefly holds other files (``/etc/passwd``) on low descriptors before it
    execs, so a test waits for this, not for the descriptor to exist."""
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}") == str(path)
    except OSError:
        return False


# -- the residue check: what faultlab-made objects exist now -------------------------------

def proc_argvs():
    """Yield ``(pid, argv)`` of every process on this host now: argv is
    ``/proc/PID/cmdline`` split at NUL bytes (bytes; a trailing b"" after the last
    argument); a process that ends while it is read is skipped."""
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        yield int(p.name), argv


def residue() -> dict[str, set]:
    """What faultlab-made objects exist on this machine right now."""
    out: dict[str, set] = {}
    cp = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    out["netns"] = {l.split()[0] for l in cp.stdout.splitlines() if l.startswith("fl")}
    out["links"] = {p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith("fl")}
    cp = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True)
    out["qdiscs"] = {l for l in cp.stdout.splitlines() if FAULT_QDISC.search(l) or "ingress" in l}
    # bridge anti-spoofing chains of host-like docker nodes (faultlab/nodes/antispoof.py)
    eb = shutil.which("ebtables")
    cp = subprocess.run([eb, "-L"], capture_output=True, text=True) if eb and ROOT else None
    out["ebtables"] = {l.split()[2].rstrip(",") for l in cp.stdout.splitlines() if l.startswith("Bridge chain: fl")} if cp else set()
    out["cgroups"] = {str(p) for p in cgroups_named("faultlab-")}
    lease_dir = Path(os.environ["FAULTLAB_LEASE_DIR"])
    out["leases"] = {p.name for p in lease_dir.glob("*")} if lease_dir.exists() else set()
    me = os.getpid()
    procs = set()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == me:
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(k in cmd for k in ("faultlab-watchdog", "faultlab-pause", "faultlab.benchmarks", "faultlab.probe")):
            try:  # only processes of this test session (other sessions may run beside it)
                mine = f"FAULTLAB_LEASE_DIR={lease_dir}".encode() in (p / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if mine:
                procs.add(f"{p.name} {cmd[:80]}")
    out["processes"] = procs
    # stress / mem-bw workers (python3 -I -c CODE MARK PIDFILE ...) of this session's faults
    workers = set()
    for pid, argv in proc_argvs():
        if any(a.startswith(b"faultlab-") and a.endswith((b"stress", b"membw", b"mem-bw")) for a in argv) and \
                any(a.startswith(str(lease_dir).encode()) for a in argv):
            workers.add(f"{pid} {' '.join(x.decode(errors='replace') for x in argv[4:6])}")
    out["workers"] = workers
    # testbed state files of this session
    tb_dir = Path(os.environ["FAULTLAB_STATE_DIR"]) / "testbeds"
    # (state files, also in a backend's subfolder such as docker/; an empty folder is no state)
    out["testbed_state"] = {str(p.relative_to(tb_dir)) for p in tb_dir.rglob("*") if not p.is_dir()} if tb_dir.exists() else set()
    # agent command/status files: the folder tests point FAULTLAB_AGENT_DIR at, and the default
    agent_dirs = {Path("/run/faultlab/agents")}
    if os.environ.get("FAULTLAB_AGENT_DIR"):
        agent_dirs.add(Path(os.environ["FAULTLAB_AGENT_DIR"]))
    out["agent_files"] = {str(p) for d in agent_dirs if d.is_dir() for pat in ("*.gc-storm*", "*.agent", "*.agent.tmp*")
                          for p in d.glob(pat)}
    # iptables rules faultlab adds (testbed FORWARD ACCEPT, commented faultlab-<id>)
    cp = subprocess.run(["iptables", "-S"], capture_output=True, text=True) if shutil.which("iptables") else None
    out["iptables"] = {l for l in cp.stdout.splitlines() if "faultlab" in l} if cp and cp.returncode == 0 else set()
    # qdiscs inside namespaces (nic-slow on a netns node shapes its interface there)
    nsq = set()
    for ns in out["netns"]:
        cp = subprocess.run(["tc", "-n", ns, "qdisc", "show"], capture_output=True, text=True)
        nsq |= {f"{ns}: {l}" for l in cp.stdout.splitlines() if FAULT_QDISC.search(l) or "ingress" in l}
    out["netns_qdiscs"] = nsq
    # docker testbed containers and networks (label faultlab.testbed) on faultlab's own
    # dockerd, when it is up (the cached node image is not residue)
    out["docker"] = _docker_objects()
    return out


def _docker_objects() -> set[str]:
    if os.environ.get("FAULTLAB_DOCKER_HOST") is None and not dockerd.SOCKET.exists():
        return set()
    try:
        cli = dockerd.client(timeout_s=10)
    except Exception:  # a daemon that does not answer holds nothing we can see
        return set()
    try:
        flt = {"label": "faultlab.testbed"}
        out = {f"container {c.name}" for c in cli.containers.list(all=True, filters=flt)}
        return out | {f"network {n.name}" for n in cli.networks.list(filters=flt)}
    finally:
        cli.close()


def left_since(before: dict[str, set], settle_s: float = 2.0) -> dict[str, set]:
    """What exists now of faultlab's that did not in ``before`` (a ``residue()``).
    A process just signalled may take a moment to exit: what is left is looked at
    again for up to ``settle_s`` seconds, and only what stays counts."""
    end = time.monotonic() + settle_s
    while True:
        after = residue()
        left = {k: after[k] - before[k] for k in after if after[k] - before[k]}
        if not left or time.monotonic() >= end:
            return left
        time.sleep(0.1)


# -- docker testbeds -----------------------------------------------------------------------

@contextlib.contextmanager
def docker_testbed(cli, tb):
    """Bring the docker-backed testbed ``tb`` up and yield it; take it down afterwards and
    assert that nothing of it is left (containers, networks, images)."""
    before = docker_residue(cli)
    tb.up()
    try:
        yield tb
    finally:
        assert tb.down() == []
        assert docker_residue(cli) - before == set()


def docker_residue(cli) -> set[str]:
    """faultlab testbed containers and networks, and images other than the node image."""
    flt = {"label": "faultlab.testbed"}
    out = {f"container {c.name}" for c in cli.containers.list(all=True, filters=flt)}
    out |= {f"network {n.name}" for n in cli.networks.list(filters=flt)}
    out |= {f"image {t}" for i in cli.images.list() for t in (i.tags or [i.id]) if t != IMAGE}
    return out


# -- processes, cgroups and disks of this host ---------------------------------------------

def cpu_rate(pid: int, seconds: float = 1.5) -> float:
    """CPU-seconds per second the process used over ``seconds`` (user+system)."""
    p = psutil.Process(pid)
    c0 = sum(p.cpu_times()[:2])
    time.sleep(seconds)
    return (sum(p.cpu_times()[:2]) - c0) / seconds


def cpu_cgroup(pid: int) -> str:
    """The cgroup v1 cpu controller path of process ``pid`` (as /proc/PID/cgroup names it)."""
    for ln in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        num, _, rest = ln.partition(":")
        ctrls, _, path = rest.partition(":")
        if "cpu" in ctrls.split(","):
            return path
    raise AssertionError(f"no cpu line for {pid}")


def real_disk_dir() -> Path | None:
    """A writable folder of this host on a real block device (for direct I/O), or None."""
    for d in ("/var/tmp", "/tmp", "/root"):
        try:
            block_device_of(LocalNode("local"), d)
            return Path(d)
        except BadInput:
            continue
    return None


# -- faults and leases of this session -----------------------------------------------------

#: argv words of faultlab's own processes (watchdogs, pause loops, stress and mem-bw workers)
MARKERS = ("faultlab-watchdog", "faultlab-pause", "faultlab-stress", "faultlab-membw")


def lease_dir() -> Path:
    """This session's lease folder (FAULTLAB_LEASE_DIR)."""
    return Path(os.environ["FAULTLAB_LEASE_DIR"])


def stand_in_ssh_node(tmp_path: Path, monkeypatch) -> tuple[LocalNode, Path]:
    """``(node, leases)``: the local node standing in for an ssh node whose lease
    folder is ``tmp_path/leases`` (0700, below a 0755 ``tmp_path``), its commands bounded
    at 30 s as an ssh node's are, for the remote lease and watchdog code run for real."""
    node = LocalNode("local")
    d = tmp_path / "leases"
    d.mkdir(mode=0o700)
    os.chmod(tmp_path, 0o755)
    monkeypatch.setattr(type(node), "lease_dir", lambda self: d)
    monkeypatch.setattr(node, "command_timeout_s", 30, raising=False)
    return node, d


def deadline_now(fault_id: str, folder: Path | None = None) -> None:
    """Move lease ``fault_id``'s deadline to now through its deadline file (as
    ``Lease.renew`` moves it; the watchdog reads it through its folder descriptor, with
    or without the record): its watchdog reverts at its next poll, within 5 s, so a
    test that waits for a lease to end need not wait out the fault's duration."""
    ((folder or lease_dir()) / f"{fault_id}.deadline").write_text(str(int(time.time())))


def end_leases_now(within_s: float) -> list[str]:
    """Every lease of this session's folder (a SIGKILLed controller's, which nobody
    renews any more) moved to end now (:func:`deadline_now`), once it is checked that
    each would have ended by itself within ``within_s`` seconds from now (its renewed
    deadline, else its record's); returns their ids."""
    d, now, ids = lease_dir(), time.time(), []
    for rec in sorted(d.glob("*.json")):
        if rec.name.startswith("."):  # a writer's temporary
            continue
        renewed = d / f"{rec.stem}.deadline"
        deadline = int(renewed.read_text()) if renewed.exists() else json.loads(rec.read_text())["deadline_ts"]
        assert deadline <= now + within_s, f"lease {rec.stem} would run {deadline - now:.0f}s more by itself, over {within_s:g}s"
        deadline_now(rec.stem)
        ids.append(rec.stem)
    return ids


def faultlab_procs(lease: str | None = None) -> set[str]:
    """faultlab's own processes (watchdogs, pause loops, stress workers) started with
    FAULTLAB_LEASE_DIR=``lease`` (default: this session's). Not the short-lived children
    a watchdog or loop forks for each ``$(...)`` or background ``sleep``: until they exec
    they have its argv and environ, so a matched process whose parent is matched too is
    left out (a leaked child whose parent is gone is still counted)."""
    want = f"FAULTLAB_LEASE_DIR={lease or lease_dir()}".encode()
    found: dict[int, tuple[int, str]] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if any(k in cmd for k in MARKERS) and want in (p / "environ").read_bytes().split(b"\0"):
                ppid = int((p / "stat").read_text().rpartition(")")[2].split()[1])
                found[int(p.name)] = (ppid, cmd[:60])
        except (OSError, ValueError, IndexError):
            continue
    return {f"{pid} {cmd}" for pid, (ppid, cmd) in found.items() if ppid not in found}


def state(extra_lease: str | None = None) -> set[str]:
    """What a fault could leave on the host, as strings: faultlab qdiscs and ifb
    devices in this and every network namespace, faultlab cgroups, lease files, and
    every faultlab process (stress workers included) of this session. Namespaces and
    links of testbeds are not faults and are left out (another session's testbed may
    come and go)."""
    out = set()
    for ns in [""] + [ln.split()[0] for ln in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines() if ln.strip()]:
        pre = ["ip", "netns", "exec", ns] if ns else []
        q = subprocess.run([*pre, "tc", "qdisc", "show"], capture_output=True, text=True).stdout
        out |= {f"{ns}: {ln}" for ln in q.splitlines() if FAULT_QDISC.search(ln) or "ingress" in ln}
        links = subprocess.run([*pre, "ip", "-br", "link"], capture_output=True, text=True).stdout
        out |= {f"{ns}: link {ln.split()[0]}" for ln in links.splitlines() if ln.startswith(("flifb", "flprb"))}
    out |= {f"cgroup {p}" for p in cgroups_named("faultlab-")}
    out |= {f"lease file {p.name}" for p in lease_dir().glob("*")} if lease_dir().exists() else set()
    out |= {f"process {p}" for p in faultlab_procs() | (faultlab_procs(extra_lease) if extra_lease else set())}
    return out


# -- running as another user ---------------------------------------------------------------

def _exec_ok_as_nobody(path: str) -> bool:
    return subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "test", "-x", path]).returncode == 0


def give_to_nobody(path: Path) -> None:
    """Make ``path`` and everything below it (links themselves, never their targets)
    owned by nobody: a folder another user owns, for the trust-boundary tests."""
    for dirpath, dirs, files in os.walk(path):
        for n in [dirpath, *(os.path.join(dirpath, f) for f in dirs + files)]:
            os.chown(n, 65534, 65534, follow_symlinks=False)


def nobody_sh(script: str, *args, timeout: float = 60) -> None:
    """Run the ``sh -e`` ``script`` as nobody with ``args`` as ``$1``... (any path-like);
    raises CalledProcessError when it fails, TimeoutExpired after ``timeout`` s."""
    subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-ec", script, "sh", *map(str, args)],
                   check=True, timeout=timeout)


def as_nobody(argv: list[str], env: dict, timeout: float = 60, prefix: list[str] = ()) -> subprocess.CompletedProcess:
    """Run ``argv`` as user nobody. When the interpreter is not reachable by nobody
    (it lives under /root), a private mount namespace shows it at the same path:
    /root becomes an empty 0755 tmpfs with only the interpreter's tree bound back.
    ``prefix``: a command root runs it under before dropping to nobody (``nsenter``)."""
    real = os.path.realpath(sys.executable)
    drop = [*prefix, "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "env", *[f"{k}={v}" for k, v in env.items()]]
    if _exec_ok_as_nobody(real) or not real.startswith("/root/"):
        return subprocess.run([*drop, *argv], capture_output=True, text=True, timeout=timeout)
    top = "/root/" + real.split("/")[2]  # e.g. /root/.pyenv
    script = ('set -e; mount --make-rprivate /; mount --bind "$1" /mnt; mount -t tmpfs -o mode=0755 tmpfs /root; '
              'mkdir "$1"; mount --move /mnt "$1"; shift; exec "$@"')
    return subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", top, *drop, *argv], capture_output=True, text=True, timeout=timeout)


#: where ``sandboxed_root_beside_records`` has nobody write its made-up lease records
#: (its default lease folder, which root's host-wide commands read)
NOBODY_LEASES = "/run/user/65534/faultlab/leases"

# root's host-wide places hidden behind fresh tmpfs; nobody's default lease folder
# filled with $1 made-up records (valid, of faults that do not exist); then "$@" as root
_SANDBOX_WITH_RECORDS = r"""
set -e
for d in /run/faultlab /run/netns /run/user /sys/fs/cgroup; do mkdir -p $d; mount -t tmpfs -o mode=0755 fl-sandbox $d; done
ip link set lo up
mkdir -m 0700 /run/user/65534 && chown 65534:65534 /run/user/65534
n=$1; shift
setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c '
import json, os, sys
d = "/run/user/65534/faultlab/leases"
os.makedirs(d, mode=0o700)
for i in range(int(sys.argv[1])):
    fid = "process-%06x" % i
    with open(os.path.join(d, fid + ".json"), "w") as f:
        json.dump({"fault_id": fid, "deadline_ts": 4102444800, "created_ts": 1, "fault_type": "process-pause",
                   "node": "local", "target": "pid:1", "revert": ["true"]}, f)
    os.chmod(os.path.join(d, fid + ".json"), 0o600)
' "$n"
exec "$@"
"""


def sandboxed_root_beside_records(n: int, argv: list[str], env: dict | None = None,
                                  timeout: float = 1200, cwd=REPO) -> subprocess.CompletedProcess:
    """Run ``argv`` as root in private PID, mount and network namespaces with fresh
    tmpfs over faultlab's host-wide places (``/run/faultlab``, ``/run/netns``,
    ``/run/user``, ``/sys/fs/cgroup``), after user nobody wrote ``n`` made-up lease
    records in its default lease folder ``NOBODY_LEASES``. Root's host-wide commands
    (status, revert --all, recover) then see only those records: never another
    agent's faults. ``env`` replaces this process's environment (default: it, less
    ``FAULTLAB_LEASE_DIR``, so root's own lease folder is the sandbox's). ``cwd``: where
    it runs (``python -m`` imports from there first)."""
    if env is None:
        env = {k: v for k, v in os.environ.items() if k != "FAULTLAB_LEASE_DIR"}
    return subprocess.run(["unshare", "--pid", "--mount", "--net", "--fork", "--kill-child", "--mount-proc",
                           "--propagation", "private", "sh", "-c", _SANDBOX_WITH_RECORDS, "sh", str(n), *argv],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def nobody_env(d: Path) -> dict:
    """The environment of a faultlab run as nobody whose lease and state folders are under ``d``."""
    return {"FAULTLAB_LEASE_DIR": str(d / "leases"), "FAULTLAB_STATE_DIR": str(d), "HOME": str(d), "PATH": os.environ["PATH"]}


def ratio_plugin(name: str, ratio: float) -> str:
    """The source of a plugin module whose detector class ``Slow`` (``name``) alarms a
    rank whose peer ratio stays over ``ratio`` (default) for 3 steps: a detector
    package the plugin and leaderboard tests install or import by ``module:Class``."""
    return f'''
from faultlab.scoring.detectors import Detector, alarms_from_steps, step_frame


class Slow(Detector):
    name = "{name}"

    def __init__(self, ratio={ratio}):
        self.ratio = float(ratio)

    def detect(self, steps, host=None):
        f = step_frame(steps)
        f["stat"] = f["peer_ratio"]
        f["hot"] = f["peer_ratio"] > self.ratio
        return alarms_from_steps(f, 3)
'''


def write_plugin_package(folder, module: str, dist: str, name: str, ratio: float):
    """Write at ``folder`` (created) a separate detector package: ``MODULE.py`` with
    :func:`ratio_plugin`'s detector, and a pyproject naming distribution ``dist``
    whose entry point ``name`` (group ``faultlab.detectors``) is ``MODULE:Slow``.
    Returns ``folder``, ready for ``pip install``."""
    folder = Path(folder)
    folder.mkdir()
    (folder / f"{module}.py").write_text(ratio_plugin(name, ratio))
    (folder / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{dist}"\nversion = "0.0.1"\n'
        f'[project.entry-points."faultlab.detectors"]\n{name} = "{module}:Slow"\n'
        f'[tool.setuptools]\npy-modules = ["{module}"]\n')
    return folder
