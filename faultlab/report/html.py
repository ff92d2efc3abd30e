"""The HTML report: one self-contained page (jinja2 template, plots as base64 PNG
``data:`` URIs, inline CSS, no script, nothing loaded from the network).

Four inputs, told apart by what the path holds:

- a run directory (``steps.parquet`` or ``telemetry/``): the run's page;
- a folder of runs (a campaign's ``--out``, a ``faultlab run --repeat`` folder) or a
  dataset folder (``data/steps/run=ID/``; a published dataset also by its name): a
  thumbnail per run and the score table, each figure with a bootstrap 95% CI over runs;
- a scores JSON file (``metrics.json``, or what ``faultlab score`` writes): the score
  table and bars;
- a ``leaderboard.json``: the page ``faultlab leaderboard --out`` writes beside it.
"""

from __future__ import annotations

import base64
import json
import math
import os
import sys
import time
from pathlib import Path
from urllib.parse import quote

import jinja2
import numpy as np
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markupsafe import Markup

from faultlab import inputfile, safefs, schema
from faultlab.datasets import manifest, registry
from faultlab.datasets.card import CARD_BYTES
from faultlab.datasets.layout import Dataset
from faultlab.errors import BadInput, printable
from faultlab.report import plots
from faultlab.report.data import RunData, is_run_dir, load_run
from faultlab.scoring.leaderboard.compute import FORMAT as LEADERBOARD_FORMAT, Board
from faultlab.scoring.leaderboard.html import html as leaderboard_html
from faultlab.scoring import runmetrics
from faultlab.scoring.leaderboard.verify import load_scores
from faultlab.scoring.table import metric_title
from faultlab.steps import unix_time

SCORE_COLUMNS = ["window_precision", "window_recall", "window_f1", "window_mcc", "window_f1_point_adjusted", "window_recall_point_adjusted", "event_precision", "event_recall", "event_f1", "range_f1", "vus_pr", "acc_at_1", "latency_median_s", "precision", "recall", "f1", "mcc"]


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("faultlab.report", "templates"),
                              autoescape=jinja2.select_autoescape(["html", "j2"]), undefined=jinja2.StrictUndefined)


def data_uri(png: bytes | None) -> str | None:
    return None if png is None else "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def figure(plot: plots.Plot | None) -> dict | None:
    """What a template needs of a plot: ``src`` (a data: URI) and ``axes`` (its axis
    titles as JSON, the ``data-axes`` attribute); None for no plot."""
    return None if plot is None else {"src": data_uri(plot.png), "axes": json.dumps(plot.axes)}


def fmt(v, digits: int = 3) -> str:
    """A table cell: numbers rounded, NaN/None as '-'."""
    if v is None:
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return "-" if not math.isfinite(v) else f"{v:.{digits}f}"
    return str(v)


def write_report(path: str | Path, out: str | Path | None = None) -> Path:
    """Render the report of ``path`` (run directory, folder of runs, dataset folder or
    the name of a published one (:func:`faultlab.datasets.registry.find`), a scores JSON
    file or a leaderboard.json) into ``out`` (default: ``path/report.html`` for a
    folder, ``./NAME-report.html`` for a dataset, ``PATH.html`` beside a JSON file).
    Returns the path written.

    Raises BadInput (field ``PATH``) when ``path`` is none of those, and BadInput
    naming the file when one of its files cannot be read; OSError when ``out``
    cannot be written, UntrustedPath when a folder on its path is a symlink. The page
    is written with no link followed (``safefs.write_file_nofollow``: a fresh
    temporary in ``out``'s folder, renamed over it).
    """
    p = registry.published(path) or Path(path)  # a published name over a folder of the working folder
    if p.exists() and not p.is_dir():  # a scores file; a FIFO or device is refused unread (faultlab.inputfile)
        html, default = render_scores_file(p), p.with_suffix(".html")
    elif is_run_dir(p):
        html, default = render_run(load_run(p)), p / "report.html"
    elif p.is_dir() and (found := find_runs(p))[0]:
        # a dataset's page goes to the current folder: a file inside it would break its MANIFEST.sha256
        for note in found[1]:
            print(f"faultlab: note: {p}/{note}", file=sys.stderr)
        html, default = render_collection(p, found[0], found[1]), Path(f"{p.name}-report.html") if registry.is_dataset(p) else p / "report.html"
    else:
        what = "does not exist" if not p.exists() else "holds no run directory, dataset or scores file"
        raise BadInput(f"{p} {what}", field="PATH", fix="give a run directory, a folder of runs, a dataset folder or name, a scores JSON file or a leaderboard.json")
    target = Path(out) if out is not None else default
    safefs.write_file_nofollow(target, html.encode("utf-8"), 0o644)
    return target


# -- one run ---------------------------------------------------------------------------
def render_run(run: RunData) -> str:
    """The HTML page of one run."""
    t = time.perf_counter()
    timeline, binsize = plots.timeline(run)
    figures = [
        {"id": "timeline", "title": "Step and compute time per rank",
         "plot": figure(timeline),
         "caption": "Per-rank step time (all ranks wait for the slowest, so these lines coincide) and compute time "
                    "(local work: a straggler's line rises alone); bold: rolling median over 15 steps, faint: every step. Shaded: injection windows, named type @ node. "
                    "Lanes: injected faults, labels colored by source with their slowdown, detector alarms in red."
                    + (f" Lines show the maximum per {binsize} steps." if binsize > 1 else "")},
        {"id": "whatif", "title": "What-if slowdown", "plot": figure(plots.whatif(run)),
         "caption": "Left: cumulative actual job time minus the job time with every straggler made ideal (its compute at "
                    "its peer group's median; OSDI'25 what-if analysis): the time stragglers cost the job. A job-wide slowdown "
                    "such as a slow link is no straggler and costs nothing here. Right: S_w per rank, drawn as the share of "
                    "job time that making rank w ideal removes, (S_w - 1) x 100 %, from a baseline of 0 % (S_w = 1: no slowdown) "
                    "on an axis reaching at least 5 %."},
        {"id": "host", "title": "Host metrics per node", "plot": figure(plots.host_metrics(run)),
         "caption": "CPU utilization, NIC receive (solid) and transmit (dashed, triangles) rate and TCP round-trip time to each "
                    "peer node, sampled once a second; each node's own faults shaded."},
    ]
    figures = [f for f in figures if f["plot"]]
    score_rows = runmetrics.rows_of(run.metrics) or []
    ctx = {
        "title": f"faultlab run {run.run_id}",
        "run": _run_summary(run),
        "notes": run.notes,
        "figures": figures,
        "faults": _fault_rows(run),
        "labels": _label_rows(run),
        "alarms": _alarm_rows(run),
        "scores": _score_table(score_rows),
        "scores_about": _scores_about(run.metrics),
        "whatif": _whatif_rows(run),
        "meta": [(k, fmt(v)) for k, v in sorted(run.meta.items()) if not isinstance(v, (dict, list))],
        "render_s": None,
    }
    ctx["render_s"] = f"{time.perf_counter() - t:.1f}"
    return _env().get_template("run.html.j2").render(**ctx)


def _scores_about(doc) -> str | None:
    """What a run's metrics.json was scored with (:mod:`faultlab.scoring.runmetrics`),
    as one line; None for a bare list of rows, which does not say."""
    if not runmetrics.is_document(doc):
        return None
    p = runmetrics.provenance_of(doc)
    params = ", ".join(f"{x['detector']} {x['params']}" for x in p if x["params"] != "defaults") or "defaults"
    return (f"scored on this run: window {p[0]['window'] if p else '-'}, {doc.get('mode', '-')}; parameters: {params}; "
            f"CI {doc.get('ci_note', '')}")


def _run_summary(run: RunData) -> dict:
    s = run.steps
    dur = float((s["t_start"] + s["step_s"]).max() - run.t0)
    started = unix_time(run.meta.get("started_ts"))  # whoever wrote meta.json's: 1e400 is no time to print
    return {
        "id": run.run_id, "path": str(run.path), "ranks": len(run.ranks), "nodes": ", ".join(run.nodes),
        "steps": int(s["step"].nunique()), "duration": f"{dur:.1f} s", "median_step": f"{s['step_s'].median() * 1e3:.1f} ms",
        "t0": _utc(run.t0), "complete": bool(run.meta.get("complete", False)),
        "started": f"{_utc(started)} ({_rel(run, started)})" if started is not None else None,
        "faults": len(run.injections), "labels": len(run.labels), "alarms": len(run.alarms),
    }


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _rel(run: RunData, ts) -> str:
    """``+12.3s`` (or ``-7.1s`` before the time origin); ``-`` for no time."""
    return "-" if ts is None or (isinstance(ts, float) and not math.isfinite(ts)) else f"{run.rel(ts):+.1f}s"


def _fault_rows(run: RunData) -> list[dict]:
    rows = []
    for r in run.injections.itertuples():
        rows.append({"fault": r.fault_id, "type": r.fault_type, "node": r.node, "target": r.target,
                     "start": _rel(run, r.start_ts), "end": _rel(run, r.end_ts), "params": r.params,
                     "verified": fmt(r.verified), "status": r.status, "color": plots.FAULT_COLORS.get(r.fault_type, "#999")})
    return rows


def _label_rows(run: RunData) -> list[dict]:
    rows = []
    for r in run.labels.sort_values("start_ts").itertuples():
        rows.append({"component": r.component, "start": _rel(run, r.start_ts), "end": _rel(run, r.end_ts),
                     "steps": f"{r.start_step}-{r.end_step}", "slowdown": f"{r.slowdown:.2f}x", "views": r.views,
                     "confidence": fmt(r.confidence, 2), "source": r.source, "cause": r.cause, "fault": r.fault_id if isinstance(r.fault_id, str) else "-"})
    return rows


def _alarm_rows(run: RunData) -> list[dict]:
    return [{"component": r.component, "start": _rel(run, r.start_ts), "end": _rel(run, r.end_ts), "score": fmt(r.score)}
            for r in run.alarms.sort_values("start_ts").itertuples()]


def _whatif_rows(run: RunData) -> list[tuple[str, str]]:
    w = run.whatif or {}
    rows = [("S (job)", fmt(w.get("slowdown")))]
    rows += [(f"S_w {k}", fmt(v)) for k, v in (w.get("per_rank") or {}).items()]
    if "actual_s" in w:
        rows.append(("actual / simulated job time", f"{fmt(w.get('actual_s'), 1)} s / {fmt(w.get('simulated_s'), 1)} s"))
    return rows if w else []


def _score_table(rows: list[dict], label: str = "detector") -> dict | None:
    """The template's score table of ``rows`` (flat rows: ``detector``, METRIC,
    ``METRIC_ci``, ``n_runs`` or ``runs``; a row of one run reads ``CI n/a: 1 run``): columns in :data:`SCORE_COLUMNS` order, titled by
    :func:`faultlab.scoring.table.metric_title` (level, unit; point-adjusted marked
    inflated), and, for detector rows, the window-level bars (of the offline rows
    when rows carry a ``mode``)."""
    rows = [r for r in rows if isinstance(r, dict)]
    if not rows:
        return None
    cols = [c for c in SCORE_COLUMNS if any(c in r for r in rows)]
    extra = [c for c in rows[0] if c not in cols and c != "detector" and not c.endswith("_ci") and isinstance(rows[0][c], (int, float))][:6]
    cols += extra
    body = []
    for r in rows:
        cells = []
        one_run = (r.get("n_runs") if "n_runs" in r else r.get("runs")) == 1
        for c in cols:
            ci = r.get(f"{c}_ci")
            cell = fmt(r.get(c))
            if one_run and ci is not None and cell != "-":
                cell += " (CI n/a: 1 run)"  # a bootstrap over one run has no width: no interval, not certainty
            elif isinstance(ci, (list, tuple)) and len(ci) == 2 and fmt(ci[0]) != "-":
                cell += f" [{fmt(ci[0])}, {fmt(ci[1])}]"
            cells.append(cell)
        body.append({"detector": str(r.get("detector", "-")), "cells": cells})
    return {"label": label, "columns": [{"key": c, "title": metric_title(c), "inflated": c.endswith("_point_adjusted")} for c in cols],
            "rows": body, "bars": figure(plots.score_bars([r for r in rows if r.get("mode", "offline") == "offline"] or rows)) if label == "detector" else None,
            "inflated": any(c.endswith("_point_adjusted") for c in cols)}


# -- a folder of runs, or a dataset ----------------------------------------------------
def find_runs(p: Path) -> tuple[list[Path], list[str]]:
    """The run directories in a folder of runs (children, sorted), or the runs of a
    dataset folder (``data/steps/run=ID``, one per run its splits name, in their
    order), and one note per child of a folder of runs that is a link (``lstat``):
    never followed, so a link another user plants in their folder of runs never puts
    a run they cannot read into the page. Raises BadInput naming a dataset's file that
    is malformed (:class:`faultlab.datasets.layout.Dataset`)."""
    if (p / "data" / "steps").is_dir():
        return [p / "data" / "steps" / f"run={rid}" for rid in Dataset(p, lookup=False).run_ids("all")], []
    runs, notes = [], []
    with os.scandir(p) as it:
        for e in it:
            if e.is_symlink():
                notes.append(f"{printable(e.name, 80)}: a symlink, not followed (a folder of runs is read only through its own folders)")
            elif e.is_dir(follow_symlinks=False) and is_run_dir(Path(e.path)):
                runs.append(Path(e.path))
    return sorted(runs), sorted(notes)


def _dataset_run(ds: Dataset, part: Path) -> RunData:
    """One run of a dataset, read as every reader of a dataset reads it
    (:meth:`faultlab.datasets.layout.Dataset.read_run`: each table checked first)."""
    run = ds.read_run(part.name.split("=", 1)[1])
    if run.steps.empty:
        raise BadInput(f"{part} holds no steps", field=str(part), fix="run faultlab dataset verify")
    return RunData(path=part, run_id=run.run_id, meta={}, steps=run.steps, host=run.host, injections=run.injections,
                   labels=run.labels, alarms=schema.empty("alarms"), whatif=None, metrics=None,
                   t0=float(run.steps["t_start"].min()))


def bootstrap_ci(values, n: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """The 95% percentile-bootstrap CI of the mean of ``values`` (NaN dropped), seeded;
    None for fewer than 2 values."""
    v = np.asarray([x for x in values if isinstance(x, (int, float)) and math.isfinite(x)], dtype=float)
    if len(v) < 2:
        return None
    rng = np.random.default_rng(seed)
    means = rng.choice(v, size=(n, len(v)), replace=True).mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def pooled_scores(per_run: dict[str, list[dict]]) -> list[dict]:
    """Per detector, the mean of each score metric over runs with its bootstrap 95% CI
    (``METRIC_ci``) and the number of runs (``runs``)."""
    by_det: dict[str, list[dict]] = {}
    for rows in per_run.values():
        for r in rows:
            if isinstance(r, dict) and "detector" in r:
                by_det.setdefault(str(r["detector"]), []).append(r)
    out = []
    for det, rows in by_det.items():
        row = {"detector": det, "runs": len(rows)}
        for c in SCORE_COLUMNS:
            vals = [r.get(c) for r in rows if isinstance(r.get(c), (int, float)) and math.isfinite(r.get(c))]
            if vals:
                row[c] = float(np.mean(vals))
                ci = bootstrap_ci(vals)
                if ci:
                    row[f"{c}_ci"] = list(ci)
        out.append(row)
    return out


def render_collection(p: Path, runs: list[Path], notes: list[str] = ()) -> str:
    """The page of a folder of runs or a dataset: a thumbnail per run (with a legend
    of their colours) and the score table. Scores: a ``scores.json`` or
    ``metrics.json`` the folder holds, else a dataset's published scores beside it
    (``scores-NAME.json`` in its parent folder, as ``datasets/`` keeps them), else
    (a folder of runs) the runs' metrics.json pooled with bootstrap 95% CIs over runs.
    A dataset page is checked against its ``MANIFEST.sha256`` first: a dataset whose
    files differ (or that has none) says NOT VERIFIED at the top of the page and on
    stderr. It ends with its whole card (README.md, front matter left out).
    ``notes``: lines shown with the runs that could not be read (children skipped)."""
    dataset = (p / "data" / "steps").is_dir()
    ds = Dataset(p, lookup=False) if dataset else None  # p: the folder write_report resolved (./NAME is "NAME" by now)
    verified = []
    if ds is not None:  # a dataset is one whole: a table that does not fit refuses the page
        ds.check()
        verified = _manifest_notes(p, ds)
        for note in verified:
            print(f"faultlab: note: {note}", file=sys.stderr)
    cards, per_run, problems, types = [], {}, [], set()
    for r in runs:
        try:
            run = _dataset_run(ds, r) if ds is not None else load_run(r)
        except BadInput as e:
            problems.append(f"{r.name}: {e}")
            continue
        if (rows := runmetrics.rows_of(run.metrics)) is not None:
            per_run[run.run_id] = rows
        types |= set(run.injections["fault_type"].astype(str))
        # the folder's name quoted, below this page's folder: a name is anyone's (https:evil.example, a#b)
        link = f"./{quote(r.name)}/report.html" if (r / "report.html").exists() else None
        cards.append({"id": run.run_id, "plot": figure(plots.thumbnail(run)), "link": link,
                      "faults": ", ".join(f"{x.fault_type}@{x.node}" for x in run.injections.itertuples()) or "none",
                      "labels": len(run.labels), "steps": int(run.steps["step"].nunique())})
    if not cards:  # nothing readable: an empty page with exit 0 would hide it
        raise BadInput(f"none of its {len(runs)} run(s) could be read; {problems[0]}", field="PATH",
                       fix="restore or relabel the runs (faultlab label RUN_DIR), or run faultlab dataset verify")
    candidates = [p / "scores.json", p / "metrics.json"] + ([p.parent / f"scores-{p.name}.json"] if dataset else [])
    scores_file = next((f for f in candidates if f.is_file() or f.is_symlink()), None)
    provenance = []
    if scores_file:
        rows, provenance = score_doc(_read_json(scores_file, below=True))
        source = f"read from {scores_file}"
    elif per_run:
        rows, source = pooled_scores(per_run), f"mean of {len(per_run)} runs' metrics.json, bootstrap 95% CI over runs"
    else:
        rows = []
        source = (f"no scores file: score it with faultlab score --dataset {p} --detector NAME --out {p.parent / f'scores-{p.name}.json'}" if dataset
                  else "no run here holds metrics.json (faultlab demo and faultlab score write it)")
    legend = [{"name": t, "color": plots.FAULT_COLORS.get(t, "#999999"), "what": "fault window (shaded)"} for t in sorted(types)]
    legend += [{"name": f"label: {k}", "color": v, "what": "label (mark along the bottom)"} for k, v in plots.SOURCE_COLORS.items()]
    ctx = {"title": f"faultlab {'dataset' if dataset else 'runs'} {p.name}", "path": str(p), "kind": "dataset" if dataset else "folder of runs",
           "cards": cards, "problems": [*verified, *notes, *problems], "scores": _score_table(rows), "scores_source": source,
           "provenance": provenance_view(provenance), "legend": legend, "card": _dataset_card(p) if dataset else None}
    return _env().get_template("collection.html.j2").render(**ctx)


def _dataset_card(p: Path) -> Markup | None:
    """The dataset card (``README.md``) whole as HTML (:func:`card_html`), its YAML
    front matter left out; None when there is none. Read with no link followed and only when a regular file of at
    most :data:`CARD_BYTES` (:func:`faultlab.safefs.read_below`): the dataset may be
    another user's. Raises BadInput (field ``README.md``) naming it otherwise."""
    try:
        text = safefs.read_below(p, "README.md", CARD_BYTES).decode("utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except safefs.UntrustedPath as e:
        raise BadInput(e.reason, field="README.md", fix=e.fix) from None
    except OSError as e:
        raise BadInput(f"{p / 'README.md'} could not be read ({e.strerror or e})", field="README.md", fix="restore the card") from None
    if text.startswith("---"):
        end = text.find("\n---", 3)
        text = text[end + 4:] if end > 0 else text
    return card_html(text.strip())


def card_html(markdown: str) -> Markup:
    """A dataset card's markdown rendered as HTML (CommonMark with tables, by
    markdown-it-py): HTML comments (the leaderboard block's markers) left out, any
    other raw HTML shown escaped as text (the page runs no script and loads
    nothing), each table in a sideways-scrolling box as the page's own tables."""
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    md.add_render_rule("html_block", _raw_html)
    md.add_render_rule("html_inline", _raw_html)
    md.add_render_rule("table_open", lambda self, tokens, idx, options, env: '<div class="scroll"><table>\n')
    md.add_render_rule("table_close", lambda self, tokens, idx, options, env: "</table></div>\n")
    return Markup(md.render(markdown))


def _raw_html(self, tokens, idx, options, env) -> str:
    """markdown-it-py's rule for raw HTML in a card: a comment is left out, anything
    else escaped."""
    raw = tokens[idx].content
    if raw.strip().startswith("<!--") and raw.strip().endswith("-->"):
        return ""
    return escapeHtml(raw)


def _manifest_notes(p: Path, ds: Dataset) -> list[str]:
    """What a dataset's page says of its ``MANIFEST.sha256``: nothing when every
    listed file matches (:func:`faultlab.datasets.manifest.verify`; ``ds``, the dataset
    held open, then reads its parts only as the bytes the manifest names:
    :meth:`faultlab.datasets.layout.Dataset.pin`), else one line
    saying the dataset is not verified and why (no manifest, changed or missing
    files). Raises BadInput naming a listed file that is a link, no regular file or
    too large (never hashed), or a manifest that is not a regular file."""
    try:
        r = manifest.verify(p, ds.fd)
    except BadInput:
        if not (p / manifest.NAME).exists() and not (p / manifest.NAME).is_symlink():
            return [f"NOT VERIFIED: {p} has no {manifest.NAME}; what this page shows may have been changed by anyone"]
        raise
    bad = [f"{len(r[k])} {k} ({', '.join(printable(x, 80) for x in r[k][:3])}{', ...' if len(r[k]) > 3 else ''})" for k in ("changed", "missing") if r[k]]
    if not bad:
        ds.pin(manifest.read(p, ds.fd))  # a page that says nothing of its manifest shows what it vouches for
        return []
    return [f"NOT VERIFIED: files differ from {manifest.NAME}: {'; '.join(bad)}; faultlab dataset verify {p} lists them"]


# -- a scores file ---------------------------------------------------------------------
def _read_json(f: Path, *, below: bool = False):
    """The parsed JSON scores file ``f``: the file the caller named
    (:func:`faultlab.inputfile.read_text`, a link followed), or with ``below`` one
    found in a folder someone else may own (a collection's ``scores.json``), read with
    no link followed (:func:`faultlab.safefs.read_below`); at most
    ``inputfile.JSON_BYTES`` either way. Raises BadInput naming the file."""
    fix = "give a scores JSON file (metrics.json)"
    if below:
        try:
            text = safefs.read_below(f.parent, f.name, inputfile.JSON_BYTES).decode("utf-8", errors="replace")
        except safefs.UntrustedPath as e:
            raise BadInput(e.reason, field=f.name, fix=e.fix) from None
        except OSError as e:
            raise BadInput(f"{f} could not be read ({e.strerror or e})", field=f.name, fix=fix) from None
    else:
        text = inputfile.read_text(f, "PATH", limit=inputfile.JSON_BYTES, fix=fix)
    try:
        return safefs.parse_json(text, str(f))
    except ValueError as e:  # bad or too deeply nested JSON
        raise BadInput(f"{f} could not be read as JSON ({type(e).__name__}: {e})", field="PATH", fix="give a scores JSON file (metrics.json)") from None


def _is_result(d) -> bool:
    """True for one ``faultlab score`` result (ScoreResult.to_dict())."""
    return isinstance(d, dict) and isinstance(d.get("metrics"), dict) and "mode" in d and "detector" in d


def _result_row(res: dict, label: str | None = None) -> dict:
    """The flat score row of one result, ``detector`` = ``LABEL (MODE)``, with its
    ``mode``."""
    row = {"detector": f"{label or res['detector']} ({res['mode']})", "mode": res["mode"], "n_runs": res.get("n_runs")}
    for k, v in res["metrics"].items():
        if isinstance(v, dict):
            row[k], row[f"{k}_ci"] = v.get("value"), v.get("ci")
    return row


def _provenance(res: dict, label: str | None = None) -> dict:
    """What a result was scored on and how: detector (and its spec when the label
    differs), mode, dataset (the source folder's name), split, runs, window, params."""
    st = res.get("settings") or {}
    src = str(res.get("source") or "-")
    params = res.get("params") or {}
    window = st.get("window_s")
    return {"detector": label or res["detector"], "spec": res["detector"], "mode": res.get("mode", "-"),
            "dataset": Path(src).name if src.startswith("/") or "/" in src else src, "source": src,
            "split": res.get("split", "-"), "runs": res.get("n_runs", "-"),
            "window": f"{window:g} s" if isinstance(window, (int, float)) else "-",
            "params": ", ".join(f"{k}={v}" for k, v in params.items()) or "defaults",
            "settings": ", ".join(f"{k}={v}" for k, v in st.items() if k != "window_s") or "-"}


def score_doc(doc) -> tuple[list[dict], list[dict]]:
    """``(rows, provenance)`` of a scores document. Rows: flat score rows (``detector``,
    METRIC, ``METRIC_ci``). Provenance: per scored result, :func:`_provenance` (none
    for a bare list of rows). Shapes read: a run's metrics.json
    (:mod:`faultlab.scoring.runmetrics`, or a bare list of rows); one
    ``faultlab score`` result (``--out``/``--json``); published scores, detector ->
    mode -> result (``datasets/scores-NAME.json``); an object holding rows under
    ``rows``, ``scores``, ``detectors`` or ``overall``."""
    if runmetrics.is_document(doc):
        return runmetrics.rows_of(doc), runmetrics.provenance_of(doc)
    if isinstance(doc, list):
        return [r for r in doc if isinstance(r, dict)], []
    if not isinstance(doc, dict):
        return [], []
    if _is_result(doc):
        return [_result_row(doc)], [_provenance(doc)]
    published = [(lab, res) for lab, modes in doc.items() if isinstance(modes, dict) for res in modes.values() if _is_result(res)]
    if published:
        return [_result_row(res, lab) for lab, res in published], [_provenance(res, lab) for lab, res in published]
    for k in ("rows", "scores", "detectors", "overall"):
        if isinstance(doc.get(k), list):
            return [r for r in doc[k] if isinstance(r, dict)], []
        if isinstance(doc.get(k), dict):
            return [{"detector": d, **v} for d, v in doc[k].items() if isinstance(v, dict)], []
    return [], []


#: provenance fields as the page names them
PROVENANCE = (("dataset", "dataset"), ("source", "source"), ("split", "split"), ("mode", "mode"), ("window", "window"),
              ("runs", "runs"), ("params", "parameters"), ("settings", "settings"), ("spec", "detector spec"))


def provenance_view(provenance: list[dict]) -> dict | None:
    """What the results of a scores file were scored on, for the page: ``summary``,
    (name, value) pairs for the fields every result shares (a field that differs
    reads ``per row (table below)``), and a table of ``columns`` (detector, then the
    fields that differ) and ``rows``. None for no provenance."""
    if not provenance:
        return None
    summary, varying = [], []
    for key, name in PROVENANCE:
        vals = list(dict.fromkeys(str(p[key]) for p in provenance))
        if key == "spec" and all(p["spec"] == p["detector"] for p in provenance):
            continue
        if len(vals) == 1:
            summary.append((name, vals[0]))
        else:
            summary.append((name, ", ".join(vals) if key == "mode" else "per row (table below)"))
            varying.append((key, name))
    return {"summary": summary, "columns": ["detector"] + [n for _, n in varying],
            "rows": [[p["detector"]] + [str(p[k]) for k, _ in varying] for p in provenance]}


def render_scores_file(f: Path) -> str:
    """The page of a scores JSON file: what was scored (dataset, split, mode, window,
    parameters), its score table and window-level bars; a leaderboard.json gets the
    page ``faultlab leaderboard --out`` writes.

    Raises BadInput (field ``PATH``) when the file holds no score rows."""
    doc = _read_json(f)
    if isinstance(doc, dict) and doc.get("format") == LEADERBOARD_FORMAT:  # leaderboard.json: the leaderboard's own page
        return leaderboard_html(Board.from_dict(load_scores(f, field="PATH")))
    rows, provenance = score_doc(doc)
    if not rows:
        raise BadInput(f"{f} holds no score rows", field="PATH", fix="give metrics.json of a run, or the output of faultlab score")
    breakdown = []
    if isinstance(doc, dict) and isinstance(doc.get("by"), dict) and doc["by"]:
        # faultlab score: per group (fault type, label source): {"n_labels", "metrics": {name: {"value", "ci"}}}
        grows = []
        for g, d in doc["by"].items():
            r = {"detector": g, "n_labels": (d or {}).get("n_labels")}
            for m, v in ((d or {}).get("metrics") or {}).items():
                if isinstance(v, dict):
                    r[m], r[f"{m}_ci"] = v.get("value"), v.get("ci")
            grows.append(r)
        breakdown.append({"name": f"by {doc.get('by_key') or 'group'}", "table": _score_table(grows, label=str(doc.get("by_key") or "group"))})
    if isinstance(doc, dict) and not provenance:
        for k, v in doc.items():
            if k not in ("rows", "scores", "detectors", "overall", "per_run") and isinstance(v, list) and v and isinstance(v[0], dict):
                breakdown.append({"name": k, "table": _score_table(v)})
    return _env().get_template("scores.html.j2").render(
        title=f"faultlab scores {f.name}", path=str(f), scores=_score_table(rows), breakdown=breakdown,
        provenance=provenance_view(provenance))
