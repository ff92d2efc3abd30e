"""The benchmark workload (faultlab.benchmarks.ddp), its launcher and HostSampler.

Real processes: 2 gloo ranks on loopback, and 2 ranks in two network namespaces
joined by a veth pair (root). Nothing here asserts on speed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from faultlab.benchmarks.launch import RankFailure, free_port, launch_ranks, rank_iface, stop_ranks, wait_ranks
from faultlab.telemetry.hostsampler import HostSampler, read_net_dev
from faultlab.nodes import LocalNode, NetnsNode

KEYS = {"run_id", "rank", "node", "peer_group", "step", "t_start", "compute_s", "comm_s", "step_s", "gc_s"}
TOL_S = 1e-4  # bookkeeping between the timers; perf_counter is monotonic

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 (network namespaces)")


def read_steps(telemetry: Path, rank: int) -> list[dict]:
    return [json.loads(line) for line in (telemetry / f"steps-rank{rank}.jsonl").read_text().splitlines()]


def check_steps(telemetry: Path, world: int, run_id: str, nodes: dict[int, str], n_steps: int | None = None) -> dict[int, list[dict]]:
    recs = {r: read_steps(telemetry, r) for r in range(world)}
    counts = {r: len(v) for r, v in recs.items()}
    assert len(set(counts.values())) == 1, f"ranks stopped at different steps: {counts}"
    if n_steps is not None:
        assert counts[0] == n_steps
    for r, rows in recs.items():
        assert rows, f"rank {r} wrote no steps"
        assert [row["step"] for row in rows] == list(range(len(rows)))
        prev_t = 0.0
        for row in rows:
            assert set(row) == KEYS
            assert row["run_id"] == run_id and row["rank"] == r and row["node"] == nodes[r] and row["peer_group"] == "dp"
            assert row["compute_s"] > 0 and row["comm_s"] > 0 and row["step_s"] > 0
            assert row["compute_s"] + row["comm_s"] <= row["step_s"] + TOL_S
            assert row["t_start"] > 1.6e9 and row["t_start"] >= prev_t
            prev_t = row["t_start"]
    return recs


def wait_for_lines(path: Path, n: int, procs, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= n:
            return
        if any(p.popen.poll() not in (None, 0) for p in procs):
            wait_ranks(procs, timeout_s=1)  # raises with the failing rank's log
        time.sleep(0.05)
    stop_ranks(procs, grace_s=1)
    pytest.fail(f"{path} did not reach {n} lines in {timeout_s}s")


@pytest.fixture
def job(tmp_path):
    """Collects started RankProcs and kills any still running at teardown."""
    started = []
    yield started
    stop_ranks(started, grace_s=1)


# -- local ranks on loopback ---------------------------------------------------------
def launch_local_pair(tmp_path: Path, job: list, run_id: str, duration_s: float, extra_args: list[str]) -> list:
    """Ranks 0 and 1 on this host (node "local") over loopback, telemetry in
    ``tmp_path/tel`` and logs in ``tmp_path/logs``; added to ``job`` (ended at teardown)."""
    procs = launch_ranks(
        [(LocalNode(name="local"), 0), (LocalNode(name="local"), 1)],
        telemetry_dir=tmp_path / "tel",
        run_id=run_id,
        master_addr="127.0.0.1",
        master_port=free_port(),
        duration_s=duration_s,
        extra_args=extra_args,
        log_dir=tmp_path / "logs",
    )
    job.extend(procs)
    return procs


def test_two_local_ranks_train_and_record(tmp_path, job):
    tel = tmp_path / "run" / "telemetry"
    nodes = [LocalNode(name="n0"), LocalNode(name="n1")]
    assert rank_iface(nodes[0], "127.0.0.1") == "lo"
    procs = launch_ranks(
        [(nodes[0], 0), (nodes[1], 1)],
        telemetry_dir=tel,
        run_id="wl-local",
        master_addr="127.0.0.1",
        master_port=free_port(),
        duration_s=None,
        extra_args=["--steps", "40", "--hidden", "256", "--batch", "32"],
        log_dir=tmp_path / "logs",
    )
    job.extend(procs)
    sampler = HostSampler({"n0": [procs[0].pid], "n1": [procs[1].pid]}, interval_s=0.2, run_id="wl-local").start()
    try:
        rcs = wait_ranks(procs, timeout_s=120)
    finally:
        host = sampler.stop()
    assert rcs == {0: 0, 1: 0}
    check_steps(tel, 2, "wl-local", {0: "n0", 1: "n1"}, n_steps=40)
    assert "done: 40 steps" in (tmp_path / "logs" / "rank0.log").read_text()

    # The raw telemetry is what the run directory reads back when no Parquet exists.
    from faultlab.rundir import RunDir

    steps = RunDir(tmp_path / "run").read_raw_steps()
    assert len(steps) == 80 and set(steps["rank"]) == {0, 1}

    # Host samples: the host schema, and the ranks' own CPU and memory seen.
    assert list(host.columns) == ["run_id", "node", "ts", "metric", "value"]
    assert set(host["node"]) == {"n0", "n1"}
    assert not sampler.errors
    for node in ("n0", "n1"):
        h = host[host["node"] == node]
        cpu = h[h["metric"] == "cpu_util_pct"]["value"]
        assert len(cpu) and cpu.between(0, 100).all()
        assert (h[h["metric"] == "proc_cpu_util_pct"]["value"] > 0).any()
        assert (h[h["metric"] == "proc_rss_bytes"]["value"] > 10e6).any()
        assert (h[h["metric"].str.startswith("net_")]["value"] >= 0).all()


def test_duration_stop_is_the_same_step_on_every_rank(tmp_path, job):
    procs = launch_local_pair(tmp_path, job, "wl-dur", 1.0, ["--hidden", "128", "--batch", "16"])
    assert wait_ranks(procs, timeout_s=120) == {0: 0, 1: 0}
    recs = check_steps(tmp_path / "tel", 2, "wl-dur", {0: "local", 1: "local"})
    assert len(recs[0]) >= 1


def test_sigterm_to_one_rank_stops_all_at_the_same_step(tmp_path, job):
    procs = launch_local_pair(tmp_path, job, "wl-term", 600, ["--hidden", "128", "--batch", "16"])
    wait_for_lines(tmp_path / "tel" / "steps-rank1.jsonl", 5, procs)
    procs[1].popen.send_signal(signal.SIGTERM)
    assert wait_ranks(procs, timeout_s=120) == {0: 0, 1: 0}
    check_steps(tmp_path / "tel", 2, "wl-term", {0: "local", 1: "local"})
    assert "stop: SIGTERM" in (tmp_path / "logs" / "rank1.log").read_text()


def test_failing_rank_raises_with_its_log(tmp_path, job):
    procs = launch_local_pair(tmp_path, job, "wl-bad", 5, ["--no-such-flag"])
    with pytest.raises(RankFailure) as ei:
        wait_ranks(procs, timeout_s=120, grace_s=1)
    assert "unrecognized arguments: --no-such-flag" in str(ei.value)
    assert ei.value.returncode == 2
    assert all(p.popen.returncode is not None for p in procs)


def test_timeout_kills_the_ranks_it_started(tmp_path, job):
    # World size 2 but only rank 0 placed: rank 0 waits for its peer forever.
    procs = launch_ranks(
        [(LocalNode(name="local"), 0)],
        world_size=2,
        telemetry_dir=tmp_path / "tel",
        run_id="wl-hang",
        master_addr="127.0.0.1",
        master_port=free_port(),
        duration_s=5,
        log_dir=tmp_path / "logs",
    )
    job.extend(procs)
    with pytest.raises(RankFailure, match=r"still running after 3s"):
        wait_ranks(procs, timeout_s=3, grace_s=1)
    assert procs[0].popen.returncode is not None
    with pytest.raises(ValueError):
        launch_ranks([(LocalNode(name="x"), 2)], world_size=2, telemetry_dir=tmp_path, run_id="x",
                     master_addr="127.0.0.1", master_port=1, duration_s=1, log_dir=tmp_path)  # fmt: skip


def test_hostsampler_tolerates_dead_pids():
    p = subprocess.Popen(["sleep", "0.1"])
    p.wait()
    s = HostSampler({"gone": [p.pid], "me": [os.getpid()]}, interval_s=0.05).start()
    time.sleep(0.3)
    df = s.stop()
    assert list(df.columns) == ["node", "ts", "metric", "value"]
    assert set(df[df["node"] == "gone"]["metric"]) == {"cpu_util_pct"}
    assert {"proc_cpu_util_pct", "proc_rss_bytes", "net_rx_bytes_per_s"} <= set(df[df["node"] == "me"]["metric"])
    assert not s.errors
    with pytest.raises(ValueError):
        HostSampler({}, interval_s=0)


# -- two network namespaces joined by a veth pair ------------------------------------
@pytest.fixture
def veth_pair():
    """Two namespaces A (10.231.7.1/24) and B (10.231.7.2/24) joined by a veth pair.
    Removed at teardown, also when the test or the setup fails."""
    tag = f"{os.getpid() % 100000}"
    ns = (f"flwl{tag}a", f"flwl{tag}b")
    veth = (f"flwv{tag}a", f"flwv{tag}b")
    addrs = ("10.231.7.1", "10.231.7.2")

    def ip(*args):
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)

    try:
        for n in ns:
            ip("netns", "add", n)
        ip("link", "add", veth[0], "netns", ns[0], "type", "veth", "peer", "name", veth[1], "netns", ns[1])
        for n, v, a in zip(ns, veth, addrs):
            ip("-n", n, "addr", "add", f"{a}/24", "dev", v)
            ip("-n", n, "link", "set", v, "up")
            ip("-n", n, "link", "set", "lo", "up")
        yield [NetnsNode(name=n, netns=n, address=a) for n, a in zip(ns, addrs)], veth
    finally:
        for n in ns:
            subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=10)
        for v in veth:  # only if a half-made pair was left in the root namespace
            subprocess.run(["ip", "link", "del", v], capture_output=True, timeout=10)


@needs_root
@pytest.mark.root
def test_two_ranks_in_network_namespaces(tmp_path, job, veth_pair):
    (na, nb), veth = veth_pair
    assert rank_iface(na, na.address) == veth[0]
    assert rank_iface(nb, na.address) == veth[1]
    tel = tmp_path / "tel"
    procs = launch_ranks(
        [(na, 0), (nb, 1)],
        telemetry_dir=tel,
        run_id="wl-netns",
        master_addr=na.address,
        master_port=free_port(),  # any port: the fresh namespace has nothing bound
        duration_s=None,
        extra_args=["--steps", "100"],
        log_dir=tmp_path / "logs",
    )
    job.extend(procs)
    sampler = HostSampler({p.node.name: [p.pid] for p in procs}, interval_s=0.2, run_id="wl-netns").start()
    try:
        # popen.pid is the rank itself: `ip netns exec` execs in place, in the namespace.
        for p in procs:
            ns_ino = os.stat(f"/run/netns/{p.node.netns}").st_ino
            deadline = time.monotonic() + 30
            while "faultlab.benchmarks.ddp" not in Path(f"/proc/{p.pid}/cmdline").read_bytes().decode(errors="replace"):
                assert time.monotonic() < deadline, "rank never exec'd"
                time.sleep(0.02)
            assert os.readlink(f"/proc/{p.pid}/ns/net") == f"net:[{ns_ino}]"
            rx, tx = read_net_dev(p.pid)  # the namespace's counters, through the rank's PID
            assert rx >= 0 and tx >= 0
        rcs = wait_ranks(procs, timeout_s=120)
    finally:
        host = sampler.stop()
    assert rcs == {0: 0, 1: 0}
    check_steps(tel, 2, "wl-netns", {0: na.name, 1: nb.name}, n_steps=100)
    assert f"iface={veth[0]}" in (tmp_path / "logs" / "rank0.log").read_text()
    assert not sampler.errors
    for node in (na.name, nb.name):
        h = host[host["node"] == node]
        # ~1 MB of gradients cross the veth each step: the namespace's counters moved.
        assert (h[h["metric"] == "net_rx_bytes_per_s"]["value"] > 0).any(), h
        assert (h[h["metric"] == "net_tx_bytes_per_s"]["value"] > 0).any(), h
        assert (h[h["metric"] == "proc_cpu_util_pct"]["value"] > 0).any()
