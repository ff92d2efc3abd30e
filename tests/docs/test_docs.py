"""The docs hold together: the README stays a front door (at most 200 lines), every
relative link in it and in docs/ names a file that exists, and the reference site
builds with warnings as errors (where the `docs` extra is installed)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 200
#: a markdown link or image: [text](target) / ![alt](target), target without spaces
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _relative_links(path: Path) -> list[str]:
    """The link targets in ``path`` that name a file of the repository (no scheme, no
    bare anchor), with code blocks and code spans left out."""
    text = CODE_SPAN.sub("", FENCE.sub("", path.read_text()))
    targets = [m.group(1) for m in LINK.finditer(text)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_readme_is_at_most_200_lines():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines: move reference text into docs/"


def test_every_relative_link_names_a_file_that_exists():
    broken = []
    for md in _markdown_files():
        for target in _relative_links(md):
            dest = (md.parent / target.split("#", 1)[0]).resolve()
            if not dest.exists():
                broken.append(f"{md.relative_to(ROOT)}: {target}")
    assert not broken, "links to nothing: " + ", ".join(broken)


def test_link_checker_sees_links_and_skips_code(tmp_path):
    md = tmp_path / "x.md"
    md.write_text("[a](docs/a.md#x) ![i](img.png) [w](https://e.org) [h](#top)\n"
                  "`[c](code.md)`\n```sh\n[f](fenced.md)\n```\n")
    assert _relative_links(md) == ["docs/a.md#x", "img.png"]


@pytest.mark.skipif(not (importlib.util.find_spec("mkdocs") and importlib.util.find_spec("mkdocstrings")),
                    reason="mkdocs not installed: pip install -e '.[docs]' to build the reference site")
def test_site_builds_strict(tmp_path):
    """`mkdocs build --strict`: a broken link or anchor, a page left out of the nav, or
    an API page naming an object that is not there fails the build (no ``--quiet``:
    it drops the warnings ``--strict`` counts)."""
    cp = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert (tmp_path / "site" / "api" / "injectors" / "index.html").is_file()
    api = (tmp_path / "site" / "api" / "injectors" / "index.html").read_text()
    assert "FAULT_TYPES" in api and "Injector" in api


def test_the_public_traces_skip_reason_names_a_page_that_exists():
    """A test skipped for want of the public traces points at the page that says where
    they come from; no test points at a README section that moved."""
    from tests.helpers import PUBLIC_DOC, PUBLIC_HINT, REPO, TESTS

    assert (REPO / PUBLIC_DOC).read_text().startswith("# Labeling public traces") and PUBLIC_DOC in PUBLIC_HINT
    stale = [str(p.relative_to(REPO)) for p in TESTS.rglob("*.py") if "(README" + ": " in p.read_text()]  # split: this line is no match
    assert not stale, stale
