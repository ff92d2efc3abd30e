"""``minder`` and ``minder-mahalanobis``: Minder's faulty-machine detection from
per-node host metrics.

Paper: Yangtao Deng, Xiang Shi, Zhuo Jiang et al., "Minder: Faulty Machine Detection
for Large-scale Distributed Model Training", USENIX NSDI 2025 (arXiv:2411.01791).
Its four ideas: **similarity** (machines doing the same job have similar metrics, so
the faulty one is the one most dissimilar from its peers), **continuity** (a fault
lasts: a machine is reported only when it stays the most dissimilar for a number of
consecutive windows), **per-metric denoising** (one LSTM-VAE per metric reconstructs
each machine's window; distances are taken between the reconstructions) and
**metric prioritization** (metrics are tried in an order, the first that reports a
machine decides). Its baseline: the Mahalanobis distance of each machine's metric
vector from its peers (variant ``minder-mahalanobis``).

Signals read: ``host`` only (per node; ``steps`` only to map a node to its ranks and
to bound the run): ``METRICS``, in this order: CPU (``proc_cpu_util_pct``), run delay
(``proc_run_delay_s_per_s``), NIC rates (``net_tx_bytes_per_s``,
``net_rx_bytes_per_s``), TCP RTT (``tcp_rtt_ms``, the mean over peers) and
retransmits (``tcp_retrans_per_s``), then GPU metrics where present (``gpu_*``, the
mean over a node's GPUs). Each metric is put on a ``sample_s`` grid per node and
min-max normalized over all nodes. Per window (``window`` samples, one every ``stride``
samples) each node's dissimilarity is the sum of its Euclidean distances to the other
nodes' windows; the most dissimilar node is a candidate when its dissimilarity is at
least ``dissimilarity`` times the nodes' median. A candidate that stays the same
for ``continuity`` consecutive windows is alarmed (on every rank of the node) from
its streak's first window on; score = its mean dissimilarity ratio.

``minder`` denoises each window with a per-metric LSTM-VAE (torch: ``pip install
faultlab[detectors]``) trained by ``fit`` on the train split's windows only; without
``fit`` (scoring single runs) it compares the raw windows.
``minder-mahalanobis`` compares, per window, each node's vector of window means (all
metrics at once) with its peers' mean by the Mahalanobis distance (covariance of
those deviations over all windows seen, ridge ``1e-3``). Replay: the base class's
re-run on what the clock has shown.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from faultlab.scoring.detectors import as_alarms, empty_alarms
from faultlab.scoring.published.params import Param, PublishedDetector, params_doc

METRICS = ("proc_cpu_util_pct", "proc_run_delay_s_per_s", "net_tx_bytes_per_s", "net_rx_bytes_per_s", "tcp_rtt_ms",
           "tcp_retrans_per_s", "gpu_")

PARAMS = (
    Param("sample_s", 1.0, "s", "ours: faultlab samples host metrics about once a second",
          "grid step the host samples are put on", lambda v: v > 0),
    Param("window", 3, "samples",
          "ours, the paper's windows span minutes: 3 s leaves ~7 windows in a ~22 s run, room for continuity",
          "samples per window", lambda v: v >= 1),
    Param("stride", 3, "samples", "ours: windows side by side, so a blip falls in one window",
          "samples between window ends", lambda v: v >= 1),
    Param("continuity", 3, "windows",
          "ours, the paper counts minutes: the fewest windows that reject a one-window blip and a two-window "
          "coincidence within a ~22 s run", "consecutive windows the same node must stay most dissimilar",
          lambda v: v >= 1),
    Param("dissimilarity", 2.0, "ratio",
          "ours, the paper's number not found: twice the nodes' median, a round factor fitted to no dataset",
          "a candidate's dissimilarity over the nodes' median", lambda v: v >= 1),
)
VAE_PARAMS = PARAMS + (
    Param("latent", 4, "units", "ours, the paper's size not found: a small model that trains on a CPU",
          "LSTM-VAE latent size", lambda v: v >= 1),
    Param("hidden", 16, "units", "ours, as latent", "LSTM-VAE hidden size", lambda v: v >= 1),
    Param("epochs", 30, "passes", "ours, as latent: full-batch passes over the few hundred windows of a train split",
          "training passes over the train windows", lambda v: v >= 1),
    Param("seed", 0, "", "ours: a fixed seed so a score is repeatable", "torch seed of the training", lambda v: True),
)
__doc__ += "\n``minder-mahalanobis``:" + params_doc(PARAMS) + "\n``minder`` (adds the LSTM-VAE's):" + params_doc(VAE_PARAMS)


def metric_grids(host: pd.DataFrame, nodes: list[str], t0: float, t1: float, sample_s: float) -> dict[str, np.ndarray]:
    """Per metric of ``METRICS`` the host has: a (bins x nodes) array on the
    ``sample_s`` grid from ``t0`` to ``t1`` (unix s), the mean of the samples in each
    bin (a qualified metric ``BASE:Q`` averaged over its qualifiers), carried
    forward over empty bins, min-max normalized over all nodes (NaN before a node's
    first sample)."""
    if host is None or host.empty:
        return {}
    ts = host["ts"].to_numpy(np.float64)
    col = _codes(host["node"], lambda u: nodes.index(u) if u in nodes else -1)  # the row's node column, -1: no node of the run
    kind = _codes(host["metric"], lambda u: _metric_of(u.split(":")[0]))  # index into METRICS, -1: not read
    keep = (ts >= t0) & (ts <= t1) & (col >= 0)
    value = host["value"].to_numpy(np.float64)
    n_bins = int(np.floor((t1 - t0) / sample_s)) + 1
    # (bin, node) as one index; a row not kept is put in bin 0 (never counted), so no NaN or far time is cast
    cell = np.floor((np.where(keep, ts, t0) - t0) / sample_s).astype(np.int64) * len(nodes) + col
    out = {}
    for i, m in enumerate(METRICS):
        rows = keep & (kind == i)
        if not rows.any():
            continue
        rows &= ~np.isnan(value)  # a missing value is left out of its bin's mean
        total = np.bincount(cell[rows], weights=value[rows], minlength=n_bins * len(nodes))
        count = np.bincount(cell[rows], minlength=n_bins * len(nodes))
        with np.errstate(invalid="ignore", divide="ignore"):
            x = _carry_forward(np.where(count > 0, total / count, np.nan).reshape(n_bins, len(nodes)))
        lo, hi = np.nanmin(x) if np.isfinite(x).any() else 0.0, np.nanmax(x) if np.isfinite(x).any() else 0.0
        out[m] = (x - lo) / (hi - lo) if hi > lo else np.where(np.isfinite(x), 0.0, np.nan)
    return out


def _metric_of(base: str) -> int:
    """The index in ``METRICS`` of a metric's base name (a prefix entry such as
    ``gpu_`` takes every name it starts), -1 for a metric not read."""
    return next((i for i, m in enumerate(METRICS) if (base.startswith(m) if m.endswith("_") else base == m)), -1)


def _codes(column: pd.Series, of) -> np.ndarray:
    """``of(value)`` for every row of a string column, computed once per distinct
    value (-1 for a missing one)."""
    codes, uniques = pd.factorize(column)
    table = np.array([of(str(u)) for u in uniques] + [-1], np.int64)
    return table[codes]  # a missing value's code -1 picks the trailing -1


def _carry_forward(x: np.ndarray) -> np.ndarray:
    """Each NaN of a (bins x nodes) array replaced by the last value above it in its
    column (NaN before the column's first value)."""
    seen = np.where(np.isnan(x), 0, np.arange(len(x))[:, None])
    np.maximum.accumulate(seen, axis=0, out=seen)
    return x[seen, np.arange(x.shape[1])]


def windows(x: np.ndarray, window: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """Windows of a (bins x nodes) grid, one every ``stride`` bins: ``(ends, W)``
    with ``ends`` the last bin of each and ``W`` of shape (n_windows, nodes,
    window); windows with a NaN are left out."""
    if len(x) < window:
        return np.zeros(0, np.int64), np.zeros((0, x.shape[1], window))
    w = np.lib.stride_tricks.sliding_window_view(x, window, axis=0)[::stride]  # (n, nodes, window)
    ends = np.arange(window - 1, len(x))[::stride]
    ok = np.isfinite(w).all(axis=(1, 2))
    return ends[ok], w[ok]


def candidates(dis: np.ndarray, ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """Per window (rows of ``dis``: each node's dissimilarity), the most dissimilar
    node when its dissimilarity over the nodes' median reaches ``ratio`` (else -1),
    and that ratio."""
    med = np.median(dis, axis=1)
    top = dis.argmax(axis=1)
    mx = dis.max(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(med > 0, mx / med, np.where(mx > 0, np.inf, 1.0))
    return np.where(r >= ratio, top, -1), r


def euclid_dissimilarity(w: np.ndarray) -> np.ndarray:
    """(n_windows, nodes, k) -> (n_windows, nodes): each node's summed Euclidean
    distance to the other nodes."""
    d = np.sqrt(((w[:, :, None, :] - w[:, None, :, :]) ** 2).sum(-1))
    return d.sum(axis=2)


def continuous(ends: np.ndarray, cand: np.ndarray, continuity: int, stride: int) -> np.ndarray:
    """Per window (``ends``: its last bin), the candidate node once it has been the
    candidate for ``continuity`` consecutive windows (``stride`` bins apart) up to
    and including this one (else -1)."""
    out = np.full(len(cand), -1)
    run = 0
    for i, c in enumerate(cand):
        follows = i > 0 and c == cand[i - 1] and ends[i] - ends[i - 1] == stride
        run = run + 1 if c >= 0 and follows else (1 if c >= 0 else 0)
        if run >= continuity:
            out[i] = c
    return out


class MinderMahalanobisDetector(PublishedDetector):
    """Minder's Mahalanobis baseline (NSDI'25): per window, each node's vector of
    metric window means against its peers' mean; continuity as Minder's."""

    name = "minder-mahalanobis"
    PARAMS = PARAMS

    def _prepare(self, steps: pd.DataFrame, host: pd.DataFrame):
        """(nodes, node -> ranks, t0, grids) of one run, or None without host rows."""
        if steps is None or len(steps) == 0 or host is None or host.empty or "node" not in steps.columns:
            return None
        nodes = sorted(steps["node"].astype(str).unique())
        ranks = steps.groupby(steps["node"].astype(str))["rank"].unique().to_dict()
        t0 = float(steps["t_start"].min())
        t1 = float((steps["t_start"] + steps["step_s"]).max())
        grids = metric_grids(host, nodes, t0, t1, self.sample_s)
        return (nodes, ranks, t0, t1, grids) if grids else None

    def _confirmed(self, grids: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(window ends, confirmed node per window or -1, ratio per window)."""
        common = None
        per = []
        for m, x in grids.items():
            ends, w = windows(x, self.window, self.stride)
            per.append((ends, w.mean(axis=2)))
            common = set(ends) if common is None else common & set(ends)
        ends = np.array(sorted(common or []), np.int64)
        if not len(ends):
            return ends, np.zeros(0, np.int64), np.zeros(0)
        feats = np.stack([v[np.searchsorted(e, ends)] for e, v in per], axis=2)  # (n, nodes, metrics)
        n_nodes = feats.shape[1]
        peers = (feats.sum(axis=1, keepdims=True) - feats) / max(n_nodes - 1, 1)
        dev = feats - peers
        flat = dev.reshape(-1, dev.shape[2])
        cov = np.cov(flat, rowvar=False).reshape(dev.shape[2], dev.shape[2]) + 1e-3 * np.eye(dev.shape[2])
        inv = np.linalg.inv(cov)
        dis = np.sqrt(np.einsum("wnk,kl,wnl->wn", dev, inv, dev))
        cand, ratio = candidates(dis, self.dissimilarity)
        return ends, continuous(ends, cand, self.continuity, self.stride), ratio

    def detect(self, steps: pd.DataFrame, host: pd.DataFrame | None = None) -> pd.DataFrame:
        prep = self._prepare(steps, host)
        if prep is None:
            return empty_alarms()
        nodes, ranks, t0, t1, grids = prep
        ends, node, ratio = self._confirmed(grids)
        return self._alarms(ends, node, ratio, nodes, ranks, t0, t1)

    def _alarms(self, ends, node, ratio, nodes, ranks, t0, t1) -> pd.DataFrame:
        """One alarm per streak of windows confirming the same node, on each of its
        ranks, from the streak's first window's first sample (continuity windows
        before the confirmation) to its last window's end."""
        rows = []
        i = 0
        while i < len(node):
            if node[i] < 0:
                i += 1
                continue
            j = i
            while j + 1 < len(node) and node[j + 1] == node[i] and ends[j + 1] == ends[j] + self.stride:
                j += 1
            first = ends[i] - (self.continuity - 1) * self.stride - (self.window - 1)
            start = t0 + max(first, 0) * self.sample_s
            end = min(t0 + (ends[j] + 1) * self.sample_s, t1)
            score = float(np.mean(np.minimum(ratio[i : j + 1], 1e6)))
            for r in ranks.get(nodes[node[i]], []):
                rows.append((f"rank:{int(r)}", start, max(end, start), score))
            i = j + 1
        if not rows:
            return empty_alarms()
        return as_alarms(pd.DataFrame(rows, columns=["component", "start_ts", "end_ts", "score"]))


class MinderDetector(MinderMahalanobisDetector):
    """Minder (NSDI'25): per metric in priority order, each node's (LSTM-VAE
    denoised) window against its peers'; continuity; the first metric that
    confirms a node decides (see the module)."""

    name = "minder"
    PARAMS = VAE_PARAMS

    def fit(self, train_runs) -> "MinderDetector":
        """Train one LSTM-VAE per metric on the train runs' windows (every node's)."""
        # torch is imported here: a heavy optional dependency, needed by this variant's fit only
        from faultlab.scoring.published.minder_vae import train_vaes

        per_metric: dict[str, list[np.ndarray]] = {}
        for run in train_runs:
            prep = self._prepare(run.steps, run.host)
            if prep is None:
                continue
            for m, x in prep[4].items():
                _, w = windows(x, self.window, self.stride)
                if len(w):
                    per_metric.setdefault(m, []).append(w.reshape(-1, self.window))
        data = {m: np.concatenate(v) for m, v in per_metric.items()}
        self._vaes = train_vaes(data, latent=self.latent, hidden=self.hidden, epochs=self.epochs, seed=self.seed)
        return self

    def _confirmed(self, grids: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        vaes = getattr(self, "_vaes", {})
        decided: dict[int, tuple[int, float]] = {}
        for m in METRICS:  # priority order: an earlier metric's confirmation wins a window
            if m not in grids:
                continue
            ends, w = windows(grids[m], self.window, self.stride)
            if not len(ends):
                continue
            if m in vaes:
                w = vaes[m].denoise(w)
            cand, ratio = candidates(euclid_dissimilarity(w), self.dissimilarity)
            for e, c, r in zip(ends, continuous(ends, cand, self.continuity, self.stride), ratio):
                if c >= 0 and int(e) not in decided:
                    decided[int(e)] = (int(c), float(r))
        ends = np.array(sorted(decided), np.int64)
        return ends, np.array([decided[e][0] for e in ends], np.int64), np.array([decided[e][1] for e in ends])
