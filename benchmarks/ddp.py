"""One rank of a synchronous data-parallel training job, instrumented per step.

Run one process per rank::

    python -m faultlab.benchmarks.ddp --rank R --world-size W \\
        --master-addr A --master-port P --out TELEMETRY_DIR --run-id ID \\
        --node NODE [--peer-group dp] [--duration-s 60] [--steps N] \\
        [--hidden 512] [--batch 64] [--threads 1] [--seed 0] [--device cpu|cuda]
        [--agent-dir DIR|none] [--no-telemetry] [--flush-s 0.5]
        [--seq-len-tokens N [--seq-len-sigma S] [--seqs-per-rank K] [--rebalance]]
        [--gc-mode off|uncoordinated|planned [--gc-every N] [--gc-garbage-mb MB]]
        [--data-dir DIR [--checkpoint-every N]]

The model is a 256-HIDDEN-256 MLP trained with SGD on synthetic data (a fixed pool
of batches per rank, targets from a fixed random teacher shared by all ranks).

This is data-parallel training as DDP does it, without the overlap, so compute and
communication are measured apart: DistributedDataParallel starts the gradient
all-reduce of a bucket while backward is still running, and then local work and
waiting for peers cannot be told apart. Here, after backward, all gradients are
flattened into one buffer, reduced with a single ``dist.all_reduce`` (SUM), divided
by the world size and copied back; then the optimizer steps.

Per step, one JSON object is appended to ``TELEMETRY_DIR/steps-rank{R}.jsonl``::

    run_id, rank, node, peer_group, step, t_start, compute_s, comm_s, step_s, gc_s
    (+ tokens, dataloader_s with --seq-len-tokens)

- ``t_start``: unix time (s) when the step began on this rank.
- ``compute_s``: forward + backward + flatten + unflatten + optimizer step, in
  seconds (local work only; with ``--gc-mode`` also the step's garbage allocation and,
  in ``planned`` mode, the planned ``gc.collect()``).
- ``comm_s``: seconds inside the all-reduce, including waiting for slower peers
  (the straggler itself waits least).
- ``step_s``: the whole step in seconds (``compute_s + comm_s`` (+ ``dataloader_s``)
  plus a few µs of bookkeeping). Writing the record happens between steps and is not
  counted.
- ``gc_s``: seconds the process spent in Python garbage collection during the step
  (any thread, measured with ``gc.callbacks``; collections of the in-workload agent's
  gc-storm included, since they stop this thread too). Overlaps compute_s/comm_s.
  A collection run by another thread can be counted in the following step (its
  closing callback may run after this thread got the GIL back); sums over a few
  steps are exact. A stall by another thread's collection lands in ``comm_s`` when
  it hits while this thread waits in the all-reduce (which finishes without the GIL
  but cannot return until the collection ends): read ``gc_s`` beside both.
- ``tokens`` (int, only with ``--seq-len-tokens``): rows (tokens) this rank computed
  in the step, after rebalancing when ``--rebalance``.
- ``dataloader_s`` (only with ``--seq-len-tokens`` or ``--data-dir``): seconds spent
  building the step's batch (drawing the token counts, rebalancing, slicing the rows;
  with ``--data-dir`` reading the step's shard from disk); not part of ``compute_s``.

Disk-backed data path (``--data-dir DIR``, :mod:`faultlab.benchmarks.diskdata`): the
rank's 16 batches are written once as shard files under ``DIR/RUN_ID/rankR/`` and one
is read from disk every step (its pages dropped from the page cache after each read,
so every read reaches the disk); ``--checkpoint-every N`` writes the model's
state_dict every N steps with ``O_DIRECT`` + ``fsync`` (counted in ``compute_s`` of that
step). A throttled disk (``io-slow``) then stalls the rank's dataloader and its
checkpoints. The folder is removed when the rank ends.

Records are written in batches: the first record at once (so a watcher sees training
start), then whenever ``--flush-s`` seconds (default 0.5) have passed since the last
write, and at the end. Each batch is whole lines in one ``write(2)``: a run killed with
SIGKILL stays readable up to its last batch (it loses at most the last ``--flush-s``
seconds of records); SIGTERM and errors flush first. ``--flush-s 0`` writes every
record at once. ``--no-telemetry`` writes no records and installs no GC timer (the
uninstrumented baseline of ``perf/instrumentation_overhead.py``); the rank still prints
its median step time at the end. ``--telemetry-ab N`` (for that measurement) records
only the steps of every other block of N steps and prints the median period of the
recorded and of the unrecorded steps, and the median over block pairs of the difference
of their mean periods (``PeriodLog``).

Software stragglers (the knobs of ``faultlab.scenario.Stragglers``):

- **Sequence-length imbalance** (``--seq-len-tokens N``): every step, rank r's token
  count is drawn from a lognormal with median ``N`` and shape ``--seq-len-sigma``
  (clipped to ``[K, 16 N]``), and split at random cut points into
  ``K = --seqs-per-rank`` sequences (default 8). The draw uses one RNG seeded by
  ``--seed`` and the step, the same on every rank, so every rank knows every rank's
  sequences (``draw_sequences``). The rank's batch is then that many rows (``--batch``
  is ignored): compute grows linearly with its tokens, and the fastest ranks wait for
  the one that drew the most. ``--rebalance`` (the mitigation) pools the step's
  sequences of all ranks and assigns them greedily, longest first, each to the least
  loaded rank (``rebalance``), so every rank's tokens end near the mean (within one
  sequence). The loss of each rank is weighted by its share of the step's tokens, so
  the averaged gradient is the gradient of the mean over all tokens.
- **Python GC** (``--gc-mode``): every step the rank allocates ``--gc-garbage-mb`` MB
  (× a per-step factor in [0.5, 1.5] from the rank's own RNG) of cyclic garbage (empty
  lists in one self-referencing list, 64 bytes each, as the agent's gc-storm makes it),
  standing for the Python objects a real training step leaves behind.
  ``uncoordinated``: CPython's automatic collector runs; the rank's generation-2
  threshold is set so a full collection trips about every ``--gc-every`` steps ×
  a per-rank factor in [0.6, 1.4] (spread so that no two ranks share it), starting
  from a per-rank random phase, so ranks
  collect at different steps and every rank's pause stalls all ranks (as with
  uncoordinated GC in production). CPython also requires the objects promoted since
  the last full collection to exceed a quarter of the long-lived heap (~1.7·10^5
  objects after importing torch), so small garbage can make collections rarer than
  ``--gc-every``. ``planned``: ``gc.disable()``, and every rank runs ``gc.collect()``
  in the same steps (``step % every == every - 1``), the mitigation production jobs
  use. Memory: up to ``every × garbage-mb`` MB (× 1.5 × 1.4) of garbage per rank
  between collections.

In-workload agent: each rank starts ``faultlab.benchmarks.agent`` before importing
torch, so faults that act from inside the interpreter (``gc-storm``) can target the
rank by its PID. ``--agent-dir`` is its control folder; the default is the agent's
``default_dir()`` (``$FAULTLAB_AGENT_DIR``, else ``/run/faultlab/agents`` as root, else
``$XDG_RUNTIME_DIR/faultlab/agents``), the same folder the injector looks in, so
``faultlab inject --type gc-storm --target PID`` finds a rank with no extra setup;
``--agent-dir none`` turns the agent off. Idle, the agent costs one ``os.stat`` per
50 ms and a heartbeat write per second. A folder that cannot be written only prints a
warning. The agent is stopped (its files removed) before the rank exits.

Stopping: every rank stops at the same step, or the collectives would hang. Each
step every rank puts a stop vote (0 or 1) into one extra element of the gradient
buffer; since the buffer is reduced with SUM, a non-zero sum means some rank voted
to stop, and all ranks stop after that same step, with no extra collective. A rank
votes to stop when ``--steps`` steps are done, when ``--duration-s`` has elapsed on
its clock (measured from the end of init), or when it received SIGTERM. Without
``--steps`` or ``--duration-s`` the run lasts 60 s.

Exit status: 0 when training finished (also after a SIGTERM-requested stop), 1 on
an error (a peer died, init timed out), 2 on bad arguments. After the last step all
ranks pass a barrier, destroy the process group and leave with ``os._exit`` (gloo's
threads can abort the interpreter's own teardown).

The helpers ``draw_sequences``, ``rebalance``, ``step_tokens``, ``GcKnob`` and
``StepLog`` import nothing heavy; ``faultlab.benchmarks.pipeline`` uses them too, and
the steps of a rank's run: ``boot``, ``print_up`` (the "up" line), ``run_steps`` (the
step loop), ``StepRecorder`` (one step's record) and ``finish`` (barrier, teardown, the
"done" line). The ddp rank's model, data and step are :class:`DdpRank`.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import io
import json
import math
import os
import random
import signal
import sys
import time
from itertools import pairwise, repeat
from pathlib import Path
from typing import NamedTuple

#: a drawn token count is clipped to at most this many times the median
MAX_TOKENS_FACTOR = 16
#: bytes one garbage object takes (an empty list with its GC header, plus its slot);
#: the same as ``faultlab.benchmarks.agent.OBJ_BYTES``
GARBAGE_OBJ_BYTES = sys.getsizeof([]) + 8
MAX_GARBAGE_MB = 4096.0


# -- sequence-length imbalance ---------------------------------------------------------
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


# -- Python GC -------------------------------------------------------------------------
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
    [0.5, 1.5]); ``seed`` and ``rank`` seed the rank's own RNG. Raises ValueError for
    an unknown mode, ``every_steps < 1`` or ``garbage_mb`` outside (0, 4096].

    ``start()`` once before training (changes the process's ``gc`` settings), then
    ``step(step)`` at the start of every step's compute.
    """

    GEN0 = 700  # CPython's default generation-0 threshold (allocations)
    GEN1 = 10  # CPython's default generation-1 threshold (generation-0 collections)

    def __init__(self, mode: str, every_steps: int, garbage_mb: float, *, seed: int = 0, rank: int = 0):
        if mode not in ("uncoordinated", "planned"):
            raise ValueError(f"gc mode {mode!r} is not 'uncoordinated' or 'planned'")
        if every_steps < 1:
            raise ValueError(f"gc every_steps {every_steps} must be >= 1")
        if not 0 < garbage_mb <= MAX_GARBAGE_MB:
            raise ValueError(f"gc garbage_mb {garbage_mb} is not in (0, {MAX_GARBAGE_MB:g}]")
        self.mode, self.every, self.garbage_mb = mode, int(every_steps), float(garbage_mb)
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
        make_garbage(int(self.objs_per_step * self.rng.uniform(0.5, 1.5)))
        if self.planned_step(step):
            gc.collect()


# -- telemetry -------------------------------------------------------------------------
class StepLog:
    """Appends step records (dicts of JSON-able values) as JSON lines to ``path``, in
    batches.

    ``add`` only keeps the dict (a step's bookkeeping must stay a few µs: encoding a
    record right after the step's compute, with cold caches, took ~16 µs here); the
    kept records are encoded and written together on the first record (at once), then
    when ``flush_s`` seconds have passed since the last write (0: every record), and on
    ``flush()``/``close()``. Each batch is whole lines written with ``os.write`` on an
    ``O_APPEND`` descriptor, so a process killed at any moment leaves whole lines up to
    its last batch. Raises OSError when the file cannot be opened or written, ValueError
    for ``flush_s < 0``. A context manager.
    """

    def __init__(self, path: str | Path, flush_s: float = 0.5):
        if not flush_s >= 0:
            raise ValueError(f"flush_s {flush_s} must be >= 0")
        self.path, self.flush_s = Path(path), float(flush_s)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._buf: list[dict] = []
        self._last: float | None = None

    def add(self, rec: dict) -> None:
        self._buf.append(rec)
        if self._last is None or time.monotonic() - self._last >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        if self._buf and self._fd is not None:
            dumps = json.dumps
            data = "".join([dumps(r) + "\n" for r in self._buf]).encode()
            self._buf.clear()
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
        self._last = time.monotonic()

    def close(self) -> None:
        if self._fd is not None:
            try:
                self.flush()
            finally:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> StepLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- command line ----------------------------------------------------------------------
def add_common_args(p: argparse.ArgumentParser, *, peer_group: str) -> None:
    """The flags ddp and pipeline ranks share (rendezvous, run length, telemetry,
    agent, straggler knobs)."""
    p.add_argument("--rank", type=int, required=True, help="global rank (0..W-1)")
    p.add_argument("--world-size", type=int, required=True, help="number of ranks")
    p.add_argument("--master-addr", required=True, help="IPv4 address of rank 0's rendezvous")
    p.add_argument("--master-port", type=int, required=True, help="TCP port of rank 0's rendezvous")
    p.add_argument("--out", required=True, help="telemetry folder; steps-rank{R}.jsonl is appended there")
    p.add_argument("--run-id", required=True)
    p.add_argument("--node", default="local", help="node name written in every record")
    p.add_argument("--peer-group", default=peer_group, help="peer group written in every record")
    p.add_argument("--duration-s", type=float, default=None, help="stop after this many seconds of training")
    p.add_argument("--steps", type=int, default=None, help="stop after this many steps")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cpu: gloo; cuda: nccl")
    p.add_argument("--local-rank", type=int, default=None, help="GPU index (default: rank %% GPUs)")
    p.add_argument("--iface", default=None, help="network interface for gloo/nccl (GLOO_SOCKET_IFNAME)")
    p.add_argument("--timeout-s", type=float, default=120.0, help="init and collective timeout (s)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--agent-dir", default=None,
                   help="control folder of the in-workload agent (default: $FAULTLAB_AGENT_DIR, else /run/faultlab/agents as root); 'none': no agent")
    p.add_argument("--no-telemetry", action="store_true", help="write no step records and install no GC timer (overhead baseline)")
    p.add_argument("--flush-s", type=float, default=0.5, help="write buffered step records at most this often (s); 0: every step")
    p.add_argument("--telemetry-ab", type=int, default=0, metavar="N",
                   help="overhead measurement: record only in every other block of N steps, print the median period of both kinds of block")
    p.add_argument("--seq-len-tokens", type=int, default=None, help="sequence-length imbalance: median tokens per rank per step")
    p.add_argument("--seq-len-sigma", type=float, default=0.5, help="shape (sigma) of the lognormal token count")
    p.add_argument("--seqs-per-rank", type=int, default=8, help="sequences a rank's tokens are split into (the unit of --rebalance)")
    p.add_argument("--rebalance", action="store_true", help="greedy rebalancing of the step's sequences across ranks")
    p.add_argument("--gc-mode", choices=["off", "uncoordinated", "planned"], default="off", help="Python GC straggler")
    p.add_argument("--gc-every", type=int, default=50, help="steps between full collections (planned: exact; uncoordinated: mean)")
    p.add_argument("--gc-garbage-mb", type=float, default=20.0, help="cyclic garbage made per step (MB)")


def check_common_args(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Validate the shared flags (``p.error``: exit status 2)."""
    if a.world_size < 1 or not 0 <= a.rank < a.world_size:
        p.error(f"--rank {a.rank} is not in 0..{a.world_size - 1}")
    if a.threads < 1:
        p.error("--threads must be >= 1")
    if a.steps is not None and a.steps < 1:
        p.error("--steps must be >= 1")
    if a.duration_s is not None and a.duration_s <= 0:
        p.error("--duration-s must be > 0")
    if not a.flush_s >= 0:
        p.error("--flush-s must be >= 0")
    if a.telemetry_ab < 0:
        p.error("--telemetry-ab must be >= 0")
    if a.seq_len_tokens is not None and a.seq_len_tokens < 1:
        p.error("--seq-len-tokens must be >= 1")
    if not 0 <= a.seq_len_sigma <= 3:
        p.error("--seq-len-sigma must be in [0, 3]")
    if a.seqs_per_rank < 1:
        p.error("--seqs-per-rank must be >= 1")
    if a.rebalance and a.seq_len_tokens is None:
        p.error("--rebalance needs --seq-len-tokens")
    if a.gc_every < 1:
        p.error("--gc-every must be >= 1")
    if not 0 < a.gc_garbage_mb <= MAX_GARBAGE_MB:
        p.error(f"--gc-garbage-mb must be in (0, {MAX_GARBAGE_MB:g}]")
    if a.steps is None and a.duration_s is None:
        a.duration_s = 60.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The rank's argv (the module docstring). Bad values: argparse's one-line usage
    error, exit status 2."""
    p = argparse.ArgumentParser(prog="python -m faultlab.benchmarks.ddp", description=__doc__.split("\n\n")[0])
    add_common_args(p, peer_group="dp")
    p.add_argument("--hidden", type=int, default=512, help="hidden width of the 256-H-256 MLP")
    p.add_argument("--batch", type=int, default=64, help="samples per rank per step (ignored with --seq-len-tokens)")
    p.add_argument("--data-dir", default=None, help="disk-backed data path: the rank's batches are shards read from disk each step (dataloader_s), under DIR/RUN_ID/rankR/")
    p.add_argument("--checkpoint-every", type=int, default=0, help="with --data-dir: write a checkpoint every N steps (O_DIRECT + fsync; counted in compute_s); 0: never")
    a = p.parse_args(argv)
    if a.checkpoint_every < 0:
        p.error("--checkpoint-every must be >= 0")
    if a.data_dir is not None and a.seq_len_tokens is not None:
        p.error("--data-dir does not combine with --seq-len-tokens")
    for name in ("hidden", "batch"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be >= 1")
    check_common_args(p, a)
    return a


_stop_requested = False


def _on_sigterm(signum, frame):
    global _stop_requested
    if _stop_requested:  # second request: leave now
        os._exit(128 + signum)
    _stop_requested = True


def stop_requested() -> bool:
    """True once SIGTERM arrived (after ``install_sigterm()``)."""
    return _stop_requested


def install_sigterm() -> None:
    """SIGTERM asks for a stop at the next step; a second one exits at once."""
    signal.signal(signal.SIGTERM, _on_sigterm)


def start_agent(a: argparse.Namespace):
    """Install the GC timer (unless --no-telemetry) and start the in-workload agent
    (unless --agent-dir none). Returns the cumulative GC-seconds function."""
    from faultlab.benchmarks import agent as fl_agent

    if not a.no_telemetry:
        fl_agent.install_gc_timer()
    if (a.agent_dir or "").strip().lower() != "none":
        try:
            fl_agent.start(a.agent_dir or None)
        except OSError as e:
            print(f"[rank {a.rank}] warning: faultlab agent not started ({e}); gc-storm cannot target this rank", flush=True)
    return fl_agent.gc_seconds


def init_torch(a: argparse.Namespace):
    """Import torch, size its thread pools, init the process group. Returns
    (torch, dist, device, backend, sync)."""
    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    if a.device == "cuda":
        local = a.local_rank if a.local_rank is not None else a.rank % max(torch.cuda.device_count(), 1)
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        backend = "nccl"
        sync = torch.cuda.synchronize
    else:
        device = torch.device("cpu")
        backend = "gloo"

        def sync():
            return None

    dist.init_process_group(
        backend,
        init_method=f"tcp://{a.master_addr}:{a.master_port}",
        rank=a.rank,
        world_size=a.world_size,
        timeout=datetime.timedelta(seconds=a.timeout_s),
    )
    return torch, dist, device, backend, sync


def stop_reason(a: argparse.Namespace, step: int, t_train0: float) -> str | None:
    """Why this rank votes to stop before running ``step`` (None: it does not)."""
    if _stop_requested:
        return "SIGTERM"
    if a.steps is not None and step + 1 >= a.steps:
        return "steps"
    if a.duration_s is not None and time.perf_counter() - t_train0 >= a.duration_s:
        return "duration"
    return None


def _seqlen_text(a: argparse.Namespace) -> str:
    if a.seq_len_tokens is None:
        return "off"
    return f"{a.seq_len_tokens}/sigma {a.seq_len_sigma:g}" + ("/rebalance" if a.rebalance else "")


class PeriodLog:
    """Step periods (s from the start of one step to the start of the next, so the
    bookkeeping between steps is counted), split by whether the step was recorded.

    With ``--telemetry-ab N`` blocks of N recorded and N unrecorded steps alternate;
    ``paired_diff_s()`` is the median over block pairs of (mean recorded period - mean
    unrecorded period), which cancels load drift slower than a block pair."""

    def __init__(self, block: int = 0):
        self.block = block
        self.all: list[float] = []
        self.on: list[float] = []
        self.off: list[float] = []
        self._pairs: dict[int, tuple[list[float], list[float]]] = {}
        self._prev: tuple[float, bool, int] | None = None

    def mark(self, t: float, recorded: bool, step: int = 0) -> None:
        if self._prev is not None:
            t_prev, rec_prev, step_prev = self._prev
            d = t - t_prev
            self.all.append(d)
            (self.on if rec_prev else self.off).append(d)
            if self.block:
                pair = self._pairs.setdefault(step_prev // (2 * self.block), ([], []))
                pair[0 if rec_prev else 1].append(d)
        self._prev = (t, recorded, step)

    def paired_diff_s(self) -> float:
        diffs = [sum(a) / len(a) - sum(b) / len(b) for a, b in self._pairs.values() if a and b]
        return median(diffs)

    def ab_text(self) -> str:
        return (f"telemetry A/B: median period recorded {median(self.on) * 1e3:.4f} ms ({len(self.on)} steps), "
                f"unrecorded {median(self.off) * 1e3:.4f} ms ({len(self.off)} steps), "
                f"paired difference {self.paired_diff_s() * 1e6:.2f} us")


class StepRecorder:
    """The per-step telemetry of a rank's training loop (ddp and pipeline): which steps
    are recorded (all, or alternate blocks with ``--telemetry-ab N``), the step records
    written through a :class:`StepLog` to ``OUT/steps-rankR.jsonl`` (none with
    ``--no-telemetry``), every step time (s) and the step periods (:class:`PeriodLog`).

    Per step: ``begin(step, t0)`` at its start (``t0`` a ``time.perf_counter()``
    reading; notes the wall-clock ``t_start`` and the GC clock when recorded), then
    ``end(step, step_s, compute_s, comm_s, ...)`` (seconds). ``close()`` flushes.
    Raises OSError when the output folder or file cannot be made."""

    def __init__(self, a: argparse.Namespace, gc_seconds):
        out_dir = Path(a.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.a, self.gc_seconds = a, gc_seconds
        self.log = None if a.no_telemetry else StepLog(out_dir / f"steps-rank{a.rank}.jsonl", a.flush_s)
        self.ab = a.telemetry_ab
        self.periods = PeriodLog(self.ab)
        self.step_times: list[float] = []
        self.on = False
        self._t_start = self._g0 = 0.0

    def begin(self, step: int, t0: float) -> None:
        self.on = self.log is not None and (self.ab == 0 or (step // self.ab) % 2 == 0)
        self.periods.mark(t0, self.on, step)
        if self.on:
            self._t_start = time.time()
            self._g0 = self.gc_seconds()

    def end(self, step: int, step_s: float, compute_s: float, comm_s: float,
            tokens: int | None = None, dataloader_s: float | None = None) -> None:
        self.step_times.append(step_s)
        if not self.on:
            return
        a = self.a
        rec = {
            "run_id": a.run_id,
            "rank": a.rank,
            "node": a.node,
            "peer_group": a.peer_group,
            "step": step,
            "t_start": self._t_start,
            "compute_s": compute_s,
            "comm_s": comm_s,
            "step_s": step_s,
            "gc_s": self.gc_seconds() - self._g0,
        }
        if tokens is not None:
            rec["tokens"] = tokens
        if dataloader_s is not None:
            rec["dataloader_s"] = dataloader_s
        self.log.add(rec)

    def close(self) -> None:
        if self.log is not None:
            self.log.close()

    def summary(self) -> str:
        """``"median step X ms, median period Y ms"``."""
        return f"median step {median(self.step_times) * 1e3:.3f} ms, median period {median(self.periods.all) * 1e3:.3f} ms"


def median(xs: list[float]) -> float:
    import statistics

    return statistics.median(xs) if xs else float("nan")


def boot(a: argparse.Namespace):
    """Start a rank: thread and interface settings (before torch is imported, so its
    thread pools are sized once), the in-workload agent, torch.distributed, the
    SIGTERM handler. Returns ``(t_boot, gc_seconds, torch, dist, device, backend,
    sync)``; ``t_boot`` is a perf_counter reading (s). Shared by ddp and pipeline."""
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    if a.iface:
        os.environ["GLOO_SOCKET_IFNAME"] = a.iface
        os.environ.setdefault("NCCL_SOCKET_IFNAME", a.iface)
    t_boot = time.perf_counter()
    gc_seconds = start_agent(a)
    torch, dist, device, backend, sync = init_torch(a)
    install_sigterm()
    return t_boot, gc_seconds, torch, dist, device, backend, sync


# -- the rank's run: shared by ddp and pipeline ---------------------------------------
def print_up(who: str, backend: str, t_boot: float, settings: str) -> None:
    """Print the rank's "up" line, ``[WHO] BACKEND up in X.XXs (iface=IFACE, SETTINGS)``;
    ``t_boot`` is the perf_counter reading (s) taken before :func:`boot`."""
    print(
        f"[{who}] {backend} up in {time.perf_counter() - t_boot:.2f}s "
        f"(iface={os.environ.get('GLOO_SOCKET_IFNAME', 'default')}, {settings})",
        flush=True,
    )


def make_gc_knob(a: argparse.Namespace) -> GcKnob | None:
    """The rank's ``--gc-mode`` straggler (None with ``--gc-mode off``)."""
    if a.gc_mode == "off":
        return None
    return GcKnob(a.gc_mode, a.gc_every, a.gc_garbage_mb, seed=a.seed, rank=a.rank)


def seq_pool_rows(a: argparse.Namespace) -> int:
    """Rows of the data pool that ``--seq-len-tokens`` steps slice their rows from:
    ``MAX_TOKENS_FACTOR`` × the median (the largest draw), at most 65536 (a step's
    rows wrap round the pool, ``wrap_index``)."""
    return min(MAX_TOKENS_FACTOR * a.seq_len_tokens, 1 << 16)


def wrap_index(torch, start: int, n: int, pool_rows: int, device):
    """The index of ``n`` consecutive rows of a pool of ``pool_rows`` rows, from row
    ``start % pool_rows``, wrapping round at the pool's end: a slice (indexing gives a
    view) when they do not wrap, else an int64 index tensor on ``device``."""
    start %= pool_rows
    if start + n <= pool_rows:
        return slice(start, start + n)
    return torch.arange(start, start + n, device=device) % pool_rows


class Trained(NamedTuple):
    """What :func:`run_steps` returns: ``steps`` run; ``why``, this rank's own stop
    reason in the last step (``stop_reason``; None: it stopped on a peer's vote);
    ``t_train0``, the perf_counter reading (s) when training began."""

    steps: int
    why: str | None
    t_train0: float


def run_steps(a: argparse.Namespace, recorder: StepRecorder, gc_knob: GcKnob | None, step_fn) -> Trained:
    """The step loop of a rank, until the ranks agree to stop.

    Starts ``gc_knob`` (when not None), then per step: this rank's stop vote
    (``stop_reason``), the step's start ``t0`` (a perf_counter reading, s),
    ``recorder.begin(step, t0)``, and ``step_fn(recorder, step, t0, want_stop)``, which
    runs the step, records it with ``recorder.end`` and returns True when the reduced
    vote says stop after it. ``--duration-s`` counts from the start of this loop. The
    recorder is closed (its records flushed) on the way out, on an error too; errors
    of ``step_fn`` propagate."""
    step = 0
    why = None
    if gc_knob is not None:
        gc_knob.start()
    t_train0 = time.perf_counter()
    try:
        while True:
            why = stop_reason(a, step, t_train0)
            t0 = time.perf_counter()
            recorder.begin(step, t0)
            stop = step_fn(recorder, step, t0, why is not None)
            step += 1
            if stop:
                break
    finally:
        recorder.close()
    return Trained(step, why, t_train0)


def finish(dist, who: str, run: Trained, recorder: StepRecorder, loss_text: str = "") -> None:
    """Leave with the other ranks: a barrier, destroy the process group, then the "done"
    line (steps, training seconds, ``recorder.summary()``, ``loss_text``, the stop
    reason) and, with ``--telemetry-ab``, the A/B line on stdout."""
    # All ranks leave together: a rank that tears gloo down while its peer is still
    # finishing the last all-reduce makes the peer abort at exit (seen here ~1 run in
    # 4 without the barrier: "terminate called without an active exception").
    dist.barrier()
    dist.destroy_process_group()
    why = run.why or "a peer's vote"
    print(
        f"[{who}] done: {run.steps} steps in {time.perf_counter() - run.t_train0:.2f}s "
        f"({recorder.summary()}{loss_text}, stop: {why})",
        flush=True,
    )
    if recorder.ab:
        print(f"[{who}] {recorder.periods.ab_text()}", flush=True)


# -- the ddp rank ----------------------------------------------------------------------
class DdpRank:
    """The model, data and gradient buffer of one ddp rank, and its training step.

    The 256-HIDDEN-256 MLP starts from the same weights on every rank (``--seed``),
    and the targets come from one fixed teacher; each rank draws its own data:
    with ``--seq-len-tokens`` one pool of ``seq_pool_rows`` rows a step slices its
    tokens from, else 16 batches of ``--batch`` rows, with ``--data-dir`` written as
    shard files and read back from disk. Gradients travel in one float32 buffer of
    all parameters plus one element, the stop vote. ``torch``, ``dist``, ``device``,
    ``sync`` are :func:`boot`'s. ``close()`` removes the ``--data-dir`` shards. Raises
    OSError (``safefs.UntrustedPath`` too) when the shard folder cannot be made."""

    def __init__(self, a: argparse.Namespace, torch, dist, device, sync):
        self.a, self.torch, self.dist, self.device, self.sync = a, torch, dist, device, sync
        self.seqlen = a.seq_len_tokens is not None
        teacher = self._build_model()
        self.pool, self.pool_x, self.pool_y, self.pool_rows = self._build_pool(teacher)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=a.lr)
        self.loss_fn = torch.nn.MSELoss()
        self.gc_knob = make_gc_knob(a)
        self.buf, self.views = self._grad_buffer()
        self.world = float(a.world_size)
        self.loss = None  # the last step's unweighted loss (a 0-d tensor)
        self.disk = None
        if a.data_dir is not None:  # last: nothing after it can fail and leave the shards
            from faultlab.benchmarks.diskdata import DiskData

            self.disk = DiskData(a.data_dir, a.run_id, a.rank, [(x.cpu().numpy(), y.cpu().numpy()) for x, y in self.pool])

    def _build_model(self):
        """Seed torch with ``--seed``, build the MLP on the device; returns the teacher
        (a 256 × 256 float32 tensor), drawn right after the weights."""
        torch, a = self.torch, self.a
        torch.manual_seed(a.seed)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(256, a.hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(a.hidden, 256),
        ).to(self.device)
        return torch.randn(256, 256) / 16.0

    def _build_pool(self, teacher):
        """The rank's data, from its own generator: ``(pool, pool_x, pool_y,
        pool_rows)``; with ``--seq-len-tokens`` the row pool (``pool`` empty), else
        ``pool`` the 16 ``(x, y)`` batches (the rest None)."""
        torch, a, device = self.torch, self.a, self.device
        gen = torch.Generator().manual_seed(a.seed * 100003 + a.rank + 1)
        if self.seqlen:
            # One pool of rows; a step takes `tokens` consecutive rows of it (wrapping).
            pool_rows = seq_pool_rows(a)
            px = torch.randn(pool_rows, 256, generator=gen)
            return [], px.to(device), torch.tanh(px @ teacher).to(device), pool_rows
        pool = []
        for _ in range(16):
            x = torch.randn(a.batch, 256, generator=gen)
            pool.append((x.to(device), torch.tanh(x @ teacher).to(device)))
        return pool, None, None, None

    def _grad_buffer(self):
        """One float32 buffer for all gradients plus the stop vote (its last element),
        and per parameter ``(param, view of its slice)``."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        n_grad = sum(p.numel() for p in params)
        buf = self.torch.zeros(n_grad + 1, dtype=self.torch.float32, device=self.device)
        views = []
        off = 0
        for p in params:
            views.append((p, buf[off : off + p.numel()]))
            off += p.numel()
        return buf, views

    def batch(self, step: int):
        """The step's batch (the dataloader's work): ``(x, y, tokens, weight)``;
        ``tokens`` and ``weight`` are None without ``--seq-len-tokens``."""
        if self.seqlen:
            return self._seq_batch(step)
        if self.disk is not None:
            xn, yn = self.disk.read(step)
            return self.torch.from_numpy(xn).to(self.device), self.torch.from_numpy(yn).to(self.device), None, None
        x, y = self.pool[step % len(self.pool)]
        return x, y, None, None

    def _seq_batch(self, step: int):
        """This rank's ``step_tokens`` rows of the pool, with the loss weight: its share
        of the step's tokens × W, so SUM / W of the gradients is the gradient of the
        mean loss over all tokens."""
        a = self.a
        toks = step_tokens(a.seed, step, a.world_size, a.seq_len_tokens, a.seq_len_sigma, a.seqs_per_rank, a.rebalance)
        n = toks[a.rank]
        ix = wrap_index(self.torch, step * 7919 + a.rank * 104729, n, self.pool_rows, self.device)
        return self.pool_x[ix], self.pool_y[ix], n, n * len(toks) / sum(toks)

    def step(self, recorder: StepRecorder, step: int, t0: float, want_stop: bool) -> bool:
        """One training step from ``t0`` (perf_counter, s): batch, local gradients,
        the all-reduce of the gradients and the stop votes, the optimizer step, the
        record. Returns True when some rank voted to stop."""
        x, y, n_tok, weight = self.batch(step)
        td = time.perf_counter()
        self._backward(step, x, y, weight)
        self.buf[-1] = 1.0 if want_stop else 0.0
        self.sync()
        t1 = time.perf_counter()
        self.dist.all_reduce(self.buf, op=self.dist.ReduceOp.SUM)
        self.sync()
        t2 = time.perf_counter()
        stop = self._apply(step)
        self.sync()
        t3 = time.perf_counter()
        self._record(recorder, step, t0, td, t1, t2, t3, n_tok)
        return stop

    def _backward(self, step: int, x, y, weight) -> None:
        """The ``--gc-mode`` garbage, forward, backward (loss × ``weight`` when not
        None), and the gradients copied into the buffer."""
        if self.gc_knob is not None:
            self.gc_knob.step(step)
        self.model.zero_grad(set_to_none=False)
        self.loss = self.loss_fn(self.model(x), y)  # printed at the end: the rank's unweighted loss
        (self.loss * weight if weight is not None else self.loss).backward()
        for p, v in self.views:
            v.copy_(p.grad.reshape(-1))

    def _apply(self, step: int) -> bool:
        """After the all-reduce: read the vote, average the gradients back into the
        parameters, step the optimizer, checkpoint when due. Returns the stop."""
        buf = self.buf
        stop = bool(buf[-1].item() > 0)
        buf[:-1].div_(self.world)
        for p, v in self.views:
            p.grad.copy_(v.view_as(p))
        self.opt.step()
        every = self.a.checkpoint_every
        if self.disk is not None and every and step % every == every - 1:
            ck = io.BytesIO()
            self.torch.save(self.model.state_dict(), ck)
            self.disk.checkpoint(ck.getvalue())
        return stop

    def _record(self, recorder: StepRecorder, step: int, t0: float, td: float, t1: float, t2: float, t3: float,
                n_tok: int | None) -> None:
        """The step's record from its perf_counter readings (s): ``t0`` start, ``td``
        batch ready, ``t1`` all-reduce begins, ``t2`` it ends, ``t3`` step ends.
        ``step_s = t3 - t0``, ``comm_s = t2 - t1``; the batch (``td - t0``) is
        ``dataloader_s`` with ``--seq-len-tokens`` or ``--data-dir`` and part of
        ``compute_s`` with the in-memory pool."""
        if self.seqlen:  # the batch draw (dataloader) is not compute
            recorder.end(step, t3 - t0, (t1 - td) + (t3 - t2), t2 - t1, tokens=n_tok, dataloader_s=td - t0)
        elif self.disk is not None:  # reading the shard is the dataloader's time
            recorder.end(step, t3 - t0, (t1 - td) + (t3 - t2), t2 - t1, dataloader_s=td - t0)
        else:
            recorder.end(step, t3 - t0, (t1 - t0) + (t3 - t2), t2 - t1)

    def close(self) -> None:
        """Remove the ``--data-dir`` shards and checkpoint (no-op without)."""
        if self.disk is not None:
            self.disk.close()


def main(argv: list[str] | None = None) -> int:
    """One rank: the argv of the module docstring (``parse_args``), then boot (GC
    timer, agent, torch.distributed rendezvous at ``--master-addr:--master-port``
    within ``--timeout-s``), training until ``--duration-s`` seconds / ``--steps`` steps
    / SIGTERM (the stop is agreed by all ranks through the all-reduce buffer, so every
    rank ends at the same step), a barrier, and teardown.

    Writes ``--out/steps-rank{R}.jsonl`` (one record a step, the schema of the module
    docstring; buffered and written at most every ``--flush-s`` s, and at the end) and, with
    ``--data-dir``, shards and checkpoints under ``DATA_DIR/RUN_ID/rank{R}`` (removed at
    the end); one "up" line and one "done" line on stdout.

    Returns 0 after a clean stop. Run through :func:`run_main` (as ``python -m``):
    an exception is printed and the process exits 1; Ctrl-C exits 130; a second
    SIGTERM exits at once with 143; argparse's usage errors exit 2."""
    a = parse_args(argv)
    t_boot, gc_seconds, torch, dist, device, backend, sync = boot(a)
    print_up(f"rank {a.rank}/{a.world_size} node {a.node}", backend, t_boot,
             f"hidden={a.hidden}, batch={a.batch}, threads={a.threads}, seq_len={_seqlen_text(a)}, gc={a.gc_mode}")
    rank = DdpRank(a, torch, dist, device, sync)
    try:
        recorder = StepRecorder(a, gc_seconds)
        run = run_steps(a, recorder, rank.gc_knob, rank.step)
    finally:
        rank.close()
    finish(dist, f"rank {a.rank}", run, recorder, f", final loss {rank.loss.item():.4f}")
    return 0


def _stop_agent() -> None:
    """Stop the in-workload agent (removes its files); os._exit skips atexit."""
    mod = sys.modules.get("faultlab.benchmarks.agent")
    if mod is not None:
        try:
            mod.stop(timeout_s=1.0)
        except Exception:
            pass


def run_main(main_fn) -> None:
    """Run ``main_fn`` and leave with ``os._exit`` (after stopping the agent)."""
    try:
        rc = main_fn()
    except SystemExit:
        raise
    except KeyboardInterrupt:
        rc = 130
    except BaseException:
        import traceback

        traceback.print_exc()
        _stop_agent()
        sys.stdout.flush()
        sys.stderr.flush()
        # Skip interpreter teardown: a process group whose peer died can hang in it.
        os._exit(1)
    # Skip interpreter teardown here too: the telemetry file is closed and stdio is
    # flushed; C++ destructors of gloo/torch threads at exit can only add a crash.
    _stop_agent()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


if __name__ == "__main__":
    run_main(main)
