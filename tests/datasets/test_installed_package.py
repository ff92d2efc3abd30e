"""A non-editable install of the package finds and scores the published datasets from an
empty folder: the wheel is built from the checkout (``pip wheel --no-deps``), installed
with pip into a fresh venv, and its ``faultlab`` command run where no ``datasets/``
folder is. The venv borrows the dependencies of the interpreter running the tests
(their folders listed in a ``.pth`` file: added to ``sys.path``, their own ``.pth``
files, the checkout's editable-install hook among them, not run), so nothing is
downloaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest

from tests.helpers import REPO

#: published datasets this test scores from the installed package, with the split
SCORED = (("faultlab-hw-v1", "test"), ("public-st", "all"))
#: the most a wheel of code and the published datasets may weigh (bytes)
MAX_WHEEL = 40e6


def run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=240, **kw)


@pytest.mark.slow
def test_wheel_install_scores_a_published_dataset_by_name_from_an_empty_folder(tmp_path):
    p = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--check-build-dependencies", "-q", "-w", tmp_path / "wheel", REPO])
    assert p.returncode == 0, p.stderr[-2000:]
    (whl,) = (tmp_path / "wheel").glob("faultlab-*.whl")
    assert whl.stat().st_size <= MAX_WHEEL, whl.stat().st_size
    names = zipfile.ZipFile(whl).namelist()
    published = sorted({n.split("/")[2] for n in names if n.startswith("faultlab/published/") and n.count("/") >= 3})
    assert {"faultlab-hw-v1", "faultlab-sw-v1", "public-pai", "public-perseus-a", "public-st"} <= set(published)

    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", "--without-pip", venv]).returncode == 0
    py = venv / "bin" / "python"
    purelib = run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    deps = dict.fromkeys(p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p))
    (tmp_path / "venv-deps.pth").write_text("\n".join(deps) + "\n")
    os.replace(tmp_path / "venv-deps.pth", os.path.join(purelib, "zz-test-deps.pth"))  # after the venv's own packages
    p = run([sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index", "-q", whl])
    assert p.returncode == 0, p.stderr[-2000:]

    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("FAULTLAB_DATASETS", "PYTHONPATH")}
    fl = venv / "bin" / "faultlab"
    p = run([fl, "dataset", "list", "--json"], cwd=empty, env=env)
    assert p.returncode == 0, p.stderr
    found = {d["name"]: d["path"] for d in json.loads(p.stdout)}
    assert set(published) <= set(found)
    for name, split in SCORED:
        assert found[name].startswith(purelib), found[name]  # the installed package's data, not the checkout's
        p = run([fl, "score", "--detector", "peer-median", "--dataset", name, "--split", split, "--json", "--boot", "0"], cwd=empty, env=env)
        assert p.returncode == 0, (name, p.stderr[-2000:])
        assert json.loads(p.stdout)["n_runs"] >= 1
    assert not any(empty.iterdir())  # scoring by name wrote nothing where it ran
