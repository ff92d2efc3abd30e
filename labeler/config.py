"""The labeler's settings (:class:`LabelerConfig`) and the one way every labeler and
importer setting is given: an instance, a dict of its fields, or None for the
defaults (:func:`make_config`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from faultlab.errors import BadInput


def _job_wide_types() -> tuple[str, ...]:
    """The registered fault types whose effect is job-wide: each fault type's module
    declares it (``Injector.job_wide``), so a new job-wide type needs no change here."""
    # the fault types register as their package imports its modules: imported when a
    # default config is made, not with the labeler
    from faultlab.injectors.registry import job_wide_types

    return job_wide_types()


@dataclass(frozen=True)
class LabelerConfig:
    """Defaults of the labeler. Units: ``*_steps`` count training steps; thresholds are
    ratios (value / baseline); ``mad_k`` is a multiple of the robust sigma
    (1.4826 x MAD).

    Attributes:
        temporal_window_steps: trailing window of the temporal baseline (steps). 50.
        temporal_min_valid_steps: fewest unflagged steps in the window to refresh the
            baseline; with fewer (deep in a long fault) it is held. Also the warm-up
            length, which uses the median of the first window. 10.
        temporal_block_steps: the temporal baseline is refreshed every this many steps
            (a speed knob: flags are still per step). 5.
        temporal_threshold: temporal flag when value / baseline exceeds it. 1.3.
        peer_threshold: peer flag when compute_s / peer median exceeds it. 1.3.
        peer_min_ranks: fewest ranks with data in the peer group for a peer flag. 2.
        mad_k: a flag also needs value - baseline > mad_k x sigma (noise floor). 4.0.
        gap_steps: flagged runs separated by at most this many unflagged steps merge. 2.
        min_steps: shortest interval kept (first..last step inclusive). 3.
        min_slowdown: a label's slowdown (ratio to its baseline over the whole
            interval) must reach this, else it is no slowdown and is dropped. 1.2.
        gap_s: flagged runs separated by at most this many seconds also merge. 0.3.
        min_duration_s: shortest interval kept, in seconds (a fail-slow condition
            outlasts a scheduler hiccup). 1.0.
        match_slack_steps: reconciliation time slack, in median job step times. 3.0.
        intermittent_period_s: the longest stall period (seconds) at which an
            intermittent straggler (a duty-cycle pause, GC storms) is recognized: job
            flags up to this far apart form one episode whose stalls vote for a rank
            (see :func:`faultlab.labeler.intermittent.intermittent`). 3.5.
        job_wide_fault_types: fault types whose effect is job-wide (they match the
            ``job`` label, not a rank). The registered types that declare it
            (``Injector.job_wide``): ("nic-slow",).
        group_gap_sigmas: peer groups are discovered by cutting the ranks' sorted
            log typical local times only at a gap of at least this many pooled
            MAD-sigmas of the levels within the sides (or, for a gap of
            ``peer_threshold`` or more, ``mad_k`` of them; see
            :mod:`faultlab.labeler.peergroups`). 6.0.
        group_min_gap: ... and of at least this ratio of the upper level to the
            lower (a difference that matters to a peer view). 1.05.
    """

    temporal_window_steps: int = 50
    temporal_min_valid_steps: int = 10
    temporal_block_steps: int = 5
    temporal_threshold: float = 1.3
    peer_threshold: float = 1.3
    peer_min_ranks: int = 2
    mad_k: float = 4.0
    gap_steps: int = 2
    min_steps: int = 3
    gap_s: float = 0.3
    min_slowdown: float = 1.2
    min_duration_s: float = 1.0
    match_slack_steps: float = 3.0
    intermittent_period_s: float = 3.5
    job_wide_fault_types: tuple[str, ...] = field(default_factory=_job_wide_types)
    group_gap_sigmas: float = 6.0
    group_min_gap: float = 1.05

    def __post_init__(self) -> None:
        for name in ("temporal_window_steps", "temporal_min_valid_steps", "temporal_block_steps",
                     "peer_min_ranks", "min_steps"):
            if int(getattr(self, name)) < 1:
                raise BadInput(f"must be >= 1, got {getattr(self, name)!r}", field=name)
        for name in ("group_gap_sigmas", "gap_steps", "mad_k", "match_slack_steps", "gap_s", "min_duration_s", "intermittent_period_s"):
            if float(getattr(self, name)) < 0:
                raise BadInput(f"must be >= 0, got {getattr(self, name)!r}", field=name)
        for name in ("temporal_threshold", "peer_threshold", "group_min_gap"):
            if not float(getattr(self, name)) > 1.0:
                raise BadInput(f"must be > 1.0 (a ratio), got {getattr(self, name)!r}", field=name)
        object.__setattr__(self, "job_wide_fault_types", tuple(self.job_wide_fault_types))

    def to_dict(self) -> dict:
        """The config as a JSON-able dict."""
        d = asdict(self)
        d["job_wide_fault_types"] = list(self.job_wide_fault_types)
        return d


def make_config(cls, config, *, fix: str | None = None):
    """``cls()`` for None, ``config`` itself for an instance, ``cls(**config)`` for a
    dict (BadInput naming unknown fields; ``fix`` its fix, by default the fields)."""
    if config is None:
        return cls()
    if isinstance(config, cls):
        return config
    if isinstance(config, dict):
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise BadInput(f"unknown field(s) {', '.join(unknown)}", field="config",
                           fix=fix or f"fields of {cls.__name__}: {', '.join(sorted(known))}")
        return cls(**config)
    raise BadInput(f"expected {cls.__name__} or dict, got {type(config).__name__}", field="config")


def labeler_config(config) -> LabelerConfig:
    """:func:`make_config` of :class:`LabelerConfig` (``label(config=...)``)."""
    return make_config(LabelerConfig, config, fix="see faultlab.labeler.LabelerConfig")
