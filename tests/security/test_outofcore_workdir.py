"""Root's out-of-core labeler never makes its memory maps in a folder another user can
swap: the maps are created and opened by path (by Dask workers in other processes),
so a work folder inside another user's run folder could be renamed away by them and
its name linked to a folder of theirs whose ``compute.npy`` links to any file, which
root would truncate and overwrite.

The other user is ``nobody`` (uid 65534, ``setpriv``) owning a run folder under the
sticky ``/tmp``; a loop of theirs watches the run folder for the work folder, moves it
away and links its name to their folder of links to a root-only file (0600 in root's
0700 folder). Root labels the run out of core on an embedded LocalCluster: the file
must be unchanged, the loop must never have seen a work folder, and the labels must be
written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from faultlab.labeler import label_run
from faultlab.report.synthetic import make_run
from tests.helpers import ROOT, give_to_nobody

pytest.importorskip("distributed", reason="dask.distributed is the 'scale' extra: pip install -e '.[scale]'")
pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("setpriv"), reason="needs root (to act as nobody) and setpriv")

VICTIM = "ROOT-ONLY VICTIM FILE\n"
#: nobody's loop: while root labels, swap any work folder that appears in the run folder
SWAP = '''
while [ ! -e "$3" ]; do
  for d in "$1"/.label-*; do
    if [ -d "$d" ] && [ ! -L "$d" ]; then
      mv "$d" "$d.moved" && ln -s "$2" "$d" && echo "$d" >> "$2/swapped"
    fi
  done
done
'''


def test_a_user_cannot_swap_the_out_of_core_work_folder(nobody_dir, tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    victim = secret / "victim.txt"
    victim.write_text(VICTIM)
    os.chmod(victim, 0o600)
    run = nobody_dir / "run"
    shutil.move(make_run(tmp_path / "run", ranks=4, duration_s=20, label=False), run)
    evil = nobody_dir / "evil"
    evil.mkdir()
    for name in ("t_start", "compute", "comm", "step_s", "peer_median"):
        (evil / f"{name}.npy").symlink_to(victim)
    give_to_nobody(nobody_dir)
    stop = nobody_dir / "stop"  # where nobody sees it: root makes it when done
    loop = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", SWAP, "sh",
                             str(run), str(evil), str(stop)])
    try:
        labels = label_run(run, out_of_core=True)
    finally:
        stop.touch()
        try:
            loop.wait(timeout=30)
        finally:
            loop.kill()
    assert victim.read_bytes() == VICTIM.encode()
    assert not (evil / "swapped").exists(), (evil / "swapped").read_text()
    assert (run / "labels.parquet").is_file() and len(labels) > 0
    assert not [p for p in run.iterdir() if p.name.startswith(".label-")]
