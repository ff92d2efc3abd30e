"""Root imports a public trace folder someone else handed over (``faultlab label
--import``, ``faultlab dataset build --import``) reading only the folder's own regular
files: no link at any name below the folder, no FIFO, no device.

The other user is ``nobody`` (uid 65534, ``setpriv``) owning a copy of the PAI
mini-batch trace under the sticky ``/tmp``. They replace its ``LICENSE`` (copied into
the dataset's ``upstream/``) with a link to a root-only file holding a marker, or add
a ``job_*.csv`` that is a FIFO or a link to ``/dev/zero``. Root's real commands must
refuse in one line naming the file, without waiting on the FIFO, and the marker must
reach no file of the output.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.helpers import PUBLIC, ROOT, fl, give_to_nobody, nobody_sh

MARKER = "ROOT-PRIVATE-LICENSE-7319"
PAI = PUBLIC / "alibaba-pai-minibatch"
pytestmark = [pytest.mark.skipif(not ROOT or not shutil.which("setpriv"), reason="needs root (to act as nobody) and setpriv"),
              pytest.mark.skipif(not PAI.is_dir(), reason=f"the public PAI trace is not at {PAI}")]


@pytest.fixture
def trace(nobody_dir) -> Path:
    t = nobody_dir / "trace"
    shutil.copytree(PAI, t)
    for p in [t, *t.iterdir()]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    give_to_nobody(t)
    return t


def test_a_linked_license_is_not_copied_into_the_dataset(trace, tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    (secret / "notes.txt").write_text(MARKER + "\n")
    os.chmod(secret / "notes.txt", 0o600)
    nobody_sh('rm -f "$1/LICENSE" && ln -s "$2" "$1/LICENSE"', trace, secret / "notes.txt")
    out = tmp_path / "out"
    cp = fl("dataset", "build", "--import", "pai-minibatch", trace, "--name", "pai", "--out", out)
    err = (cp.stdout + cp.stderr).strip().splitlines()
    assert cp.returncode == 2 and len(err) == 1 and "LICENSE" in err[0] and "symlink" in err[0], (cp.returncode, cp.stdout[-400:], cp.stderr[-800:])
    assert not [p for p in out.rglob("*") if p.is_file() and MARKER.encode() in p.read_bytes()]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_fifo_or_device_data_file_is_refused_unread(trace, tmp_path, kind):
    make = 'mkfifo "$1/job_9_norm.csv"' if kind == "fifo" else 'ln -s /dev/zero "$1/job_9_norm.csv"'
    nobody_sh(make, trace)
    cp = fl("label", "--import", "pai-minibatch", trace, "--out", tmp_path / "labels", timeout=60)
    err = (cp.stdout + cp.stderr).strip().splitlines()
    assert cp.returncode == 2 and len(err) == 1 and "job_9_norm.csv" in err[0], (cp.returncode, cp.stdout[-400:], cp.stderr[-800:])
