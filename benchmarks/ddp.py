"""One rank of a synchronous data-parallel training job, instrumented per step.

Run one process per rank::

    python -m faultlab.benchmarks.ddp --rank R --world-size W \\
        --master-addr A --master-port P --out TELEMETRY_DIR --run-id ID \\
        --node NODE [--peer-group dp] [--duration-s 60] [--steps N] \\
        [--hidden 512] [--batch 64] [--threads 1] [--seed 0] [--device cpu|cuda]
        [--agent-dir DIR|none] [--no-telemetry] [--flush-s 0.5]
        [--seq-len-tokens N [--seq-len-sigma S] [--seqs-per-rank K] [--rebalance]]
        [--seq-len-window FROM:TO]
        [--gc-mode off|uncoordinated|planned [--gc-every N] [--gc-garbage-mb MB] [--gc-window FROM:TO]]
        [--data-dir DIR [--checkpoint-every N]] [--compute-repeat N]
        [--slow-shard-rank R --slow-shard-factor F [--slow-shard-window FROM:TO]]

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
  ``--seq-len-window FROM:TO`` switches the imbalance on for steps FROM..TO-1 only:
  the other steps are rebalanced (the same tokens, evenly spread), so a run has clean
  and straggling stretches.
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
  use. ``--gc-window FROM:TO``: only steps FROM..TO-1 make garbage (and plan
  collections), so no full collection trips outside it. Memory: up to ``every × garbage-mb`` MB (× 1.5 × 1.4) of garbage per rank
  between collections.

Slow data shard (``--slow-shard-rank R --slow-shard-factor F``): rank R's shard holds
samples F times as long as the others' (data skew), so in the steps of
``--slow-shard-window FROM:TO`` (default: every step) it computes F times the rows
(``round(F × tokens)`` with ``--seq-len-tokens``, ``round(F × --batch)`` rows of its
pool otherwise) and the other ranks wait for it at the all-reduce. With
``--seq-len-tokens`` the loss weights count the longer shard's tokens.

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

The knobs (``draw_sequences``, ``rebalance``, ``step_tokens``, ``GcKnob``) live in
:mod:`faultlab.benchmarks.knobs`, the step telemetry (``StepLog``, ``StepRecorder``) in
:mod:`faultlab.benchmarks.steplog`, and the steps of a rank's run that
``faultlab.benchmarks.pipeline`` shares (``boot``, ``print_up``, ``run_steps``,
``finish``, ``run_main``) in :mod:`faultlab.benchmarks.harness`. This module holds the
ddp rank's model, data and step (:class:`DdpRank`) and its entry point.
"""

from __future__ import annotations

import argparse
import io
import time

from faultlab.benchmarks.diskdata import DiskData
from faultlab.benchmarks.harness import (
    add_common_args,
    boot,
    check_common_args,
    finish,
    make_gc_knob,
    print_up,
    run_main,
    run_steps,
    seq_pool_rows,
    seqlen_text,
    wrap_index,
)
from faultlab.benchmarks.knobs import in_window, parse_window, step_tokens
from faultlab.benchmarks.steplog import StepRecorder


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The rank's argv (the module docstring). Bad values: argparse's one-line usage
    error, exit status 2."""
    p = argparse.ArgumentParser(prog="python -m faultlab.benchmarks.ddp", description=__doc__.split("\n\n")[0])
    add_common_args(p, peer_group="dp")
    p.add_argument("--hidden", type=int, default=512, help="hidden width of the 256-H-256 MLP")
    p.add_argument("--batch", type=int, default=64, help="samples per rank per step (ignored with --seq-len-tokens)")
    p.add_argument("--data-dir", default=None, help="disk-backed data path: the rank's batches are shards read from disk each step (dataloader_s), under DIR/RUN_ID/rankR/")
    p.add_argument("--checkpoint-every", type=int, default=0, help="with --data-dir: write a checkpoint every N steps (O_DIRECT + fsync; counted in compute_s); 0: never")
    p.add_argument("--compute-repeat", type=int, default=1, help="forward + backward N times a step, each on 1/N of the loss (the same mean gradient): a rank N times slower by design, an older hardware generation")
    p.add_argument("--slow-shard-rank", type=int, default=None, help="slow data shard: the rank whose samples are longer")
    p.add_argument("--slow-shard-factor", type=float, default=1.0, help="slow data shard: its samples' length over the others' (1 < F <= 16)")
    p.add_argument("--slow-shard-window", type=parse_window, default=(0, None), metavar="FROM:TO",
                   help="steps the slow shard is read, FROM inclusive, TO exclusive or empty (the run's end)")
    a = p.parse_args(argv)
    if not 1 <= a.compute_repeat <= 16:
        p.error("--compute-repeat must be in 1..16")
    if a.slow_shard_rank is not None and not (0 <= a.slow_shard_rank < a.world_size and 1.0 < a.slow_shard_factor <= 16.0):
        p.error("--slow-shard-rank must be a rank of the job and --slow-shard-factor in (1, 16]")
    if a.slow_shard_rank is not None and a.data_dir is not None:
        p.error("--slow-shard-rank does not combine with --data-dir")
    if a.checkpoint_every < 0:
        p.error("--checkpoint-every must be >= 0")
    if a.data_dir is not None and a.seq_len_tokens is not None:
        p.error("--data-dir does not combine with --seq-len-tokens")
    for name in ("hidden", "batch"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be >= 1")
    check_common_args(p, a)
    return a


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
        if self.slow_factor(step) > 1.0:  # the longer samples of a slow shard: more rows
            ix = self.torch.arange(round(self.slow_factor(step) * len(x)), device=self.device) % len(x)
            x, y = x[ix], y[ix]
        return x, y, None, None

    def slow_factor(self, step: int) -> float:
        """How much longer this rank's samples are in ``step`` (``--slow-shard-factor``
        on the slow-shard rank inside its window, else 1.0)."""
        a = self.a
        if a.slow_shard_rank == a.rank and in_window(step, a.slow_shard_window):
            return a.slow_shard_factor
        return 1.0

    def _seq_batch(self, step: int):
        """This rank's ``step_tokens`` rows of the pool, with the loss weight: its share
        of the step's tokens × W, so SUM / W of the gradients is the gradient of the
        mean loss over all tokens."""
        a = self.a
        balanced = a.rebalance or not in_window(step, a.seq_len_window)
        toks = step_tokens(a.seed, step, a.world_size, a.seq_len_tokens, a.seq_len_sigma, a.seqs_per_rank, balanced)
        if a.slow_shard_rank is not None and in_window(step, a.slow_shard_window):
            toks[a.slow_shard_rank] = round(toks[a.slow_shard_rank] * a.slow_shard_factor)
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
        None; ``--compute-repeat`` times, each on that share of the loss), and the
        gradients copied into the buffer."""
        if self.gc_knob is not None:
            self.gc_knob.step(step)
        self.model.zero_grad(set_to_none=False)
        k = self.a.compute_repeat  # N passes on 1/N of the loss: the same gradient, N times the work
        for _ in range(k):
            self.loss = self.loss_fn(self.model(x), y)  # printed at the end: the rank's unweighted loss
            ((self.loss * weight if weight is not None else self.loss) / k).backward()
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
             f"hidden={a.hidden}, batch={a.batch}, threads={a.threads}, seq_len={seqlen_text(a)}, gc={a.gc_mode}")
    rank = DdpRank(a, torch, dist, device, sync)
    try:
        recorder = StepRecorder(a, gc_seconds)
        run = run_steps(a, recorder, rank.gc_knob, rank.step)
    finally:
        rank.close()
    finish(dist, f"rank {a.rank}", run, recorder, f", final loss {rank.loss.item():.4f}")
    return 0


if __name__ == "__main__":
    run_main(main)
