"""docs/architecture.md stays true to the tree: every path named in the first column of
its 'Where each part lives' table exists, and every module of the package is named
somewhere in the document."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PACKAGE_DIRS = ("faultlab", "injectors", "labeler", "benchmarks")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
#: a token that names a path: ends in .py/.md/.yml/.yaml/.j2 or a folder's slash
PATH_LIKE = re.compile(r"^[\w.\-/]+(\.py|\.md|\.ya?ml|\.j2|/)$")

#: package modules the document need not name: __init__ files that only re-export or
#: gather their package's modules (the package's row names the folder).
UNNAMED_OK = {
    "faultlab/__init__.py",
    "faultlab/nodes/__init__.py",
    "faultlab/telemetry/__init__.py",
    "faultlab/scoring/__init__.py",
    "faultlab/datasets/__init__.py",
    "faultlab/report/__init__.py",
    "faultlab/lifecycle/__init__.py",
    "labeler/views/__init__.py",
    "labeler/importers/long/__init__.py",
    "benchmarks/__init__.py",
}


def table_rows() -> list[list[str]]:
    """The cells of each body row of the 'Where each part lives' table."""
    lines = DOC.read_text().splitlines()
    start = lines.index("## Where each part lives")
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("|") and not line.startswith(("| path", "|---")):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def resolve(token: str, bases: list[Path]) -> Path | None:
    """The file or folder ``token`` names, relative to one of ``bases`` (the last added first: the most specific)."""
    for base in reversed(bases):
        p = base / token.rstrip("/")
        if p.exists():
            return p
    return None


def first_column_paths(cell: str) -> list[str]:
    return [t for t in CODE_SPAN.findall(cell) if PATH_LIKE.match(t)]


def test_table_paths_exist():
    missing = []
    for cells in table_rows():
        bases = [ROOT, ROOT / "faultlab"]
        for token in first_column_paths(cells[0]):
            found = resolve(token, bases)
            if found is None:
                missing.append(token)
            elif found.is_file():
                bases.append(found.parent)  # `injectors/gpu.py`, `gpu_clock.py`
    assert not missing, "docs/architecture.md names paths that do not exist:\n" + "\n".join(missing)


def named_files() -> set[Path]:
    """Every file the document names: a path relative to the repository, to faultlab/, to
    a folder its table row names, or to the folder of a file its row names."""
    named = set()
    rows = [" | ".join(cells) for cells in table_rows()] + [DOC.read_text()]
    for row in rows:
        bases = [ROOT, ROOT / "faultlab"]
        for token in CODE_SPAN.findall(row):
            if not PATH_LIKE.match(token):
                continue
            found = resolve(token, bases)
            if found is None:
                continue
            if found.is_dir():
                bases.append(found)
            else:
                named.add(found.resolve())
                bases.append(found.parent)
    return named


def test_every_module_is_named():
    named = named_files()
    unnamed = []
    for d in PACKAGE_DIRS:
        for path in sorted((ROOT / d).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if path.resolve() not in named and rel not in UNNAMED_OK and not _registers_a_fault_type(path):
                unnamed.append(rel)
    assert not unnamed, "modules docs/architecture.md does not name:\n" + "\n".join(unnamed)


def _registers_a_fault_type(path: Path) -> bool:
    """A fault type module (``@register`` in ``injectors/``) is named by the registry's
    row: adding a fault type is its module and its test file (docs/fault-types.md)."""
    return path.parent.name == "injectors" and "\n@register\n" in path.read_text()
