"""A node's root may forge its own ranks' step records, and only those, and never
makes the controller read them unbounded.

A real container (one host-like node: ``stb.inner.nodes[0]`` as a docker node,
``stb.nodes[0]`` over ssh) writes, as its root, step records for a rank placed on
another node, host samples under another node's name, and records of keys that are
no step column; the real collector copies them as ``faultlab run`` does and the run
directory's reader (faultlab.steprecords) merges them.
"""

from __future__ import annotations

import json
import os

import pytest

from faultlab.errors import BadInput
from faultlab.nodes.backends import SshTestbed
from faultlab.nodes.docker import WORK_DIR
from faultlab.rundir import RunDir
from faultlab.telemetry import remote
from faultlab.telemetry.collect import TelemetryCollector
from tests.helpers import docker_testbed

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def stb(dockerd):
    with docker_testbed(dockerd, SshTestbed(1)) as tb:
        yield tb


def as_node_root(stb, run_id: str, name: str, text: str, times: int = 1) -> None:
    """The container's root writes ``text`` ``times`` times as ``WORK_DIR/run_id/name``."""
    from faultlab.nodes.dockerd import client

    rc, out = client().containers.get(stb.inner.nodes[0].container).exec_run(
        ["sh", "-c", 'mkdir -p "$1" && i=0 && while [ $i -lt "$4" ]; do printf %s "$3"; i=$((i+1)); done > "$1/$2"',
         "sh", f"{WORK_DIR}/{run_id}", name, text, str(times)])
    assert rc == 0, out


def record(rank: int, step: int, node: str, step_s: float = 0.01) -> str:
    return json.dumps({"rank": rank, "node": node, "peer_group": "all", "step": step, "t_start": 1e9 + step,
                       "compute_s": step_s / 2, "comm_s": step_s / 2, "step_s": step_s})


def test_a_node_keeps_only_its_own_ranks_records_and_its_own_host_samples(stb, tmp_path, no_residue):
    """Node n0 (rank 0 placed there) sends its rank 0's records saying ``node: n9`` and
    forged 5 s steps of rank 1, placed on n1: the merged steps hold rank 0's records
    only, ``node`` n0 from the placement; rank 1's are one counted skip naming n0 and
    the file. Host samples it sends under n1's name are not copied (a skip naming n0)."""
    node = stb.inner.nodes[0]
    run_id = f"forge-{os.urandom(3).hex()}"
    own = [record(0, s, "n9") for s in range(3)]
    forged = [record(1, s, "n1", step_s=5.0) for s in range(4)]
    as_node_root(stb, run_id, "steps-rank0.jsonl", "\n".join(own + forged) + "\n")
    as_node_root(stb, run_id, f"{remote.PREFIX}n1.jsonl", '{"ts": 1}\n')
    c = TelemetryCollector([node], run_id, tmp_path / "run" / "telemetry")
    c.stop()
    assert sorted(os.listdir(tmp_path / "run" / "telemetry" / node.name)) == ["steps-rank0.jsonl"]
    why = c.skipped[(node.name, f"{remote.PREFIX}n1.jsonl")]
    assert "\n" not in why and f"node {node.name}" in why, why
    (tmp_path / "run" / "meta.json").write_text(json.dumps({"run_id": run_id, "placement": {node.name: [0], "n1": [1]}}))
    rd = RunDir(tmp_path / "run")
    steps = rd.read_raw_steps()
    assert steps["rank"].tolist() == [0, 0, 0] and set(steps["node"]) == {node.name}
    assert steps["step_s"].max() < 1 and set(steps["run_id"]) == {run_id}
    [skip] = rd.steps_skipped
    assert (skip.node, skip.file, skip.count, skip.ranks) == (node.name, "steps-rank0.jsonl", 4, [1])
    assert "\n" not in skip.line() and f"node {node.name}" in skip.line()


def test_a_nodes_records_of_no_step_schema_are_one_line_not_memory(stb, tmp_path, no_residue):
    """n0's root sends records of 1000 keys each (what made the controller hold ~90 KB
    a record as dicts): the reader stops at the first one, with one line naming the
    node and the file, having parsed no more than a block."""
    node = stb.inner.nodes[0]
    run_id = f"wide-{os.urandom(3).hex()}"
    wide = json.dumps({**json.loads(record(0, 1, "n0")), **{f"k{i}": i for i in range(1000)}})
    as_node_root(stb, run_id, "steps-rank0.jsonl", wide + "\n", times=2000)
    TelemetryCollector([node], run_id, tmp_path / "run" / "telemetry").stop()
    (tmp_path / "run" / "meta.json").write_text(json.dumps({"run_id": run_id, "placement": {node.name: [0]}}))
    with pytest.raises(BadInput) as e:
        RunDir(tmp_path / "run").read_raw_steps()
    msg = str(e.value)
    assert "\n" not in msg and f"node {node.name}" in msg and "steps-rank0.jsonl" in msg, msg
