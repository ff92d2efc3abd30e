"""A non-editable install of the package finds and scores the published datasets from an
empty folder: the wheel is built from a copy of the checkout (``pip wheel --no-deps``),
installed with pip into a fresh venv, and its ``faultlab`` command run where no
``datasets/`` folder is. Where the public traces are, the copy's ``datasets/`` also holds
the public collections as a developer builds them there: the wheel leaves them out, and
the installed command finds and scores them by name through ``$FAULTLAB_DATASETS``. The venv borrows the dependencies of the interpreter running the tests
(their folders listed in a ``.pth`` file: added to ``sys.path``, their own ``.pth``
files, the checkout's editable-install hook among them, not run), so nothing is
downloaded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.helpers import PUBLIC_COLLECTIONS, REPO, public_sources_present

#: the published dataset this test scores from the installed package, with the split
SCORED = ("faultlab-hw-v2", "test")
#: a public collection this test scores by name through $FAULTLAB_DATASETS, with the split
SCORED_PUBLIC = ("public-st", "all")
#: the most a wheel of code and the published datasets may weigh (bytes): PyPI's default
#: limit on one uploaded file
MAX_WHEEL = 100e6


def run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=240, **kw)


def checkout_copy(dst, public) -> None:
    """The checkout's files (no git, build or cache folders) at ``dst``, with the public
    collections built in ``public`` (a folder, or None) in its ``datasets/``."""
    shutil.copytree(REPO, dst, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", "build", "dist", "public-*"))
    for name in PUBLIC_COLLECTIONS if public else ():
        shutil.copytree(public / name, dst / "datasets" / name)


def score(fl, name: str, split: str, **kw) -> subprocess.CompletedProcess:
    return run([fl, "score", "--detector", "peer-median", "--dataset", name, "--split", split, "--json", "--boot", "0"], **kw)


@pytest.mark.slow
def test_wheel_install_scores_a_published_dataset_by_name_from_an_empty_folder(tmp_path, request):
    public = request.getfixturevalue("public_datasets") if public_sources_present() else None
    checkout_copy(tmp_path / "src", public)
    p = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--check-build-dependencies", "-q", "-w", tmp_path / "wheel", tmp_path / "src"])
    assert p.returncode == 0, p.stderr[-2000:]
    (whl,) = (tmp_path / "wheel").glob("faultlab-*.whl")
    assert whl.stat().st_size <= MAX_WHEEL, whl.stat().st_size
    names = zipfile.ZipFile(whl).namelist()
    published = sorted({n.split("/")[2] for n in names if n.startswith("faultlab/published/") and n.count("/") >= 3})
    assert {"faultlab-hw-v1", "faultlab-sw-v1", "faultlab-hw-v2", "faultlab-sw-v2"} <= set(published)
    assert not [n for n in names if "public-" in n]  # built locally, never shipped (docs/datasets.md)

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
    name, split = SCORED
    assert found[name].startswith(purelib), found[name]  # the installed package's data, not the checkout's
    p = score(fl, name, split, cwd=empty, env=env)
    assert p.returncode == 0, (name, p.stderr[-2000:])
    assert json.loads(p.stdout)["n_runs"] >= 1
    if public:  # a user's build of the public collections, found by name where the user points
        env["FAULTLAB_DATASETS"] = str(public)
        p = run([fl, "dataset", "list", "--json"], cwd=empty, env=env)
        assert p.returncode == 0 and {d["name"] for d in json.loads(p.stdout)} == set(PUBLIC_COLLECTIONS), p.stderr
        p = score(fl, *SCORED_PUBLIC, cwd=empty, env=env)
        assert p.returncode == 0, p.stderr[-2000:]
        assert json.loads(p.stdout)["n_runs"] >= 1
    assert not any(empty.iterdir())  # scoring by name wrote nothing where it ran
