"""Child Python processes faultlab starts (ranks, the throughput probe) do not import
from the caller's working directory: a fake ``faultlab/`` package there (a folder
someone else can write) is never imported."""

from __future__ import annotations

import pytest

from faultlab.benchmarks.launch import free_port, launch_ranks, wait_ranks
from faultlab.nodes import LocalNode
from faultlab.probe import measure_throughput


@pytest.fixture
def hostile_cwd(tmp_path, monkeypatch):
    """cwd = a folder holding a fake ``faultlab`` package that leaves a marker file
    (and exits) when imported. Yields the marker path."""
    evil = tmp_path / "cwd"
    (evil / "faultlab").mkdir(parents=True)
    marker = tmp_path / "imported-from-cwd"
    (evil / "faultlab" / "__init__.py").write_text(
        f"import os\nopen({str(marker)!r}, 'w').write('pwned')\nos._exit(7)\n")
    monkeypatch.chdir(evil)
    return marker


def test_probe_ignores_a_fake_faultlab_in_cwd(hostile_cwd):
    """``python -m faultlab.probe`` never runs the fake package (no marker written,
    the probe measures)."""
    node = LocalNode("local")
    r = measure_throughput(node, node, "127.0.0.1", 2_000_000, timeout_s=20)
    assert r["bytes"] == 2_000_000 and r["bit_per_s"] > 0
    assert not hostile_cwd.exists()


def test_ranks_ignore_a_fake_faultlab_in_cwd(hostile_cwd, tmp_path):
    """A rank (``python -m faultlab.benchmarks.ddp``) never imports the fake package
    (which would exit 7)."""
    procs = launch_ranks([(LocalNode(name="local"), 0)], telemetry_dir=tmp_path / "tel", run_id="iso",
                         master_addr="127.0.0.1", master_port=free_port(), duration_s=None,
                         extra_args=["--steps", "2", "--hidden", "32", "--batch", "4", "--agent-dir", "none"],
                         log_dir=tmp_path / "logs")
    codes = wait_ranks(procs, timeout_s=120)
    assert codes == {0: 0}, (tmp_path / "logs" / "rank0.log").read_text()[-2000:]
    assert not hostile_cwd.exists()
