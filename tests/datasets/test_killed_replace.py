"""A ``dataset build --force`` (and so a ``dataset relabel``, which rebuilds its
dataset that way) SIGKILLed while it replaces the old dataset leaves one whole dataset
at its name, the old or the new, never the old one half removed: the new one waits
hidden in a ``.NAME.building`` folder, which the next build removed first, so a kill inside
the old one's removal lost both (and a relabel's runs live only in its dataset).

The old dataset here holds 20,000 empty folders beyond its files, so that removing it
takes a while; the build is killed as soon as one of them is gone.
"""

from __future__ import annotations

import json
import os
import subprocess

from tests.helpers import FL, fl, wait_for

#: folders the old dataset holds beyond its manifest (fewer than ext4 counts as links)
FOLDERS = 20_000


def test_a_build_killed_while_it_replaces_a_dataset_leaves_the_dataset_whole(tmp_path, two_runs):
    out = tmp_path / "out"
    cp = fl("dataset", "build", *two_runs, "--name", "ds", "--out", out, "--description", "old")
    assert cp.returncode == 0, cp.stderr
    many = out / "ds" / "many"
    many.mkdir()
    for i in range(FOLDERS):
        (many / str(i)).mkdir()
    fd = os.open(many, os.O_RDONLY | os.O_DIRECTORY)  # the folder wherever it is moved
    try:
        proc = subprocess.Popen([*FL, "dataset", "build", *two_runs, "--name", "ds", "--out", str(out), "--force",
                                 "--description", "new"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            removing = wait_for(lambda: os.fstat(fd).st_nlink < FOLDERS + 2, timeout=180, step=0.001)
        finally:
            proc.kill()
            proc.wait()
    finally:
        os.close(fd)
    assert removing, "the build never removed the old dataset"
    cp = fl("dataset", "verify", out / "ds")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert json.loads((out / "ds" / "build.json").read_text())["description"] == "new"
    cp = fl("dataset", "build", *two_runs, "--name", "ds", "--out", out, "--force", "--description", "newer")
    assert cp.returncode == 0, cp.stderr
    assert sorted(os.listdir(out)) == ["ds"]
