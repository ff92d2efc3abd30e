"""Synthetic drive clusters with known fail-slow drives, for held-out checks of the
drive verdict (:mod:`faultlab.labeler.verdict`) on data nobody tuned it on.

Each cluster is generated in code from a seed, in the Perseus metrics layout
(:mod:`faultlab.labeler.importers.perseus`: ``cluster, host, ts, disk_id, throughput,
latency``): hosts of ``drives_per_host`` drives, one sample every 15 s for
``hours_per_day`` hours a day (as the Perseus dataset). Per host a base latency, a
shared workload (throughput) and a noise level; latency grows with throughput
(``base x (0.5 + 0.5 x tp / mean tp)``) with lognormal noise. On top:

- **fail-slow drives** (the truth): slow for a share of their time drawn from
  ``slow_share`` (0.56-0.97, the confirmed drives of the Perseus clusters), at a
  slowdown drawn from ``slowdown`` (1.3-3x), in one contiguous span a day; in a
  cluster with many (``slow_fraction`` 0.3) some hosts hold two or three;
- **hard negatives**: healthy drives with slow episodes for 3-26% of their time at
  1.4-1.8x (the false positives a "slow for most of one day" rule admits);
- **offset drives**: healthy drives steadily 2-6% slower than their peers (another
  drive model);
- **noisy hosts** (``noisy_fraction``): 3x the latency noise, and host-wide bursts
  (every drive of the host 1.5-2.5x at once, 10% of the time: not a drive's fault).

:data:`CLUSTERS` names the standard set (none, one and 30% slow drives; each with hard
negatives, offset drives and noisy hosts), the same seeds every time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class ClusterSpec:
    """How one synthetic cluster is drawn (see the module docstring); ``seed`` fixes it."""

    name: str
    seed: int
    hosts: int = 30
    drives_per_host: int = 12
    days: int = 3
    hours_per_day: float = 3.0
    sample_s: float = 15.0
    slow_drives: int | None = None  # an exact count, or
    slow_fraction: float = 0.0  # a share of all drives
    hard_negatives: int = 10
    offset_drives: int = 10
    noisy_fraction: float = 0.2
    slow_share: tuple[float, float] = (0.56, 0.97)
    slowdown: tuple[float, float] = (1.3, 3.0)
    negative_share: tuple[float, float] = (0.03, 0.26)
    negative_slowdown: tuple[float, float] = (1.4, 1.8)


#: the standard synthetic clusters of perf/public_datasets.py and the tests
CLUSTERS = (
    ClusterSpec("synthetic-none", seed=1001, slow_drives=0),
    ClusterSpec("synthetic-one", seed=1002, slow_drives=1),
    ClusterSpec("synthetic-30pct", seed=1003, hosts=20, slow_fraction=0.3),
)


def generate(spec: ClusterSpec) -> tuple[pd.DataFrame, list[str]]:
    """Draw one cluster.

    Returns:
        ``(metrics, slow)``: the metrics frame (columns ``cluster, host, ts`` [unix s,
        int64], ``disk_id, throughput`` [bytes/s], ``latency`` [ms]) sorted by host,
        disk, ts; and the names ``HOST/DISK`` of its fail-slow drives (the truth).
        Deterministic in ``spec``.
    """
    rng = np.random.default_rng(spec.seed)
    H, D = spec.hosts, spec.drives_per_host
    per_day = int(spec.hours_per_day * 3600 / spec.sample_s)
    T = spec.days * per_day
    t0 = 1_700_006_400  # a midnight (UTC)
    ts = np.concatenate([t0 + d * 86400 + 3600 + np.arange(per_day) * int(spec.sample_s) for d in range(spec.days)])
    n = H * D
    n_slow = spec.slow_drives if spec.slow_drives is not None else int(round(spec.slow_fraction * n))
    # fail-slow drives: with many, some hosts hold two or three (hosts whose drives share a cause)
    slow: list[int] = []
    if n_slow:
        hosts = rng.permutation(H)
        k = 0
        while len(slow) < n_slow:
            h = int(hosts[k % H])
            take = int(min(rng.integers(1, 4) if n_slow > H // 2 else 1, n_slow - len(slow)))
            free = [h * D + d for d in rng.permutation(D).tolist() if h * D + d not in slow]
            slow += free[:take]
            k += 1
    rest = [i for i in rng.permutation(n).tolist() if i not in set(slow)]
    negatives = rest[: spec.hard_negatives]
    offsets = rest[spec.hard_negatives : spec.hard_negatives + spec.offset_drives]
    noisy = rng.random(H) < spec.noisy_fraction
    base = rng.uniform(40.0, 120.0, H)
    sigma = np.where(noisy, 0.24, 0.08)
    # host workload: a slow wave plus noise, shared by the host's drives
    phase = rng.uniform(0, 2 * np.pi, H)
    wave = 1.0 + 0.3 * np.sin(2 * np.pi * np.arange(T)[None, :] / (per_day / 2.0) + phase[:, None])
    work = 20e6 * wave * rng.lognormal(0.0, 0.15, (H, T))
    tp = work[:, None, :] * rng.uniform(0.7, 1.3, (H, D))[:, :, None] * rng.lognormal(0.0, 0.2, (H, D, T))
    lat = base[:, None, None] * (0.5 + 0.5 * tp / 20e6) * rng.lognormal(0.0, 1.0, (H, D, T)) ** sigma[:, None, None]
    mult = np.ones((n, T))
    for i in slow:
        share, f = rng.uniform(*spec.slow_share), rng.uniform(*spec.slowdown)
        for d in range(spec.days):
            L = int(round(share * per_day))
            a = d * per_day + int(rng.integers(0, per_day - L + 1))
            mult[i, a : a + L] = f
    for i in negatives:
        share, f = rng.uniform(*spec.negative_share), rng.uniform(*spec.negative_slowdown)
        L = max(int(round(share * T)), 120)  # at least 30 min: a kept slow period
        a = int(rng.integers(0, T - L + 1))
        mult[i, a : a + L] = f
    for i in offsets:
        mult[i] *= rng.uniform(1.02, 1.06)
    for h in np.flatnonzero(noisy):  # host-wide bursts: every drive at once
        for _ in range(3):
            L = int(0.1 * T / 3)
            a = int(rng.integers(0, T - L + 1))
            mult[h * D : (h + 1) * D, a : a + L] *= rng.uniform(1.5, 2.5)
    lat = lat.reshape(n, T) * mult
    host_names = np.array([f"host_{h + 1}" for h in range(H)], dtype=object)
    disk_names = np.array([f"disk{d + 1}" for d in range(D)], dtype=object)
    df = pd.DataFrame({
        "cluster": spec.name,
        "host": np.repeat(host_names, D * T),
        "ts": np.tile(ts, n).astype(np.int64),
        "disk_id": np.tile(np.repeat(disk_names, T), H),
        "throughput": np.round(tp.reshape(-1), 2),
        "latency": np.round(lat.reshape(-1), 2),
    })
    truth = sorted(f"{host_names[i // D]}/{disk_names[i % D]}" for i in slow)
    return df, truth


def half_hosts(df: pd.DataFrame, which: int) -> pd.DataFrame:
    """The rows of every other host (``which`` 0: the 1st, 3rd, ... in name order; 1:
    the 2nd, 4th, ...): a split of one cluster into two halves judged separately."""
    hosts = sorted(pd.unique(df["host"]).tolist(), key=lambda h: (len(str(h)), str(h)))
    keep = set(hosts[which::2])
    return df[df["host"].isin(keep)].reset_index(drop=True)


__all__ = ["CLUSTERS", "ClusterSpec", "generate", "half_hosts"]
