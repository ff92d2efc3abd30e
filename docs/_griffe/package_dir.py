"""A griffe extension: the subpackages that pyproject.toml maps to other folders.

faultlab's ``[tool.setuptools] package-dir`` installs ``./injectors`` as
``faultlab.injectors`` (and labeler, benchmarks alike). griffe reads a package from
its own folder only, so without this the API pages could not name
``faultlab.injectors``; the mapping is read from pyproject.toml, its one place.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parents[2]


def mapped_packages(root: Path = ROOT) -> dict[str, Path]:
    """Each mapped subpackage's dotted name and folder, from pyproject.toml (a folder
    without ``__init__.py`` is package data, e.g. ``faultlab.published``: no API)."""
    conf = tomllib.loads((root / "pyproject.toml").read_text())
    dirs = conf["tool"]["setuptools"]["package-dir"]
    return {name: root / folder for name, folder in dirs.items() if "." in name and (root / folder / "__init__.py").is_file()}


def _visit_folder(name: str, folder: Path, parent: griffe.Module, loader: griffe.GriffeLoader) -> None:
    """Attach the package in ``folder`` and its modules under ``parent`` as ``name``."""
    opts = {
        "extensions": loader.extensions,
        "docstring_parser": loader.docstring_parser,
        "docstring_options": loader.docstring_options,
        "lines_collection": loader.lines_collection,
        "modules_collection": loader.modules_collection,
    }
    init = folder / "__init__.py"
    pkg = griffe.visit(name, init, init.read_text(), parent=parent, **opts)
    parent.set_member(name, pkg)
    for path in sorted(folder.glob("*.py")):
        if path.name != "__init__.py":
            pkg.set_member(path.stem, griffe.visit(path.stem, path, path.read_text(), parent=pkg, **opts))


class PackageDir(griffe.Extension):
    """Loads the mapped subpackages into the top-level package when it is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        for dotted, folder in mapped_packages().items():
            top, _, name = dotted.partition(".")
            if top == pkg.name and "." not in name and name not in pkg.members:
                _visit_folder(name, folder, pkg, loader)
