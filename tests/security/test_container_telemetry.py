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
    assert not (out / node.name / "rank0.jsonl").exists()
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
    assert sorted(os.listdir(out / node.name)) == ["rank0.jsonl"]
    st = os.lstat(out / node.name / "rank0.jsonl")
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644
    assert (out / node.name / "rank0.jsonl").read_bytes() == b'{"step": 1}\n'
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
    assert sorted(os.listdir(out / node.name)) == ["rank0.jsonl"]
    assert (out / node.name / "rank0.jsonl").read_bytes() == b'{"step": 2}\n'
    why = c.skipped[(node.name, "big.jsonl")]
    assert "\n" not in why and "big.jsonl" in why and str(collect.MAX_FILE_BYTES) in why, why

