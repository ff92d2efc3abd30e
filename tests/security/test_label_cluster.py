"""No other local user can run code through the Dask cluster root's out-of-core
labeler starts: Dask runs whatever pickled function a client sends, so a scheduler
reachable over plain TCP on 127.0.0.1 would run another user's code as root.

Root starts the embedded cluster as ``faultlab label --out-of-core`` does
(:func:`faultlab.labeler.cluster.client_for`); ``nobody`` (uid 65534, ``setpriv``,
the same Python and Dask) connects to its scheduler's port over TCP and over TLS with
a certificate of its own and asks the scheduler to write a file. Both must be
refused and no file written; root's own client still computes, and every socket the
cluster listens on (its HTTP servers too) is on 127.0.0.1.

A scheduler root gives by address is trusted (what it returns is unpickled), and a
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
from pathlib import Path
from urllib.parse import urlsplit

import pytest

psutil = pytest.importorskip("psutil", reason="psutil comes with dask.distributed")

from faultlab.labeler import cluster as labelcluster
from faultlab.labeler import outofcore
from faultlab.report.synthetic import make_run
from tests.helpers import ROOT, as_nobody, fl, nobody_sh

pytest.importorskip("distributed", reason="dask.distributed is the 'scale' extra: pip install -e '.[scale]'")
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
        c = Client(f"{proto}://127.0.0.1:{port}", timeout=20, security=Security.temporary() if proto == "tls" else None)
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
        me = psutil.Process()
        listening = [(p.pid, c.laddr) for p in [me, *me.children(recursive=True)]
                     for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        assert listening and all(a.ip == "127.0.0.1" for _, a in listening), listening
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
