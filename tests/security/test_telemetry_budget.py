"""What a container's root plants in its telemetry folder never makes root write more
than a bounded amount on the host.

Sparse files cost the container nothing, and the collector's copies are dense: the
collector copies at most a budget of bytes a node and a run, at most
collect.MAX_FILES files a node, skips (once, one line) a file whose next line is longer
than collect.MAX_LINE_BYTES, and a rank's ``docker exec`` output is cut at
base.MAX_LOG_BYTES. A real container (one host-like node of an ssh testbed, as a
docker node) plants the files; the real collector copies them as ``faultlab run`` does.
"""

from __future__ import annotations

import os

import pytest

from faultlab.nodes import base
from faultlab.nodes.docker import WORK_DIR
from faultlab.telemetry import collect
from faultlab.telemetry.collect import TelemetryCollector
from tests.helpers import docker_residue

pytestmark = pytest.mark.root
MiB = 1 << 20


@pytest.fixture(scope="module")
def stb(dockerd):
    """One host-like node: ``stb.inner.nodes[0]`` is it as a docker node."""
    from faultlab.nodes.backends import SshTestbed

    before = docker_residue(dockerd)
    tb = SshTestbed(1).up()
    try:
        yield tb
    finally:
        assert tb.down() == []
        assert docker_residue(dockerd) - before == set()


def in_container(stb, script: str, *args: str) -> None:
    """Run ``sh -c script sh args...`` as the container's root."""
    from faultlab.nodes.dockerd import client

    rc, out = client().containers.get(stb.inner.nodes[0].container).exec_run(["sh", "-c", script, "sh", *args])
    assert rc == 0, out


def du(path) -> int:
    """Bytes on disk under ``path``."""
    return sum(os.lstat(os.path.join(d, f)).st_blocks * 512 for d, _, fs in os.walk(path) for f in fs)


# four 32 MiB sparse files, a newline every 512 KiB (lines short enough to be copied)
SPARSE = ('mkdir -p "$1" && for n in a b c d; do f="$1/steps-$n.jsonl"; i=1; '
          'while [ $i -le 64 ]; do printf "\\n" | dd of="$f" bs=1 seek=$((i*524288-1)) conv=notrunc 2>/dev/null; i=$((i+1)); done; done')


@pytest.mark.parametrize("budget", ["node", "run"])
def test_sparse_files_are_copied_only_up_to_the_budget(stb, tmp_path, no_residue, budget):
    """128 MiB of sparse lines (a few KiB on the container's disk) with a budget of
    40 MiB (a node's, or the run's): at most 40 MiB lands on the host, the file that
    hit the budget is one skipped line naming the budget, and later passes copy
    nothing more of the node."""
    run_id = f"budget-{budget}-{os.urandom(3).hex()}"
    in_container(stb, SPARSE, f"{WORK_DIR}/{run_id}")
    node = stb.inner.nodes[0]
    out = tmp_path / "telemetry"
    kw = {"node_budget": 40 * MiB} if budget == "node" else {"run_budget": 40 * MiB}
    c = TelemetryCollector([node], run_id, out, **kw)
    total = sum(c.collect_once() for _ in range(4))
    c.stop()
    assert 0 < total <= 40 * MiB and c.copied_total == total
    assert du(out) <= 41 * MiB
    assert c.collect_once() == 0
    (why,) = c.skipped.values()
    assert "\n" not in why and "budget" in why and str(40 * MiB) in why, why
    assert not c.errors


def test_a_line_with_no_end_is_skipped_once_and_never_read_again(stb, tmp_path, monkeypatch, no_residue):
    """A 16 MiB sparse file with no newline (and a good rank file beside it): one
    skipped line naming it; the next passes do not read it again; the rank file is
    copied."""
    run_id = f"longline-{os.urandom(3).hex()}"
    in_container(stb, 'mkdir -p "$1" && printf \'{"step": 1}\\n\' > "$1/steps-0.jsonl" && truncate -s 16M "$1/long.jsonl"',
                 f"{WORK_DIR}/{run_id}")
    node = stb.inner.nodes[0]
    reads = []
    real = node.read_telemetry

    def counting(run_id, name, offset):
        reads.append(name)
        return real(run_id, name, offset)

    monkeypatch.setattr(node, "read_telemetry", counting)
    out = tmp_path / "telemetry"
    c = TelemetryCollector([node], run_id, out)
    for _ in range(3):
        c.collect_once()
    c.stop()
    assert reads.count("long.jsonl") == 1
    why = c.skipped[(node.name, "long.jsonl")]
    assert "\n" not in why and "long.jsonl" in why and str(collect.MAX_LINE_BYTES) in why, why
    assert sorted(os.listdir(out / node.name)) == ["steps-0.jsonl"]


def test_files_past_the_cap_are_not_copied(stb, tmp_path, no_residue):
    """MAX_FILES + 40 one-line files: MAX_FILES are copied, the rest is one skipped
    line for the node."""
    run_id = f"many-{os.urandom(3).hex()}"
    in_container(stb, 'mkdir -p "$1" && i=0; while [ $i -lt "$2" ]; do echo "{}" > "$1/f$i.jsonl"; i=$((i+1)); done',
                 f"{WORK_DIR}/{run_id}", str(collect.MAX_FILES + 40))
    node = stb.inner.nodes[0]
    out = tmp_path / "telemetry"
    c = TelemetryCollector([node], run_id, out)
    c.collect_once()
    c.collect_once()
    c.stop()
    assert len(os.listdir(out / node.name)) == collect.MAX_FILES
    (why,) = c.skipped.values()
    assert "\n" not in why and f"more than {collect.MAX_FILES} telemetry files" in why, why


def test_a_ranks_exec_output_is_cut_at_the_bound(stb, tmp_path, monkeypatch, no_residue):
    """A rank that prints 5 MiB with a 1 MiB bound: its log holds the first 1 MiB and
    one line saying the rest was dropped; the rank still ran to its end."""
    monkeypatch.setattr(base, "MAX_LOG_BYTES", MiB)
    log = tmp_path / "rank.log"
    with open(log, "wb") as f:
        p = stb.inner.nodes[0].spawn_workload(["sh", "-c", "head -c 5242880 /dev/zero; echo; echo end >&2; exit 7"], stdout=f)
    assert p.wait(timeout=120) == 7
    p._pump.join(30)
    data = log.read_bytes()
    assert data.startswith(b"\0" * MiB) and data[MiB:] == f"\n[faultlab: output past {MiB} bytes dropped]\n".encode()


def test_a_folder_of_countless_links_is_not_listed(stb, tmp_path, no_residue):
    """One step file and MAX_ENTRIES links (an inode each to the container's root):
    the listing stops past MAX_ENTRIES entries of any kind, one skipped line names the
    folder, and nothing is copied."""
    run_id = f"links-{os.urandom(3).hex()}"
    in_container(stb, 'mkdir -p "$1" && echo "{}" > "$1/steps-0.jsonl" && i=0; while [ $i -lt "$2" ]; do ln -s /etc/shadow "$1/l$i"; i=$((i+1)); done',
                 f"{WORK_DIR}/{run_id}", str(collect.MAX_ENTRIES))
    node = stb.inner.nodes[0]
    out = tmp_path / "telemetry"
    c = TelemetryCollector([node], run_id, out)
    assert c.collect_once() == 0
    c.stop()
    (why,) = c.skipped.values()
    assert "\n" not in why and f"more than {collect.MAX_ENTRIES} entries" in why and run_id in why, why
    assert not c.errors
