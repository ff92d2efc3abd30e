"""The optional Python packages each node backend needs (faultlab's extras), checked
before anything is started: a missing one is one line naming it and its install
command, exit 2, with no daemon, testbed or run folder made."""

from __future__ import annotations

from importlib.util import find_spec

from faultlab.errors import BadInput

#: backend (or node kind) -> (import name, faultlab extra) of each package it needs;
#: an ssh testbed is docker containers reached over SSH, so it needs both
NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "docker": (("docker", "docker"),),
    "ssh": (("docker", "docker"), ("paramiko", "ssh")),
    "inventory": (("paramiko", "ssh"),),
}


def missing(backend: str) -> list[tuple[str, str]]:
    """(import name, extra) of each package ``backend`` needs that is not installed
    (found without importing it)."""
    return [(mod, extra) for mod, extra in NEEDS.get(backend, ()) if find_spec(mod) is None]


def require(backend: str, field: str = "--backend") -> None:
    """Raise BadInput (exit 2, naming ``field``) when a package ``backend`` needs is
    missing: ``the docker backend needs the Python package 'docker' (not installed)
    (pip install 'faultlab[docker]')``. Backends that need none pass."""
    gone = missing(backend)
    if gone:
        pkgs = " and ".join(repr(m) for m, _ in gone)
        extras = ",".join(dict.fromkeys(e for _, e in gone))
        what = "ssh nodes need" if backend == "inventory" else f"the {backend} backend needs"
        raise BadInput(f"{what} the Python package{'s' if len(gone) > 1 else ''} {pkgs} (not installed)", field=field,
                       fix=f"pip install 'faultlab[{extras}]'")
