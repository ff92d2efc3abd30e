"""Per-peer TCP statistics from the kernel's socket diagnostics (``ss -tin``).

Source: iproute2's ss(8), which reads the kernel's ``struct tcp_info`` of every socket
through the NETLINK_SOCK_DIAG (inet_diag) interface and prints it as text. One ``ss``
run per network namespace per sample: ``ss -tinHe state established`` (numeric ports
and raw ``bps`` rates with ``-n``; the socket inode with ``-e``), inside a named
namespace through ``ip netns exec NS``, or inside the namespace of a PID through
``nsenter --net=/proc/PID/ns/net``. (pyroute2 speaks inet_diag from Python but is not a
dependency of faultlab; ss is part of iproute2, which faultlab needs anyway for tc
and ip.)

Fields read from each connection (tcp_info names in brackets):

- ``rtt:SRTT/RTTVAR`` ms [tcpi_rtt, tcpi_rttvar] (ss prints them in ms),
- ``retrans:NOW/TOTAL`` segments [tcpi_retrans, tcpi_total_retrans] (absent = 0),
- ``delivery_rate N[KMG]bps`` bit/s [tcpi_delivery_rate], stored as bytes/s,
- ``bytes_acked:N``, ``bytes_received:N`` bytes [tcpi_bytes_acked,
  tcpi_bytes_received] (absent = 0; bytes_acked counts the SYN, so it is 1 above the
  payload once established),
- ``cwnd:N`` segments [tcpi_snd_cwnd], ``ino:N`` the socket inode.

Metric naming convention (the ``host`` table, long format): a metric name is a base
name carrying its unit, optionally followed by ``:`` and a qualifier. For TCP the
qualifier is the **peer node** (``tcp_rtt_ms:n2`` = RTT of this row's node toward node
n2); for GPU metrics it is the GPU index (``gpu_power_w:0``). Base names never hold a
``:``, so ``metric.split(":", 1)`` always gives ``(base, qualifier)``; a qualifier may
itself hold colons (an IPv6 address). Per (node, peer), every sample:

==================================  ==========================================================
``tcp_conns:P``                     established connections between the node and P (count)
``tcp_rtt_ms:P``                    mean smoothed RTT (srtt), ms
``tcp_rttvar_ms:P``                 mean RTT variance (rttvar), ms
``tcp_cwnd_segs:P``                 mean congestion window, segments
``tcp_delivery_rate_bytes_per_s:P`` sum of the connections' delivery-rate samples, bytes/s
``tcp_tx_bytes_per_s:P``            bytes acked by P per second (sum of bytes_acked deltas)
``tcp_rx_bytes_per_s:P``            bytes received from P per second (bytes_received deltas)
``tcp_retrans_total:P``             total retransmitted segments of the open connections
``tcp_retrans_per_s:P``             retransmitted segments per second (total_retrans deltas)
==================================  ==========================================================

and per node ``tcp_retrans_per_s`` (all its connections, whatever the peer).

The gauges (rtt, rttvar, cwnd, delivery rate) are taken over the connections that
*sent* data in the interval (bytes_acked grew): the kernel refreshes them only when
ACKs of our data arrive, so an idle or receive-only connection shows a stale value
(often its handshake RTT). When no connection to P sent data, they are taken over all
connections to P and are the last known values. Rates (``*_per_s``) are over the
interval since the node's previous sample; the first sample of a node gives only the
gauges. A connection first seen in a later sample counts from zero (it opened in the
interval); counters of closed connections leave the totals.

Peer resolution, in order: (1) the remote endpoint (address, port) is a local endpoint
of a connection of another sampled node (exact, also for ranks on loopback; loopback
endpoints only match within one namespace); (2) the remote address in the ``peers``
mapping (address -> node name; IPv4-mapped IPv6 addresses are unmapped first);
(3) else the remote address itself is the qualifier (``tcp_rtt_ms:10.0.0.7``).
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from faultlab.errors import NodeError
from faultlab.nodes.base import run_bounded

SS_ARGS = ("ss", "-tinHe", "state", "established")
#: the most bytes of ss's output read from one namespace each sample (some 10,000
#: connections at 300 to 450 bytes each; a node's ranks make a few dozen): whoever is
#: root in a docker node's namespace may open as many connections there as its memory
#: holds, and ss prints every one
SS_BYTES = 4 << 20
#: the most descriptors looked at in one node's processes each sample (``socket_inodes``,
#: a readlink each; a node's ranks hold a few hundred): a docker node's root may hold as
#: many as its processes' descriptor limits allow (4096 processes of 20,000 each here),
#: 300,000 took 1.5 s, and the one sampler thread of every node would take minutes a sample
MAX_FDS = 1 << 16

#: per-peer base metric names (``BASE:peer``) and the node-level one
PEER_METRICS = (
    "tcp_conns",
    "tcp_rtt_ms",
    "tcp_rttvar_ms",
    "tcp_cwnd_segs",
    "tcp_delivery_rate_bytes_per_s",
    "tcp_tx_bytes_per_s",
    "tcp_rx_bytes_per_s",
    "tcp_retrans_total",
    "tcp_retrans_per_s",
)
NODE_METRICS = ("tcp_retrans_per_s",)

_STATES = {"ESTAB", "SYN-SENT", "SYN-RECV", "FIN-WAIT-1", "FIN-WAIT-2", "TIME-WAIT", "UNCONN", "CLOSE-WAIT", "LAST-ACK", "LISTEN", "CLOSING"}
_RATE = re.compile(r"^([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)([KMGT]?)bps$")
_MULT = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


@dataclass(frozen=True)
class TcpConn:
    """One established TCP connection as ss(8) printed it.

    ``local``/``remote``: (address, port), the address normalized (no brackets, no
    ``%iface``, IPv4-mapped IPv6 unmapped). ``rtt_ms``/``rttvar_ms``: smoothed RTT and
    its variance, ms (None when not printed). ``retrans_now``/``retrans_total``:
    segments. ``delivery_rate_bytes_per_s``: bytes/s (None when not printed).
    ``bytes_acked``/``bytes_received``: bytes. ``cwnd_segs``: segments. ``inode``:
    socket inode (None without ``-e``).
    """

    local: tuple[str, int]
    remote: tuple[str, int]
    inode: int | None = None
    rtt_ms: float | None = None
    rttvar_ms: float | None = None
    retrans_now: int = 0
    retrans_total: int = 0
    delivery_rate_bytes_per_s: float | None = None
    bytes_acked: int = 0
    bytes_received: int = 0
    cwnd_segs: int | None = None

    @property
    def key(self) -> tuple:
        return (self.local, self.remote, self.inode)


def parse_rate_bit_per_s(token: str) -> float:
    """``"48.2Mbps"`` -> 48.2e6 (bit/s). ss prints raw ``123bps`` with ``-n`` and
    ``K``/``M``/``G`` suffixes (powers of 1000) without. Raises ValueError."""
    m = _RATE.match(token.strip())
    if not m:
        raise ValueError(f"not an ss rate: {token!r}")
    return float(m.group(1)) * _MULT[m.group(2)]


def parse_endpoint(text: str) -> tuple[str, int]:
    """``"10.0.0.1:5000"``, ``"[::ffff:10.0.0.1]:5000"``, ``"[fe80::1]%eth0:22"``,
    ``"10.0.0.1%fleth0:80"`` -> (address, port); IPv4-mapped addresses unmapped.
    ``*`` ports become 0. Raises ValueError when there is no ``:port``."""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"not an ss endpoint: {text!r}")
    host = host.split("%", 1)[0]
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return normalize_address(host), (int(port) if port.isdigit() else 0)


def normalize_address(addr: str) -> str:
    """An address as faultlab compares them: IPv4-mapped IPv6 (``::ffff:a.b.c.d``)
    becomes ``a.b.c.d``; IPv6 compressed; anything unparsable is returned as given."""
    a = addr.strip().strip("[]").split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(a)
    except ValueError:
        return a
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def _int(v: str) -> int | None:
    try:
        return int(v)
    except ValueError:
        return None


def _conn(tokens: list[str]) -> TcpConn | None:
    if tokens and tokens[0] in _STATES:
        tokens = tokens[1:]
    # Recv-Q Send-Q Local:Port Peer:Port [extended/info fields...]
    if len(tokens) < 4 or not tokens[0].isdigit() or not tokens[1].isdigit():
        return None
    try:
        local, remote = parse_endpoint(tokens[2]), parse_endpoint(tokens[3])
    except ValueError:
        return None
    f: dict = {}
    rest = tokens[4:]
    for i, tok in enumerate(rest):
        if tok == "delivery_rate" and i + 1 < len(rest):
            try:
                f["delivery_rate_bytes_per_s"] = parse_rate_bit_per_s(rest[i + 1]) / 8.0
            except ValueError:
                pass
            continue
        key, sep, val = tok.partition(":")
        if not sep:
            continue
        if key == "rtt":
            a, _, b = val.partition("/")
            try:
                f["rtt_ms"] = float(a)
                f["rttvar_ms"] = float(b) if b else None
            except ValueError:
                pass
        elif key == "retrans":
            a, _, b = val.partition("/")
            now, total = _int(a), _int(b)
            if now is not None:
                f["retrans_now"] = now
            if total is not None:
                f["retrans_total"] = total
        elif key in ("bytes_acked", "bytes_received"):
            v = _int(val)
            if v is not None:
                f[key] = v
        elif key == "cwnd":
            f["cwnd_segs"] = _int(val)
        elif key == "ino":
            f["inode"] = _int(val)
    return TcpConn(local=local, remote=remote, **f)


def parse_ss(text: str) -> list[TcpConn]:
    """Parse ``ss -ti`` output into TcpConns.

    Accepts the two-line form (address line, then an indented info line) and the
    one-line form (``-O``), with or without the header (``-H``), the State column
    (present unless one state is filtered), ``-e`` extended fields and ``-p``
    ``users:(...)``. Lines that are not connections are skipped; fields that are
    absent keep their defaults (ss prints most counters only when non-zero).
    """
    records: list[list[str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line[0] in " \t":
            if records:
                records[-1].extend(line.split())
            continue
        toks = line.split()
        if toks[0] in ("Recv-Q", "State", "Netid"):
            continue
        records.append(toks)
    out = []
    for toks in records:
        c = _conn(toks)
        if c is not None:
            out.append(c)
    return out


def ss_argv(*, netns: str | None = None, pid: int | None = None) -> list[str]:
    """The argv that lists the established TCP connections with their tcp_info: in the
    named network namespace ``netns`` (``ip netns exec``), else in the namespace of
    ``pid`` (``nsenter --net=/proc/PID/ns/net``), else in this process's. Pure."""
    if netns:
        return ["ip", "netns", "exec", netns, *SS_ARGS]
    if pid is not None:
        return ["nsenter", f"--net=/proc/{pid}/ns/net", *SS_ARGS]
    return list(SS_ARGS)


def read_conns(*, netns: str | None = None, pid: int | None = None, timeout: float = 5.0) -> list[TcpConn]:
    """The established TCP connections of a network namespace (see :func:`ss_argv`),
    parsed. Namespaces other than this process's need root (CAP_SYS_ADMIN).

    Raises NodeError when ss (or ip/nsenter) is missing, times out or fails, or prints
    more than SS_BYTES (ss is killed, none of its output parsed).
    """
    argv = ss_argv(netns=netns, pid=pid)
    try:
        cp = run_bounded(argv, input=None, timeout=timeout, limit=SS_BYTES)
    except FileNotFoundError:
        raise NodeError(f"{argv[0]!r} not found", field="tcp", fix="install iproute2 (ss, ip) and util-linux (nsenter)") from None
    except subprocess.TimeoutExpired:
        raise NodeError(f"{' '.join(argv[:5])} timed out after {timeout:g}s", field="tcp") from None
    if len(cp.stdout) > SS_BYTES:
        raise NodeError(f"{' '.join(argv[:5])} printed more than {SS_BYTES} bytes (more connections than a node's ranks make): "
                        "its TCP rows are left out", field="tcp")
    if cp.returncode != 0:
        msg = (cp.stderr.decode(errors="replace").strip() or cp.stdout.decode(errors="replace").strip() or f"rc={cp.returncode}").splitlines()[-1]
        raise NodeError(f"{' '.join(argv[:5])} failed: {msg}", field="tcp")
    return parse_ss(cp.stdout.decode(errors="replace"))


def ss_available() -> bool:
    """Whether ``ss`` is on PATH here."""
    return shutil.which("ss") is not None


def socket_inodes(pids, limit: int | None = None) -> set[int]:
    """Inodes of the sockets open in the processes ``pids`` (from ``/proc/PID/fd``:
    links ``socket:[N]``). Processes that are gone or unreadable are skipped. Raises
    NodeError once they hold more than ``limit`` descriptors in all (default
    ``MAX_FDS``), none of them taken."""
    limit = MAX_FDS if limit is None else limit
    out: set[int] = set()
    seen = 0
    for pid in pids:
        d = f"/proc/{pid}/fd"
        try:
            fds = os.scandir(d)
        except OSError:
            continue
        with fds:
            for fd in fds:
                seen += 1
                if seen > limit:
                    raise NodeError(f"the node's processes hold more than {limit} descriptors (more than its ranks "
                                    "hold): its TCP rows are left out", field="tcp")
                try:
                    t = os.readlink(fd.path)
                except OSError:
                    continue
                if t.startswith("socket:["):
                    v = _int(t[8:-1])
                    if v is not None:
                        out.add(v)
    return out


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


class PeerResolver:
    """Maps a connection's remote endpoint to a node name (see the module docstring for
    the order). Build one per sample with :meth:`add` for every node's connections,
    then call :meth:`peer`."""

    def __init__(self, peers: dict[str, str] | None = None):
        self.peers = {normalize_address(a): n for a, n in (peers or {}).items()}
        self._owner: dict[tuple, str | None] = {}  # endpoint key -> node (None: ambiguous)

    @staticmethod
    def _key(group, ep: tuple[str, int]) -> tuple:
        return (group, *ep) if _is_loopback(ep[0]) else ep

    def add(self, node: str, group, conns: list[TcpConn]) -> None:
        """Record that ``conns`` (seen in namespace ``group``) belong to ``node``."""
        for c in conns:
            k = self._key(group, c.local)
            prev = self._owner.get(k, node)
            self._owner[k] = node if prev == node else None

    def peer(self, group, conn: TcpConn) -> str:
        owner = self._owner.get(self._key(group, conn.remote))
        if owner:
            return owner
        return self.peers.get(conn.remote[0], conn.remote[0])


class TcpTracker:
    """Turns successive connection snapshots of ONE node into host-table metrics.

    ``update(conns, peer_of, now)``: ``conns`` the node's connections now, ``peer_of``
    a function TcpConn -> peer name, ``now`` a monotonic time in seconds. Returns
    [(metric, value)] (names as in the module docstring). Pure apart from the state it
    keeps (the previous counters of each connection).
    """

    def __init__(self):
        self._prev: dict[tuple, tuple[int, int, int]] = {}
        self._prev_t: float | None = None

    def update(self, conns: list[TcpConn], peer_of, now: float) -> list[tuple[str, float]]:
        """One snapshot of the node's connections -> host-table rows.

        Args:
            conns: the node's established TCP connections now (``parse_ss`` rows).
            peer_of: ``TcpConn -> str``, the peer node's name of a connection (e.g.
                ``"n2"``, from its remote address).
            now: a monotonic time, s (``time.monotonic()``); rates divide by the
                difference to the previous call's ``now``.

        Returns: ``[(metric, value)]``, per peer ``tcp_conns:P`` (count),
        ``tcp_rtt_ms:P``, ``tcp_rttvar_ms:P`` (ms, the mean over the connections
        that sent since the last call, else over all), ``tcp_cwnd_segs:P``
        (segments), ``tcp_delivery_rate_bytes_per_s:P`` (bytes/s, summed),
        ``tcp_retrans_total:P`` (segments, cumulative); from the second call on
        also ``tcp_tx_bytes_per_s:P``, ``tcp_rx_bytes_per_s:P`` (bytes/s) and
        ``tcp_retrans_per_s:P`` (segments/s), and the node's ``tcp_retrans_per_s``.
        A connection seen for the first time counts from 0; a counter that went
        down counts 0. Raises nothing of its own (``peer_of``'s errors pass)."""
        dt = now - self._prev_t if self._prev_t is not None else None
        rates = dt is not None and dt > 0
        by_peer: dict[str, list[tuple[TcpConn, int, int, int]]] = {}
        new_prev = {}
        node_retrans = 0
        for c in conns:
            p = self._prev.get(c.key, (0, 0, 0))
            d_ack = max(0, c.bytes_acked - p[0])
            d_rcv = max(0, c.bytes_received - p[1])
            d_ret = max(0, c.retrans_total - p[2])
            new_prev[c.key] = (c.bytes_acked, c.bytes_received, c.retrans_total)
            node_retrans += d_ret
            by_peer.setdefault(peer_of(c), []).append((c, d_ack, d_rcv, d_ret))
        self._prev, self._prev_t = new_prev, now
        rows: list[tuple[str, float]] = []
        for peer in sorted(by_peer):
            items = by_peer[peer]
            sending = [c for c, d_ack, _, _ in items if d_ack > 0] if rates else []
            fresh = sending or [c for c, *_ in items]
            rows.append((f"tcp_conns:{peer}", float(len(items))))
            rtt = [c.rtt_ms for c in fresh if c.rtt_ms is not None]
            if rtt:
                rows.append((f"tcp_rtt_ms:{peer}", sum(rtt) / len(rtt)))
            var = [c.rttvar_ms for c in fresh if c.rttvar_ms is not None]
            if var:
                rows.append((f"tcp_rttvar_ms:{peer}", sum(var) / len(var)))
            cw = [c.cwnd_segs for c in fresh if c.cwnd_segs is not None]
            if cw:
                rows.append((f"tcp_cwnd_segs:{peer}", sum(cw) / len(cw)))
            dr = [c.delivery_rate_bytes_per_s for c in fresh if c.delivery_rate_bytes_per_s is not None]
            if dr:
                rows.append((f"tcp_delivery_rate_bytes_per_s:{peer}", float(sum(dr))))
            rows.append((f"tcp_retrans_total:{peer}", float(sum(c.retrans_total for c, *_ in items))))
            if rates:
                rows.append((f"tcp_tx_bytes_per_s:{peer}", sum(x[1] for x in items) / dt))
                rows.append((f"tcp_rx_bytes_per_s:{peer}", sum(x[2] for x in items) / dt))
                rows.append((f"tcp_retrans_per_s:{peer}", sum(x[3] for x in items) / dt))
        if rates:
            rows.append(("tcp_retrans_per_s", node_retrans / dt))
        return rows


def split_metric(metric: str) -> tuple[str, str | None]:
    """``"tcp_rtt_ms:n2"`` -> ("tcp_rtt_ms", "n2"); ``"cpu_util_pct"`` -> ("cpu_util_pct", None)."""
    base, sep, q = metric.partition(":")
    return base, (q if sep else None)
