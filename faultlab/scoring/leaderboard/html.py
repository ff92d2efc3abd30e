"""leaderboard.html: one self-contained page (jinja2 template, inline CSS, plots as
SVG ``data:`` URIs, no script, nothing loaded from the network): per dataset its table
(:mod:`.render`'s cells and marks) and a plot of each detector's window MCC and event
F1 with their 95% CIs, so overlapping intervals are seen at a glance.
"""

from __future__ import annotations

import base64
import io
import json
import math

import jinja2
from markupsafe import Markup, escape

from faultlab import mplagg  # noqa: F401 (first: matplotlib headless, configured by nothing in the working folder)
import matplotlib.pyplot as plt  # noqa: E402

from faultlab.scoring.leaderboard.compute import Board, DatasetBoard  # noqa: E402
from faultlab.scoring.leaderboard.render import LEGEND, row_cells, dataset_title, header  # noqa: E402

#: (metric, panel title, x-axis title) of each panel of a dataset's plot
PLOTTED = (("window_mcc", "window MCC (ranks)", "window-level MCC (-1..1), 95% CI over runs"),
           ("event_f1", "event F1", "event-level F1 (0..1), 95% CI over runs"))
#: the y-axis title of every panel
Y_TITLE = "detector (rank order)"


def _svg_uri(fig) -> tuple[str, str]:
    """``(data URI, axis titles)``: the figure as SVG, and per axes its x and y titles
    as JSON (the page's ``data-axes``, as the run report's plots carry them)."""
    axes = json.dumps([{"x": ax.get_xlabel(), "y": ax.get_ylabel()} for ax in fig.axes if ax.axison])
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    return "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue()).decode("ascii"), axes


def ci_plot(db: DatasetBoard) -> tuple[str, str]:
    """The SVG (data URI) of one dataset and its axis titles (JSON): per panel of
    :data:`PLOTTED`, each detector (rank order, best on top) as its value and 95% CI
    bar; a detector whose figure is undefined is left out of that panel."""
    n = len(db.rows)
    fig, axes = plt.subplots(1, len(PLOTTED), figsize=(4.2 * len(PLOTTED), 0.35 * n + 1.0), sharey=True, squeeze=False)
    ys = list(range(n))[::-1]
    for ax, (key, title, xtitle) in zip(axes[0], PLOTTED):
        for y, r in zip(ys, db.rows):
            m = r.metrics.get(key) or {}
            v, ci = m.get("value"), m.get("ci") or [None, None]
            if v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            lo = v if ci[0] is None or math.isnan(ci[0]) else ci[0]
            hi = v if ci[1] is None or math.isnan(ci[1]) else ci[1]
            ax.errorbar([v], [y], xerr=[[v - lo], [hi - v]], fmt="o", color="#555" if r.detector in ("random", "constant") else "#1f5f8b",
                        capsize=3, ms=4)
        ax.axvline(0.0, color="#aaa", lw=0.8)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xtitle, fontsize=8)
        ax.set_ylabel(Y_TITLE, fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(ys, [r.label for r in db.rows], fontsize=8)
    return _svg_uri(fig)


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("faultlab.scoring.leaderboard", "templates"),
                              autoescape=jinja2.select_autoescape(["html", "j2"]), undefined=jinja2.StrictUndefined)


def html(board: Board) -> str:
    """The page's HTML text (every value another party chose, such as a plugin's name,
    is escaped by the template)."""
    sets = []
    for db in board.datasets:
        plot, axes = ci_plot(db)
        sets.append({"title": dataset_title(db, board.settings), "digest": db.digest or "-",
                     "header": ["detector (rank)"] + header()[2:],
                     "rows": [[f"#{r.rank} {r.label}"] + row_cells(r) for r in db.rows], "plot": plot, "axes": axes})
    return _env().get_template("leaderboard.html.j2").render(legend=_code_spans(LEGEND), settings=board.settings, datasets=sets)


def _code_spans(text: str) -> Markup:
    """``text`` (Markdown with backtick code spans) as HTML: each span a ``<code>``,
    everything escaped."""
    parts = text.split("`")
    return Markup("").join(Markup("<code>{}</code>").format(p) if k % 2 else escape(p) for k, p in enumerate(parts))
