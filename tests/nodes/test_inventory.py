"""Scenarios and campaigns on inventory nodes: `run`/`campaign --inventory` and
`--backend`, the fault's ``node:`` naming an inventory node (checked before anything
connects or runs)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.helpers import fl, fl_many, one_line_error



INV = {"known_hosts": "/nonexistent/known_hosts", "defaults": {"connect_timeout_s": 1.0},
       "nodes": {"gpu-a": {"address": "192.0.2.1", "labels": {"rack": "1"}}, "gpu-b": {"address": "192.0.2.2", "labels": {"rack": "1"}},
                 "gpu-c": {"address": "192.0.2.3", "labels": {"rack": "2"}}}}

SCENARIO = """name: inv
workload: {duration: 30s}
faults:
  - type: nic-slow
    node: NODE
    at: 5s
    duration: 5s
    params: {rate: 50mbit}
"""

CAMPAIGN = """name: c
seed: 3
runs: 6
base: {workload: {duration: 40s}}
faults_per_run: [2, 2]
types:
  nic-slow: {params: {rate: 50mbit}}
"""


def _files(tmp_path, node):
    inv, sc = tmp_path / "cluster.yaml", tmp_path / "s.yaml"
    inv.write_text(yaml.safe_dump(INV))
    sc.write_text(SCENARIO.replace("NODE", node))
    return str(inv), str(sc)


def test_scenario_node_not_in_inventory_one_line_lists_known_nodes(tmp_path):
    inv, sc = _files(tmp_path, "gpu-9")
    cp, narrowed = fl_many([["run", sc, "--inventory", inv, "--out", str(tmp_path / "run")],
                            ["run", sc, "--inventory", inv, "--select", "rack=1", "--out", str(tmp_path / "run")]])
    assert cp.returncode == 2, cp.stderr
    err = cp.stderr.strip()
    assert "\n" not in err and "faults[0].node" in err and "'gpu-9'" in err and "gpu-a, gpu-b, gpu-c" in err, err
    assert not (tmp_path / "run").exists()  # nothing started, nothing connected
    # a label selection narrows the known nodes, and the message says which are left
    assert narrowed.returncode == 2 and "gpu-a, gpu-b)" in narrowed.stderr, narrowed.stderr


def test_scenario_testbed_names_without_inventory_still_checked(tmp_path):
    _, sc = _files(tmp_path, "gpu-a")
    cp, no_inventory = fl_many([["run", sc, "--out", str(tmp_path / "run")],
                                ["run", sc, "--backend", "docker", "--inventory", str(tmp_path / "none.yaml")]])
    assert cp.returncode == 2 and "faults[0].node" in cp.stderr and "n0, n1, n2, n3" in cp.stderr, cp.stderr
    cp = no_inventory
    assert cp.returncode == 2 and "--backend" in cp.stderr and cp.stderr.count("\n") == 1, cp.stderr


def test_campaign_draws_inventory_node_names_and_checks_backend(tmp_path):
    inv, _ = _files(tmp_path, "gpu-a")
    c = tmp_path / "c.yaml"
    c.write_text(CAMPAIGN)
    cp, other_backend = fl_many([["campaign", str(c), "--inventory", inv, "--dry-run", "--json"],
                                 ["campaign", str(c), "--backend", "vm", "--dry-run"]])
    assert cp.returncode == 0, cp.stderr
    nodes = {f["node"] for s in json.loads(cp.stdout) for f in s["faults"]}
    assert nodes <= {"gpu-a", "gpu-b", "gpu-c"} and len(nodes) >= 2, nodes
    cp = other_backend
    assert cp.returncode == 2 and "--backend" in cp.stderr and cp.stderr.count("\n") == 1, cp.stderr


def test_inventory_not_utf8(tmp_path):
    p = tmp_path / "inv.yaml"
    p.write_bytes(b"nodes:\n  a: {address: 10.0.0.1\xff}\n")
    cp = fl("doctor", "--inventory", str(p), "--node", "a")
    one_line_error(cp, "--inventory", "UTF-8")


@pytest.fixture
def silent_port():
    """A TCP port on 127.0.0.1 that accepts connections and closes them without an SSH
    banner (a real socket server in a thread of this test; nothing else is reached)."""
    import socket
    import threading

    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        t.join(5)
        srv.close()


def test_ssh_no_banner_is_one_line_without_paramiko_traceback(tmp_path, silent_port):
    """An address that closes the connection without an SSH banner is faultlab's one-line
    error alone: paramiko's transport thread logs nothing (no ``Exception (client):
    Error reading SSH protocol banner``, no traceback)."""
    (tmp_path / "kh").write_text("")
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"known_hosts: {tmp_path / 'kh'}\ndefaults: {{connect_timeout_s: 5}}\n"
                   f"nodes:\n  a: {{address: 127.0.0.1, port: {silent_port}}}\n")
    cp = fl("doctor", "--inventory", str(inv), "--node", "a")
    one_line_error(cp, "--node", "ssh node a", "banner", code=1)


def test_inventory_labels_declare_the_ranks_peer_groups(tmp_path):
    """An inventory node's labels declare the peer group of the rank started on it (the
    keys of ``peer_group_labels``; all of them without it): its rank is started with
    ``--peer-group gpu=...``, the labeler takes those groups as declared and judges a
    rank only against its own kind; a scenario's labeled node group wins for its nodes."""
    from faultlab.labeler.analysis import analyze
    from faultlab.labeler.grid import StepGrid
    from faultlab.nodes.inventory import run_nodes
    from faultlab.scenario import load
    from tests.labeler.test_labeler import simulate

    kinds = ["a100", "a100", "a100", "v100", "v100", "v100"]
    inv = {"known_hosts": "/nonexistent/known_hosts", "peer_group_labels": ["gpu"],
           "nodes": {f"g{i}": {"address": f"192.0.2.{i + 1}", "labels": {"rack": str(i % 2), "gpu": k}}
                     for i, k in enumerate(kinds)}}
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(inv))
    nodes = run_nodes(tmp_path / "inv.yaml")
    assert [n.group_labels for n in nodes] == [{"gpu": k} for k in kinds]
    (tmp_path / "s.yaml").write_text("name: inv\nworkload: {duration: 30s}\n")
    sc = load(tmp_path / "s.yaml", "scenario", nodes=[n.name for n in nodes])
    args = sc.testbed.rank_args([n.group_labels for n in nodes])
    assert args == {i: ["--peer-group", f"gpu={k}"] for i, k in enumerate(kinds)}
    # the labeler: the declared kinds are the groups (discovery would cut the levels
    # 1.3x apart elsewhere), and the slower kind is no straggler
    groups = [a[-1] for _, a in sorted(args.items())]
    steps = simulate(n_ranks=6, n_steps=300, scale=[1, 1, 1.3, 3, 3, 3], groups=groups, seed=7)
    an = analyze(StepGrid.from_steps(steps))
    assert an.groups.source == "declared"
    assert [g["members"] for g in an.groups.summary([an.grid.component(j) for j in range(6)])] == \
        [["rank:0", "rank:1", "rank:2"], ["rank:3", "rank:4", "rank:5"]]
    # every label without peer_group_labels; a scenario's labeled node group wins for its nodes
    del inv["peer_group_labels"]
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(inv))
    nodes = run_nodes(tmp_path / "inv.yaml")
    (tmp_path / "s.yaml").write_text("name: inv\nworkload: {duration: 30s}\ntestbed:\n  node_groups:\n"
                                     "    - {nodes: [5], compute_repeat: 2, labels: {role: learner}}\n")
    sc = load(tmp_path / "s.yaml", "scenario", nodes=[n.name for n in nodes])
    args = sc.testbed.rank_args([n.group_labels for n in nodes])
    assert args[0] == ["--peer-group", "gpu=a100,rack=0"] and args[4] == ["--peer-group", "gpu=v100,rack=0"]
    assert args[5] == ["--compute-repeat", "2", "--peer-group", "role=learner"]
