"""`faultlab demo --backend docker|ssh`: DDP across docker nodes and across SSH nodes,
a nic-slow and a cpu-contention fault, found by the labels; nothing left behind."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from conftest import docker_residue, residue

pytestmark = [pytest.mark.root, pytest.mark.slow]


@pytest.mark.parametrize("backend", ["docker", "ssh"])
def test_demo_on_docker_and_ssh_nodes_labels_both_faults(dockerd, tmp_path, backend):
    before, dbefore = residue(), docker_residue(dockerd)
    out = tmp_path / "run"
    cp = subprocess.run([sys.executable, "-m", "faultlab.cli", "demo", "--backend", backend, "--out", str(out), "--duration", "40s"],
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    assert residue() == before and docker_residue(dockerd) == dbefore
    assert json.loads((out / "meta.json").read_text())["complete"] is True
    inj = pd.read_parquet(out / "injections.parquet")
    assert sorted(inj.fault_type) == ["cpu-contention", "nic-slow"]
    assert (inj.status == "reverted").all() and inj.verified.all()
    labels = pd.read_parquet(out / "labels.parquet")
    nic, cpu = (inj[inj.fault_type == t].iloc[0] for t in ("nic-slow", "cpu-contention"))

    def overlaps(l, i):
        return l.start_ts < i.end_ts and l.end_ts > i.start_ts

    job = [l for l in labels.itertuples() if l.component == "job" and overlaps(l, nic)]
    assert job and job[0].source == "injected" and job[0].fault_id == nic.fault_id and job[0].slowdown > 1.3
    straggler = [l for l in labels.itertuples() if l.component == cpu.target and overlaps(l, cpu)]
    assert straggler and all(l.source == "injected" and l.fault_id == cpu.fault_id for l in straggler)
    # the ranks wrote telemetry on their nodes; the collector brought all of it back
    steps = pd.read_parquet(out / "steps.parquet")
    assert steps["rank"].nunique() == 4 and steps.groupby("rank").size().nunique() == 1
    assert sorted(p.name for p in (out / "telemetry").glob("steps-rank*.jsonl")) == [f"steps-rank{i}.jsonl" for i in range(4)]
    # the host sampler ran on each node (docker: /proc of the ranks' host PIDs and ss in
    # their namespace; ssh: faultlab.telemetry.nodesampler on the node, collected back)
    host = pd.read_parquet(out / "host.parquet")
    nodes = sorted(steps.groupby("rank")["node"].first())
    assert sorted(host.node.unique()) == nodes
    for node in nodes:
        h = host[host.node == node]
        per = h.groupby("metric")["value"]
        assert per.size()["proc_cpu_util_pct"] >= 20, (node, per.size())
        # a training rank's own CPU, not 0 (a sampler reading the wrong PID); 5%, not
        # 20%: on a loaded 2-core host four ranks and other work share the CPU (one
        # rank read under 20% there with everything else right)
        assert per.mean()["proc_cpu_util_pct"] > 5 and per.min()["proc_rss_bytes"] > 50e6
        assert per.max()["net_tx_bytes_per_s"] > 0 and per.max()["net_rx_bytes_per_s"] > 0
        peers = {m.split(":", 1)[1] for m in per.size().index if m.startswith("tcp_rtt_ms:")}
        assert set(nodes) - {node} <= peers, (node, peers)
    if backend == "ssh":
        assert sorted(p.name for p in (out / "telemetry").glob("host-*.jsonl")) == [f"host-{n}.jsonl" for n in nodes]
