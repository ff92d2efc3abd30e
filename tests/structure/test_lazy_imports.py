"""An import inside a function says why it is lazy: a comment (``#``) on its line or on
the line directly above it (a block of consecutive imports shares the comment above
its first line). A CLI module (``cli.py``) may instead say it once for the whole file,
in a module-level comment containing ``lazy``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = ("faultlab", "injectors", "labeler", "benchmarks")


def package_modules() -> list[Path]:
    return sorted(p for d in PACKAGE_DIRS for p in (ROOT / d).rglob("*.py"))


def function_imports(tree: ast.Module) -> list[int]:
    """Line numbers of the Import/ImportFrom statements inside a function."""
    found = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.update(n.lineno for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return sorted(found)


def says_why(lines: list[str], lineno: int) -> bool:
    """Whether the import at ``lineno`` (1-based) has a comment on its line or above its block."""
    i = lineno - 1
    if "#" in lines[i]:
        return True
    i -= 1
    while i >= 0 and lines[i].strip().startswith(("import ", "from ")) and "#" not in lines[i]:
        i -= 1
    return i >= 0 and lines[i].strip().startswith(("#", "import ", "from ")) and "#" in lines[i]


def cli_says_lazy(lines: list[str]) -> bool:
    return any(line.startswith("#") and "lazy" in line.lower() for line in lines)


def test_function_level_imports_say_why():
    bad = []
    for path in package_modules():
        text = path.read_text()
        lines = text.splitlines()
        if path.name == "cli.py" and cli_says_lazy(lines):
            continue
        for lineno in function_imports(ast.parse(text)):
            if not says_why(lines, lineno):
                bad.append(f"{path.relative_to(ROOT)}:{lineno}: {lines[lineno - 1].strip()}")
    assert not bad, "function-level imports without a comment saying why:\n" + "\n".join(bad)
