"""Component-level fail-slow verdict: which drives (components) of a cluster are fail-slow.

One rule, shared by the ``perseus`` and ``long`` importers, decided from the
distribution over the cluster (all components judged together) rather than from an
absolute cut that one cluster's noise crosses:

- ``level``: the component's typical slowdown, the median over all its observed time
  of its ratio to its peers (``long``: value / the leave-one-out median of its peer
  group at the same timestamp; ``perseus``: latency / the host's latency-vs-throughput
  regression). The median is the level it sits at for at least half of its time, so a
  drive slow 1.8x for a quarter of its time has a level near 1.0, and one slow for most
  of its time has a level near its slowdown.
- ``share``: the share of its observed time inside its slow periods (0..1).

Each is compared with the cluster's bulk by a robust z-score, ``(x - median) /
max(sigma, floor)`` with ``sigma = (median - 25th percentile) / 0.6745`` (a modified
z-score after Iglewicz & Hoaglin, its spread read on the bulk's lower side, which slow
components never reach, so a cluster with 30% slow drives still has a healthy bulk),
``level`` on a log scale. A component is **fail-slow** when its level is an outlier
above the bulk (``level_z >= z``; 3.5, the modified z-score cut) and reaches
``min_level`` (1.08). The bulk of a very quiet cluster can be so tight that a steady
offset of a few percent, another drive model, is an outlier, and such an offset is no
fail-slow drive (the offset drives of :mod:`faultlab.labeler.synthetic`, 2-6% by
construction, read levels up to 1.053); a component 10% slower than its peers for its
whole time is persistently slow. 1.08 lies between the two with room for the noise of
a level on both sides (a rank exactly 1.10x its peers over 400 steps reads 1.097-1.102),
so neither is decided by that noise. Perseus
(FAST'23) likewise judges a drive by how long it is slow, not by a single slow
episode; judging the *level* (where the drive sits for at least half of its time) is
what rejects drives with short slow episodes (a few percent to a quarter of their
time, 1.4-1.8x) that a "slow for most of one day" rule admits. The share is not
required to be an outlier: on a noisy host a drive steadily 1.2-1.3x slow may never
cross the host's noise bound in a window (share 0) and is still the host's slow drive;
the share and its z-score are evidence and order the ranking.

Defaults are the same for every dataset (:class:`VerdictConfig`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from faultlab.errors import BadInput
from faultlab.labeler.config import make_config
from faultlab.labeler.peergroups import group_columns
from faultlab.labeler.stats import median


#: columns :func:`judge` adds
VERDICT_COLUMNS = ("level_z", "share_z", "bulk_level", "bulk_share", "failslow", "rank")


@dataclass(frozen=True)
class VerdictConfig:
    """Defaults of the component verdict (the same for every dataset).

    Attributes:
        z: a component is an outlier when its robust z-score against the cluster's
            bulk is at least this (dimensionless; Iglewicz & Hoaglin's 3.5). 3.5.
        min_level: its level (median ratio to its peers over its observed time) must
            also reach this ratio (above a healthy offset, below 10% slow: see the
            module docstring). 1.08.
        level_sigma_floor: the bulk's spread of log(level) is at least this (a
            cluster of identical drives has MAD 0). 0.01 (about 1%).
        share_sigma_floor: the bulk's spread of the share of slow time is at least
            this (share units, 0..1; where almost nothing is slow the MAD is 0). 0.02.
    """

    z: float = 3.5
    min_level: float = 1.08
    level_sigma_floor: float = 0.01
    share_sigma_floor: float = 0.02

    def __post_init__(self) -> None:
        for name in ("z", "level_sigma_floor", "share_sigma_floor"):
            if not float(getattr(self, name)) > 0:
                raise BadInput(f"must be > 0, got {getattr(self, name)!r}", field=name)
        if not float(self.min_level) >= 1.0:
            raise BadInput(f"must be >= 1.0 (a ratio), got {self.min_level!r}", field="min_level")

    def to_dict(self) -> dict:
        return asdict(self)


def _robust_z(x: np.ndarray, floor: float) -> tuple[np.ndarray, float]:
    """``((x - median) / max(sigma, floor), median)`` over the finite entries, where
    ``sigma = (median - 25th percentile) / 0.6745``: the spread of the bulk read on its
    lower side, which slow components never reach (a two-sided MAD grows with the
    share of slow components: 1.8x at 30% of them, this 1.4x)."""
    fin = x[np.isfinite(x)]
    if fin.size == 0:
        return np.zeros_like(x), float("nan")
    c = median(fin)
    sig = max((c - float(np.percentile(fin, 25))) / 0.6745, floor)
    return (x - c) / sig, c


def judge(components: pd.DataFrame, config: VerdictConfig | dict | None = None, *,
          cluster: str | None = None) -> pd.DataFrame:
    """The fail-slow verdict of each component, against its cluster's bulk.

    Args:
        components: one row per component; columns ``level`` (median ratio to its
            peers over its observed time, > 0) and ``share`` (share of its observed
            time in slow periods, 0..1); others are kept. NaN levels (no peer ever)
            are never fail-slow.
        config: :class:`VerdictConfig` or a dict of its fields.
        cluster: a column naming each component's cluster: each cluster is judged
            against its own bulk (None: all rows are one cluster).

    Returns:
        a copy with :data:`VERDICT_COLUMNS` added: ``level_z``, ``share_z`` (robust
        z-scores; the evidence of how far from the bulk; ``failslow`` is decided on
        ``level_z`` and ``level``), ``bulk_level``,
        ``bulk_share`` (the cluster's medians), ``failslow`` (bool) and ``rank`` (1 =
        most suspect: fail-slow first, then by ``level_z + share_z``, ties by the
        original order), sorted by rank, index reset. Deterministic.

    Raises:
        BadInput naming a missing column or a bad config field.
    """
    cfg = make_config(VerdictConfig, config)
    missing = [c for c in ("level", "share") if c not in components.columns]
    if missing:
        raise BadInput(f"missing column(s) {', '.join(missing)}", field="components")
    out = components.copy().reset_index(drop=True)
    level = pd.to_numeric(out["level"], errors="coerce").to_numpy(np.float64)
    share = pd.to_numeric(out["share"], errors="coerce").fillna(0.0).to_numpy(np.float64)
    n = len(out)
    lz, sz = np.zeros(n), np.zeros(n)
    bl, bs = np.full(n, np.nan), np.full(n, np.nan)
    keys = out[cluster].astype(str).to_numpy(dtype=object) if cluster else np.zeros(n, dtype=object)
    with np.errstate(invalid="ignore", divide="ignore"):
        loglev = np.where(level > 0, np.log(level), np.nan)
    # each cluster's rows by one sort: a pass over every row for each cluster cost rows x
    # clusters, and a Perseus file names as many clusters as it has rows
    for k, idx in sorted(group_columns(keys), key=lambda g: str(g[0])):
        z1, c1 = _robust_z(loglev[idx], cfg.level_sigma_floor)
        z2, c2 = _robust_z(share[idx], cfg.share_sigma_floor)
        lz[idx], sz[idx] = z1, z2
        bl[idx], bs[idx] = np.exp(c1), c2
    lz = np.where(np.isfinite(lz), lz, -np.inf)
    out["share"] = share
    out["level_z"] = lz
    out["share_z"] = sz
    out["bulk_level"] = bl
    out["bulk_share"] = bs
    with np.errstate(invalid="ignore"):
        out["failslow"] = (lz >= cfg.z) & (level >= cfg.min_level)
    score = np.where(np.isfinite(lz), lz, -1e9) + sz
    order = np.lexsort((np.arange(n), -score, ~out["failslow"].to_numpy(bool))) if n else np.zeros(0, dtype=np.int64)
    out = out.iloc[order].reset_index(drop=True)
    out["rank"] = np.arange(1, n + 1, dtype=np.int64)
    return out


__all__ = ["VERDICT_COLUMNS", "VerdictConfig", "judge"]
