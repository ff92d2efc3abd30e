"""Scenario and campaign files (YAML), validated before anything runs.

A **scenario** is one run: a testbed, a workload and a fault schedule::

    name: quickstart
    seed: 0
    testbed: {backend: netns, nodes: 4}        # netns (root) or local
    # testbed.node_groups: [{nodes: [2, 3], compute_repeat: 2, labels: {gpu: v100}}]
    #   nodes slower by design for the whole run (labels: their declared peer group)
    workload:
      kind: ddp                                 # ddp | pipeline
      duration: 60s                             # or steps: 2000
      hidden: 512
      batch: 512
      stragglers:                               # software stragglers (see benchmarks)
        seq_len: {sigma: 0.5, rebalance: false} # per-rank token counts, lognormal
        gc: {mode: uncoordinated, every_steps: 50}
    faults:
      - type: nic-slow
        node: n2                                # a testbed node, or
        at: 15s                                 # or at_step: 400
        duration: 10s
        params: {rate: 50mbit}
      - type: cpu-contention
        rank: 1                                 # the PIDs of that rank
        at: 35s
        duration: 10s
        repeat: {every: 20s, times: 2}
        params: {cpu_fraction: 0.25}

A **campaign** draws many scenarios from distributions, seeded (the same seed gives
the same schedules), see :class:`Campaign`.

Errors name the file, the line and the field: ``quickstart.yaml:14: faults[0].params.rate:
'100 mbps' has a space before its unit (write e.g. 100mbit)``, raised as BadInput.
Checked before anything starts: types, units, negative durations, unknown fault
types, targets that do not exist in the testbed, faults past the end of the run, and
overlapping faults of the same kind on one target.

The module runs past 800 lines and is still one idea, the input file: a campaign's
base is a scenario, its draws become the same :class:`FaultSpec` checked by the same
validators, one loader (:func:`parse`) tells the two kinds apart, and both name an
error by the same file, line and field.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from faultlab import injectors, inputfile
from faultlab.errors import BadInput, pydantic_fix
from faultlab.injectors import FAULT_TYPES
from faultlab.injectors.registry import option_help, params_by_option
from faultlab.nodes import LocalNode
from faultlab.units import parse_duration
from faultlab.yamlsafe import DuplicateKey, compose as compose_yaml, load as load_yaml
from faultlab.yamlloc import fmt_loc, line_of


def param_options() -> dict[str, str]:
    """Scenario parameter name -> CLI option of ``faultlab.injectors.build``, over every
    registered fault type (each declares its parameters once: ``Injector.PARAMS``)."""
    return {p.name: p.option for cls in FAULT_TYPES.values() for p in cls.PARAMS}


def rank_types() -> set[str]:
    """The fault types whose target is a rank's processes (the others target a node)."""
    return {name for name, cls in FAULT_TYPES.items() if cls.targets == "rank"}


#: the longest scenario name (a run id adds ``-YYYYmmdd-HHMMSS-XXXX``, 21 characters)
RUN_NAME_MAX = 64
#: the longest run id (faultlab.rundir.new_run_id of the longest name)
RUN_ID_MAX = RUN_NAME_MAX + 21
#: the longest campaign name (its runs are ``NAME-RRRR``)
CAMPAIGN_NAME_MAX = RUN_NAME_MAX - 5
_RUN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


def check_run_name(v, max_len: int = RUN_NAME_MAX) -> str:
    """``v`` when it is a run name: one path component of ``[A-Za-z0-9._-]``, not
    starting with ``.``, at most ``max_len`` characters. Run folders (``./faultlab-runs/
    NAME-...``, a campaign's ``OUT/NAME-RRRR``) and node telemetry folders are named by
    it, so a name with ``/`` or ``..`` would make root create folders elsewhere.
    Raises ValueError (the message carries the fix)."""
    if not isinstance(v, str) or not _RUN_NAME.fullmatch(v):
        raise ValueError(f"{v!r} is not a plain name: give one path component of [A-Za-z0-9._-], "
                         "not starting with '.', e.g. quickstart-1")
    if len(v) > max_len:
        raise ValueError(f"has {len(v)} characters: give at most {max_len} of [A-Za-z0-9._-]")
    return v


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _dur(v, info) -> float:
    if v is None:
        return v
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        raise ValueError(f"{v!r} has no unit (write e.g. 30s, 500ms or 2m)")
    try:
        return parse_duration(v, info.field_name)
    except BadInput as e:
        raise ValueError(str(e).split(": ", 1)[-1]) from None


class NodeGroup(_Strict):
    """Nodes that differ from the rest for the whole run, by design (a heterogeneous
    testbed: an older hardware generation, another role): ``nodes`` (the testbed's
    node indices, ``n0`` = 0), ``compute_repeat`` (the rank on such a node does its
    forward + backward that many times a step, on that share of the loss each: the
    same gradient, that many times the compute; ddp) and ``labels`` (e.g. ``{gpu:
    v100}``: written as the ranks' ``peer_group``, ``gpu=v100``, so the labeler takes
    the group as declared; without labels it must find the group itself)."""

    nodes: list[int] = Field(..., min_length=1, description="node indices (0 = n0)")
    compute_repeat: int = Field(1, ge=1, le=16, description="forward + backward passes a step (ddp)")
    labels: dict[str, str] = Field({}, description="node labels, e.g. {gpu: v100}: the ranks' declared peer group")

    def peer_group(self) -> str | None:
        """The declared peer group of the group's ranks (:func:`peer_group_of` its
        labels), or None without labels."""
        return peer_group_of(self.labels)


def peer_group_of(labels: dict[str, str]) -> str | None:
    """The declared peer group node labels name (``{gpu: v100, role: learner}`` ->
    ``gpu=v100,role=learner``, sorted by key), or None for no labels."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or None


class Testbed(_Strict):
    """Where the ranks run: ``netns`` (one network-namespace node per rank; root),
    ``docker`` (one container per rank, faults from the docker host; root), ``ssh``
    (containers of a docker testbed reached over SSH with pinned host keys; root) or
    ``local`` (plain local processes on loopback). ``node_groups``: nodes made
    permanently different (:class:`NodeGroup`)."""

    backend: Literal["netns", "docker", "ssh", "local"] = "netns"
    nodes: int = Field(4, ge=2, le=64, strict=True, description="number of nodes, one rank each (a whole number: true is refused)")
    node_groups: list[NodeGroup] = []

    def rank_args(self, node_labels: list[dict[str, str]] | None = None) -> dict[int, list[str]]:
        """``{rank: argv}`` of the ranks that differ (rank i runs on node i): in a node
        group, ``--compute-repeat`` and, with labels, ``--peer-group``; a rank in no
        labeled node group takes its ``--peer-group`` from ``node_labels[i]`` (an
        inventory node's, :func:`faultlab.nodes.inventory.ssh_nodes`) if any."""
        out: dict[int, list[str]] = {}
        labeled = set()
        for g in self.node_groups:
            args = ["--compute-repeat", str(g.compute_repeat)] if g.compute_repeat > 1 else []
            if g.peer_group():
                args += ["--peer-group", g.peer_group()]
                labeled.update(g.nodes)
            for i in g.nodes:
                if args:
                    out[i] = list(args)
        for i, labels in enumerate(node_labels or []):
            if i not in labeled and peer_group_of(labels or {}):
                out[i] = out.get(i, []) + ["--peer-group", peer_group_of(labels)]
        return out


#: the largest median ``seq_len.tokens`` (a step's rows, as ``workload.batch``'s bound)
MAX_SEQ_TOKENS = 65536
#: the most layers one pipeline stage may hold (``workload.layers_per_stage``)
MAX_STAGE_LAYERS = 64


class KnobWindow(_Strict):
    """The steps a software-straggler knob is in force: ``from_step`` (inclusive) to
    ``to_step`` (exclusive; None: the run's end), so a run can have clean and
    straggling stretches. The knob is recorded in the run's injections over these
    steps (:mod:`faultlab.knobfaults`)."""

    from_step: int = Field(0, ge=0, strict=True)
    to_step: int | None = Field(None, ge=1, strict=True)

    @model_validator(mode="after")
    def _order(self):
        if self.to_step is not None and self.to_step <= self.from_step:
            raise ValueError(f"to_step {self.to_step} is not after from_step {self.from_step}")
        return self

    def window_arg(self) -> str:
        """The rank's ``FROM:TO`` argument (``faultlab.benchmarks.knobs.parse_window``)."""
        return f"{self.from_step}:{'' if self.to_step is None else self.to_step}"


class SeqLen(KnobWindow):
    """Sequence-length imbalance: per-rank token counts drawn each step from a
    lognormal (median ``tokens``, shape ``sigma``); ``rebalance`` applies greedy
    rebalancing (the mitigation) before the step, as do the steps outside the
    window."""

    # a rank computes up to 16 times the median a step (faultlab.benchmarks.knobs.MAX_TOKENS_FACTOR):
    # bounded as ``batch`` is, so no scenario has a rank ask for more rows than a batch may hold
    tokens: int = Field(512, ge=16, le=MAX_SEQ_TOKENS, description="median tokens per rank per step")
    sigma: float = Field(0.5, ge=0.0, le=3.0)
    rebalance: bool = False


class Gc(KnobWindow):
    """Python GC: ``uncoordinated`` (each rank collects when its own allocation
    threshold trips, at different steps) or ``planned`` (gc disabled, every rank
    collects at the same step every ``every_steps``); steps outside the window make no
    garbage."""

    mode: Literal["uncoordinated", "planned"] = "uncoordinated"
    every_steps: int = Field(50, ge=1)
    garbage_mb: float = Field(20.0, gt=0, le=2048, description="cyclic garbage made per step (MB)")


class SlowShard(KnobWindow):
    """A slow data shard (ddp): rank ``rank``'s samples are ``factor`` times as long
    as the others', so it computes that many times the rows in the window."""

    rank: int = Field(..., ge=0, strict=True)
    factor: float = Field(..., gt=1.0, le=16.0, description="its samples' length over the others'")


class Stragglers(_Strict):
    """The workload's software-straggler knobs (each with its window of steps)."""

    seq_len: SeqLen | None = None
    gc: Gc | None = None
    slow_shard: SlowShard | None = None


class DataPath(_Strict):
    """Disk-backed data (ddp): the rank reads a shard of its batches from ``dir`` every
    step (page cache dropped, so the read reaches the disk) and writes a checkpoint
    every ``checkpoint_every`` steps (O_DIRECT + fsync; 0 = never), so a slow disk
    (``io-slow`` on a path of the same device) stalls the job."""

    dir: str = Field("/var/tmp/faultlab-data", description="folder on the disk to read from (a per-run subfolder is made and removed)")
    checkpoint_every: int = Field(100, ge=0, description="steps between checkpoints; 0: none")

    @field_validator("dir")
    @classmethod
    def _abs(cls, v):
        if not v.startswith("/"):
            raise ValueError("give an absolute path, e.g. /var/tmp/faultlab-data")
        return v


class Workload(_Strict):
    """The training job. ``duration`` (with a unit) or ``steps``."""

    kind: Literal["ddp", "pipeline"] = "ddp"
    duration: float | None = Field(None, description="training time, e.g. 60s")
    steps: int | None = Field(None, ge=1)
    hidden: int = Field(512, ge=8, le=16384)
    batch: int = Field(512, ge=1, le=65536)
    threads: int = Field(1, ge=1, le=64)
    stages: int | None = Field(None, ge=2, le=8, description="pipeline stages (kind: pipeline)")
    # each stage's layers are the rank's memory (hidden**2 floats a layer): bounded as hidden is
    layers_per_stage: list[Annotated[int, Field(ge=1, le=MAX_STAGE_LAYERS, strict=True)]] | None = Field(
        None, description=f"pipeline: layers of each stage, 1 to {MAX_STAGE_LAYERS} (uneven = stage imbalance)")
    stragglers: Stragglers = Stragglers()
    data: DataPath | None = Field(None, description="disk-backed data path and checkpoints (ddp); off by default")

    _d = field_validator("duration", mode="before")(_dur)

    @model_validator(mode="after")
    def _check(self):
        if self.duration is None and self.steps is None:
            self.duration = 60.0
        if self.kind == "pipeline":
            if self.stages is None:
                raise ValueError("kind pipeline needs stages (2 to 8)")
            if self.layers_per_stage is not None and len(self.layers_per_stage) != self.stages:
                raise ValueError(f"layers_per_stage has {len(self.layers_per_stage)} entries for {self.stages} stages")
        if self.data is not None and (self.kind != "ddp" or self.stragglers.seq_len is not None):
            raise ValueError("data (disk-backed data path) needs kind ddp without seq_len")
        if self.stragglers.slow_shard is not None and (self.kind != "ddp" or self.data is not None):
            raise ValueError("stragglers.slow_shard needs kind ddp without data (a shard of the in-memory pool)")
        return self


class Repeat(_Strict):
    every: float = Field(..., description="period between starts, e.g. 30s")
    times: int = Field(..., ge=1, le=1000)

    _d = field_validator("every", mode="before")(_dur)


class FaultSpec(_Strict):
    """One scheduled fault. ``node`` (a testbed node name, for node faults such as
    nic-slow) or ``rank`` (for faults on a rank's processes); ``at`` (seconds from the
    first training step) or ``at_step``; ``duration``; ``params`` as the CLI takes them
    (``rate: 50mbit``)."""

    type: str
    node: str | None = None
    rank: int | None = Field(None, ge=0, strict=True)
    at: float | None = None
    at_step: int | None = Field(None, ge=0)
    duration: float
    repeat: Repeat | None = None
    params: dict[str, Any] = {}

    _d = field_validator("at", "duration", mode="before")(_dur)

    @field_validator("type")
    @classmethod
    def _type(cls, v):
        if v not in FAULT_TYPES:
            raise ValueError(f"unknown fault type {v!r} (use one of {', '.join(FAULT_TYPES)})")
        return v

    @field_validator("params")
    @classmethod
    def _params(cls, v):
        known = param_options()
        bad = [k for k in v if k not in known]
        if bad:
            raise ValueError(f"unknown parameter {bad[0]!r} (known: {', '.join(known)})")
        return v

    @model_validator(mode="after")
    def _check(self):
        if (self.at is None) == (self.at_step is None):
            raise ValueError("give exactly one of at (e.g. 15s) or at_step")
        if self.type in rank_types():
            if self.rank is None:
                raise ValueError(f"{self.type} targets a rank's processes: give rank")
        elif self.node is None and self.rank is None:
            raise ValueError(f"{self.type} targets a node: give node (e.g. n2) or rank")
        return self

    def options(self) -> dict[str, str]:
        """Parameters as CLI options for ``faultlab.injectors.build``."""
        known = param_options()
        return {known[k]: str(v) for k, v in self.params.items()}

    def occurrences(self) -> list[tuple[float | None, int | None]]:
        """(at seconds or None, at_step or None) of every repetition."""
        n = self.repeat.times if self.repeat else 1
        if self.at is not None:
            every = self.repeat.every if self.repeat else 0.0
            return [(self.at + i * every, None) for i in range(n)]
        return [(None, self.at_step)]


class Scenario(_Strict):
    """One run: testbed, workload, faults (see the module docstring)."""

    name: str = "scenario"
    seed: int = Field(0, ge=0, lt=2**53)  # torch and numpy seeds take it; JSON keeps it exact
    testbed: Testbed = Testbed()
    workload: Workload = Workload()
    faults: list[FaultSpec] = []

    _n = field_validator("name", mode="before")(lambda v: check_run_name(v))

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo):
        n = self.testbed.nodes
        _check_node_groups(self.testbed, self.workload)
        given = (info.context or {}).get("nodes")  # inventory node names (load(..., nodes=))
        names = set(given) if given else {f"n{i}" for i in range(n)}
        where = "the inventory has" if given else "the testbed has"
        for i, f in enumerate(self.faults):
            if f.node is not None and f.node not in names:
                raise _FieldError(("faults", i, "node"), f"node {f.node!r} does not exist ({where} {', '.join(sorted(names))})")
            if f.rank is not None and f.rank >= n:
                raise _FieldError(("faults", i, "rank"), f"rank {f.rank} does not exist (world size {n})")
        shard = self.workload.stragglers.slow_shard
        if shard is not None and shard.rank >= n:
            raise _FieldError(("workload", "stragglers", "slow_shard", "rank"), f"rank {shard.rank} does not exist (world size {n})")
        for i, f in enumerate(self.faults):
            if f.repeat and f.at_step is not None:
                raise _FieldError(("faults", i, "repeat"), "repeat needs at (seconds), not at_step")
            if f.repeat and f.repeat.every < f.duration:
                raise _FieldError(("faults", i, "repeat", "every"), f"every {f.repeat.every:g}s is shorter than the duration {f.duration:g}s: the repetitions would overlap")
            if self.workload.duration is not None:
                for at, _ in f.occurrences():
                    if at is not None and at + f.duration > self.workload.duration:
                        raise _FieldError(("faults", i, "at"), f"the fault ends at {at + f.duration:g}s, after the run ({self.workload.duration:g}s)")
            _check_params(f, i)
        # overlapping faults of the same kind on one target
        spans: dict[tuple, list[tuple[float, float, int]]] = {}
        for i, f in enumerate(self.faults):
            key = (f.type, f.rank if f.rank is not None else f.node)
            for at, _ in f.occurrences():
                if at is None:
                    continue
                for a0, a1, j in spans.get(key, []):
                    if at < a1 and a0 < at + f.duration:
                        raise _FieldError(("faults", i), f"overlaps faults[{j}]: two {f.type} faults on {key[1]} at once (the second would be refused)")
                spans.setdefault(key, []).append((at, at + f.duration, i))
        return self


def _check_node_groups(tb: Testbed, w: Workload) -> None:
    """Each node group's nodes exist and no node is in two groups; a compute_repeat
    needs a ddp workload."""
    seen: dict[int, int] = {}
    for k, g in enumerate(tb.node_groups):
        for i in g.nodes:
            if not 0 <= i < tb.nodes:
                raise _FieldError(("testbed", "node_groups", k, "nodes"), f"node {i} does not exist (the testbed has nodes 0..{tb.nodes - 1})")
            if i in seen:
                raise _FieldError(("testbed", "node_groups", k, "nodes"), f"node {i} is in node_groups[{seen[i]}] too")
            seen[i] = k
        if g.compute_repeat > 1 and w.kind != "ddp":
            raise _FieldError(("testbed", "node_groups", k, "compute_repeat"), "compute_repeat needs workload kind ddp")


class _FieldError(ValueError):
    def __init__(self, loc: tuple, msg: str):
        super().__init__(msg)
        self.loc = loc


def _check_params(f: FaultSpec, i: int) -> None:
    """Parse the parameters as the injector will (units, ranges), on a stand-in node:
    nothing is probed or applied."""
    placeholder = "999999" if f.type in rank_types() else None  # parsed, never probed
    try:
        injectors.build(f.type, LocalNode("validate"), target=placeholder, duration_s=f.duration, opts=f.options())
    except BadInput as e:
        opt = e.field or ""
        param = next((k for k, o in param_options().items() if o == opt), None)
        raise _FieldError(("faults", i, "params", param) if param else ("faults", i, "params"), scenario_words(str(e).split(": ", 1)[-1])) from None


_FLAG_VALUE = re.compile(r"--([a-z][a-z-]*) (\d\S*)")
_FLAG = re.compile(r"--([a-z][a-z-]*)")


def scenario_words(msg: str) -> str:
    """An injector's message with its CLI flags in the scenario file's words:
    ``--pause 200ms`` -> ``pause: 200ms``, ``--rate`` -> ``params.rate``,
    ``--duration`` -> ``duration`` (flags that are no scenario field stay as they are)."""
    fields = {o: k for k, o in param_options().items()}

    def value(m: re.Match) -> str:
        key = fields.get(f"--{m[1]}") or ("duration" if m[1] == "duration" else None)
        return f"{key}: {m[2]}" if key else m[0]

    def flag(m: re.Match) -> str:
        key = fields.get(m[0])
        return f"params.{key}" if key else ("duration" if m[0] == "--duration" else m[0])

    return _FLAG.sub(flag, _FLAG_VALUE.sub(value, msg))


# -- campaigns ------------------------------------------------------------------------


class Range(_Strict):
    """A uniform distribution ``[low, high]`` (numbers, or strings with units)."""

    low: Any
    high: Any


class FaultDraw(_Strict):
    """How one fault type is drawn: its weight and, per parameter, a list of choices
    or a ``{low, high}`` range (units kept: ``{low: 10mbit, high: 200mbit}``)."""

    weight: float = Field(1.0, gt=0)
    params: dict[str, Any] = {}


class KnobDraw(_Strict):
    """How a campaign draws one workload knob (software straggler) for a run: ``p`` the
    chance a run gets it; ``params`` per field of the knob (``SeqLen``, ``Gc``,
    ``SlowShard``; ``stage_imbalance``: ``layers_per_stage``) a list of choices or a
    ``{low, high}`` range; the window: ``from_step`` drawn from ``[low, high]`` and
    ``steps`` (its length, ``[low, high]``; none: to the end of the run)."""

    p: float = Field(0.5, ge=0.0, le=1.0)
    params: dict[str, Any] = {}
    from_step: tuple[int, int] = (0, 0)
    steps: tuple[int, int] | None = None


#: the knobs a campaign can draw: a ``workload.stragglers`` key, or stage_imbalance
KNOBS = ("seq_len", "gc", "slow_shard", "stage_imbalance")


class Campaign(_Strict):
    """Many runs with randomized faults, seeded: ``runs`` scenarios derived from
    ``base`` with ``faults_per_run`` faults each, types drawn by weight from ``types``,
    targets uniformly, start and duration uniformly from ``start`` and ``duration``
    (seconds), never two faults of one kind on one target at once.

    ``spacing`` (seconds, optional) keeps any two faults of a run at least that far
    apart (end of one to start of the next, any kind, any target): isolated faults, so
    the slowdown each caused can be measured on its own (an evaluation campaign); None
    allows overlapping faults.

    ``knobs`` (optional): workload knobs drawn per run (:class:`KnobDraw`), on top of
    ``base``'s; ``controls`` (0..1): the chance a run is a fault-free control (no fault,
    no drawn knob; ``base``'s knobs stay). Both draw after a run's faults, so adding them
    leaves a campaign's fault schedules as they are."""

    name: str = "campaign"
    seed: int = Field(0, ge=0, lt=2**31)  # a run's seed is seed * 100003 + its index: kept a safe integer
    runs: int = Field(..., ge=1, le=10000)
    base: Scenario = Scenario()
    faults_per_run: tuple[int, int] = (1, 2)
    types: dict[str, FaultDraw] = Field(..., min_length=1)
    start: tuple[float, float] = (10.0, 40.0)
    duration: tuple[float, float] = (5.0, 15.0)
    spacing: float | None = None
    knobs: dict[Literal[KNOBS], KnobDraw] = {}
    controls: float = Field(0.0, ge=0.0, le=1.0)

    _n = field_validator("name", mode="before")(lambda v: check_run_name(v, CAMPAIGN_NAME_MAX))

    @field_validator("spacing", mode="before")
    @classmethod
    def _spacing(cls, v, info):
        return None if v is None else _dur(v, info)

    @field_validator("start", "duration", mode="before")
    @classmethod
    def _span(cls, v, info):
        if not isinstance(v, (list, tuple)) or len(v) != 2:
            raise ValueError("give [low, high], e.g. [10s, 40s]")
        out = tuple(_dur(x, info) for x in v)
        if out[0] > out[1]:
            raise ValueError(f"low {out[0]:g}s is above high {out[1]:g}s")
        return out

    @field_validator("faults_per_run")
    @classmethod
    def _per_run(cls, v):
        if not 0 <= v[0] <= v[1] <= 64:
            raise ValueError(f"give [low, high] with 0 <= low <= high <= 64, got [{v[0]}, {v[1]}]")
        return v

    @field_validator("types")
    @classmethod
    def _types(cls, v):
        known = param_options()
        for k, d in v.items():
            if k not in FAULT_TYPES:
                raise ValueError(f"unknown fault type {k!r} (use one of {', '.join(FAULT_TYPES)})")
            bad = [p for p in d.params if p not in known]
            if bad:
                raise ValueError(f"{k}: unknown parameter {bad[0]!r}")
        return v

    @model_validator(mode="after")
    def _draws(self):
        """Every fault type's parameters, at each end of each draw, parse as the injector
        will (:func:`_check_draws`): a required one missing is refused here, naming
        ``types.TYPE.params.PARAM``, not when a run is drawn."""
        for t, d in self.types.items():
            _check_draws(t, d.params, self.duration[0])
        return self

    def scenarios(self, nodes: list[str] | None = None) -> list[Scenario]:
        """The ``runs`` scenarios, deterministic in ``seed``. ``nodes``: the node names
        drawn from (an inventory's, in order; default the testbed's ``n0..``), one rank
        each."""
        rng = random.Random(self.seed)
        out = []
        names = list(self.types)
        weights = [self.types[n].weight for n in names]
        n_nodes = len(nodes) if nodes else self.base.testbed.nodes
        node_names = list(nodes) if nodes else [f"n{i}" for i in range(n_nodes)]
        for r in range(self.runs):
            faults: list[dict] = []
            spans: dict[tuple, list[tuple[float, float]]] = {}
            want = rng.randint(*self.faults_per_run)
            tries = 0
            while len(faults) < want and tries < 50 * want:
                tries += 1
                t = rng.choices(names, weights)[0]
                at = round(rng.uniform(*self.start), 2)
                dur = round(rng.uniform(*self.duration), 2)
                if self.base.workload.duration is not None and at + dur > self.base.workload.duration:
                    continue
                spec: dict = {"type": t, "at": f"{at}s", "duration": f"{dur}s"}
                if t in rank_types():
                    spec["rank"] = rng.randrange(n_nodes)
                    key = (t, spec["rank"])
                else:
                    spec["node"] = node_names[rng.randrange(n_nodes)]
                    key = (t, spec["node"])
                if any(at < b and a < at + dur for a, b in spans.get(key, [])):
                    continue
                if self.spacing is not None and any(
                    at < b + self.spacing and a < at + dur + self.spacing for sp in spans.values() for a, b in sp
                ):
                    continue
                spec["params"] = {p: _draw(rng, d) for p, d in self.types[t].params.items()}
                spans.setdefault(key, []).append((at, at + dur))
                faults.append(spec)
            data = self.base.model_dump(mode="python")
            if self.controls and rng.random() < self.controls:
                faults = []
            elif self.knobs:
                _draw_knobs(rng, self.knobs, data["workload"])
            data["name"] = f"{self.name}-{r:03d}"
            data["seed"] = self.seed * 100003 + r
            data["faults"] = sorted(faults, key=lambda f: float(f["at"][:-1]))
            data["workload"]["duration"] = f"{data['workload']['duration']}s" if data["workload"]["duration"] is not None else None
            if nodes:
                data["testbed"] = {**data["testbed"], "backend": "ssh", "nodes": n_nodes}
            try:
                out.append(Scenario.model_validate(_with_units(data), context={"nodes": node_names} if nodes else None))
            except ValidationError as e:
                raise DrawnError(e, data) from None
        return out


class DrawnError(BadInput):
    """A scenario drawn from a campaign that does not validate, as one line naming
    the campaign's field (``loc``) that drew it: a fault's parameter is
    ``types.TYPE.params.PARAM``, its node or rank ``base.testbed.nodes``, its start
    ``start``, its duration ``duration``, the rest ``base.FIELD``."""

    def __init__(self, e: ValidationError, data: dict):
        err = e.errors()[0]
        loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and x.startswith(("function-", "tagged-union"))))
        ctx = err.get("ctx", {}).get("error")
        if isinstance(ctx, _FieldError):
            loc = loc + ctx.loc
        self.loc = _campaign_loc(loc, data)
        self.message = f"{err['msg'].removeprefix('Value error, ')} (in the drawn run {data['name']})"
        super().__init__(self.message, field=fmt_loc(self.loc), fix=pydantic_fix(err, "see `faultlab scenario schema --campaign`"))


def _campaign_loc(loc: tuple, data: dict) -> tuple:
    """The campaign field that drew the scenario field at ``loc`` (see DrawnError)."""
    if len(loc) >= 2 and loc[0] == "faults" and isinstance(loc[1], int) and loc[1] < len(data["faults"]):
        t = data["faults"][loc[1]]["type"]
        rest = loc[2:]
        if rest[:1] == ("params",):
            return ("types", t, *rest)
        if rest[:1] in (("node",), ("rank",)):
            return ("base", "testbed", "nodes")
        if rest[:1] == ("at",):
            return ("start",)
        if rest[:1] == ("duration",):
            return ("duration",)
        return ("types", t)
    return ("base", *loc)


def _draw_ends(d) -> list:
    """The values a draw can give at its ends: every choice of a list, ``low`` and
    ``high`` of a range, a constant itself."""
    if isinstance(d, list):
        return list(d) or [None]
    if isinstance(d, dict) and set(d) == {"low", "high"}:
        return [d["low"], d["high"]]
    return [d]


def _check_draws(fault_type: str, params: dict, duration_s: float) -> None:
    """Parse ``fault_type``'s drawn ``params`` as the injector will, on a stand-in node
    (nothing probed or applied): every parameter at its first value, then each in turn
    at each of its other ends. Raises _FieldError at ``types.TYPE.params[.PARAM]``."""
    first = {p: _draw_ends(d)[0] for p, d in params.items()}
    sets = [first] + [{**first, p: v} for p, d in params.items() for v in _draw_ends(d)[1:]]
    known = param_options()
    placeholder = "999999" if fault_type in rank_types() else None  # parsed, never probed
    for ps in sets:
        opts = {known[k]: str(v) for k, v in ps.items() if v is not None}
        try:
            injectors.build(fault_type, LocalNode("validate"), target=placeholder, duration_s=duration_s, opts=opts)
        except BadInput as e:
            param = next((k for k, o in known.items() if o == (e.field or "")), None)
            where = ("types", fault_type, "params", param) if param else ("types", fault_type, "params")
            msg = scenario_words(str(e).split(": ", 1)[-1])
            if param and param not in ps:  # the injector's alternatives, when it has several (rate, delay or loss)
                alt = msg[msg.index("(give "):].strip("() ") if "(give " in msg else ""
                msg = (f"{fault_type} needs {alt.removeprefix('give ')}, and none is drawn (add one to types.{fault_type}.params, e.g. {param}: [VALUE])"
                       if alt else f"{fault_type} needs {param}, and none is drawn (add {param}: [VALUE] to types.{fault_type}.params)")
            raise _FieldError(where, msg) from None


def _draw_knobs(rng: random.Random, knobs: dict, workload: dict) -> None:
    """Draw each knob of ``knobs`` (:class:`KnobDraw`) into ``workload`` (a dumped
    Workload), in order: with chance ``p``, its params and its window."""
    for name, kd in knobs.items():
        if rng.random() >= kd.p:
            continue
        params = {k: _draw(rng, d) for k, d in kd.params.items()}
        if name == "stage_imbalance":
            workload.update(params)
            continue
        lo = rng.randint(*kd.from_step)
        window = {"from_step": lo, "to_step": lo + rng.randint(*kd.steps) if kd.steps else None}
        workload["stragglers"][name] = {**(workload["stragglers"].get(name) or {}), **params, **window}


def _with_units(data: dict) -> dict:
    """model_dump gives durations as float seconds: write them back with their unit."""
    for f in data["faults"]:
        if f.get("repeat") and isinstance(f["repeat"].get("every"), float):
            f["repeat"]["every"] = f"{f['repeat']['every']}s"
    return data


def _draw(rng: random.Random, d):
    if isinstance(d, list):
        return rng.choice(d)
    if isinstance(d, dict) and set(d) == {"low", "high"}:
        lo, hi = d["low"], d["high"]
        if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
            v = rng.uniform(lo, hi)
            return round(v, 3) if isinstance(lo, float) or isinstance(hi, float) else int(round(v))
        m0, m1 = re.fullmatch(r"([\d.]+)(\D+)", str(lo)), re.fullmatch(r"([\d.]+)(\D+)", str(hi))
        if m0 and m1 and m0.group(2) == m1.group(2):
            # 3 significant digits, never in exponent notation (2860ms, not 2.86e+03ms)
            return f"{float(f'{rng.uniform(float(m0.group(1)), float(m1.group(1))):.3g}'):.10g}{m0.group(2)}"
        raise BadInput(f"cannot draw between {lo!r} and {hi!r}", field="types.params", fix="give numbers or the same unit on both ends")
    return d


def load(path: str | Path, kind: Literal["scenario", "campaign", "auto"] = "auto", nodes: list[str] | None = None) -> Scenario | Campaign:
    """Read and validate a scenario or campaign file (``auto``: a file with ``runs``
    is a campaign). Raises BadInput ``FILE:LINE: FIELD: what (fix)`` on the first
    problem: not a regular file or over :data:`faultlab.inputfile.YAML_BYTES` (nothing
    read), YAML syntax, types, units, unknown fault types, missing targets,
    overlapping same-kind faults.

    ``nodes``: the run's nodes are these inventory nodes (one rank each, in order):
    the testbed becomes ``{backend: ssh, nodes: len(nodes)}`` and a fault's ``node``
    must be one of these names (the error lists them)."""
    p = Path(path)
    text = inputfile.read_text(p, "SCENARIO", limit=inputfile.YAML_BYTES, fix="give the path of a YAML file")
    return parse(text, p, kind, nodes)


def parse(text: str, path: str | Path, kind: Literal["scenario", "campaign", "auto"] = "auto",
          nodes: list[str] | None = None) -> Scenario | Campaign:
    """:func:`load` of ``text`` already read from ``path`` (named in the errors): a
    caller that keeps what it validated (a dataset's copy of a campaign file) checks
    that very text, never a second read of a path its owner may have changed since."""
    p = Path(path)
    try:
        root = compose_yaml(text)
        data = load_yaml(text)
    except DuplicateKey as e:
        raise BadInput(f"{p}:{e.line}: duplicated key {e.key!r} (also at line {e.first_line})",
                       fix="keep one of them: YAML would silently take the last") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark else str(p)
        raise BadInput(f"{where}: not valid YAML: {getattr(e, 'problem', e)}", fix="fix the YAML syntax") from None
    if not isinstance(data, dict):
        raise BadInput(f"{p}: expected a mapping at the top (name, testbed, workload, faults)", fix="see examples/quickstart.yaml")
    if kind == "auto":
        kind = "campaign" if "runs" in data else "scenario"
    model = Campaign if kind == "campaign" else Scenario
    if nodes:
        key = "base" if kind == "campaign" else None
        tgt = data.setdefault(key, {}) if key else data
        if isinstance(tgt, dict) and isinstance(tgt.get("testbed", {}), dict):
            tgt["testbed"] = {**tgt.get("testbed", {}), "backend": "ssh", "nodes": len(nodes)}
    try:
        sc = model.model_validate(data, context={"nodes": list(nodes)} if nodes else None)
        if isinstance(sc, Campaign):  # the runs it draws are checked too, named by the campaign field that drew them
            try:
                sc.scenarios(nodes)
            except DrawnError as d:
                line = line_of(root, d.loc)
                raise BadInput(d.message, field=f"{p}:{line}: {fmt_loc(d.loc)}" if line else f"{p}: {fmt_loc(d.loc)}", fix=d.fix) from None
        return sc
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and x.startswith(("function-", "tagged-union"))))
        msg = err["msg"].removeprefix("Value error, ")
        ctx = err.get("ctx", {}).get("error")
        if isinstance(ctx, _FieldError):
            loc = loc + ctx.loc
        line = line_of(root, loc)
        field = fmt_loc(loc) or "(top)"
        fix = pydantic_fix(err, "see `faultlab scenario schema`")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        raise BadInput(msg, field=f"{p}:{line}: {field}" if line else f"{p}: {field}", fix=fix) from None


def schema(kind: Literal["scenario", "campaign"] = "scenario") -> dict:
    """The JSON Schema of a scenario (or campaign) file, with the fault types and
    their parameters of the registry (``FAULT_TYPES``, each type's ``PARAMS``)."""
    out = (Campaign if kind == "campaign" else Scenario).model_json_schema()
    defs = out.get("$defs", {})
    if "FaultSpec" in defs:
        _fault_spec_schema(defs["FaultSpec"])
    if "FaultDraw" in defs:
        defs["FaultDraw"]["properties"]["params"]["propertyNames"] = {"enum": list(param_options())}
    if kind == "campaign":
        out["properties"]["types"]["propertyNames"] = {"enum": list(FAULT_TYPES)}
    return out


def _fault_spec_schema(spec: dict) -> None:
    """Fill a fault's schema from the registry: ``type`` is one of the registered
    names, ``params`` holds the parameters of that type (one ``if``/``then`` per type)
    with their own schema (``Param.json_schema``)."""
    spec["properties"]["type"]["enum"] = list(FAULT_TYPES)
    params = {entries[0][1].name: {**entries[0][1].json_schema(), "description": option_help(entries)}
              for entries in params_by_option().values()}
    spec["properties"]["params"] = {"type": "object", "properties": params, "additionalProperties": False,
                                    "description": "the fault type's parameters, written as the CLI takes them (rate: 50mbit)"}
    spec["allOf"] = [{
        "if": {"properties": {"type": {"const": name}}, "required": ["type"]},
        "then": {"properties": {"params": {"propertyNames": {"enum": [p.name for p in cls.PARAMS]}}},
                 **({"required": ["rank"]} if cls.targets == "rank" else {})},
    } for name, cls in FAULT_TYPES.items()]
