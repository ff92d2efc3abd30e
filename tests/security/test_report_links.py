"""A folder of runs that someone hands root names its runs as it likes: the page of
that folder links each run's card to the run's own page, in the run's own folder,
whatever the folder's name. A name is one path component, so it may hold ``:``,
``#`` or ``?``: written into the link as it is, ``https:evil.example`` linked the
card to https://evil.example/report.html, ``javascript:alert(1)`` made a script link
(the page's Content-Security-Policy refuses to run it), and ``a#b`` pointed at
another file.
"""

from __future__ import annotations

import re
import shutil
from html import unescape
from urllib.parse import urljoin

import pytest

from faultlab.report.html import write_report
from faultlab.report.synthetic import make_run

NAMES = ["https:evil.example", "javascript:alert(1)", "a#b?c=1", "plain"]


@pytest.fixture(scope="module")
def folder_of_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    first = make_run(root / NAMES[0], ranks=2, duration_s=10)
    for name in NAMES[1:]:
        shutil.copytree(first, root / name)
    for name in NAMES:
        (root / name / "report.html").write_text("<p>a run's page</p>")
    return root


def test_each_run_card_links_to_the_runs_own_page_whatever_its_folder_is_named(folder_of_runs):
    page = write_report(folder_of_runs)
    links = [unescape(h) for h in re.findall(r'<a href="([^"]*)"', page.read_text())]
    assert sorted(urljoin(page.as_uri(), h) for h in links) == sorted((folder_of_runs / n / "report.html").as_uri() for n in NAMES), links
