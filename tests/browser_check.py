"""The checks a report must pass in a real browser (used by tests/report/test_report.py
and tests/runner/test_demo.py): loaded in headless Chromium, no console error, no
request beyond the page's own file and its ``data:`` images, every image decoded and
not blank."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cdp import Browser, chromium_path, pixel_std

#: grey-level standard deviation below which a rendered image counts as blank (a
#: plot with axes, lines and text is ~40; a single-colour square is 0)
BLANK_STD = 5.0


def check_report(report: Path, screenshot: Path) -> dict:
    """Open ``report`` in Chromium, save a full-page screenshot to ``screenshot`` and
    assert the page is clean; returns what the browser saw (cdp.Browser.open)."""
    if chromium_path() is None:
        pytest.fail("chromium is not installed (apt-get install chromium; .ci/run installs it)")
    with Browser() as b:
        res = b.open(report)
    screenshot.write_bytes(res["screenshot"])
    page = report.resolve().as_uri()
    foreign = [u for u in res["requests"] if u != page and not u.startswith("data:")]
    assert foreign == [], f"the page made network requests: {foreign}"
    assert res["errors"] == [], f"console errors: {res['errors']}"
    assert pixel_std(res["screenshot"]) > BLANK_STD, "the screenshot is blank"
    plots = [i for i in res["images"] if "plot" in i["cls"].split()]
    assert plots, "no plot images on the page"
    for im in plots:
        assert im["complete"] and im["w"] > 100 and im["h"] > 100, f"image {im['id']} did not decode: {im}"
        assert pixel_std(im["png"]) > BLANK_STD, f"image {im['id']} is blank as shown"
    return res
