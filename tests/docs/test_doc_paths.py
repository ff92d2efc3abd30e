"""Every repository file or folder that README.md or a page of docs/ names, in prose,
a code span or a code block, exists: a path that starts at a top-level entry of the
repository (``faultlab/report/html.py``, ``tests/docs/``, ``datasets/faultlab-hw-v1``)
and is not a pattern (``datasets/scores-*.json``, ``examples/x-{a,b}.yaml``), a
placeholder (``datasets/NAME``) or an image tag (``faultlab/node:bookworm``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the top-level entries a repo-relative path starts with
TOPS = (".ci", "benchmarks", "datasets", "docs", "examples", "faultlab", "injectors", "labeler", "perf", "tests",
        "README.md", "mkdocs.yml", "pyproject.toml")
#: a path at a word boundary (not inside a longer path or a URL), and the character after it
PATH = re.compile(r"(?<![\w/.\-~])((?:%s)(?:/[\w.\-]+)*/?)(.?)" % "|".join(re.escape(t) for t in TOPS))
#: an upper-case word in a path is a placeholder (``NAME``, ``RUN_ID``) unless it is
#: one of these real file names
REAL_CAPS = {"README", "MANIFEST", "LICENSE", "CHANGELOG"}
CAPS = re.compile(r"(?<![A-Za-z0-9])[A-Z][A-Z0-9_]+(?![a-z0-9])")
#: named as files a reader would create, not files of the repository
HYPOTHETICAL = {"injectors/cpu_nice.py": "docs/fault-types.md: where a reader's own new fault type would go"}


def named_paths(text: str) -> set[str]:
    """The repo-relative paths ``text`` names, patterns and placeholders left out."""
    out = set()
    for m in PATH.finditer(text):
        path, after = m.group(1).rstrip(".,;:)"), m.group(2)
        if after in ("*", "{", ":", "<") and m.group(1) == path:
            continue  # a glob, a brace pattern, an image tag, a placeholder
        if set(CAPS.findall(path)) - REAL_CAPS:
            continue  # datasets/NAME, datasets/scores-NAME.json
        out.add(path)
    return out


def test_every_named_repository_path_exists():
    missing = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for p in sorted(named_paths(md.read_text())):
            if p not in HYPOTHETICAL and not (ROOT / p).exists() and not (md.parent / p).exists():
                missing.append(f"{md.relative_to(ROOT)}: {p}")
    assert not missing, "docs name files the repository lacks: " + ", ".join(missing)


def test_path_finder_skips_patterns_and_placeholders():
    text = ("see `faultlab/report/html.py`, tests/nothing_here.py. `datasets/scores-*.json` "
            "examples/sweep-{a,b}.yaml datasets/NAME datasets/scores-NAME.json faultlab/node:bookworm "
            "https://x.org/docs/a.md datasets/x/MANIFEST.sha256")
    assert named_paths(text) == {"faultlab/report/html.py", "tests/nothing_here.py", "datasets/x/MANIFEST.sha256"}
