"""A module of the package stays under 800 lines unless its opening docstring says why
it is one idea: it names the marker phrase ``one idea`` (any case)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = ("faultlab", "injectors", "labeler", "benchmarks")
MAX_LINES = 800
MARKER = "one idea"


def package_modules() -> list[Path]:
    return sorted(p for d in PACKAGE_DIRS for p in (ROOT / d).rglob("*.py"))


def test_long_modules_say_why_they_are_one_idea():
    bad = []
    for path in package_modules():
        text = path.read_text()
        n = len(text.splitlines())
        if n <= MAX_LINES:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if MARKER not in " ".join(doc.lower().split()):
            bad.append(f"{path.relative_to(ROOT)}: {n} lines")
    assert not bad, f"modules over {MAX_LINES} lines whose docstring does not say '{MARKER}':\n" + "\n".join(bad)
