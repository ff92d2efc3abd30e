"""Host metric sampling for the ``host`` table, in a thread of the controller.

Every ``interval_s`` seconds, for each node, one row per metric (long format, the
``host`` table of faultlab.schema; the unit is in the metric name):

- ``cpu_util_pct``: host-wide CPU utilisation, 0..100 over all CPUs of this host
  (``psutil.cpu_percent``). Nodes on one host share it.
- ``proc_cpu_util_pct``: CPU used by the node's processes (its PIDs and their
  children), in percent of ONE CPU, so it can exceed 100 (``Process.cpu_percent``).
- ``proc_rss_bytes``: resident memory of those processes, bytes.
- ``proc_run_delay_s_per_s``: seconds per second those processes' threads were
  runnable but not running (waiting for a CPU, or held by a CFS quota: throttled
  time counts), summed over their threads: field 2 of ``/proc/<pid>/task/*/schedstat``
  (the kernel's sched_info). A rank held by a cgroup quota at 30% of a core reads
  ~0.2 s/s while its step timings and its CPU share may not single it out; an idle
  host reads ~0. From the second sample of a process on; threads that ended between
  two samples are left out of that interval.
- ``net_rx_bytes_per_s`` / ``net_tx_bytes_per_s``: bytes/s received/sent on the
  non-loopback interfaces of the node's network namespace, read from
  ``/proc/<pid>/net/dev`` of one of its live PIDs (that file shows the namespace of
  that process: a netns node needs no extra process). For a ``local`` node this is
  the whole host's traffic outside loopback; ranks that talk over 127.0.0.1 show ~0.

Metric names are ``BASE`` or ``BASE:QUALIFIER`` (the unit is in BASE; BASE never holds
a ``:``, so ``metric.split(":", 1)`` separates them). With ``tcp=True`` (default), per
peer node P (faultlab.telemetry.tcpstats, from iproute2 ss(8) / the kernel's tcp_info):
``tcp_conns:P``, ``tcp_rtt_ms:P``, ``tcp_rttvar_ms:P`` (ms), ``tcp_cwnd_segs:P``,
``tcp_delivery_rate_bytes_per_s:P``, ``tcp_tx_bytes_per_s:P``, ``tcp_rx_bytes_per_s:P``
(bytes/s), ``tcp_retrans_total:P`` (segments), ``tcp_retrans_per_s:P`` (segments/s), and
per node ``tcp_retrans_per_s``. A node's connections are all established TCP
connections of its network namespace when ``netns`` names it, else those whose socket
is open in the node's processes (its PIDs and their children; read in the namespace
of its first live PID). With ``gpu=True`` (default) and NVML present
(faultlab.telemetry.gpumetrics, nvidia-ml-py), per GPU index G: ``gpu_sm_clock_mhz:G``,
``gpu_power_w:G``, ``gpu_util_pct:G``, ``gpu_mem_used_bytes:G``, ``gpu_temp_c:G``,
``gpu_throttle_reasons:G`` (NVML bitmask), on the node whose processes hold a compute
context on G (or the GPUs a ``gpu`` dict assigns to it). Without nvidia-ml-py or a
driver there are no GPU rows and no error (``disabled["gpu"]`` says why); without
``ss`` no TCP rows (``disabled["tcp"]``).

Rates and CPU percentages are over the interval since the previous sample of the
same node. A node's PID names the process it named at the sampler's first look at it
(its PID and start time, psutil's identity) and no other: once that process has ended,
or its handle says so (a ``docker exec`` rank's ``ended()``, through its pidfd), the
PID is never sampled again, since it may by then be any process's of this host (its
CPU, memory and connections would be the node's rows, and ``nsenter`` would enter its
network namespace). A node with no live PID gets only
``cpu_util_pct`` (plus its namespace's TCP metrics when ``netns`` names it, and the
GPUs a ``gpu`` dict assigns to it). The only processes started are one ``ss`` per
network namespace per sample (~2 ms; through ``ip netns exec`` or ``nsenter`` for
another namespace, which needs root).
"""

from __future__ import annotations

import os
import threading
import time

import pandas as pd
import psutil

from faultlab.errors import NodeError
from faultlab.telemetry import tcpstats
from faultlab.telemetry.gpumetrics import NvmlReader

#: every host metric base name this sampler (and tcpstats, gpumetrics) writes: its unit
#: and meaning (the dataset card lists them; the module docstring says how each is read)
HOST_METRICS = {
    "cpu_util_pct": ("percent (0..100)", "host-wide CPU utilisation over all CPUs"),
    "proc_cpu_util_pct": ("percent of one CPU (may exceed 100)", "CPU used by the node's processes"),
    "proc_rss_bytes": ("bytes", "resident memory of the node's processes"),
    "proc_run_delay_s_per_s": ("s/s", "time the node's threads were runnable but not running (CPU wait, CFS throttling)"),
    "net_rx_bytes_per_s": ("bytes/s", "received on the node's non-loopback interfaces"),
    "net_tx_bytes_per_s": ("bytes/s", "sent on the node's non-loopback interfaces"),
    "tcp_conns": ("count", "established TCP connections to the peer node (:PEER)"),
    "tcp_rtt_ms": ("ms", "smoothed TCP round-trip time to the peer node (:PEER)"),
    "tcp_rttvar_ms": ("ms", "TCP round-trip time variation to the peer node (:PEER)"),
    "tcp_cwnd_segs": ("segments", "TCP congestion window to the peer node (:PEER)"),
    "tcp_delivery_rate_bytes_per_s": ("bytes/s", "TCP delivery rate to the peer node (:PEER)"),
    "tcp_tx_bytes_per_s": ("bytes/s", "TCP bytes sent to the peer node (:PEER)"),
    "tcp_rx_bytes_per_s": ("bytes/s", "TCP bytes received from the peer node (:PEER)"),
    "tcp_retrans_total": ("segments", "TCP retransmissions so far to the peer node (:PEER)"),
    "tcp_retrans_per_s": ("segments/s", "TCP retransmissions (per peer with :PEER, else the node's)"),
    "gpu_sm_clock_mhz": ("MHz", "SM clock of GPU :G"),
    "gpu_power_w": ("W", "power draw of GPU :G"),
    "gpu_util_pct": ("percent (0..100)", "utilisation of GPU :G"),
    "gpu_mem_used_bytes": ("bytes", "memory used on GPU :G"),
    "gpu_temp_c": ("degrees C", "temperature of GPU :G"),
    "gpu_throttle_reasons": ("bitmask (NVML)", "clock throttle reasons of GPU :G"),
}
METRICS = ("cpu_util_pct", "proc_cpu_util_pct", "proc_rss_bytes", "proc_run_delay_s_per_s", "net_rx_bytes_per_s",
           "net_tx_bytes_per_s")

_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied, ProcessLookupError, FileNotFoundError, PermissionError)


def read_net_dev(pid: int | str = "self", *, include_loopback: bool = False) -> tuple[int, int]:
    """Total (rx_bytes, tx_bytes) over the interfaces of ``pid``'s network namespace,
    from ``/proc/<pid>/net/dev``; loopback (``lo``) left out unless asked, and ifb
    devices always (``ifb*``, faultlab's ``flifb*``/``flprb*``): an ifb carries the
    redirected ingress of a real interface, so counting it would count bytes twice.

    Raises FileNotFoundError / ProcessLookupError when the process is gone.
    """
    rx = tx = 0
    with open(f"/proc/{pid}/net/dev") as f:
        for line in f.read().splitlines()[2:]:
            name, _, rest = line.partition(":")
            name = name.strip()
            if not rest or (name == "lo" and not include_loopback) or name.startswith(("ifb", "flifb", "flprb")):
                continue
            cols = rest.split()
            rx += int(cols[0])
            tx += int(cols[8])
    return rx, tx


def read_run_delay(pid: int) -> dict[int, float]:
    """``{tid: run delay in seconds}`` of every thread of process ``pid``: field 2 of
    ``/proc/<pid>/task/<tid>/schedstat`` (ns; time runnable but waiting for a CPU,
    including CFS-throttled time). A thread that ends while it is read is left out.

    Raises FileNotFoundError / ProcessLookupError when the process is gone."""
    out: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[1]) / 1e9
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError, ValueError):
            continue
    return out


class HostSampler:
    """Samples host metrics of nodes in a background thread.

    ``targets``: node name -> that node's processes (ranks): PIDs, or handles with a
    ``pid`` (a ``subprocess.Popen``, a ``docker.ContainerProcess``) and optionally
    ``ended()``, which says the process the handle started has ended while its PID may
    still name one (the module docstring says how a PID is tied to its process). ``interval_s``:
    seconds between samples (> 0). ``run_id``: when given, the frame ``stop()``
    returns has a ``run_id`` column (the full ``host`` schema); else it has
    ``node, ts, metric, value``. Use ``start()``, then ``stop()``; or as a context
    manager (then read ``frame()``). Raises ValueError for ``interval_s <= 0``.

    TCP and GPU options (see the module docstring for the metrics):

    - ``netns``: node name -> network namespace name (``ip netns``): the node's TCP
      connections are all established ones of that namespace. Nodes not named here
      use the sockets of their own processes.
    - ``peers``: address -> node name, to name the peer of a connection whose remote
      endpoint is not a socket of another sampled node (faultlab.telemetry.tcpstats,
      ``PeerResolver``). Unresolved peers are named by their address.
    - ``tcp``: sample TCP statistics (default True).
    - ``gpu``: True (default): NVML metrics of the GPUs the node's processes use;
      a dict node -> GPU indices: those GPUs for that node (others get none); False:
      no GPU metrics.

    Attributes: ``errors`` (unexpected sampling errors, first 20), ``disabled``
    (``{"tcp"|"gpu": reason}`` for a source that is off or unavailable).
    """

    def __init__(
        self,
        targets: dict[str, list[int]],
        interval_s: float = 1.0,
        *,
        run_id: str | None = None,
        netns: dict[str, str] | None = None,
        peers: dict[str, str] | None = None,
        tcp: bool = True,
        gpu: bool | dict[str, list[int]] = True,
    ):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0 seconds, got {interval_s}")
        self.netns: dict[str, str] = dict(netns or {})
        self.peers: dict[str, str] = dict(peers or {})
        self.disabled: dict[str, str] = {}
        self.tcp = bool(tcp)
        if not self.tcp:
            self.disabled["tcp"] = "off (tcp=False)"
        elif not tcpstats.ss_available():
            self.tcp = False
            self.disabled["tcp"] = "ss not found (install iproute2)"
        self._tcp_trackers: dict[str, tcpstats.TcpTracker] = {}
        self._gpu_map: dict[str, list[int]] | None = None if gpu is True or gpu is False else {n: list(g) for n, g in gpu.items()}
        self._nvml: NvmlReader | None = NvmlReader() if gpu is not False else None
        if gpu is False:
            self.disabled["gpu"] = "off (gpu=False)"
        self._live: dict[str, list[int]] = {}  # node -> live PIDs (incl. children) of the last sample
        self.interval_s = float(interval_s)
        self.run_id = run_id
        self._lock = threading.Lock()
        self._targets: dict[str, list[int]] = {}
        self._ended_of: dict[int, object] = {}  # target PID -> its handle's ended(), when it has one
        for n, p in targets.items():
            self._set(n, p)
        self._pinned: dict[int, psutil.Process | None] = {}  # target PID -> the process it named at first look (None: ended)
        self._procs: dict[int, psutil.Process] = {}  # child pid -> Process, kept so cpu_percent has a previous reading
        self._net_prev: dict[str, tuple[float, int, int]] = {}  # node -> (monotonic s, rx, tx)
        self._delay_prev: dict[str, tuple[float, dict[tuple[int, int], float]]] = {}  # node -> (mono s, {(pid, tid): s})
        self._rows: list[tuple[str, float, str, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []  # unexpected sampling errors (first few), for diagnosis

    # -- control ---------------------------------------------------------------------
    def start(self) -> "HostSampler":
        """Take baseline readings and start the sampling thread. Returns self.

        Raises RuntimeError when already started.
        """
        if self._thread is not None:
            raise RuntimeError("HostSampler already started")
        psutil.cpu_percent(interval=None)  # baseline: the next call measures from here
        if self._nvml is not None:
            self._nvml.open()
            if not self._nvml.available:
                self.disabled["gpu"] = self._nvml.reason or "NVML unavailable"
        ts = time.time()
        for node in list(self._targets):
            self._sample_node(node, ts, None, emit=False)
        self._sample_tcp(ts, emit=False)
        self._thread = threading.Thread(target=self._loop, name="faultlab-hostsampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> pd.DataFrame:
        """Stop the thread (waits for the current sample) and return all rows as a
        DataFrame (see the class docstring for its columns). Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(10.0, 3 * self.interval_s))
        if self._nvml is not None and (self._thread is None or not self._thread.is_alive()):
            self._nvml.close()
        return self.frame()

    def set_targets(self, node: str, pids: list) -> None:
        """Replace the processes sampled for ``node`` (PIDs or handles, as ``targets``
        takes them; adds the node when new). A PID whose process this sampler saw end
        stays unsampled."""
        with self._lock:
            self._set(node, pids)

    def _set(self, node: str, targets: list) -> None:
        pids = []
        for t in targets:
            pid = t if isinstance(t, int) else t.pid
            if not isinstance(t, int) and callable(getattr(t, "ended", None)):
                self._ended_of[pid] = t.ended
            pids.append(pid)
        self._targets[node] = pids

    def frame(self) -> pd.DataFrame:
        """The rows sampled so far, as a DataFrame (safe while running)."""
        with self._lock:
            rows = list(self._rows)
        df = pd.DataFrame(rows, columns=["node", "ts", "metric", "value"])
        df["ts"] = df["ts"].astype("float64")
        df["value"] = df["value"].astype("float64")
        if self.run_id is not None:
            df.insert(0, "run_id", self.run_id)
        return df

    def __enter__(self) -> "HostSampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- sampling --------------------------------------------------------------------
    def _loop(self) -> None:
        t0 = time.monotonic()
        k = 1
        while not self._stop.wait(max(0.0, t0 + k * self.interval_s - time.monotonic())):
            k = max(k + 1, int((time.monotonic() - t0) / self.interval_s) + 1)  # skip missed ticks
            try:
                self.sample_once()
            except Exception as e:  # never let the thread die silently mid-run
                if len(self.errors) < 20:
                    self.errors.append(f"{type(e).__name__}: {e}")

    def sample_once(self) -> None:
        """Take one sample of every node now (the thread calls this each interval)."""
        ts = time.time()
        cpu = psutil.cpu_percent(interval=None)
        with self._lock:
            nodes = list(self._targets)
        for node in nodes:
            self._sample_node(node, ts, cpu, emit=True)
        self._sample_tcp(ts, emit=True)
        # Forget the children that are gone: a child is found anew from its live parent
        # each sample, so a reused PID starts fresh (a target's never does: _target).
        for pid in [q for q, p in self._procs.items() if not _alive(p)]:
            self._procs.pop(pid, None)

    def _target(self, pid: int) -> psutil.Process | None:
        """The process target PID ``pid`` named at the first look at it, while it runs
        (a zombie too: its PID is not free until it is reaped); None from the moment
        it ended, or its handle's ``ended()`` said so, on, for good."""
        if self._pinned.get(pid, True) is None:
            return None
        ended = self._ended_of.get(pid)
        p = self._pinned.get(pid)
        try:
            if ended is not None and ended():
                raise psutil.NoSuchProcess(pid)
            if p is None:
                p = psutil.Process(pid)
                p.cpu_percent(None)  # baseline
            elif not p.is_running():
                raise psutil.NoSuchProcess(pid)
        except _GONE:
            self._pinned[pid] = None
            return None
        self._pinned[pid] = p
        return p

    def _process(self, pid: int) -> psutil.Process | None:
        p = self._procs.get(pid)
        if p is None:
            try:
                p = psutil.Process(pid)
                p.cpu_percent(None)  # baseline
            except _GONE:
                return None
            self._procs[pid] = p
        return p

    def _run_delay_rows(self, node: str, ts: float, pids: list[int]) -> list[tuple[str, float, str, float]]:
        """The node's ``proc_run_delay_s_per_s`` row: the run delay its processes'
        threads gathered since the previous sample, over the time between (threads
        seen in both samples only); none on a node's first sample or with no thread
        seen twice."""
        now = time.monotonic()
        cur: dict[tuple[int, int], float] = {}
        for pid in pids:
            try:
                cur.update({(pid, tid): v for tid, v in read_run_delay(pid).items()})
            except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
                continue
        prev = self._delay_prev.get(node)
        self._delay_prev[node] = (now, cur)
        if prev is None or now <= prev[0]:
            return []
        both = [k for k in cur if k in prev[1]]
        if not both:
            return []
        gained = sum(max(0.0, cur[k] - prev[1][k]) for k in both)
        return [(node, ts, "proc_run_delay_s_per_s", gained / (now - prev[0]))]

    def _sample_node(self, node: str, ts: float, host_cpu: float | None, *, emit: bool) -> None:
        with self._lock:
            pids = list(self._targets.get(node, ()))
        rows: list[tuple[str, float, str, float]] = []
        if host_cpu is not None:
            rows.append((node, ts, "cpu_util_pct", float(host_cpu)))

        # Processes: the node's PIDs and all their children, each counted once.
        seen: dict[int, psutil.Process] = {}
        live_pids = []
        for pid in pids:
            p = self._target(pid)
            if p is None:
                continue
            try:
                if p.status() == psutil.STATUS_ZOMBIE:
                    continue
                kids = p.children(recursive=True)
            except _GONE:
                continue
            live_pids.append(pid)
            seen[pid] = p
            for c in kids:
                if c.pid not in seen:
                    cp = self._process(c.pid)
                    if cp is not None:
                        seen[c.pid] = cp
        cpu_sum = 0.0
        rss_sum = 0
        counted = 0
        for pid, p in seen.items():
            try:
                with p.oneshot():
                    c = p.cpu_percent(None)
                    r = p.memory_info().rss
            except _GONE:
                self._procs.pop(pid, None)
                continue
            cpu_sum += c
            rss_sum += r
            counted += 1
        if counted:
            rows.append((node, ts, "proc_cpu_util_pct", cpu_sum))
            rows.append((node, ts, "proc_rss_bytes", float(rss_sum)))
        rows += self._run_delay_rows(node, ts, list(seen))

        # Network of the node's namespace, through any live PID of it.
        now = time.monotonic()
        for pid in live_pids:
            try:
                rx, tx = read_net_dev(pid)
            except (OSError, ValueError, IndexError):
                continue
            prev = self._net_prev.get(node)
            self._net_prev[node] = (now, rx, tx)
            if prev is not None and now > prev[0]:
                dt = now - prev[0]
                # Counters only go down when the interface set changed (a veth removed): clamp.
                rows.append((node, ts, "net_rx_bytes_per_s", max(0, rx - prev[1]) / dt))
                rows.append((node, ts, "net_tx_bytes_per_s", max(0, tx - prev[2]) / dt))
            break

        self._live[node] = list(seen)
        rows += self._gpu_rows(node, ts, list(seen))

        if emit and rows:
            with self._lock:
                self._rows.extend(rows)

    def _note(self, msg: str) -> None:
        if len(self.errors) < 20 and msg not in self.errors:
            self.errors.append(msg)

    def _gpu_rows(self, node: str, ts: float, pids: list[int]) -> list[tuple[str, float, str, float]]:
        nv = self._nvml
        if nv is None or not nv.available:
            return []
        if self._gpu_map is not None:
            idx = self._gpu_map.get(node, [])
        else:
            idx = nv.gpus_of(pids) if pids else []
        if not idx:
            return []
        return [(node, ts, f"{name}:{i}", v) for i, m in nv.read(idx).items() for name, v in m.items()]

    def _sample_tcp(self, ts: float, *, emit: bool) -> None:
        """One ss per network namespace; each node's connections; per-peer rows."""
        if not self.tcp:
            return
        with self._lock:
            nodes = list(self._targets)
        me = _netns_id("self")
        snaps: dict[object, list[tcpstats.TcpConn] | None] = {}
        mine: dict[str, tuple[object, list[tcpstats.TcpConn]]] = {}
        for node in nodes:
            ns = self.netns.get(node)
            pids = self._live.get(node, [])
            if ns:
                group = ("netns", ns)
                if group not in snaps:
                    snaps[group] = self._read(netns=ns)
            elif pids:
                nsid = _netns_id(pids[0])
                if nsid is None:
                    continue
                group = ("ns", nsid)
                if group not in snaps:
                    snaps[group] = self._read(pid=None if nsid == me else pids[0])
            else:
                continue
            conns = snaps[group]
            if conns is None:
                continue
            if not ns:
                try:
                    inodes = tcpstats.socket_inodes(pids)
                except NodeError as e:
                    self._note(f"tcp: node {node}: {e}")
                    continue
                conns = [c for c in conns if c.inode in inodes]
            mine[node] = (group, conns)
        resolver = tcpstats.PeerResolver(self.peers)
        for node, (group, conns) in mine.items():
            resolver.add(node, group, conns)
        now = time.monotonic()
        rows = []
        for node, (group, conns) in mine.items():
            tr = self._tcp_trackers.setdefault(node, tcpstats.TcpTracker())
            for metric, value in tr.update(conns, lambda c, g=group: resolver.peer(g, c), now):
                rows.append((node, ts, metric, float(value)))
        if emit and rows:
            with self._lock:
                self._rows.extend(rows)

    def _read(self, *, netns: str | None = None, pid: int | None = None) -> list[tcpstats.TcpConn] | None:
        try:
            return tcpstats.read_conns(netns=netns, pid=pid)
        except Exception as e:
            if pid is not None and (not psutil.pid_exists(pid) or _netns_id(pid) is None):
                # The process ended between the two reads. A zombie still "exists" but has
                # no namespace links left, so nsenter fails on it: not a sampling error.
                return None
            self._note(f"tcp: {type(e).__name__}: {e}")
            return None


def _netns_id(pid) -> str | None:
    """``net:[INODE]`` of ``pid``'s network namespace, or None when unreadable."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except _GONE:
        return False
