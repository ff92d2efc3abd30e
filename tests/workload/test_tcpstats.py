"""Per-peer TCP statistics (faultlab.telemetry.tcpstats) and NVML GPU metrics (faultlab.telemetry.gpumetrics)
in the HostSampler.

Parser tests run on ss(8) output captured on this machine (iproute2 6.1) and on
hand-made lines in the other forms ss prints. The real-parts tests run ss against
real connections: two local processes on loopback (no root), and a 3-node netns
testbed with a rate cap on node n0's link (root). The GPU test uses a stand-in
``pynvml`` module (this machine has no GPU); the real check is a machine with an NVIDIA
GPU and nvidia-ml-py (see faultlab.telemetry.gpumetrics).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
import types

import pandas as pd
import pytest

from faultlab.telemetry import tcpstats
from faultlab.telemetry.gpumetrics import NvmlReader
from faultlab.telemetry.hostsampler import HostSampler
from faultlab.telemetry.tcpstats import PeerResolver, TcpConn, TcpTracker, parse_endpoint, parse_rate_bit_per_s, parse_ss, split_metric
from tests.helpers import ROOT

needs_ss = pytest.mark.skipif(shutil.which("ss") is None, reason="needs iproute2's ss")

# `ss -tinHe state established` on this machine: a loopback sender (bbr) and its receiver.
CAPTURED = """\
0      0      127.0.0.1:45455 127.0.0.1:36300 ino:304205 sk:1 cgroup:/ <->
\t ts sack bbr wscale:10,10 rto:204 rtt:0.022/0.011 ato:40 mss:32768 pmtu:65535 rcvmss:65483 advmss:65483 cwnd:10 bytes_received:13107200 segs_out:39 segs_in:227 data_segs_in:225 bbr:(bw:0bps,mrtt:0.022) send 119156363636bps lastsnd:8 lastrcv:4 lastack:4 pacing_rate 340531187816bps delivered:1 app_limited rcv_rtt:0.01 rcv_space:357270 rcv_ssthresh:3413115 minrtt:0.022 snd_wnd:65536
0      0      127.0.0.1:36300 127.0.0.1:45455 ino:304204 sk:2 cgroup:/ <->
\t ts sack bbr wscale:10,10 rto:204 rtt:0.293/0.147 mss:65483 pmtu:65535 rcvmss:536 advmss:65483 cwnd:50 ssthresh:8 bytes_sent:13107200 bytes_acked:13107201 segs_out:227 segs_in:40 data_segs_out:225 bbr:(bw:104772793752bps,mrtt:0.007,pacing_gain:1,cwnd_gain:2) send 89396587031bps lastsnd:4 lastrcv:8 lastack:4 pacing_rate 103725065816bps delivery_rate 32741500000bps delivered:226 busy:4ms rcv_space:65495 rcv_ssthresh:65495 minrtt:0.007 snd_wnd:3350528
"""

# Other forms: header + State column, human rates (no -n), retransmits, IPv4-mapped and
# scoped IPv6 endpoints, -p users, and the one-line form (-O).
VARIANTS = """\
State Recv-Q Send-Q Local Address:Port Peer Address:Port Process
ESTAB 0      412    [::ffff:10.213.40.10]:29500 [::ffff:10.213.40.11]:51234 users:(("python3",pid=4242,fd=7))
\t cubic wscale:7,7 rto:232 rtt:28.513/4.12 ato:40 mss:1448 cwnd:17 ssthresh:12 bytes_sent:9001 bytes_retrans:2896 bytes_acked:6106 bytes_received:77 segs_out:12 retrans:1/2 lost:1 send 6.9Mbps pacing_rate 8.3Mbps delivery_rate 2.4Mbps delivered:5 busy:12ms unacked:3 rcv_space:14480 minrtt:0.05
ESTAB 0      0      [fe80::1]%fleth0:22 [fe80::2]%fleth0:40000 ts sack cubic rtt:1.5/0.75 cwnd:10 delivery_rate 920Kbps bytes_acked:1
"""


# -- parsing ---------------------------------------------------------------------------
def test_parse_captured_ss_output():
    a, b = parse_ss(CAPTURED)
    assert a.local == ("127.0.0.1", 45455) and a.remote == ("127.0.0.1", 36300) and a.inode == 304205
    assert a.rtt_ms == 0.022 and a.rttvar_ms == 0.011 and a.cwnd_segs == 10
    assert a.bytes_received == 13107200 and a.bytes_acked == 0  # receive-only side
    assert a.delivery_rate_bytes_per_s is None and a.retrans_total == 0  # absent = not printed
    assert b.inode == 304204 and b.rtt_ms == 0.293 and b.rttvar_ms == 0.147 and b.cwnd_segs == 50
    assert b.bytes_acked == 13107201  # not bytes_sent, not bbr:(bw:...)
    assert b.delivery_rate_bytes_per_s == pytest.approx(32741500000 / 8)


def test_parse_variants():
    c, d = parse_ss(VARIANTS)
    assert c.local == ("10.213.40.10", 29500) and c.remote == ("10.213.40.11", 51234)
    assert c.inode is None
    assert c.rtt_ms == 28.513 and c.rttvar_ms == 4.12 and c.cwnd_segs == 17
    assert c.retrans_now == 1 and c.retrans_total == 2
    assert c.bytes_acked == 6106 and c.bytes_received == 77
    assert c.delivery_rate_bytes_per_s == pytest.approx(2.4e6 / 8)
    assert d.local == ("fe80::1", 22) and d.remote == ("fe80::2", 40000)
    assert d.delivery_rate_bytes_per_s == pytest.approx(920e3 / 8) and d.rtt_ms == 1.5
    # The one-line form gives the same connections.
    bare = "\n".join(line for line in CAPTURED.splitlines() if not line.startswith("\t"))
    joined = CAPTURED.replace("<->\n\t", "<-> ")
    assert parse_ss(joined) == parse_ss(CAPTURED)
    assert [c.rtt_ms for c in parse_ss(bare)] == [None, None]  # address lines alone: endpoints only
    assert parse_ss("") == [] and parse_ss("garbage line\n\tmore") == []


def test_rates_and_endpoints():
    assert parse_rate_bit_per_s("48.2Mbps") == pytest.approx(48.2e6)
    assert parse_rate_bit_per_s("32741500000bps") == 32741500000
    assert parse_rate_bit_per_s("1.5Gbps") == 1.5e9 and parse_rate_bit_per_s("800Kbps") == 800e3
    with pytest.raises(ValueError):
        parse_rate_bit_per_s("fast")
    assert parse_endpoint("10.0.0.1%fleth0:80") == ("10.0.0.1", 80)
    assert parse_endpoint("[::1]:5000") == ("::1", 5000)
    assert parse_endpoint("*:*") == ("*", 0)
    with pytest.raises(ValueError):
        parse_endpoint("nocolon")
    assert split_metric("tcp_rtt_ms:n2") == ("tcp_rtt_ms", "n2")
    assert split_metric("tcp_rtt_ms:fe80::2") == ("tcp_rtt_ms", "fe80::2")
    assert split_metric("cpu_util_pct") == ("cpu_util_pct", None)
    assert tcpstats.ss_argv(netns="fl1n0")[:4] == ["ip", "netns", "exec", "fl1n0"]
    assert tcpstats.ss_argv(pid=7)[:2] == ["nsenter", "--net=/proc/7/ns/net"]


# -- aggregation -----------------------------------------------------------------------
def _c(lp, rp, *, rtt=1.0, acked=0, rcvd=0, retr=0, dr=None, ino=None, raddr="10.0.0.2"):
    return TcpConn(("10.0.0.1", lp), (raddr, rp), inode=ino, rtt_ms=rtt, rttvar_ms=rtt / 2, retrans_total=retr,
                   delivery_rate_bytes_per_s=dr, bytes_acked=acked, bytes_received=rcvd, cwnd_segs=10)


def test_tracker_rates_and_fresh_gauges():
    tr = TcpTracker()
    peer = lambda c: "n2" if c.remote[0] == "10.0.0.2" else c.remote[0]  # noqa: E731
    first = dict(tr.update([_c(1, 9, rtt=30.0, acked=1000, dr=1e6), _c(2, 9, rtt=0.1, rcvd=500)], peer, 10.0))
    assert "tcp_tx_bytes_per_s:n2" not in first and "tcp_retrans_per_s" not in first  # no interval yet
    assert first["tcp_conns:n2"] == 2 and first["tcp_rtt_ms:n2"] == pytest.approx(15.05)  # all: none known to send
    rows = dict(tr.update([
        _c(1, 9, rtt=30.0, acked=3000, retr=4, dr=2e6),  # sent 2000 B, 4 retransmits
        _c(2, 9, rtt=0.1, rcvd=2500),  # received only: its rtt is stale, left out of the gauges
        _c(3, 9, rtt=5.0, rcvd=100, raddr="10.9.9.9"),  # a new connection to an unknown peer
    ], peer, 12.0))
    assert rows["tcp_rtt_ms:n2"] == 30.0 and rows["tcp_rttvar_ms:n2"] == 15.0 and rows["tcp_cwnd_segs:n2"] == 10
    assert rows["tcp_delivery_rate_bytes_per_s:n2"] == 2e6
    assert rows["tcp_tx_bytes_per_s:n2"] == 1000.0 and rows["tcp_rx_bytes_per_s:n2"] == 1000.0
    assert rows["tcp_retrans_total:n2"] == 4 and rows["tcp_retrans_per_s:n2"] == 2.0
    assert rows["tcp_rx_bytes_per_s:10.9.9.9"] == 50.0 and rows["tcp_rtt_ms:10.9.9.9"] == 5.0
    assert rows["tcp_retrans_per_s"] == 2.0
    assert {split_metric(m)[0] for m in rows} <= set(tcpstats.PEER_METRICS)


def test_peer_resolver():
    pr = PeerResolver({"::ffff:10.0.0.3": "n3"})
    a = TcpConn(("127.0.0.1", 1000), ("127.0.0.1", 2000))
    b = TcpConn(("127.0.0.1", 2000), ("127.0.0.1", 1000))
    pr.add("n0", "host", [a])
    pr.add("n1", "host", [b])
    assert pr.peer("host", a) == "n1" and pr.peer("host", b) == "n0"
    assert pr.peer("other-ns", a) == "127.0.0.1"  # loopback endpoints match only within a namespace
    assert pr.peer("x", TcpConn(("10.0.0.1", 5), ("10.0.0.3", 6))) == "n3"  # the peers mapping, unmapped


# -- real connections on loopback (no root) --------------------------------------------
SINK = r"""
import socket, sys, threading, time
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[1], int(sys.argv[2]))); srv.listen(16)
print("ready", flush=True)
def drain(c):
    while c.recv(1 << 20):
        pass
while True:
    c, _ = srv.accept()
    threading.Thread(target=drain, args=(c,), daemon=True).start()
"""

SOURCE = r"""
import socket, sys, time
for _ in range(200):
    try:
        s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2); break
    except OSError:
        time.sleep(0.05)
s.settimeout(None)
buf = b"x" * 65536
period = float(sys.argv[3])  # seconds between 64 KiB writes: ~0.005 s = 100 Mbit/s offered
nxt = time.monotonic()
while True:
    s.sendall(buf)
    nxt += period
    d = nxt - time.monotonic()
    if d > 0:
        time.sleep(d)
    else:
        nxt = time.monotonic()
"""


def _kill(procs):
    """End the processes this test started, by PID, and close their pipes."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if p.stdout is not None:
            p.stdout.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_ss
def test_local_processes_on_loopback_name_each_other():
    port = _free_port()
    procs = []
    try:
        sink = subprocess.Popen([sys.executable, "-c", SINK, "127.0.0.1", str(port)], stdout=subprocess.PIPE, text=True)
        procs.append(sink)
        assert sink.stdout.readline().strip() == "ready"
        src = subprocess.Popen([sys.executable, "-c", SOURCE, "127.0.0.1", str(port), "0.005"])
        procs.append(src)
        s = HostSampler({"a": [src.pid], "b": [sink.pid]}, interval_s=0.2, gpu=False).start()
        time.sleep(1.5)
        df = s.stop()
    finally:
        _kill(procs)
    assert not s.errors, s.errors
    a, b = df[df["node"] == "a"], df[df["node"] == "b"]
    # Each side sees exactly one connection, and names the other node as its peer.
    assert set(a["metric"][a["metric"].str.startswith("tcp_conns")]) == {"tcp_conns:b"}
    assert set(b["metric"][b["metric"].str.startswith("tcp_conns")]) == {"tcp_conns:a"}
    tx = a[a["metric"] == "tcp_tx_bytes_per_s:b"]["value"]
    rx = b[b["metric"] == "tcp_rx_bytes_per_s:a"]["value"]
    assert tx.median() > 5e6 and rx.median() > 5e6  # ~13 MB/s offered
    assert (a[a["metric"] == "tcp_rtt_ms:b"]["value"] > 0).all()
    assert (a[a["metric"] == "tcp_delivery_rate_bytes_per_s:b"]["value"] > 0).all()
    assert (a[a["metric"] == "tcp_retrans_per_s"]["value"] >= 0).all()


def test_tcp_off_and_gpu_absent(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    s = HostSampler({"me": [os.getpid()]}, interval_s=0.05, tcp=False).start()
    time.sleep(0.2)
    df = s.stop()
    assert not df["metric"].str.startswith(("tcp_", "gpu_")).any()
    assert s.disabled["tcp"].startswith("off") and "pynvml not installed" in s.disabled["gpu"]
    assert not s.errors


def test_rank_that_ends_mid_sample_is_not_an_error():
    """A rank can exit between the sampler's liveness check and its ``nsenter``: an
    unreaped child (a zombie) still "exists" but has no /proc/PID/ns/net. That read
    yields nothing and notes no error (CI once failed on exactly this race)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(f"/proc/{child.pid}/stat") or open(f"/proc/{child.pid}/stat").read().split(") ")[1][0] != "Z":
            assert time.monotonic() < deadline, "child never became a zombie"
            time.sleep(0.01)
        s = HostSampler({"z": [child.pid]}, interval_s=1.0, gpu=False)
        if not s.tcp:
            pytest.skip(s.disabled["tcp"])
        assert s._read(pid=child.pid) is None
        assert not s.errors
    finally:
        child.wait()


# -- NVML through a stand-in module ----------------------------------------------------
class _NVMLError(Exception):
    pass


def _fake_pynvml(my_pid: int) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM, m.NVML_TEMPERATURE_GPU = 1, 0
    m.calls = []
    m.nvmlInit = lambda: m.calls.append("init")
    m.nvmlShutdown = lambda: m.calls.append("shutdown")
    m.nvmlDeviceGetCount = lambda: 2
    m.nvmlDeviceGetHandleByIndex = lambda i: f"h{i}"
    m.nvmlDeviceGetClockInfo = lambda h, clk: {"h0": 1980, "h1": 1005}[h] if clk == 1 else 0
    m.nvmlDeviceGetPowerUsage = lambda h: 312500  # mW
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=97, memory=40)
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=141 << 30, used=30 << 30, free=111 << 30)

    def temp(h, sensor):
        if h == "h1":
            raise _NVMLError("Not Supported")
        return 61

    m.nvmlDeviceGetTemperature = temp
    m.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x4 | 0x20  # SW power cap | SW thermal
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=my_pid, usedGpuMemory=1)] if h == "h1" else []
    return m


def test_gpu_metrics_from_fake_nvml(monkeypatch):
    fake = _fake_pynvml(os.getpid())
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    r = NvmlReader().open()
    assert r.available and r.indices == [0, 1] and r.gpus_of([os.getpid()]) == [1]
    g = r.read()
    assert g[0] == {"gpu_sm_clock_mhz": 1980, "gpu_power_w": 312.5, "gpu_util_pct": 97, "gpu_mem_used_bytes": 30 << 30,
                    "gpu_temp_c": 61, "gpu_throttle_reasons": 0x24}
    assert "gpu_temp_c" not in g[1] and g[1]["gpu_sm_clock_mhz"] == 1005  # unsupported query: just that one left out
    r.close()
    assert fake.calls == ["init", "shutdown"]

    # In the sampler: this process holds a context on GPU 1 only -> its rows are ``:1``.
    s = HostSampler({"me": [os.getpid()]}, interval_s=0.05, tcp=False).start()
    time.sleep(0.25)
    df = s.stop()
    gpu = df[df["metric"].str.startswith("gpu_")]
    assert set(gpu["metric"]) == {"gpu_sm_clock_mhz:1", "gpu_power_w:1", "gpu_util_pct:1", "gpu_mem_used_bytes:1", "gpu_throttle_reasons:1"}
    assert (gpu[gpu["metric"] == "gpu_sm_clock_mhz:1"]["value"] == 1005).all()
    # An explicit mapping assigns GPUs to nodes; nodes left out get none.
    s = HostSampler({"me": [os.getpid()], "other": []}, interval_s=0.05, tcp=False, gpu={"me": [0]}).start()
    time.sleep(0.2)
    df = s.stop()
    gpu = df[df["metric"].str.startswith("gpu_")]
    assert set(gpu["node"]) == {"me"} and (gpu["metric"].str.endswith(":0")).all() and "gpu_temp_c:0" in set(gpu["metric"])
    assert not s.errors and "gpu" not in s.disabled


# -- a 3-node netns testbed, node n0's link capped -------------------------------------
def _median(df: pd.DataFrame, node: str, metric: str, t0: float, t1: float) -> float:
    v = df[(df["node"] == node) & (df["metric"] == metric) & (df["ts"] >= t0) & (df["ts"] < t1)]["value"]
    assert len(v), f"no {metric} of {node} in [{t0:.1f}, {t1:.1f})"
    return float(statistics.median(v))


@pytest.mark.root
@pytest.mark.skipif(not ROOT or shutil.which("ss") is None, reason="needs root and iproute2")
def test_per_peer_rtt_and_delivery_rate_under_a_nic_cap(no_residue, capsys):
    from faultlab.injectors import NicSlow, apply
    from faultlab.nodes.testbed import NetnsTestbed

    port = 5201
    procs: list[subprocess.Popen] = []
    tb = NetnsTestbed(3).up()
    active = None
    try:
        n0, n1, n2 = tb.nodes
        pids: dict[str, list[int]] = {n.name: [] for n in tb.nodes}
        for n in tb.nodes:  # a sink on every node
            p = n.spawn([sys.executable, "-c", SINK, n.address, str(port)], scope="net", stdout=subprocess.PIPE)
            procs.append(p)
            assert p.stdout.readline().strip() == b"ready"
            pids[n.name].append(p.pid)
        # Long-lived flows, ~100 Mbit/s offered each: n0<->n1 (both ways) and n2<->n1 (both ways).
        for src, dst in ((n0, n1), (n1, n0), (n2, n1), (n1, n2)):
            p = src.spawn([sys.executable, "-c", SOURCE, dst.address, str(port), "0.005"], scope="net")
            procs.append(p)
            pids[src.name].append(p.pid)
        sampler = HostSampler(pids, interval_s=0.5, netns={n.name: n.netns for n in tb.nodes},
                              peers={n.address: n.name for n in tb.nodes}, gpu=False).start()
        try:
            time.sleep(4.0)
            t_cap = time.time()
            active = apply(NicSlow(n0, 20e6), 60)
            time.sleep(6.0)
            t_end = time.time()
            active.revert()
            active = None
        finally:
            df = sampler.stop()
    finally:
        if active is not None:
            active.revert()
        _kill(procs)
        assert tb.down() == []
    assert not sampler.errors, sampler.errors

    t_start = float(df["ts"].min())
    before = (t_start + 1.0, t_cap)
    during = (t_cap + 2.0, t_end)  # let queues and rate samples settle
    fig = {}
    for node, peer in (("n0", "n1"), ("n1", "n0"), ("n1", "n2"), ("n2", "n1")):
        for metric in (f"tcp_rtt_ms:{peer}", f"tcp_delivery_rate_bytes_per_s:{peer}", f"tcp_tx_bytes_per_s:{peer}"):
            fig[(node, metric)] = (_median(df, node, metric, *before), _median(df, node, metric, *during))
    with capsys.disabled():
        print("\nmedian before cap -> under a 20 Mbit/s cap on n0 (RTT ms; rates Mbit/s):")
        for (node, metric), (b, d) in fig.items():
            scale = 1.0 if "rtt" in metric else 8 / 1e6
            print(f"  {node:3} {metric:36} {b * scale:10.3f} -> {d * scale:10.3f}")
    for node, peer in (("n0", "n1"), ("n1", "n0")):  # connections involving n0
        rb, rd = fig[(node, f"tcp_rtt_ms:{peer}")]
        assert rd > max(2 * rb, 5.0), (node, peer, rb, rd)
        db, dd = fig[(node, f"tcp_delivery_rate_bytes_per_s:{peer}")]
        assert dd * 8 < 25e6 < db * 8, (node, peer, db, dd)
    capped_rtt = min(fig[("n0", "tcp_rtt_ms:n1")][1], fig[("n1", "tcp_rtt_ms:n0")][1])
    for node, peer in (("n1", "n2"), ("n2", "n1")):  # n1<->n2 untouched
        rb, rd = fig[(node, f"tcp_rtt_ms:{peer}")]
        assert rd < max(5.0, 3 * rb) and rd < capped_rtt / 3, (node, peer, rb, rd)
        db, dd = fig[(node, f"tcp_delivery_rate_bytes_per_s:{peer}")]
        assert dd * 8 > 25e6, (node, peer, db, dd)
    # Every node also carries the node-level retransmit rate.
    assert set(df[df["metric"] == "tcp_retrans_per_s"]["node"]) == {"n0", "n1", "n2"}
