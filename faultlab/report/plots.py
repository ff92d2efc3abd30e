"""The report's figures, drawn with matplotlib (Agg backend) and returned as PNG bytes.

Every time axis is seconds since the run's time origin (RunData.t0). Injection
windows are shaded in one color per fault type and named ``TYPE @ NODE``. A line of
more than ``MAX_POINTS`` points is thinned to the maximum per bin of consecutive
steps (a straggler's spikes stay visible; the caption says so).
"""

from __future__ import annotations

import io
from collections.abc import Mapping

import matplotlib

matplotlib.use("Agg")  # no display: the report is rendered headless

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from faultlab.injectors import FAULT_TYPES  # noqa: E402
from faultlab.labeler.grid import StepGrid  # noqa: E402
from faultlab.labeler.whatif import simulate_job  # noqa: E402
from faultlab.report.data import RunData  # noqa: E402

MAX_POINTS = 3000
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
SOURCE_COLORS = {"injected": "#2a9d8f", "observed": "#577590", "injected-unmanifested": "#bbbbbb"}
plt.rcParams.update({"font.size": 8, "axes.titlesize": 9, "axes.grid": True, "grid.alpha": 0.3, "figure.dpi": DPI})


def png(fig) -> bytes:
    """The figure as PNG bytes (the figure is closed)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


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


def timeline(run: RunData) -> tuple[bytes, int]:
    """Per-rank step time and compute time over run time (ms), faults shaded and
    named, and a lane chart of faults, labels (with slowdown) and detector alarms.
    Returns ``(png, bin)`` where ``bin`` is the thinning bin (steps per point)."""
    comps = ["job"] + [f"rank:{r}" for r in run.ranks]
    fig, axes = plt.subplots(3, 1, figsize=(11, 7.2), sharex=True, gridspec_kw={"height_ratios": [3, 3, 0.55 * (len(comps) + 1)]})
    binsize = 1
    for ax, col, title in ((axes[0], "step_s", "step time per rank (ms)"), (axes[1], "compute_s", "compute time per rank (ms)")):
        for k, (rank, node, x, y) in enumerate(_per_rank(run, col)):
            c = f"C{k % 10}"
            xs, ys, binsize = thin(x, y * 1e3)
            ax.plot(xs, ys, lw=0.5, color=c, alpha=0.3)
            med = pd.Series(y * 1e3).rolling(SMOOTH_STEPS, center=True, min_periods=1).median().to_numpy()
            xm, ym, _ = thin(x, med)
            ax.plot(xm, ym, lw=1.1, color=c, label=f"rank {rank} ({node})")
        ax.set_title(title, loc="left")
        ax.set_yscale("log")
        shade_faults(ax, run, names=ax is axes[0])
    axes[0].legend(loc="upper right", fontsize=7, ncol=min(4, max(1, len(run.ranks))))
    _lanes(axes[2], run, comps)
    axes[2].set_xlabel("seconds since the first training step")
    fig.tight_layout()
    return png(fig), binsize


def _lanes(ax, run: RunData, comps: list[str]) -> None:
    """One lane per component: labels as bars with their slowdown, alarms as thin
    bars under them; a top lane ``faults`` holds the injection windows."""
    lanes = ["faults"] + comps
    y = {c: len(lanes) - 1 - i for i, c in enumerate(lanes)}
    for r in run.injections.itertuples():
        end = r.end_ts if pd.notna(r.end_ts) else r.start_ts
        ax.barh(y["faults"], run.rel(end) - run.rel(r.start_ts), left=run.rel(r.start_ts), height=0.6,
                color=FAULT_COLORS.get(r.fault_type, "#999999"), alpha=0.8)
        ax.text(run.rel(r.start_ts), y["faults"], f" {_fault_name(r)}", va="center", fontsize=7)
    for r in run.labels.itertuples():
        if r.component not in y:
            continue
        c = SOURCE_COLORS.get(r.source, "#577590")
        ax.barh(y[r.component] + 0.12, max(run.rel(r.end_ts) - run.rel(r.start_ts), 0.05), left=run.rel(r.start_ts),
                height=0.45, color=c, alpha=0.9)
        ax.text(run.rel(r.end_ts), y[r.component] + 0.12, f" {r.slowdown:.2f}x", va="center", fontsize=7)
    for r in run.alarms.itertuples():
        if r.component not in y:
            continue
        ax.barh(y[r.component] - 0.28, max(run.rel(r.end_ts) - run.rel(r.start_ts), 0.05), left=run.rel(r.start_ts),
                height=0.16, color="#d62828", alpha=0.9)
    ax.set_yticks([y[c] for c in lanes], lanes)
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.grid(axis="y", alpha=0)
    handles = [matplotlib.patches.Patch(color=v, label=f"label: {k}") for k, v in SOURCE_COLORS.items()]
    handles.append(matplotlib.patches.Patch(color="#d62828", label="detector alarm"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.32), fontsize=7, ncol=4, frameon=False)
    ax.set_title("faults, labels (with slowdown) and detector alarms", loc="left")


def whatif(run: RunData) -> bytes | None:
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
    a.set_xlabel("seconds since the first training step")
    a.set_ylabel("job time lost to stragglers (s)")
    s = (run.whatif or {}).get("slowdown")
    a.set_title(f"what-if slowdown S = {s:.3f}" if isinstance(s, (int, float)) else "what-if slowdown", loc="left")
    per = (run.whatif or {}).get("per_rank") or {}
    if per:
        names = list(per)
        vals = [per[k] if isinstance(per[k], (int, float)) else np.nan for k in names]
        b.bar(names, vals, color="#577590")
        b.axhline(1.0, color="#999999", lw=0.8)
        b.set_ylim(min(0.98, np.nanmin(vals) - 0.01) if np.isfinite(np.nanmin(vals)) else 0.98, max(1.05, np.nanmax(vals) * 1.02) if np.isfinite(np.nanmax(vals)) else 1.05)
        b.set_title("S_w: the job's slowdown that making rank w ideal removes", loc="left", fontsize=8)
        b.tick_params(axis="x", labelrotation=45)
    else:
        b.axis("off")
    fig.tight_layout()
    return png(fig)


def _host_series(host: pd.DataFrame, node: str, metric: str, t0: float):
    h = host[(host["node"] == node) & (host["metric"] == metric)].sort_values("ts")
    return h["ts"].to_numpy() - t0, h["value"].to_numpy(dtype=float)


def host_metrics(run: RunData) -> bytes | None:
    """Per node (columns): CPU utilization (%), NIC receive/transmit rate (Mbit/s) and
    the TCP RTT to each peer node (ms); the node's own faults shaded. None without
    host metrics."""
    h = run.host
    if h.empty:
        return None
    nodes = sorted(h["node"].astype(str).unique())
    rows = [("CPU (%)", ["cpu_util_pct", "proc_cpu_util_pct"]), ("NIC (Mbit/s)", ["net_rx_bytes_per_s", "net_tx_bytes_per_s"]),
            ("TCP RTT to peer (ms)", sorted(m for m in h["metric"].unique() if m.startswith("tcp_rtt_ms:")))]
    rows = [r for r in rows if r[1]]
    fig, axes = plt.subplots(len(rows), len(nodes), figsize=(min(11, 2.9 * len(nodes) + 0.5), 1.9 * len(rows)), sharex=True, squeeze=False)
    labels = {"cpu_util_pct": "host CPU", "proc_cpu_util_pct": "rank process CPU", "net_rx_bytes_per_s": "rx", "net_tx_bytes_per_s": "tx"}
    for j, node in enumerate(nodes):
        for i, (title, metrics) in enumerate(rows):
            ax = axes[i][j]
            for m in metrics:
                x, v = _host_series(h, node, m, run.t0)
                if not len(x):
                    continue
                if m.startswith("net_"):
                    v = v * 8 / 1e6
                ax.plot(x, v, lw=0.9, label=labels.get(m, m.split(":", 1)[-1]))
            shade_faults(ax, run, node=node)
            if i == 0:
                ax.set_title(f"node {node}", loc="left")
            if j == 0:
                ax.set_ylabel(title)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=6, loc="upper right")
            if i == len(rows) - 1:
                ax.set_xlabel("s since first step")
    fig.tight_layout()
    return png(fig)


def thumbnail(run: RunData) -> bytes:
    """A small step-time plot of one run (job step time, faults shaded), for a
    dataset page."""
    fig, ax = plt.subplots(figsize=(3.2, 1.4))
    g = run.steps.groupby("step", sort=True).agg(t=("t_start", "min"), s=("step_s", "median"))
    xs, ys, _ = thin(g["t"].to_numpy() - run.t0, g["s"].to_numpy() * 1e3, 600)
    ax.plot(xs, ys, lw=0.7, color="#333333")
    shade_faults(ax, run)
    for r in run.labels.itertuples():
        ax.axvspan(run.rel(r.start_ts), run.rel(r.end_ts), ymin=0, ymax=0.08, color=SOURCE_COLORS.get(r.source, "#577590"))
    ax.set_yscale("log")
    ax.tick_params(labelsize=6)
    ax.set_title(run.run_id, fontsize=7, loc="left")
    fig.tight_layout()
    return png(fig)


def score_bars(rows: list[dict], metrics=("precision", "recall", "f1", "mcc")) -> bytes | None:
    """Grouped bars of the score metrics per detector (with a CI whisker where a row
    has ``METRIC_ci`` = [low, high]). None when no row has any metric."""
    rows = [r for r in rows if any(isinstance(r.get(m), (int, float)) for m in metrics)]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 2.6))
    w = 0.8 / len(rows)
    x = np.arange(len(metrics))
    for k, r in enumerate(rows):
        vals = [r.get(m) if isinstance(r.get(m), (int, float)) else np.nan for m in metrics]
        err = None
        cis = [r.get(f"{m}_ci") for m in metrics]
        if any(isinstance(c, (list, tuple)) and len(c) == 2 for c in cis):
            err = np.array([[v - c[0], c[1] - v] if isinstance(c, (list, tuple)) and len(c) == 2 and None not in c else [0, 0]
                            for v, c in zip(vals, cis)]).T
        ax.bar(x + k * w, vals, w, yerr=err, label=str(r.get("detector")), capsize=2)
    ax.set_xticks(x + w * (len(rows) - 1) / 2, metrics)
    ax.axhline(0, color="#999999", lw=0.8)
    ax.legend(fontsize=7)
    ax.set_title("detector scores vs labels", loc="left")
    fig.tight_layout()
    return png(fig)
