"""`faultlab demo --backend docker|ssh`: DDP across docker nodes and across SSH nodes,
a nic-slow and a cpu-contention fault, found by the labels; nothing left behind."""

from __future__ import annotations

import json
import subprocess

import pandas as pd
import pytest

from tests.runner.test_demo import both_faults_labeled
from tests.helpers import FL, docker_residue, residue


pytestmark = [pytest.mark.root, pytest.mark.slow]


@pytest.mark.parametrize("backend", ["docker", "ssh"])
def test_demo_on_docker_and_ssh_nodes_labels_both_faults(dockerd, tmp_path, backend):
    before, dbefore = residue(), docker_residue(dockerd)
    out = tmp_path / "run"
    cp = subprocess.run([*FL, "demo", "--backend", backend, "--out", str(out), "--duration", "40s"],
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    assert residue() == before and docker_residue(dockerd) == dbefore
    assert json.loads((out / "meta.json").read_text())["complete"] is True
    both_faults_labeled(pd.read_parquet(out / "injections.parquet"), pd.read_parquet(out / "labels.parquet"))
    # the ranks wrote telemetry on their nodes; the collector brought all of it back
    steps = pd.read_parquet(out / "steps.parquet")
    assert steps["rank"].nunique() == 4 and steps.groupby("rank").size().nunique() == 1
    assert sorted(p.name for p in (out / "telemetry").glob("*/steps-rank*.jsonl")) == [f"steps-rank{i}.jsonl" for i in range(4)]
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
        # RSS by its median: a sample taken as the rank starts or exits reads 0 (CI,
        # Dec 3: one such sample of 20+); a sampler on the wrong PID reads 0 throughout
        assert per.mean()["proc_cpu_util_pct"] > 5 and per.median()["proc_rss_bytes"] > 50e6
        assert per.max()["net_tx_bytes_per_s"] > 0 and per.max()["net_rx_bytes_per_s"] > 0
        peers = {m.split(":", 1)[1] for m in per.size().index if m.startswith("tcp_rtt_ms:")}
        assert set(nodes) - {node} <= peers, (node, peers)
    if backend == "ssh":
        assert sorted(p.name for p in (out / "telemetry").glob("*/host-*.jsonl")) == [f"host-{n}.jsonl" for n in nodes]
