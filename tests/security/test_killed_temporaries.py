"""What a faultlab process SIGKILLed in the middle of a write leaves behind is removed
by the next one: ``dataset relabel``'s private folder of campaign files
(``faultlab-relabel-*`` in the temporary folder), ``label``'s private folder
(``faultlab-write-*``) and the temporaries it stages in the run folder
(``.labels.parquet.*.tmp``), the node image build's debootstrap folder
(``faultlab-rootfs-*`` in the image cache) and the chaos test's state folder
(``faultlab-chaos-*``); a steps writer's are in test_killed_steps_temporaries.py. Each is named for its maker's PID and start time
(``faultlab.workdirs``), so the next process removes those of makers that are gone.

The kill is made at a fixed point, not timed: the command runs in a child Python
whose ``build`` (relabel) or first rename into the run folder (label) kills it with
SIGKILL. The temporary folder is the test's own (``TMPDIR``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from faultlab import chaos, workdirs
from faultlab.report.synthetic import make_run
from tests.helpers import ROOT, fl

#: the child: the faultlab command of its arguments, SIGKILLed inside dataset build
KILLED_IN_BUILD = """
import os, runpy, signal, sys
from faultlab.datasets import build
build.build = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
sys.argv = ["faultlab", *sys.argv[1:]]
runpy.run_module("faultlab.cli", run_name="__main__")
"""

#: the child: the faultlab command of its arguments, SIGKILLed at its first rename of a
#: staged .parquet into a folder (write_together's, after every file is staged)
KILLED_AT_RENAME = """
import os, runpy, signal, sys
rename = os.rename
def killed(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
    if src_dir_fd is not None and str(dst).endswith(".parquet"):
        os.kill(os.getpid(), signal.SIGKILL)
    return rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
os.rename = killed
sys.argv = ["faultlab", *sys.argv[1:]]
runpy.run_module("faultlab.cli", run_name="__main__")
"""


#: the child: the node image build, SIGKILLed at debootstrap (in its debootstrap folder's life)
KILLED_IN_DEBOOTSTRAP = """
import os, shutil, signal
from faultlab.nodes import image
shutil.which = lambda name: "/bin/true"
image.subprocess.run = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
image.build_tarball()
"""

#: the child: the node image build, its debootstrap failing (a build that ends and cleans up)
FAILED_DEBOOTSTRAP = """
import shutil, subprocess
from faultlab.errors import FaultlabError
from faultlab.nodes import image
shutil.which = lambda name: "/bin/true"
image.subprocess.run = lambda *a, **k: subprocess.CompletedProcess(a, 1, "", "no mirror")
try:
    image.build_tarball()
except FaultlabError:
    pass
"""

#: the child: a chaos run, SIGKILLed once its state folder is made (before any fault)
KILLED_IN_CHAOS = """
import os, signal
from faultlab import chaos
chaos._start_targets = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
chaos.run_chaos(1, 0, types=["cpu-hog"])
"""


def _killed(script: str, tmp: Path, *args, env: dict | None = None) -> int:
    """Run the child ``script``, which must end SIGKILLed; its PID."""
    p = subprocess.Popen([sys.executable, "-P", "-c", script, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env={**os.environ, "TMPDIR": str(tmp), **(env or {})})
    _, err = p.communicate(timeout=300)
    assert p.returncode == -9, (p.returncode, err[-1500:])
    return p.pid


def _left(folder: Path, prefix: str) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith(prefix))


def test_a_killed_relabels_private_folder_is_removed_by_the_next_relabel(tmp_path, two_runs):
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    cp = fl("dataset", "build", *two_runs, "--name", "ds", "--out", out)
    assert cp.returncode == 0, cp.stderr
    _killed(KILLED_IN_BUILD, tmp, "dataset", "relabel", out / "ds")
    assert len(_left(tmp, "faultlab-relabel-")) == 1, "the relabel was not killed inside its private folder's life"
    cp = fl("dataset", "relabel", out / "ds", env={"TMPDIR": str(tmp)})
    assert cp.returncode == 0, cp.stderr
    assert _left(tmp, "faultlab-relabel-") == []


def test_a_killed_labels_private_folder_and_staged_files_are_removed_by_the_next_label(tmp_path):
    run, tmp = make_run(tmp_path / "run", ranks=2, duration_s=20), tmp_path / "tmp"
    tmp.mkdir()
    _killed(KILLED_AT_RENAME, tmp, "label", run)
    assert len(_left(tmp, "faultlab-write-")) == 1 and _left(run, ".labels.parquet."), "label was not killed between staging and renaming"
    cp = fl("label", run, env={"TMPDIR": str(tmp)})
    assert cp.returncode == 0, cp.stderr
    assert _left(tmp, "faultlab-write-") == []
    assert [n for n in os.listdir(run) if n.startswith(".") and n.endswith(".tmp")] == []


@pytest.mark.skipif(not ROOT, reason="needs root (a file of nobody's)")
def test_the_sweep_of_staged_temporaries_keeps_a_live_writers_and_what_is_not_its_own(tmp_path):
    """Of the temporaries staged for labels.parquet, only the regular file of this user
    whose maker is gone is removed: a live maker's (this process), a link, a folder,
    another user's file and one staged for another name stay."""
    def named(pid_start: str, name: str = "labels.parquet") -> Path:
        return tmp_path / f".{name}.{pid_start}0123456789ab.tmp"
    live, gone = named(workdirs.tag()), named("999999999-1-")
    for f in (live, gone, named("999999996-1-"), named("999999995-1-", "whatif.json")):
        f.write_bytes(b"x")
    os.chown(named("999999996-1-"), 65534, 65534)
    named("999999998-1-").symlink_to(tmp_path / "elsewhere")
    named("999999997-1-").mkdir()
    kept = sorted(n for n in os.listdir(tmp_path) if n != gone.name)
    assert workdirs.sweep(tmp_path, ".labels.parquet.", files=".tmp") == [gone.name]
    assert sorted(os.listdir(tmp_path)) == kept


def _maker(name: str, prefix: str) -> int | None:
    m = re.fullmatch(re.escape(prefix) + r"([0-9]+)-[0-9]+-.*", name)
    return int(m.group(1)) if m else None


def test_a_killed_image_builds_debootstrap_folder_is_removed_by_the_next_build(tmp_path):
    cache, tmp = tmp_path / "cache", tmp_path / "tmp"
    tmp.mkdir()
    env = {"FAULTLAB_CACHE_DIR": str(cache)}
    pid = _killed(KILLED_IN_DEBOOTSTRAP, tmp, env=env)
    [killed] = _left(cache, "faultlab-rootfs-")
    assert _maker(killed, "faultlab-rootfs-") == pid, f"{killed} is not named for its maker"
    live = Path(workdirs.make(cache, "faultlab-rootfs-")).name  # this process's: alive
    cp = subprocess.run([sys.executable, "-P", "-c", FAILED_DEBOOTSTRAP], capture_output=True, text=True, timeout=120,
                        env={**os.environ, "TMPDIR": str(tmp), **env})
    assert cp.returncode == 0, cp.stderr[-1500:]
    assert _left(cache, "faultlab-rootfs-") == [live]


def test_a_killed_chaos_runs_state_folder_is_removed_by_the_next_run(tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    pid = _killed(KILLED_IN_CHAOS, tmp)
    [killed] = _left(tmp, "faultlab-chaos-")
    assert _maker(killed, "faultlab-chaos-") == pid, f"{killed} is not named for its maker"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    mine = chaos.state_folder()  # what run_chaos starts with
    assert _left(tmp, "faultlab-chaos-") == [mine.name]
    mine.rmdir()
