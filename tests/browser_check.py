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


#: per element wider than the viewport, or reaching past its right edge, and not
#: inside a box that scrolls sideways: its tag, id, class and extent; per table,
#: whether it sits in such a box with a sticky first column; per plot image, its
#: axis titles (data-axes)
LAYOUT_JS = """(() => {
  const vw = document.documentElement.clientWidth;
  const scrolls = el => { for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX; if (o === 'auto' || o === 'scroll') return true; } return false; };
  const wide = [];
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || (r.left >= -1 && r.right <= vw + 1)) continue;
    if (!scrolls(el)) wide.push(`${el.tagName.toLowerCase()}#${el.id}.${el.className} ${Math.round(r.left)}..${Math.round(r.right)} px`);
  }
  const tables = [...document.querySelectorAll('table')].map(t => {
    const cell = t.querySelector('tr > :first-child');
    return {scroll: scrolls(t), sticky: cell ? getComputedStyle(cell).position === 'sticky' : false};
  });
  const plots = [...document.querySelectorAll('img.plot')].map(i => ({id: i.id, alt: i.alt, axes: i.dataset.axes || ''}));
  return {vw, page_width: document.documentElement.scrollWidth, wide: wide.slice(0, 20), tables, plots,
          text: document.body.innerText};
})()"""


def check_layout(report: Path, widths: tuple[int, ...], shots: Path, stem: str) -> dict[int, dict]:
    """Open ``report`` at each viewport width (CSS px), save a full-page screenshot
    ``shots/STEM-WIDTH.png`` per width and assert: no element wider than the viewport
    outside a sideways-scrolling box, the page no wider than the viewport, every
    table in such a box with its first column sticky, every plot image with at least
    one axes and a non-empty x and y title on each (its ``data-axes``). Returns per
    width what LAYOUT_JS saw."""
    import json

    if chromium_path() is None:
        pytest.fail("chromium is not installed (apt-get install chromium; .ci/run installs it)")
    out = {}
    shots.mkdir(parents=True, exist_ok=True)
    with Browser() as b:
        for w in widths:
            res = b.open(report, width=w)
            (shots / f"{stem}-{w}.png").write_bytes(res["screenshot"])
            lay = b.evaluate(LAYOUT_JS)
            assert lay["vw"] == w, f"viewport {lay['vw']} px, asked for {w}"
            assert lay["wide"] == [], f"{stem} at {w} px: wider than the viewport outside a scroll box: {lay['wide']}"
            assert lay["page_width"] <= w, f"{stem} at {w} px: the page is {lay['page_width']} px wide"
            assert lay["tables"] and all(t["scroll"] and t["sticky"] for t in lay["tables"]), f"{stem}: tables {lay['tables']}"
            assert lay["plots"], f"{stem}: no plot"
            for p in lay["plots"]:
                axes = json.loads(p["axes"] or "[]")
                assert axes and all(a["x"].strip() and a["y"].strip() for a in axes), f"{stem}: plot {p['id'] or p['alt']} axis titles {axes}"
            out[w] = lay
    return out
