"""The report's figures, drawn with matplotlib (Agg backend) and returned as
:class:`Plot`: PNG bytes and the titles of every axes' x and y axis (the page
carries them in a ``data-axes`` attribute, so a browser test can check that no axis
is left untitled).

Every axis title names the metric, its level (rank, job, node; window, event or
component for scores) and its unit. Every time axis is seconds since the run's time
origin (RunData.t0, the first training step). Log axes are labelled in plain numbers
(``600``, not ``6x10^2``). Injection windows are shaded in one color per fault type
and named ``TYPE @ NODE``. A line of more than ``MAX_POINTS`` points is thinned to
the maximum per bin of consecutive steps (a straggler's spikes stay visible; the
caption says so).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass

from faultlab import mplagg  # noqa: F401 (first: matplotlib headless, configured by nothing in the working folder)
import matplotlib.patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import LogFormatter, LogLocator  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from faultlab.injectors import FAULT_TYPES  # noqa: E402
from faultlab.labeler.grid import StepGrid  # noqa: E402
from faultlab.labeler.whatif import simulate_job  # noqa: E402
from faultlab.report.data import RunData  # noqa: E402
from faultlab.scoring.table import metric_title  # noqa: E402

MAX_POINTS = 3000
#: the most nodes the host figure draws (a column each, of three panels) and peers whose
#: RTT one panel draws: the host table names them, and one of 400 rows naming 400 nodes
#: held the report 80 CPU seconds (100 nodes 11), growing faster than the nodes; a
#: testbed has a few. The figure's title says how many were left out
MAX_HOST_NODES = 8
MAX_RTT_PEERS = 16
#: the most bars of each kind (faults, labels, alarms) the lane chart draws, the first
#: by start time: each is a bar and most a text (some 2 ms), and a run's labels table
#: of 200,000 rows (some 2 MB) held the report for minutes. The chart's title says how
#: many were left out; the page's label table lists every label
MAX_LANE_BARS = 2000
#: the most rows (detectors) the score bars draw, the first in the file's order: each
#: is a group of bars and a legend entry (some 6 ms and 150 KB), and a scores file of
#: 4,000 rows (567 KB) took 26 CPU seconds and 785 MB. The title says how many were left
#: out; the page's score table lists every row
MAX_BAR_ROWS = 32
SMOOTH_STEPS = 15  # the bold line: a centered rolling median over this many steps
DPI = 90


class _FaultColors(Mapping):
    """Fault type -> its colour, read from the registry each time (``Injector.color``,
    declared in the type's module), so a type registered later has its own too."""

    def __getitem__(self, name: str) -> str:
        return FAULT_TYPES[name].color

    def __iter__(self):
        return iter(FAULT_TYPES)

    def __len__(self) -> int:
        return len(FAULT_TYPES)


FAULT_COLORS = _FaultColors()
TIME_AXIS = "seconds since the first training step"
#: the score bars: window-level metrics (pooled (component, 10 s window) cells), else
#: component-level ones for rows that have no window figures
WINDOW_BARS = ("window_precision", "window_recall", "window_f1", "window_mcc")
COMPONENT_BARS = ("precision", "recall", "f1", "mcc")
SOURCE_COLORS = {"injected": "#2a9d8f", "observed": "#577590", "injected-unmanifested": "#bbbbbb"}
plt.rcParams.update({"font.size": 8, "axes.titlesize": 9, "axes.grid": True, "grid.alpha": 0.3, "figure.dpi": DPI})


@dataclass
class Plot:
    """One figure: ``png`` (bytes) and ``axes``, per visible axes its ``{"x", "y"}``
    axis titles (an axes sharing x with the one below takes that one's x title)."""

    png: bytes
    axes: list[dict]


def axis_titles(fig) -> list[dict]:
    """Per visible axes of ``fig``, ``{"x": title, "y": title}``; an x title missing
    on an axes is taken from an axes it shares its x axis with."""
    out = []
    for ax in fig.axes:
        if not ax.axison:
            continue
        x = ax.get_xlabel() or next((o.get_xlabel() for o in ax.get_shared_x_axes().get_siblings(ax) if o.get_xlabel()), "")
        out.append({"x": x, "y": ax.get_ylabel()})
    return out


def png(fig) -> Plot:
    """The figure as a :class:`Plot` (PNG bytes and its axis titles); the figure is
    closed."""
    titles = axis_titles(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return Plot(buf.getvalue(), titles)


def plain_log(ax) -> None:
    """Put ``ax``'s y axis on a log scale labelled in plain numbers (``20``, ``600``):
    decades always, the 2..9 multiples when fewer than two decades are shown."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(LogFormatter())
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def thin(x: np.ndarray, y: np.ndarray, n: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray, int]:
    """``x, y`` reduced to at most ``n`` points: per bin of consecutive points, the
    first x and the max y. Returns ``(x, y, bin)``, ``bin`` = points per bin (1 when
    not thinned)."""
    if len(x) <= n:
        return x, y, 1
    b = int(np.ceil(len(x) / n))
    m = len(x) // b * b
    xs = x[:m:b]
    ys = np.nanmax(y[:m].reshape(-1, b), axis=1)
    if m < len(x):
        xs = np.append(xs, x[m])
        ys = np.append(ys, np.nanmax(y[m:]))
    return xs, ys, b


def _fault_name(r) -> str:
    return f"{r.fault_type} @ {r.node}"


def shade_faults(ax, run: RunData, node: str | None = None, names: bool = False) -> None:
    """Shade each injection window on ``ax`` (only those on ``node`` when given)."""
    for r in run.injections.itertuples():
        if node is not None and r.node != node:
            continue
        end = r.end_ts if pd.notna(r.end_ts) else r.start_ts
        ax.axvspan(run.rel(r.start_ts), run.rel(end), color=FAULT_COLORS.get(r.fault_type, "#999999"), alpha=0.18, lw=0)
        if names:
            ax.text(run.rel(r.start_ts), 1.0, " " + _fault_name(r), transform=ax.get_xaxis_transform(), va="bottom",
                    ha="left", fontsize=7, color=FAULT_COLORS.get(r.fault_type, "#555555"), clip_on=False)


def _per_rank(run: RunData, col: str):
    for rank, g in run.steps.groupby("rank", sort=True):
        g = g.sort_values("step")
        yield int(rank), g["node"].iloc[0], (g["t_start"].to_numpy() - run.t0), g[col].to_numpy(dtype=float)


def timeline(run: RunData) -> tuple[Plot, int]:
    """Per-rank step time and compute time over run time (ms), faults shaded and
    named, and a lane chart of faults, labels (with slowdown) and detector alarms.
    Returns ``(png, bin)`` where ``bin`` is the thinning bin (steps per point)."""
    comps = ["job"] + [f"rank:{r}" for r in run.ranks]
    fig, axes = plt.subplots(3, 1, figsize=(11, 7.2), sharex=True, gridspec_kw={"height_ratios": [3, 3, 0.55 * (len(comps) + 1)]})
    binsize = 1
    for ax, col, title in ((axes[0], "step_s", "step time per rank (ms, log scale)"), (axes[1], "compute_s", "compute time per rank (ms, log scale)")):
        for k, (rank, node, x, y) in enumerate(_per_rank(run, col)):
            c = f"C{k % 10}"
            xs, ys, binsize = thin(x, y * 1e3)
            ax.plot(xs, ys, lw=0.5, color=c, alpha=0.3)
            med = pd.Series(y * 1e3).rolling(SMOOTH_STEPS, center=True, min_periods=1).median().to_numpy()
            xm, ym, _ = thin(x, med)
            ax.plot(xm, ym, lw=1.1, color=c, label=f"rank {rank} ({node})")
        ax.set_ylabel(title.replace(", log scale", ""))
        ax.set_title(title, loc="left")
        plain_log(ax)
        shade_faults(ax, run, names=ax is axes[0])
    axes[0].legend(loc="upper right", fontsize=7, ncol=min(4, max(1, len(run.ranks))))
    _lanes(axes[2], run, comps)
    axes[2].set_xlabel(TIME_AXIS)
    fig.tight_layout()
    return png(fig), binsize


def _lanes(ax, run: RunData, comps: list[str]) -> None:
    """One lane per component: labels as bars with their slowdown, alarms as thin
    bars under them; a top lane ``faults`` holds the injection windows."""
    lanes = ["faults"] + comps
    y = {c: len(lanes) - 1 - i for i, c in enumerate(lanes)}
    injections = _first(run.injections, None)
    labels, alarms = _first(run.labels, y), _first(run.alarms, y)
    for r in injections.itertuples():
        end = r.end_ts if pd.notna(r.end_ts) else r.start_ts
        ax.barh(y["faults"], run.rel(end) - run.rel(r.start_ts), left=run.rel(r.start_ts), height=0.6,
                color=FAULT_COLORS.get(r.fault_type, "#999999"), alpha=0.8)
        ax.text(run.rel(r.start_ts), y["faults"], f" {_fault_name(r)}", va="center", fontsize=7)
    for r in labels.itertuples():
        c = SOURCE_COLORS.get(r.source, "#577590")
        ax.barh(y[r.component] + 0.12, max(run.rel(r.end_ts) - run.rel(r.start_ts), 0.05), left=run.rel(r.start_ts),
                height=0.45, color=c, alpha=0.9)
        ax.text(run.rel(r.end_ts), y[r.component] + 0.12, f" {r.slowdown:.2f}x", va="center", fontsize=7)
    for r in alarms.itertuples():
        ax.barh(y[r.component] - 0.28, max(run.rel(r.end_ts) - run.rel(r.start_ts), 0.05), left=run.rel(r.start_ts),
                height=0.16, color="#d62828", alpha=0.9)
    ax.set_yticks([y[c] for c in lanes], lanes)
    ax.set_ylabel("component")
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.grid(axis="y", alpha=0)
    handles = [matplotlib.patches.Patch(color=v, label=f"label: {k}") for k, v in SOURCE_COLORS.items()]
    handles.append(matplotlib.patches.Patch(color="#d62828", label="detector alarm"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.32), fontsize=7, ncol=4, frameon=False)
    left = [f"{n - len(kept)} of {n} {what}" for what, kept, n in (
        ("faults", injections, len(run.injections)), ("labels", labels, _in_lanes(run.labels, y)), ("alarms", alarms, _in_lanes(run.alarms, y)))
        if n > len(kept)]
    ax.set_title("faults, labels (with slowdown) and detector alarms"
                 + (f"; not drawn: {', '.join(left)} (the first {MAX_LANE_BARS} of each by start are)" if left else ""), loc="left")


def _in_lanes(rows: pd.DataFrame, lanes: dict | None) -> int:
    """How many of ``rows`` name a component of ``lanes`` (all of them when None)."""
    return len(rows) if lanes is None else int(rows["component"].astype(str).isin(list(lanes)).sum())


def _first(rows: pd.DataFrame, lanes: dict | None) -> pd.DataFrame:
    """The first :data:`MAX_LANE_BARS` of ``rows`` by ``start_ts`` whose component has a
    lane (all components when ``lanes`` is None)."""
    if lanes is not None:
        rows = rows[rows["component"].astype(str).isin(list(lanes)).to_numpy()]
    if len(rows) <= MAX_LANE_BARS:
        return rows
    return rows.iloc[np.argsort(rows["start_ts"].to_numpy(np.float64), kind="stable")[:MAX_LANE_BARS]]


def whatif(run: RunData) -> Plot | None:
    """The what-if slowdown: cumulative actual job time against the simulated job
    time with every straggler made ideal (OSDI'25 what-if analysis, via
    faultlab.labeler.whatif.simulate_job), and S_w per rank. None without compute
    data."""

    grid = StepGrid.from_steps(run.steps)
    sim = simulate_job(grid)
    ok = ~np.isnan(grid.job_step) & ~np.isnan(sim)
    if not ok.any():
        return None
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 2.8), gridspec_kw={"width_ratios": [2.2, 1]})
    t = grid.t0[ok] - run.t0
    a.plot(t, np.cumsum(grid.job_step[ok] - sim[ok]), color="#2a9d8f")
    shade_faults(a, run)
    a.set_xlabel(TIME_AXIS)
    a.set_ylabel("job time lost to stragglers (s, cumulative)")
    s = (run.whatif or {}).get("slowdown")
    a.set_title(f"what-if slowdown S = {s:.3f}" if isinstance(s, (int, float)) else "what-if slowdown", loc="left")
    per = (run.whatif or {}).get("per_rank") or {}
    if per:
        sw_bars(b, per)
    else:
        b.axis("off")
    fig.tight_layout()
    return png(fig)


def sw_bars(ax, per_rank: dict) -> None:
    """S_w per rank as the percentage of job time that making rank w ideal removes,
    ``(S_w - 1) * 100``, on an axis whose baseline 0 % is S_w = 1 (no slowdown) and
    that reaches at least 5 %: a 1-3 % difference reads as small, as it is. Each bar
    is annotated with its S_w."""
    names = list(per_rank)
    vals = np.array([per_rank[k] if isinstance(per_rank[k], (int, float)) else np.nan for k in names], dtype=float)
    pct = (vals - 1.0) * 100.0
    ax.bar(names, np.nan_to_num(pct), color="#577590")
    ax.axhline(0.0, color="#555555", lw=0.8)
    fin = pct[np.isfinite(pct)]
    top = max(5.0, float(fin.max()) * 1.25) if fin.size else 5.0
    bottom = min(0.0, float(fin.min()) * 1.25) if fin.size else 0.0
    ax.set_ylim(bottom, top)
    for i, v in enumerate(vals):
        ax.text(i, max(0.0, pct[i]) if np.isfinite(v) else 0.0, f"{v:.3f}" if np.isfinite(v) else "-", ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("job time removed (%), 0 = S_w 1.0")
    ax.set_xlabel("rank w (S_w above each bar)")
    ax.set_title("S_w - 1: job slowdown that making rank w ideal removes", loc="left", fontsize=8)
    ax.tick_params(axis="x", labelrotation=45)


def _host_series(series: dict, node: str, metric: str, t0: float):
    h = series.get((node, metric))
    if h is None:
        return np.zeros(0), np.zeros(0)
    h = h.sort_values("ts", kind="mergesort")
    return h["ts"].to_numpy() - t0, h["value"].to_numpy(dtype=float)


#: per host metric: its legend name and line style (NIC rx solid, tx dashed with
#: markers, so the two stay apart where they coincide)
HOST_STYLES = {"cpu_util_pct": ("host CPU", {"ls": "-"}), "proc_cpu_util_pct": ("rank process CPU", {"ls": "--"}),
               "net_rx_bytes_per_s": ("rx (receive)", {"ls": "-", "color": "#1d6fa5"}),
               "net_tx_bytes_per_s": ("tx (transmit)", {"ls": "--", "color": "#e76f51", "marker": "^", "markevery": 0.1, "ms": 3})}


def host_metrics(run: RunData) -> Plot | None:
    """Per node (columns): CPU utilization (%), NIC receive/transmit rate (Mbit/s) and
    the TCP RTT to each peer node (ms); the node's own faults shaded. None without
    host metrics."""
    h = run.host
    if h.empty:
        return None
    every = sorted(h["node"].astype(str).unique())
    peers = sorted(m for m in h["metric"].astype(str).unique() if m.startswith("tcp_rtt_ms:"))
    nodes = every[:MAX_HOST_NODES]
    rows = [("CPU utilization (%)", ["cpu_util_pct", "proc_cpu_util_pct"]), ("NIC rate (Mbit/s)", ["net_rx_bytes_per_s", "net_tx_bytes_per_s"]),
            ("TCP RTT to peer (ms)", peers[:MAX_RTT_PEERS])]
    rows = [r for r in rows if r[1]]
    # each (node, metric) series found once, not by a pass over the table for each
    series = {(str(n), str(m)): g for (n, m), g in h.groupby([h["node"].astype(str), h["metric"].astype(str)], sort=False)}
    fig, axes = plt.subplots(len(rows), len(nodes), figsize=(min(11, 2.9 * len(nodes) + 0.5), 1.9 * len(rows)), sharex=True, squeeze=False)
    for j, node in enumerate(nodes):
        for i, (title, metrics) in enumerate(rows):
            ax = axes[i][j]
            for m in metrics:
                x, v = _host_series(series, node, m, run.t0)
                if not len(x):
                    continue
                if m.startswith("net_"):
                    v = v * 8 / 1e6
                name, style = HOST_STYLES.get(m, (f"to {m.split(':', 1)[-1]}", {}))
                ax.plot(x, v, lw=0.9, label=name, **style)
            shade_faults(ax, run, node=node)
            if i == 0:
                ax.set_title(f"node {node}", loc="left")
            ax.set_ylabel(title)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=6, loc="upper right")
            if i == len(rows) - 1:
                ax.set_xlabel("s since first training step")
    left = [f"{len(every) - len(nodes)} of {len(every)} nodes"] if len(every) > len(nodes) else []
    left += [f"{len(peers) - MAX_RTT_PEERS} of {len(peers)} peers' RTT"] if len(peers) > MAX_RTT_PEERS else []
    if left:
        fig.suptitle(f"not drawn: {' and '.join(left)} (the first {MAX_HOST_NODES} nodes and {MAX_RTT_PEERS} peers by name are)",
                     fontsize=8, x=0.01, ha="left")
    fig.tight_layout()
    return png(fig)


def thumbnail(run: RunData) -> Plot:
    """A small step-time plot of one run (job step time in ms on a plain-numbered log
    axis, faults shaded in their type's colour, labels as marks along the bottom in
    their source's colour; the page's legend names the colours), for a dataset page."""
    fig, ax = plt.subplots(figsize=(3.6, 2.0))
    g = run.steps.groupby("step", sort=True).agg(t=("t_start", "min"), s=("step_s", "median"))
    xs, ys, _ = thin(g["t"].to_numpy() - run.t0, g["s"].to_numpy() * 1e3, 600)
    ax.plot(xs, ys, lw=0.7, color="#333333")
    shade_faults(ax, run)
    for r in run.labels.itertuples():
        ax.axvspan(run.rel(r.start_ts), run.rel(r.end_ts), ymin=0, ymax=0.08, color=SOURCE_COLORS.get(r.source, "#577590"))
    plain_log(ax)
    ax.yaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))  # a small plot: minor ticks at 2x and 5x only, all labelled
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(10, 10)))
    ax.tick_params(labelsize=6.5)
    ax.set_ylabel("job step time (ms)", fontsize=7)
    ax.set_xlabel("s since first training step", fontsize=7)
    ax.set_title(run.run_id, fontsize=7, loc="left")
    fig.tight_layout()
    return png(fig)


def score_bars(rows: list[dict]) -> Plot | None:
    """Grouped bars of each detector's window-level precision, recall, F1 and MCC
    (pooled (component, window) cells), with a CI whisker where a row has
    ``METRIC_ci`` = [low, high]; rows without window figures fall back to the
    component-level ones, titled so. The axis runs from 0 (or just below the lowest
    negative MCC) to 1. None when no row has any of these metrics."""
    metrics = WINDOW_BARS if any(isinstance(r.get(m), (int, float)) for r in rows for m in WINDOW_BARS) else COMPONENT_BARS
    rows = [r for r in rows if any(isinstance(r.get(m), (int, float)) for m in metrics)]
    if not rows:
        return None
    n_rows, rows = len(rows), rows[:MAX_BAR_ROWS]
    fig, ax = plt.subplots(figsize=(8, 3.0))
    w = 0.8 / len(rows)
    x = np.arange(len(metrics))
    lowest = 0.0
    for k, r in enumerate(rows):
        vals = [r.get(m) if isinstance(r.get(m), (int, float)) else np.nan for m in metrics]
        cis = [r.get(f"{m}_ci") for m in metrics]
        lows = [c[0] for c in cis if isinstance(c, (list, tuple)) and len(c) == 2 and isinstance(c[0], (int, float))]
        lowest = min([lowest, *(v for v in vals + lows if np.isfinite(v))])
        err = None
        if any(isinstance(c, (list, tuple)) and len(c) == 2 for c in cis):
            err = np.array([[v - c[0], c[1] - v] if isinstance(c, (list, tuple)) and len(c) == 2 and None not in c else [0, 0]
                            for v, c in zip(vals, cis)]).T
        ax.bar(x + k * w, vals, w, yerr=err, label=str(r.get("detector")), capsize=2)
    ax.set_xticks(x + w * (len(rows) - 1) / 2, [metric_title(m) for m in metrics])
    ax.axhline(0, color="#999999", lw=0.8)
    ax.set_ylim(min(0.0, lowest - 0.1), 1.05)
    level = "window" if metrics is WINDOW_BARS else "component"
    ax.set_ylabel(f"{level}-level score (0..1; MCC -1..1)")
    ax.set_xlabel(f"metric ({level} level)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(f"detector scores vs labels, {level} level"
                 + (f"; not drawn: {n_rows - len(rows)} of {n_rows} rows (the first {MAX_BAR_ROWS} are)" if n_rows > len(rows) else ""),
                 loc="left")
    fig.tight_layout()
    return png(fig)
