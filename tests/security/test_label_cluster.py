"""No other local user can run code through the Dask cluster root's out-of-core
labeler starts: Dask runs whatever pickled function a client sends, so a scheduler
reachable over plain TCP on 127.0.0.1 would run another user's code as root.

Root starts the embedded cluster as ``faultlab label --out-of-core`` does
(:func:`faultlab.labeler.cluster.client_for`); ``nobody`` (uid 65534, ``setpriv``,
the same Python and Dask) connects to its scheduler's port over TCP and over TLS with
a certificate of its own and asks the scheduler to write a file. Both must be
refused and no file written; root's own client still computes, and every socket the
cluster listens on (its HTTP servers too) is on 127.0.0.1.

A scheduler root gives by address is trusted (what it returns is unpickled), so one of
this host must speak TLS: a plain one takes nobody's client as well as root's. And a
port is no one's: ``nobody`` listening first on a local port root names with
``--scheduler`` must have root's labeler refuse it in one line, never connect.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

psutil = pytest.importorskip("psutil", reason="psutil comes with dask.distributed")
dask = pytest.importorskip("dask", reason="dask.distributed is the 'scale' extra: pip install -e '.[scale]'")

from faultlab.labeler import cluster as labelcluster
from faultlab.labeler import outofcore
from faultlab.report.synthetic import make_run
from tests.helpers import ROOT, as_nobody, end_groups, fl, nobody_sh, wait_for

pytest.importorskip("distributed", reason="dask.distributed is the 'scale' extra: pip install -e '.[scale]'")
from tests.dasktls import tls_files  # noqa: E402 - it imports distributed
pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("setpriv"), reason="needs root (to act as nobody) and setpriv")

ATTACK = '''
import sys
from distributed import Client
from distributed.security import Security
port, out = sys.argv[1], sys.argv[2]
def own():
    open(out, "w").write("ran as root")
for proto in ("tcp", "tls"):
    try:
        c = Client(f"{proto}://127.0.0.1:{port}", timeout=5, security=Security.temporary() if proto == "tls" else None)
    except Exception as e:
        print(proto, "refused:", type(e).__name__)
        continue
    c.run_on_scheduler(own)
    print(proto, "ran")
'''


def test_another_user_cannot_use_roots_label_cluster(nobody_dir):
    client, cluster = labelcluster.client_for()
    try:
        port = urlsplit(client.scheduler.address).port
        out = nobody_dir / "pwned"
        cp = as_nobody([sys.executable, "-c", ATTACK, str(port), str(out)], env={"HOME": str(nobody_dir)}, timeout=120)
        assert not out.exists(), cp.stdout + cp.stderr[-800:]
        assert "tcp refused" in cp.stdout and "tls refused" in cp.stdout, cp.stdout + cp.stderr[-800:]
        assert client.submit(sum, [1, 2, 3]).result() == 6
        listening = _cluster_listening(client)
        assert listening and all(ip == "127.0.0.1" for ip, _ in listening), listening
    finally:
        labelcluster.close(client, cluster)


def _a_worker_pid(client) -> int:
    """The PID of a worker of ``client``'s cluster (as the worker says)."""
    return next(iter(client.run(os.getpid).values()))


def _cluster_listening(client) -> list[tuple[str, int]]:
    """``(IPv4 address, port)`` of every listening TCP socket in the network namespace
    of the embedded cluster's workers (``/proc/PID/net/tcp`` and ``tcp6`` of one of
    them: the scheduler shares it), IPv6 addresses shown as ``v6``."""
    found = []
    for name in ("tcp", "tcp6"):
        with open(f"/proc/{_a_worker_pid(client)}/net/{name}") as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                if state != "0A":  # LISTEN
                    continue
                addr, port = local.split(":")
                ip = socket.inet_ntoa(bytes.fromhex(addr)[::-1]) if len(addr) == 8 else "v6"
                found.append((ip, int(port, 16)))
    return found


#: nobody's TCP connection to each port of argv[1:] on 127.0.0.1: one line each
CONNECT = '''
import socket, sys
for port in sys.argv[1:]:
    try:
        socket.create_connection(("127.0.0.1", int(port)), timeout=10).close()
        print(port, "connected")
    except OSError as e:
        print(port, "refused", e.errno)
'''


def test_roots_label_cluster_has_no_port_another_user_can_connect_to(nobody_dir):
    """Mutual TLS keeps another user from running code on root's cluster, not from
    connecting: Dask's TLS listener waits for a handshake with no timeout, so idle
    connections held by the thousand used up root's descriptors and held its labeling.
    Root's embedded cluster runs in a network namespace of its own
    (``labeler/privatenet.py``): nobody's TCP connection to its scheduler's and each
    worker's port is refused, and root's client still computes."""
    own = os.readlink("/proc/thread-self/ns/net")
    client, cluster = labelcluster.client_for()
    try:
        info = client.scheduler_info()
        ports = [urlsplit(a).port for a in [client.scheduler.address, *info["workers"]]]
        assert len(ports) >= 2, info
        cp = as_nobody([sys.executable, "-I", "-c", CONNECT, *map(str, ports)], env={"HOME": str(nobody_dir)}, timeout=120)
        assert cp.returncode == 0 and "connected" not in cp.stdout and cp.stdout.count("refused") == len(ports), cp.stdout + cp.stderr[-800:]
        assert client.submit(sum, [1, 2, 3]).result() == 6
    finally:
        labelcluster.close(client, cluster)
    assert os.readlink("/proc/thread-self/ns/net") == own  # this thread is back in its own namespace


#: nobody's look at each port of argv[1:]: every path but /health that answers over plain HTTP
PAGES = '''
import sys, urllib.request
for port in sys.argv[1:]:
    for path in ("/", "/status", "/workers", "/tasks", "/profile", "/individual-task-stream"):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                print(port, path, r.status)
        except Exception:
            pass
'''


def test_roots_label_cluster_serves_another_user_no_dashboard_page():
    """The dashboard shows the labeling's tasks, workers and profile to whoever reaches
    its port on 127.0.0.1; without bokeh Dask serves a page asking for it there.
    Nobody's look at every port root's cluster listens on finds no page but
    ``/health``, and root's client still computes."""
    client, cluster = labelcluster.client_for()
    try:
        ports = {port for _, port in _cluster_listening(client)}
        assert ports
        # inside the cluster's own network namespace (root enters it, then acts as nobody): what its servers serve there
        cp = as_nobody([sys.executable, "-I", "-c", PAGES, *map(str, sorted(ports))], env={}, timeout=120,
                       prefix=["nsenter", f"--net=/proc/{_a_worker_pid(client)}/ns/net"])
        assert cp.returncode == 0 and cp.stdout == "", cp.stdout + cp.stderr[-800:]
        assert client.submit(sum, [1, 2, 3]).result() == 6
    finally:
        labelcluster.close(client, cluster)


@pytest.fixture
def shared():
    """A root-owned sticky folder open to all (1777) under /tmp, removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix="fl-shared-"))
    os.chmod(d, 0o1777)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_roots_label_cluster_imports_nothing_from_a_shared_scratch_folder(shared, monkeypatch):
    """Dask's default scratch folder is ``TMP/dask-scratch-space`` and every Dask server
    puts its scratch folder first on ``sys.path`` (its workers inherit it). nobody
    makes that name first in a shared sticky folder (root's, 1777: the stand-in for
    ``/tmp``, root's temporary folder here) with a package ``faultlab`` that leaves a
    mark when imported. Root's cluster computes a faultlab function on a worker: no
    mark, and nothing of the cluster is left in the shared folder."""
    mark = shared / "imported-as"
    nobody_sh('mkdir -m 0777 "$1/dask-scratch-space" && mkdir "$1/dask-scratch-space/faultlab" && '
              'printf "import os\\nopen(\\"%s\\", \\"w\\").write(str(os.getuid()))\\n" "$2" > "$1/dask-scratch-space/faultlab/__init__.py"',
              shared, mark)
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.setattr(tempfile, "tempdir", None)
    client, cluster = labelcluster.client_for()
    try:
        assert client.submit(outofcore.halo_steps, outofcore.labeler_config(None)).result() > 0
    finally:
        labelcluster.close(client, cluster)
    assert not mark.exists(), mark.read_text()
    assert sorted(p.name for p in shared.iterdir()) == ["dask-scratch-space"]


def test_roots_label_cluster_imports_nothing_from_the_working_folder(nobody_dir, monkeypatch, tmp_path):
    """multiprocessing starts Dask's workers (and its resource tracker) as ``python -c
    'from multiprocessing.spawn import ...'``, which puts the working folder first on
    ``sys.path``. nobody's folder, where root stands, holds a package
    ``multiprocessing`` that leaves a mark when imported: root's cluster computes on a
    worker, no mark is left, and root's environment is as it was."""
    mark = tmp_path / "imported-as"
    nobody_sh('mkdir "$1/multiprocessing" && printf "import os\\nopen(\\"%s\\", \\"a\\").write(str(os.getuid()))\\n" "$2" '
              '> "$1/multiprocessing/__init__.py"', nobody_dir, mark)
    before = os.environ.get("PYTHONSAFEPATH")
    monkeypatch.chdir(nobody_dir)
    client, cluster = labelcluster.client_for()
    try:
        assert client.submit(outofcore.halo_steps, outofcore.labeler_config(None)).result() > 0
    finally:
        labelcluster.close(client, cluster)
    assert not mark.exists(), f"nobody's multiprocessing was imported by uid {mark.read_text()}"
    assert os.environ.get("PYTHONSAFEPATH") == before


#: nobody's listener: a socket on a free port of 127.0.0.1, its port printed, held open
LISTEN = """
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("protocol,host", [("tcp", "127.0.0.1"), ("ws", "127.0.0.1"), ("tcp", "[::ffff:127.0.0.1]")],
                         ids=["tcp", "ws", "ipv4-mapped"])
def test_roots_labeler_refuses_a_scheduler_address_another_user_listens_on(tmp_path, protocol, host):
    """Nobody's listener on a port of this host is no scheduler of root's, whatever the
    protocol Dask would speak there (``tcp://``, or websockets: ``ws://``) and however
    the address is written (its IPv4-mapped IPv6 form reaches the IPv4 listener): the
    refusal names the listener's uid."""
    run = make_run(tmp_path / "run", ranks=2, duration_s=20, label=False)
    squatter = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", LISTEN],
                                stdout=subprocess.PIPE, text=True)
    try:
        port = int(squatter.stdout.readline())
        cp = fl("label", run, "--scheduler", f"{protocol}://{host}:{port}", timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail(f"root's labeler connected to nobody's port over {protocol}://")
    finally:
        squatter.kill()
        squatter.wait()
    err = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(err) == 1 and "uid 65534" in err[0] and "--scheduler" in err[0], (cp.returncode, cp.stderr[-1500:])


#: nobody's listener as :data:`LISTEN`, which says ``accepted`` for each connection it takes
LISTEN_LOGGED = LISTEN.replace("time.sleep(300)", "while True:\n    s.accept()\n    print('accepted', flush=True)")


@pytest.mark.parametrize("tail", ["/x", "?x", "#x", "@"], ids=["path", "query", "fragment", "user"])
def test_roots_labeler_refuses_a_scheduler_address_that_is_more_than_host_and_port(tmp_path, tail):
    """A websocket address is a URL to Dask's client: ``ws://127.0.0.1:PORT?x`` (a path,
    a query, a fragment, or a user part before the host) reaches 127.0.0.1:PORT, where
    nobody listens, so it is refused in one line and nobody's listener takes no
    connection."""
    run = make_run(tmp_path / "run", ranks=2, duration_s=20, label=False)
    squatter = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", LISTEN_LOGGED],
                                stdout=subprocess.PIPE, text=True)
    try:
        port = int(squatter.stdout.readline())
        addr = f"ws://u@127.0.0.1:{port}" if tail == "@" else f"ws://127.0.0.1:{port}{tail}"
        cp = fl("label", run, "--scheduler", addr, timeout=90)
    finally:
        squatter.kill()
        accepted = squatter.communicate()[0]
    err = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(err) == 1 and "--scheduler" in err[0], (cp.returncode, cp.stderr[-1500:])
    assert "accepted" not in accepted, f"root's labeler connected to nobody's port through {addr}"


#: nobody's listener on 127.0.0.1:argv[1] as soon as the port is free (tried every 2 ms
#: for a minute), which says ``bound``, then ``accepted`` for each connection it takes
SQUAT = r"""
import socket, sys, time
port, end = int(sys.argv[1]), time.time() + 60
while time.time() < end:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        s.listen()
        break
    except OSError:
        s.close()
        time.sleep(0.002)
print("bound", flush=True)
s.settimeout(1)
while time.time() < end:
    try:
        s.accept()
        print("accepted", flush=True)
    except socket.timeout:
        pass
"""


def test_roots_labeler_does_not_reconnect_to_the_port_of_its_scheduler_once_lost(tmp_path):
    """Root's labeler is connected to root's own scheduler at a local port; that
    scheduler ends, nobody listens on the port the moment it is free, and Dask's client
    would reconnect there for seconds. It must not: no connection reaches nobody."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tls = tls_files(tmp_path / "tls")  # a plain one of this host is refused
    sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard",
                              "--protocol", "tls", *tls["cli"]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=dict(os.environ, DASK_TEMPORARY_DIRECTORY=str(tmp_path)))  # its scratch folder, not TMP's shared one
    squatter = None
    try:
        client = None
        for _ in range(300):
            try:
                with dask.config.set(tls["config"]):
                    client, _ = labelcluster.client_for(f"tls://127.0.0.1:{port}")
                break
            except Exception:  # noqa: BLE001 - the scheduler is still starting
                time.sleep(0.2)
        assert client is not None, "root's own scheduler did not start"
        squatter = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-I", "-c", SQUAT, str(port)],
                                    stdout=subprocess.PIPE, text=True)
        time.sleep(1)
        sched.kill()
        sched.wait()
        time.sleep(labelcluster.CONNECT_TIMEOUT_S + 3)
    finally:
        sched.kill()
        if squatter is not None:
            squatter.kill()
    said = squatter.communicate()[0]
    assert "accepted" not in said, f"root's labeler reconnected to nobody's port: {said!r}"
    assert client.status == "closed", client.status
    client.close()


#: root's ``faultlab label argv[1] --scheduler tcp://127.0.0.1:argv[2]``, nobody starting
#: to listen on that port right after root's labeler looked who listens there
_LISTEN_AFTER_CHECK = r"""
import subprocess, sys
from faultlab import cli
from faultlab.labeler import listener

run, port, script = sys.argv[1], int(sys.argv[2]), sys.argv[3]
look, started = listener.listener_uids, []

def looked(host, p):
    uids = look(host, p)
    if not started:
        started.append(subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", script, str(port)],
                                        stdout=subprocess.PIPE, text=True))
        started[0].stdout.readline()  # listening now
    return uids

listener.listener_uids = looked
sys.argv = ["faultlab", "label", run, "--scheduler", f"tcp://127.0.0.1:{port}"]
try:
    cli.main()
finally:
    for p in started:
        p.kill()
"""

#: nobody's listener on the port argv[1] of 127.0.0.1, held open two minutes
LISTEN_AT = LISTEN.replace('("127.0.0.1", 0)', '("127.0.0.1", int(sys.argv[1]))').replace("sleep(300)", "sleep(120)")


def test_roots_labeler_refuses_a_local_scheduler_address_nothing_listens_on_before_it_connects(tmp_path):
    """Where nothing listens, Dask's client retries its connection for seconds: whoever
    listens first in that time, after the check of who listens, is root's scheduler."""
    run = make_run(tmp_path / "run", ranks=2, duration_s=20, label=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        cp = subprocess.run([sys.executable, "-P", "-c", _LISTEN_AFTER_CHECK, str(run), str(port), LISTEN_AT],
                            capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("root's labeler connected to the port nobody listened on after its check")
    err = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(err) == 1 and "--scheduler" in err[0] and "nothing listens" in err[0], (cp.returncode, cp.stderr[-1500:])


#: nobody's client of the plain scheduler at argv[1]: it runs on the scheduler and on
#: every worker and prints the uid each ran as
USE_OPEN_SCHEDULER = """
import os, sys
from distributed import Client
with Client(sys.argv[1], timeout=60) as c:
    print("scheduler", c.run_on_scheduler(os.getuid))
    print("workers", sorted(c.run(os.getuid).values()))
"""


def test_roots_labeler_refuses_a_plain_scheduler_of_this_host_which_any_user_can_drive(tmp_path):
    """A plain-TCP ``dask scheduler`` root started on 127.0.0.1 (what the refusals' fix
    said: "start one (dask scheduler)") takes any local user's client: nobody's runs as
    root on its scheduler and workers and could change what root's labeling computes
    there, with no port to race for. Root's labeler refuses that address in one line
    naming ``--scheduler`` and TLS, and writes nothing."""
    run = make_run(tmp_path / "run", ranks=2, duration_s=20, label=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, DASK_TEMPORARY_DIRECTORY=str(tmp_path))  # their scratch folders, not TMP's shared one
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)]
    try:
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", f"tcp://127.0.0.1:{port}", "--nworkers", "1",
                                       "--nthreads", "1", "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                      start_new_session=True))
        assert wait_for(lambda: labelcluster.listener.listener_uids("127.0.0.1", port) == {0}, 180), "root's scheduler did not start"
        nobody = as_nobody([sys.executable, "-I", "-c", USE_OPEN_SCHEDULER, f"tcp://127.0.0.1:{port}"], env={"HOME": "/nonexistent"}, timeout=120)
        assert "scheduler 0" in nobody.stdout, nobody.stdout + nobody.stderr[-800:]  # why: nobody drives root's plain scheduler
        cp = fl("label", run, "--scheduler", f"tcp://127.0.0.1:{port}", timeout=120)
    finally:
        end_groups(procs)
    err = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(err) == 1 and "--scheduler" in err[0] and "TLS" in err[0], (cp.returncode, cp.stderr[-1500:])
    assert not (run / "labels.parquet").exists() and not (run / "whatif.json").exists()
