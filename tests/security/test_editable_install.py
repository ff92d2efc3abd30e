"""An editable install (``pip install -e .``, as the README installs faultlab) puts no
relative entry on ``sys.path``. setuptools' editable finder appends the relative name
``__editable__.faultlab-VERSION.finder.__path_hook__`` to ``sys.path`` when the
project has a namespace package (a package folder with no ``__init__.py``); Python
resolves a relative entry in the working folder, so a folder of that name there,
holding ``faultlab/``, ran instead of faultlab for every root command started there.

Each package of pyproject.toml has its ``__init__.py``; and an editable install of a
copy of the checkout's packages into a fresh venv, run as ``faultlab --help`` from a
folder of nobody's holding such a ``faultlab/`` for every relative entry its
``sys.path`` has, runs faultlab and nothing of nobody's.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tomllib

import pytest

from tests.helpers import REPO, ROOT, give_to_nobody

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
#: what nobody's stand-in faultlab does, imported: write the marker file, then stop
FAKE = "import os\nos.system('id > {marker}')\nraise SystemExit('not faultlab')\n"


def _package_folder(pkg: str):
    """The checkout folder of import package ``pkg`` (pyproject's package-dir)."""
    dirs = SETUPTOOLS["package-dir"]
    parts = pkg.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in dirs:
            return REPO.joinpath(dirs[".".join(parts[:i])], *parts[i:])
    return REPO.joinpath(*parts)


def test_every_package_has_its_init_so_no_namespace_package_is_installed():
    missing = [p for p in SETUPTOOLS["packages"] if not (_package_folder(p) / "__init__.py").is_file()]
    assert not missing, f"namespace packages (an editable install puts a relative entry on sys.path): {missing}"


def _setuptools_version(folder: str) -> tuple[int, ...]:
    """The version of the setuptools in ``folder`` ((0,): none): the build needs the
    one pyproject.toml asks for, so the folder holding the newest goes first."""
    for dist in importlib.metadata.distributions(path=[folder]):
        if dist.metadata["Name"] == "setuptools":
            return tuple(int(x) for x in dist.version.split(".")[:2] if x.isdigit())
    return (0,)


def run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=240, **kw)


@pytest.mark.skipif(not ROOT or not shutil.which("setpriv"), reason="needs root (a folder owned by nobody)")
def test_an_editable_install_run_in_another_users_folder_imports_nothing_of_theirs(tmp_path, nobody_dir):
    src = tmp_path / "src"
    src.mkdir()
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / f, src / f)
    for folder in set(SETUPTOOLS["package-dir"].values()):  # the code only (the datasets' data left out)
        shutil.copytree(REPO / folder, src / folder, ignore=lambda d, names: [n for n in names if n == "__pycache__" or (
            os.path.isfile(os.path.join(d, n)) and not n.endswith((".py", ".j2")))])
    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", "--without-pip", venv]).returncode == 0
    py = venv / "bin" / "python"
    purelib = run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    deps = dict.fromkeys(p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p))
    (tmp_path / "deps.pth").write_text("\n".join(sorted(deps, key=_setuptools_version, reverse=True)) + "\n")
    os.replace(tmp_path / "deps.pth", os.path.join(purelib, "zz-test-deps.pth"))  # the test interpreter's packages
    p = run([sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index", "--no-build-isolation",
             "-q", "-e", src])
    assert p.returncode == 0, p.stderr[-2000:]

    probe = "import json, os, sys; print(json.dumps([p for p in sys.path if not os.path.isabs(p)]))"
    relative = json.loads(run([py, "-P", "-c", probe], cwd=nobody_dir).stdout)
    marker = tmp_path / "imported-by"
    for entry in relative or ["__editable__.faultlab-0.1.0.finder.__path_hook__"]:
        fake = nobody_dir / entry / "faultlab"
        fake.mkdir(parents=True)
        (fake / "__init__.py").write_text(FAKE.format(marker=marker))
    give_to_nobody(nobody_dir)
    p = run([venv / "bin" / "faultlab", "--help"], cwd=nobody_dir)
    assert not marker.exists(), f"nobody's faultlab ran: {marker.read_text()}"
    assert p.returncode == 0 and "Usage" in p.stdout, p.stderr[-2000:]
    assert relative == []
