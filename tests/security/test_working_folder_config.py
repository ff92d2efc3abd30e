"""Root never reads a library's configuration from a working folder another user may
write. numba reads ``.numba_config.yaml`` from the working folder; its
``cache_dir`` names where numba loads its cache index from, with pickle. A user who
plants both in their own folder, or in a shared sticky one such as ``/tmp``, would run
code as root when root labels a long run standing there.

The folder is nobody's (or a root-owned 1777 folder holding nobody's files); each
planted index file's pickle writes a marker file. Root walks a series long enough to
run compiled, in a fresh interpreter standing in that folder: no marker may appear,
numba must not be imported, and the values must be the vectorized walk's. From a
trusted folder the walk still runs compiled.

matplotlib reads ``./matplotlibrc`` when imported: the modules that draw root's pages
import it from ``/`` (``faultlab.mplagg``). nobody's ``matplotlibrc`` (a setting, or a
FIFO that would block the import) changes nothing, and the process stands in its own
folder again afterwards.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from faultlab.labeler import stats
from tests.helpers import ROOT, give_to_nobody

pytestmark = pytest.mark.skipif(not ROOT, reason="needs root (folders owned by nobody)")
needs_numba = pytest.mark.skipif(importlib.util.find_spec("numba") is None,
                                 reason="numba is the 'scale' extra: pip install -e '.[scale]'")

#: root's side: a trailing walk of 2**15 steps (compiled where numba may be imported),
#: then whether numba was imported and a digest of the values
WALK = """
import hashlib, sys
import numpy as np
from faultlab.labeler import stats
x = (0.03 + 0.001 * np.random.default_rng(0).standard_normal((2, 1 << 15))).astype(np.float32)
base, sig, flags = stats.trailing_baseline_t(x, window=50, min_valid=10, threshold=1.3, mad_k=4.0, block=5)
print("numba" in sys.modules, hashlib.sha256(base.tobytes() + sig.tobytes() + flags.tobytes()).hexdigest())
"""


class _Marker:
    """A pickle that, loaded, writes ``path`` (who loaded it)."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"id > {self.path}",))


def _plant(folder: Path, marker: Path) -> None:
    """``folder/.numba_config.yaml`` naming ``folder/nc`` as numba's cache, which holds
    an index file for every compiled function of trailingjit, each a marker pickle."""
    src = Path(stats.__file__).with_name("trailingjit.py")
    sub = src.parent
    cache = folder / "nc" / f"{sub.name}_{hashlib.sha1(str(sub).encode()).hexdigest()}"
    cache.mkdir(parents=True)
    (folder / ".numba_config.yaml").write_text(f"cache_dir: {folder / 'nc'}\n")
    lines = src.read_text().splitlines()
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}"
    for i, line in enumerate(lines):
        if line.startswith("@numba.njit"):
            name = re.match(r"def (\w+)", lines[i + 1]).group(1)
            (cache / f"trailingjit.{name}-{i + 1}.{tag}.nbi").write_bytes(pickle.dumps(_Marker(marker)))


def _walk_in(folder: Path) -> tuple[str, str]:
    cp = subprocess.run([sys.executable, "-P", "-c", WALK], cwd=folder, capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout.split(), cp.stderr


@pytest.fixture
def sticky_dir(tmp_path):
    """A root-owned 1777 folder, as /tmp is."""
    d = tmp_path / "sticky"
    d.mkdir()
    os.chmod(d, 0o1777)
    return d


@needs_numba
@pytest.mark.parametrize("where", ["nobodys_folder", "sticky_folder"])
def test_a_numba_config_in_the_working_folder_runs_nothing_as_root(where, nobody_dir, sticky_dir, tmp_path):
    folder = nobody_dir if where == "nobodys_folder" else sticky_dir
    marker = tmp_path / "loaded-by"
    _plant(folder, marker)
    give_to_nobody(folder / "nc")
    os.chown(folder / ".numba_config.yaml", 65534, 65534)
    if folder == nobody_dir:
        give_to_nobody(folder)
    (imported, digest), err = _walk_in(folder)
    assert not marker.exists(), f"a planted numba cache index was loaded: {marker.read_text()}"
    assert imported == "False"
    assert "runs vectorized" in err and str(folder) in err
    trusted = tmp_path / "mine"
    trusted.mkdir()
    (imported_here, digest_here), err_here = _walk_in(trusted)
    assert imported_here == "True" and "runs vectorized" not in err_here, err_here
    assert digest == digest_here


#: root's side: the modules that draw its pages, then matplotlib's settings and where the process stands
DRAW = """
import os
import faultlab.report.plots, faultlab.scoring.leaderboard.html
import matplotlib
print(matplotlib.rcParams["lines.linewidth"], matplotlib.rcParams["savefig.pad_inches"], matplotlib.get_backend(), os.getcwd())
"""


@pytest.mark.parametrize("kind", ["settings", "fifo"])
def test_a_matplotlibrc_in_the_working_folder_changes_nothing(kind, nobody_dir):
    rc = nobody_dir / "matplotlibrc"
    if kind == "fifo":
        os.mkfifo(rc)
    else:
        rc.write_text("lines.linewidth: 0.01\nsavefig.pad_inches: 200\nbackend: pdf\n")
    give_to_nobody(nobody_dir)
    cp = subprocess.run([sys.executable, "-P", "-c", DRAW], cwd=nobody_dir, capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    width, pad, backend, here = cp.stdout.split()
    assert (float(width), float(pad), backend.lower(), here) == (1.5, 0.1, "agg", str(nobody_dir))
