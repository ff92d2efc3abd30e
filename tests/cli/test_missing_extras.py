"""A backend whose Python package is missing says so at once: in a real venv that
lacks the docker SDK (or paramiko), ``faultlab demo --backend docker`` exits 2 with one
line naming the package and ``pip install 'faultlab[docker]'``, and no dockerd is
started. "At once" is measured as the command's CPU time (under 2 s; its wall time on
a loaded shared machine is the load's), and it never waits for a daemon (a wall time
far below dockerd's 60 s wait)."""

from __future__ import annotations

import re
import resource
import site
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import one_line_error


def venv_without(root: Path, *dists: str) -> Path:
    """The python of a fresh venv (no system site) whose site-packages links every
    installed package of this interpreter but ``dists`` (import names; their
    ``*.dist-info`` too): the packages are really absent there. Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    dest = Path(next((root / "lib").glob("python3*/site-packages")))
    pat = re.compile(rf"^({'|'.join(map(re.escape, dists))})(-[^/]*\.(dist|egg)-info|\.py)?$", re.I)
    for sp in map(Path, site.getsitepackages()):
        for entry in sp.iterdir():
            if not pat.match(entry.name) and not (dest / entry.name).exists():
                (dest / entry.name).symlink_to(entry)
    return root / "bin" / "python"


def _dockerds() -> set[int]:
    out = set()
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and (p / "comm").read_text().strip() == "dockerd":
                out.add(int(p.name))
        except OSError:
            pass
    return out


@pytest.fixture(scope="module")
def python_without_docker(tmp_path_factory) -> Path:
    py = venv_without(tmp_path_factory.mktemp("venv"), "docker", "paramiko")
    cp = subprocess.run([str(py), "-c", "import importlib.util as u, faultlab.cli; print(u.find_spec('docker'), u.find_spec('paramiko'))"],
                        capture_output=True, text=True, timeout=120)
    assert cp.stdout.split() == ["None", "None"], (cp.stdout, cp.stderr)
    return py


@pytest.mark.parametrize("backend,extra", [("docker", "docker"), ("ssh", "docker,ssh")])
def test_demo_refuses_a_backend_whose_package_is_missing(python_without_docker, tmp_path, backend, extra):
    before = _dockerds()
    t, r0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    cp = subprocess.run([str(python_without_docker), "-m", "faultlab.cli", "demo", "--backend", backend, "--out", str(tmp_path / "run")],
                        capture_output=True, text=True, timeout=60, cwd=tmp_path)
    wall, r1 = time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    line = one_line_error(cp, "--backend", "'docker'", f"pip install 'faultlab[{extra}]'")
    assert cpu < 2.0 and wall < 30.0, (cpu, wall, line)
    assert _dockerds() <= before, "a dockerd was started"
    assert not (tmp_path / "run").exists()


def test_testbed_up_and_inventory_refuse_too(python_without_docker, tmp_path):
    cp = subprocess.run([str(python_without_docker), "-m", "faultlab.cli", "testbed", "up", "--backend", "docker", "--nodes", "2"],
                        capture_output=True, text=True, timeout=60)
    one_line_error(cp, "--backend", "pip install 'faultlab[docker]'")
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  a: {address: 10.0.0.1}\n  b: {address: 10.0.0.2}\n")
    cp = subprocess.run([str(python_without_docker), "-m", "faultlab.cli", "run", str(Path(__file__).parents[2] / "examples" / "quickstart.yaml"),
                         "--inventory", str(inv), "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=60)
    one_line_error(cp, "--inventory", "'paramiko'", "pip install 'faultlab[ssh]'")
