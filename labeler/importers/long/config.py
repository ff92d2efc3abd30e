"""Settings of the ``long`` importer (:class:`LongConfig`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from faultlab.errors import BadInput
from faultlab.labeler.config import labeler_config, make_config
from faultlab.labeler.verdict import VerdictConfig


@dataclass(frozen=True)
class LongConfig:
    """Settings of the ``long`` importer. The thresholds are the labeler's own defaults
    (:class:`faultlab.labeler.LabelerConfig`), in samples instead of steps.

    Attributes:
        labeler: a :class:`~faultlab.labeler.LabelerConfig` (or dict of its fields):
            ``temporal_window_steps`` (trailing baseline, samples, 50),
            ``temporal_min_valid_steps`` (10), ``temporal_block_steps`` (5),
            ``temporal_threshold`` (1.3), ``peer_threshold`` (1.3), ``peer_min_ranks``
            (fewest components with data in the group, 2), ``mad_k`` (4.0),
            ``gap_steps`` (2), ``min_steps`` (3 samples), ``gap_s`` (0.3),
            ``min_duration_s`` (1.0), ``min_slowdown`` (1.2).
        align_s: samples are bucketed to ``floor(timestamp / align_s)`` before peers are
            compared (values in a bucket are averaged); 0 compares exact timestamps;
            None (the default) compares exact timestamps when the components share
            them, else aligns to the median sampling interval (seconds) of the metric
            (hosts sampling on their own clocks, 100 ms apart, still have peers).
        higher_is_better: metric names whose value is a speed (throughput, ...): they are
            inverted (1 / value) before judging, so larger still means slower. ().
        group_wide_fraction: when at least this fraction of a group's components are
            slow against their own history at a sample, the group as a whole is slowed
            (a ``group:NAME`` label), not each component. 0.5.
        verdict: the component verdict's settings
            (:class:`faultlab.labeler.verdict.VerdictConfig` or a dict of its fields; the
            same defaults as the ``perseus`` importer's): which components are
            fail-slow (``persistent``), from each component's median peer ratio over
            its time against all the input's components (see :func:`judge_persistence`).
        load_bins: equal-count load bins of the value-vs-load regression, for inputs
            with a ``load`` column (the ``perseus`` importer's ``n_bins``). 16.
        load_min_samples: fewest samples of a peer group (one metric) to fit that
            regression; a smaller group's values are judged as they are (the
            ``perseus`` importer's ``min_fit_samples``). 100.
        level_block_samples: a component's level is the median of the medians of
            blocks of this many consecutive samples of its peer ratio (the ``perseus``
            importer's 5-min window of 15-s samples): on a noisy component a slow
            episode in a quarter of its time would shift the median of single samples
            by half a sample's noise (1.1x at 24% noise), the median of block medians
            by far less. 20.
        peer_groups: ``{component: group}`` (``faultlab label --peer-groups FILE``):
            the components' peer groups, over the input's ``peer_group``; None (the
            default): the input's groups when it declares more than one, else the
            groups discovered from the components' typical values
            (:mod:`faultlab.labeler.peergroups`).
    """

    labeler: Any = None
    align_s: float | None = None
    higher_is_better: tuple[str, ...] = ()
    group_wide_fraction: float = 0.5
    verdict: Any = None
    load_bins: int = 16
    load_min_samples: int = 100
    level_block_samples: int = 20
    peer_groups: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "labeler", labeler_config(self.labeler))
        object.__setattr__(self, "higher_is_better", tuple(str(m) for m in self.higher_is_better))
        if self.align_s is not None and not float(self.align_s) >= 0:
            raise BadInput(f"must be >= 0, got {self.align_s!r}", field="align_s")
        for name in ("load_bins", "load_min_samples", "level_block_samples"):
            if int(getattr(self, name)) < 1:
                raise BadInput(f"must be >= 1, got {getattr(self, name)!r}", field=name)
        if not 0.0 < float(self.group_wide_fraction) <= 1.0:
            raise BadInput(f"must be in (0, 1], got {self.group_wide_fraction!r}", field="group_wide_fraction")
        object.__setattr__(self, "verdict", make_config(VerdictConfig, self.verdict))
        if self.peer_groups is not None and not isinstance(self.peer_groups, dict):
            raise BadInput(f"expected a mapping component -> group, got {type(self.peer_groups).__name__}",
                           field="peer_groups")

    def to_dict(self) -> dict:
        return {"labeler": self.labeler.to_dict(), "align_s": self.align_s,
                "higher_is_better": list(self.higher_is_better), "group_wide_fraction": self.group_wide_fraction,
                "verdict": self.verdict.to_dict(), "load_bins": int(self.load_bins),
                "load_min_samples": int(self.load_min_samples), "level_block_samples": int(self.level_block_samples),
                "peer_groups": dict(self.peer_groups) if self.peer_groups else None}
