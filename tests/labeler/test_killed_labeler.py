"""A labeler killed with SIGKILL leaves its work folders behind (its maps in the run
folder, its cluster's scratch folder in the temporary folder: some 32 GB at 1e9
rank-steps); the next labeler of the same user removes them, and never a live one's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from faultlab import workdirs
from faultlab.synthrun import write_run
from tests.helpers import FL, fl

pytest.importorskip("distributed")


def _leftovers(run, tmp) -> list[str]:
    return sorted([n for n in os.listdir(run) if n.startswith(".label-")]
                  + [n for n in os.listdir(tmp) if n.startswith(("faultlab-dask-", "faultlab-label-"))])


def test_a_killed_out_of_core_labelers_work_folders_are_removed_by_the_next_one(tmp_path):
    run = tmp_path / "run"
    write_run(run, 64, 8000, seed=3, run_id="big")
    tmp = tmp_path / "tmp"
    tmp.mkdir(mode=0o700)
    env = {**os.environ, "TMPDIR": str(tmp)}
    p = subprocess.Popen([*FL, "label", str(run), "--out-of-core"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 120
        while not any(n.startswith(".label-") for n in os.listdir(run)):
            assert p.poll() is None and time.monotonic() < end, "the labeler ended before its work folder appeared"
            time.sleep(0.01)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    left = _leftovers(run, tmp)
    assert any(n.startswith(".label-") for n in left) and any(n.startswith("faultlab-dask-") for n in left), left
    cp = fl("label", str(run), "--out-of-core", env={"TMPDIR": str(tmp)}, timeout=300)
    assert cp.returncode == 0, cp.stderr[-800:]
    assert _leftovers(run, tmp) == []


def test_the_sweep_keeps_a_live_labelers_folder_and_what_is_not_its_own(tmp_path):
    """A folder named for a live process (this one), a link and a folder of another
    name stay; one named for a process gone is removed."""
    mine = workdirs.make(tmp_path, ".label-")
    gone = tmp_path / ".label-999999999-1-abcdefgh"
    (gone / "sub").mkdir(parents=True)
    (gone / "sub" / "map").write_bytes(b"x")
    (tmp_path / ".label-999999998-1-abcdefgh").symlink_to(tmp_path / "elsewhere")
    (tmp_path / ".label-other").mkdir()
    assert workdirs.sweep(tmp_path, ".label-") == [gone.name]
    assert sorted(n for n in os.listdir(tmp_path)) == sorted([os.path.basename(mine), ".label-999999998-1-abcdefgh", ".label-other"])
