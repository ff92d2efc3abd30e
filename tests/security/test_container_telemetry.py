"""Telemetry copied back from nodes is read through a folder descriptor, never a link,
and bounded in size.

A real container (one host-like node of an ssh testbed: the same container is a
docker node, its ``/var/lib/faultlab/work`` a host folder of the testbed) plants
what its root can plant; the real collector (faultlab.telemetry.collect) copies the
run's telemetry as ``faultlab run`` does.
"""

from __future__ import annotations

import os
import stat

import pytest

from faultlab.nodes.backends import SshTestbed
from faultlab.nodes.docker import WORK_DIR
from faultlab.telemetry import collect
from faultlab.telemetry.collect import TelemetryCollector
from tests.helpers import docker_testbed

pytestmark = pytest.mark.root

SECRET = b'{"secret": "root only"}\n'


@pytest.fixture(scope="module")
def stb(dockerd):
    """One host-like node: ``stb.nodes[0]`` over ssh, ``stb.inner.nodes[0]`` as a
    docker node; removed afterwards."""
    with docker_testbed(dockerd, SshTestbed(1)) as tb:
        yield tb


def in_container(stb, *argv: str) -> None:
    """Run ``argv`` as the container's root."""
    from faultlab.nodes.dockerd import client

    rc, out = client().containers.get(stb.inner.nodes[0].container).exec_run(list(argv))
    assert rc == 0, out


def test_a_containers_symlinked_run_folder_is_never_followed(stb, tmp_path, no_residue):
    """The container's root makes the run's telemetry folder a symlink to a host
    folder holding a root-only file: the collector copies nothing from it (one line
    in its errors naming the link), and removing the node's copy leaves the host
    folder as it was."""
    victim = tmp_path / "secret"
    victim.mkdir(mode=0o700)
    (victim / "rank0.jsonl").write_bytes(SECRET)
    os.chmod(victim / "rank0.jsonl", 0o700)
    run_id = f"linked-{os.urandom(3).hex()}"
    in_container(stb, "ln", "-s", str(victim), f"{WORK_DIR}/{run_id}")
    node = stb.inner.nodes[0]
    out = tmp_path / "telemetry"
    c = TelemetryCollector([node], run_id, out)
    c.collect_once()
    assert not (out / "rank0.jsonl").exists()
    err = c.errors[node.name]
    assert "\n" not in err and f"{node.work_host}/{run_id}" in err and "symlink" in err, err
    c.stop()
    assert (victim / "rank0.jsonl").read_bytes() == SECRET and os.path.islink(f"{node.work_host}/{run_id}")
    os.unlink(f"{node.work_host}/{run_id}")


def test_a_containers_telemetry_is_copied_regular_files_only_and_bounded(stb, tmp_path, no_residue):
    """In a real run folder the container plants a link to a root-only file, a FIFO,
    and a file larger than collect.MAX_FILE_BYTES (sparse): only the regular rank file
    is copied (mode 0644 here); the large one is a counted skip naming it, never read;
    the node's folder is removed afterwards without following the link."""
    secret = tmp_path / "secret.jsonl"
    secret.write_bytes(SECRET)
    os.chmod(secret, 0o700)
    run_id = f"bounded-{os.urandom(3).hex()}"
    d = f"{WORK_DIR}/{run_id}"
    in_container(stb, "sh", "-c", 'mkdir "$1" && printf \'{"step": 1}\\n\' > "$1/rank0.jsonl" && ln -s "$2" "$1/leak.jsonl" '
                 '&& mkfifo "$1/fifo.jsonl" && truncate -s "$3" "$1/big.jsonl"', "sh", d, str(secret), str(collect.MAX_FILE_BYTES + 1))
    node = stb.inner.nodes[0]
    out = tmp_path / "telemetry"
    c = TelemetryCollector([node], run_id, out)
    c.collect_once()
    c.stop()
    assert sorted(os.listdir(out)) == ["rank0.jsonl"]
    st = os.lstat(out / "rank0.jsonl")
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644
    assert (out / "rank0.jsonl").read_bytes() == b'{"step": 1}\n'
    why = c.skipped[(node.name, "big.jsonl")]
    assert "\n" not in why and "big.jsonl" in why and str(collect.MAX_FILE_BYTES) in why, why
    assert not os.path.lexists(f"{node.work_host}/{run_id}")
    assert secret.read_bytes() == SECRET


def test_ssh_telemetry_is_read_bounded(stb, tmp_path, no_residue):
    """On an ssh node a telemetry file larger than collect.MAX_FILE_BYTES (sparse) is
    a counted skip naming it, never read into memory; the rank file beside it is
    copied; a link there is not followed."""
    run_id = f"sshbound-{os.urandom(3).hex()}"
    d = f"{WORK_DIR}/{run_id}"
    in_container(stb, "sh", "-c", 'mkdir -p "$1" && printf \'{"step": 2}\\n\' > "$1/rank0.jsonl" && ln -s /etc/shadow "$1/leak.jsonl" '
                 '&& truncate -s "$2" "$1/big.jsonl"', "sh", d, str(collect.MAX_FILE_BYTES + 1))
    node = stb.nodes[0]
    out = tmp_path / "telemetry"
    c = TelemetryCollector([node], run_id, out)
    try:
        c.collect_once()
        c.stop()
    finally:
        node.close()
    assert sorted(os.listdir(out)) == ["rank0.jsonl"]
    assert (out / "rank0.jsonl").read_bytes() == b'{"step": 2}\n'
    why = c.skipped[(node.name, "big.jsonl")]
    assert "\n" not in why and "big.jsonl" in why and str(collect.MAX_FILE_BYTES) in why, why


def _rec(rank: int, node: str, step: int) -> str:
    return '{"rank": %d, "node": "%s", "step": %d}\n' % (rank, node, step)


@pytest.mark.parametrize("backend", ["docker", "ssh"])
def test_a_node_hands_back_only_its_own_ranks_telemetry(stb, tmp_path, no_residue, backend):
    """The node's root writes telemetry for a rank of another node (steps-rank1.jsonl),
    the host samples of another node (host-n9.jsonl), and in its own rank's file a
    record of rank 1 and one of its rank on another node: given the run's placement
    (this node runs rank 0), the collector copies its rank 0's records up to the first
    forged one and nothing else; each refused file is one counted skip naming it. On
    main the forged files were appended to the run's telemetry as another node's."""
    node = stb.inner.nodes[0] if backend == "docker" else stb.nodes[0]
    name = node.name
    run_id = f"forged-{os.urandom(3).hex()}"
    d = f"{WORK_DIR}/{run_id}"
    own = _rec(0, name, 1) + _rec(0, name, 2)
    forged = _rec(1, name, 3) + _rec(0, "n9", 4) + _rec(0, name, 5)
    in_container(stb, "sh", "-c", 'mkdir -p "$1" && printf %s "$2" > "$1/steps-rank0.jsonl" && printf %s "$3" > "$1/steps-rank1.jsonl" '
                 '&& printf %s "$3" > "$1/host-n9.jsonl" && printf %s "$3" > "$1/host-$4.jsonl"', "sh", d, own + forged, _rec(1, "n9", 1), name)
    out = tmp_path / "telemetry"
    c = TelemetryCollector([node], run_id, out, ranks={name: [0]})
    try:
        c.collect_once()
        c.stop()
    finally:
        if backend == "ssh":
            node.close()
    assert sorted(os.listdir(out)) == ["host-%s.jsonl" % name, "steps-rank0.jsonl"]
    assert (out / "steps-rank0.jsonl").read_text() == own
    for f in ("steps-rank1.jsonl", "host-n9.jsonl"):
        why = c.skipped[(name, f)]
        assert "\n" not in why and f in why and "not a telemetry file of this node" in why, why
    why = c.skipped[(name, "steps-rank0.jsonl")]
    assert f"byte {len(own)}" in why and "not of rank 0" in why, why
