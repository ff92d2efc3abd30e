"""One stage of a synchronous pipeline-parallel training job, instrumented per step.

Run one process per stage (world size = number of stages; rank s is stage s)::

    python -m faultlab.benchmarks.pipeline --rank R --world-size S \\
        --master-addr A --master-port P --out TELEMETRY_DIR --run-id ID \\
        --node NODE [--peer-group pp] [--duration-s 60] [--steps N] \\
        [--stages S] [--layers 2,2,2,6] [--microbatches 4] \\
        [--hidden 512] [--batch 64] [--threads 1] [--seed 0] [--device cpu|cuda] \\
        [--agent-dir DIR|none] [--no-telemetry] [--flush-s 0.5] \\
        [--seq-len-tokens N [--seq-len-sigma S] [--seqs-per-rank K] [--rebalance]] \\
        [--gc-mode off|uncoordinated|planned [--gc-every N] [--gc-garbage-mb MB]]

The model is a stack of ``HIDDEN x HIDDEN`` Linear layers (ReLU between them) split
across the stages: stage s holds ``--layers[s]`` of them (default 2 per stage; uneven
counts are **stage imbalance**: the heaviest stage sets the pace of the whole
pipeline). Synthetic data and targets from a fixed random teacher; SGD.

Schedule (GPipe): each step the batch (``--batch`` rows) is cut into
``--microbatches`` microbatches of ``batch // microbatches`` rows. All forwards run
first: stage s receives microbatch m's activations from stage s-1 (``dist.recv``),
runs its layers and sends the output on to stage s+1 (``dist.isend``); the last stage
computes the loss. Then all backwards, in reverse microbatch order: stage s receives
the gradient of its output from stage s+1, back-propagates, and sends the gradient of
its input to stage s-1. Then the stop vote (below), then each stage's optimizer step.
Backend: gloo on CPU, nccl on GPU.

Per step, one JSON object is appended to ``TELEMETRY_DIR/steps-rank{R}.jsonl``, in the
format and batching of ``faultlab.benchmarks.ddp`` (the same keys; ``peer_group`` is
``pp`` for every stage by default):

- ``compute_s``: this stage's own forward + backward + optimizer time (s), plus the
  ``--gc-mode`` garbage allocation and planned collection; the loss on the last stage.
- ``comm_s``: seconds blocked in send/recv (waiting for the neighbour stages: the
  pipeline's fill and drain bubbles land here) and in the stop vote.
- ``step_s``: the whole step (s). ``gc_s``: GC seconds during the step, as in ddp.
- ``tokens``, ``dataloader_s`` with ``--seq-len-tokens`` (below).

Knobs shared with ddp: ``--seq-len-tokens`` draws each *microbatch's* rows from the
lognormal (median ``--seq-len-tokens``, shape ``--seq-len-sigma``, the microbatches
playing the part of ddp's ranks, with the same step-seeded RNG on every stage so all
stages agree on the shapes), and ``--rebalance`` balances the step's sequences across
the microbatches; ``tokens`` is the step's total rows (the same on every stage) and
``dataloader_s`` the seconds spent drawing them (not in ``compute_s``). ``--gc-mode``
works per stage exactly as per rank in ddp.

Stopping: every stage must stop after the same step. At the end of every step each
stage adds its stop vote (0 or 1) to a one-element ``all_reduce`` (SUM); a non-zero
sum stops every stage after that step. A stage votes to stop when ``--steps`` steps are
done, when ``--duration-s`` has elapsed on its clock, or on SIGTERM; without
``--steps`` or ``--duration-s`` the run lasts 60 s.

The in-workload agent, ``--agent-dir``, ``--no-telemetry``, ``--flush-s`` and
``--telemetry-ab`` are as in ddp. Exit
status: 0 when training finished (also after a SIGTERM-requested stop), 1 on an error
(a peer died, init timed out), 2 on bad arguments (also ``--stages`` different from
``--world-size``, or ``--layers`` with a count per stage that is missing or < 1).
After the last step all stages pass a barrier, destroy the process group and leave
with ``os._exit``.
"""

from __future__ import annotations

import argparse
import time

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
    wrap_index,
)
from faultlab.benchmarks.knobs import draw_sequences, in_window, rebalance
from faultlab.benchmarks.steplog import StepRecorder


def parse_layers(text: str | None, stages: int) -> list[int]:
    """Layers per stage from ``"a,b,c"`` (None: 2 per stage). Raises ValueError when
    the count of entries is not ``stages`` or an entry is not an int >= 1."""
    if text is None or not str(text).strip():
        return [2] * stages
    try:
        layers = [int(x) for x in str(text).split(",")]
    except ValueError:
        raise ValueError(f"--layers {text!r} is not a comma-separated list of ints") from None
    if len(layers) != stages:
        raise ValueError(f"--layers has {len(layers)} entries for {stages} stages")
    if min(layers) < 1:
        raise ValueError(f"--layers {text!r}: every stage needs at least 1 layer")
    return layers


def microbatch_rows(a: argparse.Namespace, step: int) -> list[int]:
    """Rows of each microbatch in ``step`` (the same on every stage)."""
    if a.seq_len_tokens is None:
        return [a.batch // a.microbatches] * a.microbatches
    seqs = draw_sequences(a.seed, step, a.microbatches, a.seq_len_tokens, a.seq_len_sigma, a.seqs_per_rank)
    if a.rebalance or not in_window(step, a.seq_len_window):
        seqs = rebalance(seqs)
    return [sum(s) for s in seqs]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The stage's argv (the module docstring); adds ``layer_counts`` (layers per
    stage). Bad values: argparse's one-line usage error, exit status 2."""
    p = argparse.ArgumentParser(prog="python -m faultlab.benchmarks.pipeline", description=__doc__.split("\n\n")[0])
    add_common_args(p, peer_group="pp")
    p.add_argument("--stages", type=int, default=None, help="pipeline stages (must equal --world-size; default: it)")
    p.add_argument("--layers", default=None, help="layers of each stage, e.g. 2,2,2,6 (default 2 each)")
    p.add_argument("--microbatches", type=int, default=4, help="microbatches per step (GPipe)")
    p.add_argument("--hidden", type=int, default=512, help="width of every layer")
    p.add_argument("--batch", type=int, default=64, help="rows per step, split into the microbatches (ignored with --seq-len-tokens)")
    a = p.parse_args(argv)
    check_common_args(p, a)
    for name in ("hidden", "batch", "microbatches"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be >= 1")
    if a.stages is None:
        a.stages = a.world_size
    if a.stages != a.world_size:
        p.error(f"--stages {a.stages} must equal --world-size {a.world_size} (one rank per stage)")
    if a.seq_len_tokens is None and a.batch < a.microbatches:
        p.error(f"--batch {a.batch} is smaller than --microbatches {a.microbatches}")
    try:
        a.layer_counts = parse_layers(a.layers, a.stages)
    except ValueError as e:
        p.error(str(e))
    return a


class _StepTimes:
    """One step's running sums (s): ``compute`` (local work) and ``comm`` (blocked
    in send/recv and the stop vote)."""

    __slots__ = ("compute", "comm")

    def __init__(self, compute: float):
        self.compute, self.comm = compute, 0.0


class PipelineStage:
    """Stage ``--rank`` of the pipeline: its ``--layers[s]`` Linear layers (ReLU
    between them; none after the last stage's last layer), its optimizer, the data
    pool (the inputs on the first stage, the targets on the last, both from one
    generator so the stages agree), and its GPipe training step. ``torch``, ``dist``,
    ``device``, ``sync`` are :func:`boot`'s."""

    def __init__(self, a: argparse.Namespace, torch, dist, device, sync):
        self.a, self.torch, self.dist, self.device, self.sync = a, torch, dist, device, sync
        self.s, self.M, self.H = a.rank, a.microbatches, a.hidden
        self.first, self.last = self.s == 0, self.s == a.stages - 1
        self.model = self._build_model()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=a.lr)
        self.loss_fn = torch.nn.MSELoss()
        self.pool_x, self.pool_y, self.pool_rows = self._build_pool()
        self.gc_knob = make_gc_knob(a)
        self.vote = torch.zeros(1, dtype=torch.float32, device=device)
        self.outs: list = []  # the last step's weighted losses, detached (last stage only)

    def _build_model(self):
        """This stage's layers, seeded by ``--seed`` and the stage, on the device."""
        torch, a, s = self.torch, self.a, self.s
        torch.manual_seed(a.seed * 1009 + s)
        mods: list = []
        for i in range(a.layer_counts[s]):
            mods.append(torch.nn.Linear(self.H, self.H))
            if not (self.last and i == a.layer_counts[s] - 1):
                mods.append(torch.nn.ReLU())
        return torch.nn.Sequential(*mods).to(self.device)

    def _build_pool(self):
        """``(pool_x, pool_y, pool_rows)``: the inputs (first stage) and targets (last
        stage) of the same pool of rows, None where the stage needs none; rows:
        ``seq_pool_rows`` with ``--seq-len-tokens``, else 16 batches."""
        if not (self.first or self.last):
            return None, None, None
        torch, a, H = self.torch, self.a, self.H
        gen = torch.Generator().manual_seed(a.seed * 100003 + 7)
        pool_rows = seq_pool_rows(a) if a.seq_len_tokens is not None else 16 * a.batch
        px = torch.randn(pool_rows, H, generator=gen)
        teacher = torch.randn(H, H, generator=gen) / H**0.5
        pool_x = px.to(self.device) if self.first else None
        pool_y = torch.tanh(px @ teacher).to(self.device) if self.last else None
        return pool_x, pool_y, pool_rows

    def _rows_at(self, pool, start: int, n: int):
        """``n`` rows of ``pool`` from row ``start`` (mod the pool's rows, wrapping)."""
        return pool[wrap_index(self.torch, start, n, self.pool_rows, self.device)]

    def step(self, recorder: StepRecorder, step: int, t0: float, want_stop: bool) -> bool:
        """One GPipe step from ``t0`` (perf_counter, s): the microbatch rows, all
        forwards, all backwards, the stop vote, the optimizer step, the record.
        Returns True when some stage voted to stop."""
        perf = time.perf_counter
        self.outs = []  # the last step's outputs and their graphs go before this step's
        rows = microbatch_rows(self.a, step)
        total = sum(rows)
        td = perf()
        if self.gc_knob is not None:
            self.gc_knob.step(step)
        self.model.zero_grad(set_to_none=False)
        self.sync()
        t = _StepTimes(perf() - td)
        ins, outs, sends = self._forwards(t, rows, total, step * total)
        self._backwards(t, ins, outs, sends)
        stop = self._vote(t, sends, want_stop)
        tc = perf()
        self.opt.step()
        self.sync()
        t3 = perf()
        t.compute += t3 - tc
        # only the last stage's losses, detached (for loss_text): no graph outlives its step
        self.outs = [o.detach() for o in outs] if self.last else []
        if self.a.seq_len_tokens is not None:
            recorder.end(step, t3 - t0, t.compute, t.comm, tokens=total, dataloader_s=td - t0)
        else:
            recorder.end(step, t3 - t0, t.compute, t.comm)
        return stop

    def _forwards(self, t: _StepTimes, rows: list[int], total: int, base: int):
        """All microbatches forward: receive each input from the stage before (the
        first stage slices the pool from row ``base``), run the layers (the loss, ×
        the microbatch's share of ``total`` rows, on the last stage), send the output
        on. Adds to ``t``; returns ``(ins, outs, sends)``."""
        perf, dist, s = time.perf_counter, self.dist, self.s
        ins: list = []
        outs: list = []
        sends: list = []
        for m in range(self.M):
            off = base + sum(rows[:m])
            if self.first:
                x = self._rows_at(self.pool_x, off, rows[m])
            else:
                x = self.torch.empty(rows[m], self.H, device=self.device)
                tw = perf()
                dist.recv(x, src=s - 1, tag=m)
                t.comm += perf() - tw
                x.requires_grad_()
            tc = perf()
            out = self.model(x)
            if self.last:
                out = self.loss_fn(out, self._rows_at(self.pool_y, off, rows[m])) * (rows[m] / total)
            self.sync()
            t.compute += perf() - tc
            if not self.last:
                tw = perf()
                sends.append(dist.isend(out.detach(), dst=s + 1, tag=m))
                t.comm += perf() - tw
            ins.append(x)
            outs.append(out)
        return ins, outs, sends

    def _backwards(self, t: _StepTimes, ins: list, outs: list, sends: list) -> None:
        """All microbatches backward, the last first: receive the output's gradient
        from the stage after, back-propagate, send the input's gradient to the stage
        before (appended to ``sends``). Adds to ``t``."""
        perf, dist, s, M = time.perf_counter, self.dist, self.s, self.M
        for m in reversed(range(M)):
            if self.last:
                tc = perf()
                outs[m].backward()
            else:
                g = self.torch.empty_like(outs[m])
                tw = perf()
                dist.recv(g, src=s + 1, tag=M + m)
                t.comm += perf() - tw
                tc = perf()
                outs[m].backward(g)
            self.sync()
            t.compute += perf() - tc
            if not self.first:
                tw = perf()
                sends.append(dist.isend(ins[m].grad, dst=s - 1, tag=M + m))
                t.comm += perf() - tw

    def _vote(self, t: _StepTimes, sends: list, want_stop: bool) -> bool:
        """Wait for the step's sends, then the one-element SUM all-reduce of the stop
        votes (both in ``t.comm``). Returns True when some stage voted to stop."""
        tw = time.perf_counter()
        for w in sends:
            w.wait()
        self.vote.fill_(1.0 if want_stop else 0.0)
        self.dist.all_reduce(self.vote, op=self.dist.ReduceOp.SUM)
        stop = bool(self.vote.item() > 0)
        t.comm += time.perf_counter() - tw
        return stop

    def loss_text(self) -> str:
        """``", final loss X"`` (the last step's loss) on the last stage, else ``""``."""
        if not self.last:
            return ""
        return f", final loss {float(sum(o.item() for o in self.outs)):.4f}"


def main(argv: list[str] | None = None) -> int:
    """One stage: the argv of the module docstring (``parse_args``), :func:`boot`,
    training until ``--duration-s`` s / ``--steps`` steps / SIGTERM (agreed by all
    stages through the stop vote), a barrier and teardown. Writes
    ``--out/steps-rank{R}.jsonl``; one "up" and one "done" line on stdout. Returns 0
    after a clean stop; exit statuses as in ``faultlab.benchmarks.ddp`` (``run_main``)."""
    a = parse_args(argv)
    t_boot, gc_seconds, torch, dist, device, backend, sync = boot(a)
    print_up(f"stage {a.rank}/{a.stages} node {a.node}", backend, t_boot,
             f"layers={a.layer_counts}, microbatches={a.microbatches}, hidden={a.hidden}, batch={a.batch}, "
             f"threads={a.threads}, gc={a.gc_mode}")
    stage = PipelineStage(a, torch, dist, device, sync)
    recorder = StepRecorder(a, gc_seconds)
    run = run_steps(a, recorder, stage.gc_knob, stage.step)
    finish(dist, f"stage {a.rank}", run, recorder, stage.loss_text())
    return 0


if __name__ == "__main__":
    run_main(main)
