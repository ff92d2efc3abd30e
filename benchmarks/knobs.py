"""The software-straggler knobs of a rank (``faultlab.scenario.Stragglers``), stdlib
only: sequence-length imbalance (:func:`draw_sequences`, the same draw on every rank;
:func:`rebalance`, the greedy mitigation; :func:`step_tokens`) and Python GC
(:class:`GcKnob`: uncoordinated or planned full collections over per-step cyclic
garbage), each in force over a window of steps (:func:`in_window`).

The module docstring of :mod:`faultlab.benchmarks.ddp` says what each does to a job."""

from __future__ import annotations

import gc
import heapq
import math
import random
import sys
from itertools import pairwise, repeat


#: a drawn token count is clipped to at most this many times the median
MAX_TOKENS_FACTOR = 16


#: bytes one garbage object takes (an empty list with its GC header, plus its slot);
#: the same as ``faultlab.benchmarks.agent.OBJ_BYTES``
GARBAGE_OBJ_BYTES = sys.getsizeof([]) + 8


MAX_GARBAGE_MB = 4096.0


def parse_window(text: str) -> tuple[int, int | None]:
    """``"FROM:TO"`` -> ``(FROM, TO)``: the steps a knob is in force, FROM inclusive,
    TO exclusive (``"FROM:"``: to the end of the run). Raises ValueError for text of
    another shape, FROM < 0 or TO <= FROM."""
    lo, sep, hi = str(text).partition(":")
    try:
        start, end = int(lo), (int(hi) if hi.strip() else None)
    except ValueError:
        raise ValueError(f"window {text!r} is not FROM:TO (steps, e.g. 100:300 or 100:)") from None
    if not sep or start < 0 or (end is not None and end <= start):
        raise ValueError(f"window {text!r}: give FROM:TO with 0 <= FROM < TO (TO empty: the run's end)")
    return start, end


def in_window(step: int, window: tuple[int, int | None]) -> bool:
    """True when ``step`` lies in ``window`` (``(from, to)``, to exclusive, None: open)."""
    lo, hi = window
    return step >= lo and (hi is None or step < hi)


def draw_sequences(seed: int, step: int, world: int, median_tokens: int, sigma: float, seqs_per_rank: int = 8) -> list[list[int]]:
    """The sequences (their lengths, in tokens) of every rank in ``step``.

    Rank r's token count is drawn from a lognormal with median ``median_tokens`` and
    shape ``sigma`` (rounded, clipped to ``[seqs_per_rank, 16 * median_tokens]``), then
    split at ``seqs_per_rank - 1`` random cut points into that many sequences of at
    least 1 token. One RNG seeded by ``seed`` and ``step`` draws all ranks in rank
    order, so every process computes the same lists. Returns ``world`` lists of
    ``seqs_per_rank`` ints. Raises ValueError for ``world < 1``, ``median_tokens < 1``,
    ``sigma < 0`` or ``seqs_per_rank < 1``.
    """
    if world < 1 or median_tokens < 1 or seqs_per_rank < 1 or not sigma >= 0:
        raise ValueError(f"bad draw: world={world} median_tokens={median_tokens} sigma={sigma} seqs_per_rank={seqs_per_rank}")
    rng = random.Random(f"faultlab-seqlen:{int(seed)}:{int(step)}")
    lo, hi = seqs_per_rank, max(seqs_per_rank, MAX_TOKENS_FACTOR * median_tokens)
    mu = math.log(median_tokens)
    out = []
    for _ in range(world):
        t = min(hi, max(lo, round(rng.lognormvariate(mu, sigma))))
        cuts = sorted(rng.sample(range(1, t), seqs_per_rank - 1))
        bounds = [0, *cuts, t]
        out.append([b - a for a, b in pairwise(bounds)])
    return out


def rebalance(seqs: list[list[int]]) -> list[list[int]]:
    """Greedy rebalancing: pool every rank's sequences and hand them out longest
    first, each to the rank with the fewest tokens so far (ties: the lowest rank).

    ``seqs``: per rank, sequence lengths (tokens, ints >= 1). Returns per rank the
    lengths it gets; the total is unchanged, and each rank's tokens end within one
    sequence of the mean (when every rank has at least one). Deterministic: every rank
    computes the same assignment.
    """
    world = len(seqs)
    items = sorted(((n, r, i) for r, s in enumerate(seqs) for i, n in enumerate(s)), key=lambda x: (-x[0], x[1], x[2]))
    heap = [(0, r) for r in range(world)]
    out: list[list[int]] = [[] for _ in range(world)]
    for n, _, _ in items:
        load, r = heapq.heappop(heap)
        out[r].append(n)
        heapq.heappush(heap, (load + n, r))
    return out


def step_tokens(seed: int, step: int, world: int, median_tokens: int, sigma: float, seqs_per_rank: int = 8,
                rebalanced: bool = False) -> list[int]:
    """Tokens of every rank in ``step`` (``draw_sequences`` summed per rank, after
    ``rebalance`` when ``rebalanced``). Raises ValueError as ``draw_sequences``."""
    seqs = draw_sequences(seed, step, world, median_tokens, sigma, seqs_per_rank)
    if rebalanced:
        seqs = rebalance(seqs)
    return [sum(s) for s in seqs]


def make_garbage(n_obj: int) -> None:
    """Allocate ``n_obj`` empty lists held by one list that contains itself, and drop
    it: cyclic garbage only the cycle collector frees (``n_obj * GARBAGE_OBJ_BYTES``
    bytes). One C-level call; automatic collection runs inside it when enabled."""
    if n_obj > 0:
        g = list(map(list, repeat((), n_obj)))
        g.append(g)
        del g


class GcKnob:
    """The ``--gc-mode`` straggler of one rank (see the module doc).

    ``mode``: ``uncoordinated`` or ``planned``; ``every_steps``: steps between full
    collections (planned: exact; uncoordinated: the mean, times a per-rank factor in
    [0.6, 1.4]); ``garbage_mb``: MB of cyclic garbage per step (× a per-step factor in
    [0.5, 1.5]); ``seed`` and ``rank`` seed the rank's own RNG; ``window`` (``(from,
    to)`` steps, :func:`in_window`): the steps that make garbage and plan collections
    (outside it a step makes none, so no full collection trips). Raises ValueError for
    an unknown mode, ``every_steps < 1`` or ``garbage_mb`` outside (0, 4096].

    ``start()`` once before training (changes the process's ``gc`` settings), then
    ``step(step)`` at the start of every step's compute.
    """

    GEN0 = 700  # CPython's default generation-0 threshold (allocations)
    GEN1 = 10  # CPython's default generation-1 threshold (generation-0 collections)

    def __init__(self, mode: str, every_steps: int, garbage_mb: float, *, seed: int = 0, rank: int = 0,
                 window: tuple[int, int | None] = (0, None)):
        if mode not in ("uncoordinated", "planned"):
            raise ValueError(f"gc mode {mode!r} is not 'uncoordinated' or 'planned'")
        if every_steps < 1:
            raise ValueError(f"gc every_steps {every_steps} must be >= 1")
        if not 0 < garbage_mb <= MAX_GARBAGE_MB:
            raise ValueError(f"gc garbage_mb {garbage_mb} is not in (0, {MAX_GARBAGE_MB:g}]")
        self.mode, self.every, self.garbage_mb, self.window = mode, int(every_steps), float(garbage_mb), window
        self.rng = random.Random(f"faultlab-gc:{int(seed)}:{int(rank)}")
        self.objs_per_step = self.garbage_mb * 2**20 / GARBAGE_OBJ_BYTES
        if mode == "uncoordinated":
            # Spread over [0.6, 1.4] along a golden-ratio sequence from a seeded start,
            # so no two ranks of a job get the same period (independent draws often
            # land close together, and such ranks collect in lockstep for a long time).
            u0 = random.Random(f"faultlab-gc:{int(seed)}").random()
            self.period_factor = 0.6 + 0.8 * ((u0 + rank * 0.6180339887498949) % 1.0)
            self.phase = self.rng.random()
        else:
            self.period_factor, self.phase = 1.0, 0.0
        #: allocations (net, of GC-tracked objects) between two full collections:
        #: CPython collects generation 0 when its count exceeds GEN0, generation 1 after
        #: more than GEN1 of those, generation 2 after more than gen2_threshold of those
        self.period_objs = self.objs_per_step * self.every * self.period_factor
        #: the rank's generation-2 threshold (generation-1 collections between full ones)
        self.gen2_threshold = max(1, round(self.period_objs / ((self.GEN0 + 1) * (self.GEN1 + 1))) - 1)

    def start(self) -> None:
        gc.collect()
        if self.mode == "planned":
            gc.disable()
            return
        gc.set_threshold(self.GEN0, self.GEN1, self.gen2_threshold)
        gc.enable()
        # a per-rank random phase: part of a period's garbage made before training
        make_garbage(int(self.phase * self.period_objs))

    def planned_step(self, step: int) -> bool:
        """True when ``step`` is a planned collection step (planned mode only)."""
        return self.mode == "planned" and step % self.every == self.every - 1

    def step(self, step: int) -> None:
        if not in_window(step, self.window):
            return
        make_garbage(int(self.objs_per_step * self.rng.uniform(0.5, 1.5)))
        if self.planned_step(step):
            gc.collect()
