"""The Dask cluster the out-of-core labeler runs on: an embedded ``LocalCluster``,
hardened for a root labeler on a shared host (mutual TLS on 127.0.0.1, the health
route only, a scratch folder of its own, workers that never import from the working
folder), or a scheduler given by address (:func:`client_for`), and its close
(:func:`close`); a cluster lost under a labeling is one line (:func:`losses`)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
import weakref
from concurrent.futures import CancelledError

from faultlab import workdirs
from faultlab.errors import BadInput, FaultlabError
from faultlab.labeler import listener, privatenet

#: seconds the client of a scheduler given by address (``--scheduler``) tries to reach
#: it: its first connection, and a reconnection once the scheduler is lost, give up
#: after this long (dask's default, ``distributed.comm.timeouts.connect``, is 30 s,
#: spent whole retrying where nothing listens: 49 s on a loaded host before the one-line
#: error); a scheduler that answers at all connects in well under a second
CONNECT_TIMEOUT_S = 5

#: the location of a scheduler given by address after its protocol: a host (a name, an
#: IPv4 address or a bracketed IPv6 one) and a port, nothing else. The websocket comm
#: takes it as a URL, so a path, query, fragment or user part (``ws://127.0.0.1:P?x``,
#: ``ws://u@127.0.0.1:P``) still reached that port, past the check of who listens there
HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):[0-9]{1,5}")

#: the protocols of a scheduler given by address that are refused at an address of this host:
#: Dask's plain comms take any client that reaches the port, and a client of a scheduler
#: runs code as the user of its scheduler and workers (``run_on_scheduler``, ``run``) and
#: changes what their tasks return; Dask's TLS (``tls``, ``wss``) asks each side for a
#: certificate of the cluster's own authority
PLAIN_PROTOCOLS = ("tcp", "ws", "ucx")

#: the prefix of an embedded cluster's scratch folder in the temporary folder
#: (``workdirs.make``: the labeler's PID and start time follow)
SCRATCH_PREFIX = "faultlab-dask-"

#: the HTTP routes of the embedded cluster's scheduler and workers: their health check only
HTTP_ROUTES = {"distributed.scheduler.http.routes": ["distributed.http.health"],
               "distributed.worker.http.routes": ["distributed.http.health"]}


#: the scratch folder's removal of each embedded cluster that is open (by ``id``)
_SCRATCH: dict[int, weakref.finalize] = {}

#: dask settings of the embedded cluster: no statistical profiler of the tasks (a
#: sample every 10 ms, for the dashboard, which is off), the event loop's
#: responsiveness tick every 500 ms instead of 20 ms, the memory and system monitors
#: every second or two: at dask's defaults an idle worker process and the scheduler
#: each use about 2% of a core, counted against a labeling that waits on its slowest
#: pass; with these, a quarter of that
CLUSTER_CONFIG = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "500ms",
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
}

#: the environment of the embedded cluster's worker processes, set in this process
#: while they start (:func:`_worker_env`) and given to Dask as the nanny's
#: ``pre-spawn-environ`` too (Dask takes a variable already set in this process over its
#: configuration, and leaves its own in this process: ``MALLOC_TRIM_THRESHOLD_=65536``
#: once any default Dask cluster has started here):
#:
#: - ``PYTHONSAFEPATH`` (``-P``): multiprocessing's ``python -c`` put the working folder
#:   first on ``sys.path`` (a ``multiprocessing/`` there ran in every worker);
#: - glibc's allocator: arrays up to 32 MiB (its largest threshold; a block's arrays
#:   are 16-32 MiB) from the heap, and freed memory kept there (trimmed at 1 GiB free
#:   at its top), where Dask's default returns it at 64 KiB: each block's arrays then
#:   reuse the pages of the one before, where a fresh mapping costs a page fault and
#:   the zeroing of every page, about as much CPU as the block's own work
#:   (``perf/labeler_scale.py`` at 1e9: a sixth of the labeling's time).
WORKER_ENV = {"PYTHONSAFEPATH": "1", "MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
PRE_SPAWN = {f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in WORKER_ENV.items()}


@contextlib.contextmanager
def _worker_env():
    """:data:`WORKER_ENV` in this process's environment for the block (the resource
    tracker starts before the nannies read :data:`PRE_SPAWN`), restored after."""
    saved = {k: os.environ.get(k) for k in WORKER_ENV}
    os.environ.update(WORKER_ENV)
    try:
        yield
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.update({k: v})


def local_cluster(n_workers: int | None = None):
    """``(cluster, security)``: an embedded ``LocalCluster`` of ``n_workers`` worker
    processes (default: one per core, at most 4) of one thread each, no memory limit
    (the passes' memory is bounded by their chunks), :data:`CLUSTER_CONFIG`'s settings,
    and the hardening :func:`client_for` describes (mutual TLS on 127.0.0.1 with
    ``security``, the health route only and no dashboard, a scratch folder of its own, :data:`WORKER_ENV`). Close it with
    :func:`close`."""
    # dask is an optional, heavy dependency: imported only when a run is labeled out of core
    import dask
    from dask.distributed import LocalCluster
    from distributed.security import Security

    from faultlab.labeler.nodashboard import NoDashboardNanny  # it imports dask at its top

    security = Security.temporary()
    workdirs.sweep(tempfile.gettempdir(), SCRATCH_PREFIX)  # those of killed labelers
    scratch = workdirs.make(tempfile.gettempdir(), SCRATCH_PREFIX)
    # read as the scheduler and workers start: the workers take them too
    try:
        with _worker_env(), dask.config.set({**CLUSTER_CONFIG, **HTTP_ROUTES, **PRE_SPAWN, "temporary-directory": scratch}):
            # the HTTP servers on 127.0.0.1 (an address is what keeps them off every one), with
            # no dashboard: LocalCluster turns one on wherever it is given an address
            cluster = LocalCluster(n_workers=n_workers or max(1, min(4, os.cpu_count() or 1)), threads_per_worker=1,
                                   processes=True, dashboard_address="127.0.0.1:0", worker_dashboard_address="127.0.0.1:0",
                                   scheduler_kwargs={"dashboard": False}, worker_class=NoDashboardNanny,
                                   memory_limit=0, host="127.0.0.1", protocol="tls://", security=security)
    except BaseException:  # a cluster that did not start leaves no scratch folder behind
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    _SCRATCH[id(cluster)] = weakref.finalize(cluster, _remove_scratch, scratch)  # at exit, at the latest
    return cluster, security


def _remove_scratch(folder: str, tries: int = 50) -> None:
    """Remove an embedded cluster's scratch folder. Its worker processes may still be
    ending when the cluster's close returns, each removing its own folder in it: a
    removal that lists the folder's entries before a worker's last one was made finds
    the folder not empty, so it is tried again, 0.1 s apart, up to ``tries`` times."""
    for _ in range(tries):
        shutil.rmtree(folder, ignore_errors=True)
        if not os.path.lexists(folder):
            return
        time.sleep(0.1)


def client_for(scheduler: str | None = None):
    """``(client, cluster)``: a Dask client of the scheduler at ``scheduler`` (or
    ``$DASK_SCHEDULER_ADDRESS``), else of an embedded cluster (:func:`local_cluster`)
    sized to the machine (``cluster`` then; else None). Close both with :func:`close`.
    Raises BadInput naming ``--scheduler`` (or ``DASK_SCHEDULER_ADDRESS``) for an
    address that is none, or where no scheduler answers within :data:`CONNECT_TIMEOUT_S`.

    The embedded cluster's scheduler and workers listen on ``127.0.0.1`` over mutual
    TLS with a certificate made for this cluster alone (``Security.temporary()``):
    Dask runs whatever pickled function a client sends, so any local user who reached
    a plain TCP port of root's cluster would run code as root. Their HTTP servers
    (which Dask starts even without a dashboard, on every address at ``:8787``) listen
    on ``127.0.0.1`` and serve ``/health`` only (:data:`HTTP_ROUTES`): no task, path
    or log of the labeling reaches another user or a testbed node. Its scratch folder
    is a fresh 0700 folder of the caller's (removed with the cluster), not Dask's
    default ``TMP/dask-scratch-space``: every Dask server puts its scratch folder first
    on ``sys.path`` (the workers inherit it), so a user who made that shared name
    first would have root import their modules. A scheduler given by address is
    trusted as the labeler's own process: what it returns is unpickled. So one at an
    address of this host is used only when this user listens there, and refused at
    once where nothing listens yet (the client would retry for seconds), and its
    client never reconnects once it lost that scheduler (``OnceClient``): a port is
    no one's, and another local user who listened first on the port of a scheduler
    not running (yet, or any more), before the check or after it, would be that
    trusted process. And it must speak TLS (``tls://``, ``wss://``, with dask's
    ``distributed.comm.tls`` settings): a plain one (:data:`PLAIN_PROTOCOLS`) takes any
    local user's client, who then runs code as its user on it and changes what it
    computes for this one, with no race at all."""
    # dask is an optional, heavy dependency: imported only when a run is labeled out of core
    from dask.distributed import Client
    from distributed.comm.addressing import parse_address, parse_host_port

    from faultlab.labeler.onceclient import OnceClient  # it imports dask at its top

    addr = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS")
    if addr:
        field = "--scheduler" if scheduler else "DASK_SCHEDULER_ADDRESS"
        try:
            proto, loc = parse_address(addr)
        except ValueError:
            proto, loc = "", ""  # Client says why below
        uids = None
        if proto and proto != "inproc":  # every other comm (tcp, tls, ws, wss, ucx) reaches a TCP port
            if not HOST_PORT.fullmatch(loc):
                raise BadInput(f"{addr!r} is not a scheduler's address: after {proto}:// give HOST:PORT alone", field=field,
                               fix="tcp://HOST:PORT of a running Dask scheduler")
            uids = listener.listener_uids(*parse_host_port(loc))
        if uids is not None and not uids:  # Client would retry for seconds: whoever listened first meanwhile would answer
            raise BadInput(f"no Dask scheduler answers at {addr}: nothing listens on that port of this host", field=field,
                           fix=f"start one with TLS ({TLS_START}) and give tls://HOST:PORT, or the address of a running one "
                               f"(tcp://HOST:PORT of another host)")
        others = (uids or set()) - {os.geteuid()}
        if others:
            raise BadInput(f"{addr} is listened on by uid {', '.join(map(str, sorted(others)))}, not by this user (uid {os.geteuid()}): "
                           f"what a scheduler returns is unpickled, so another user's would run code as this one", field=field,
                           fix=f"start the scheduler as this user with TLS ({TLS_START}), or leave the address out to label on an embedded cluster")
        if uids is not None and proto in PLAIN_PROTOCOLS:
            raise BadInput(f"{addr} is a scheduler of this host over plain {proto}://, which takes any local user's client: they would run "
                           f"code as its user on its scheduler and workers and change what this labeling computes", field=field,
                           fix=f"start it with TLS ({TLS_START}) and give tls://HOST:PORT with dask's distributed.comm.tls settings, "
                               f"or leave the address out to label on an embedded cluster (mutual TLS)")
        if proto in ("tls", "wss"):
            _check_tls_settings(addr, field)
        try:
            return OnceClient(addr, timeout=CONNECT_TIMEOUT_S), None
        except ValueError as e:  # no port, an unknown protocol
            raise BadInput(f"{addr!r} is not a scheduler's address ({e})", field=field,
                           fix="tcp://HOST:PORT of a running Dask scheduler") from None
        except OSError as e:  # refused, timed out
            raise BadInput(f"no Dask scheduler answers at {addr} ({e})", field=field,
                           fix="start one (dask scheduler) or give the address of a running one, tcp://HOST:PORT") from None
    with privatenet.private_loopback():  # their threads and processes stay in it: no other user reaches their ports
        cluster, security = local_cluster()
        return Client(cluster, security=security), cluster


#: how a scheduler of this host starts with TLS (the fixes of :func:`client_for`'s refusals)
TLS_START = "dask scheduler --tls-ca-file CA --tls-cert CERT --tls-key KEY"


def _check_tls_settings(addr: str, field: str) -> None:
    """BadInput naming ``field`` unless dask's settings give this user's client a TLS
    certificate and authority for ``addr`` (``distributed.comm.tls.ca-file``,
    ``client.cert``, ``client.key``): without them Dask's client fails with a TypeError
    at its first connection."""
    # dask is an optional, heavy dependency: imported only when a run is labeled out of core
    from distributed.security import Security

    try:
        ctx = Security().get_connection_args("client").get("ssl_context")
    except (OSError, ValueError) as e:  # a file that is missing or no certificate
        raise BadInput(f"dask's TLS settings for {addr} cannot be read ({e})", field=field,
                       fix="set distributed.comm.tls.ca-file, .client.cert and .client.key to this user's files") from None
    if ctx is None:
        raise BadInput(f"{addr} is TLS, and dask's settings give this user's client no certificate for it", field=field,
                       fix="set distributed.comm.tls.ca-file, .client.cert and .client.key (or DASK_DISTRIBUTED__COMM__TLS__CA_FILE, "
                           "__CLIENT__CERT, __CLIENT__KEY) to the cluster's authority and this user's certificate and key")


def close(client, cluster) -> None:
    """Close ``client`` and ``cluster`` as :func:`client_for` gave them (``cluster``
    None: a scheduler given by address, left running) and remove the embedded
    cluster's scratch folder."""
    client.close()
    if cluster is not None:
        cluster.close()
        remove = _SCRATCH.pop(id(cluster), None)
        if remove is not None:
            remove()


class ClusterLost(FaultlabError):
    """The Dask cluster a labeling runs on was lost under it: its scheduler ended (or
    its connection closed), or its workers died each time they ran one of its tasks.
    Exit code 1: nothing of the labeling was written."""


@contextlib.contextmanager
def losses(client):
    """Raise :class:`ClusterLost`, one line naming the scheduler's address, for the
    errors by which Dask reports the cluster of ``client`` lost in the block: the
    futures it cancels when its scheduler goes (``OnceClient`` never reconnects), a
    client closed under a call, a connection closed, a task whose every worker died
    (``KilledWorker``). Whatever a task itself raised passes through as it is."""
    # dask is an optional, heavy dependency: imported only when a run is labeled out of core
    from distributed.client import ClosedClientError
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker

    addr = _address(client)  # a closed client no longer says
    try:
        yield
    except KilledWorker as e:
        task = str(getattr(e, "task", None) or "?").split("-", 1)[0]
        raise ClusterLost(f"the Dask workers of the scheduler at {addr} died each time they ran the labeler's task {task} "
                          f"({getattr(e, 'allowed_failures', '?')} allowed failures): killed (out of memory, or by a signal), "
                          f"the labeling stopped",
                          fix="give the workers more memory, or fewer threads each, and label again; nothing was written") from None
    except (CancelledError, ClosedClientError, CommClosedError) as e:
        raise ClusterLost(f"the Dask scheduler at {addr} was lost while labeling ({type(e).__name__}): "
                          f"its connection closed, the labeling stopped",
                          fix="check that the scheduler and its workers run, then label again; nothing was written") from None


def _address(client) -> str:
    """The address of ``client``'s scheduler (``?`` when it has none)."""
    return str(getattr(getattr(client, "scheduler", None), "address", None) or "?")
