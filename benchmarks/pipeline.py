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
import os
import time

from faultlab.benchmarks.ddp import (
    boot,
    MAX_TOKENS_FACTOR,
    GcKnob,
    StepRecorder,
    add_common_args,
    check_common_args,
    draw_sequences,
    rebalance,
    run_main,
    stop_reason,
)


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
    if a.rebalance:
        seqs = rebalance(seqs)
    return [sum(s) for s in seqs]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
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


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    t_boot, gc_seconds, torch, dist, device, backend, sync = boot(a)
    s, S, M, H = a.rank, a.stages, a.microbatches, a.hidden
    first, last = s == 0, s == S - 1
    print(
        f"[stage {s}/{S} node {a.node}] {backend} up in {time.perf_counter() - t_boot:.2f}s "
        f"(iface={os.environ.get('GLOO_SOCKET_IFNAME', 'default')}, layers={a.layer_counts}, microbatches={M}, "
        f"hidden={H}, batch={a.batch}, threads={a.threads}, gc={a.gc_mode})",
        flush=True,
    )

    torch.manual_seed(a.seed * 1009 + s)
    mods: list = []
    for i in range(a.layer_counts[s]):
        mods.append(torch.nn.Linear(H, H))
        if not (last and i == a.layer_counts[s] - 1):
            mods.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*mods).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    loss_fn = torch.nn.MSELoss()

    # The data pool: the same on the first stage (inputs) and the last (targets).
    if first or last:
        gen = torch.Generator().manual_seed(a.seed * 100003 + 7)
        if a.seq_len_tokens is not None:
            pool_rows = min(MAX_TOKENS_FACTOR * a.seq_len_tokens, 1 << 16)
        else:
            pool_rows = 16 * a.batch
        px = torch.randn(pool_rows, H, generator=gen)
        teacher = torch.randn(H, H, generator=gen) / H**0.5
        pool_x = px.to(device) if first else None
        pool_y = torch.tanh(px @ teacher).to(device) if last else None
        del px

    def rows_at(pool, start: int, n: int):
        start %= pool_rows
        if start + n <= pool_rows:
            return pool[start : start + n]
        return pool[torch.arange(start, start + n, device=device) % pool_rows]

    gc_knob = GcKnob(a.gc_mode, a.gc_every, a.gc_garbage_mb, seed=a.seed, rank=a.rank) if a.gc_mode != "off" else None
    vote = torch.zeros(1, dtype=torch.float32, device=device)

    recorder = StepRecorder(a, gc_seconds)
    step = 0
    why = None
    perf = time.perf_counter
    if gc_knob is not None:
        gc_knob.start()
    t_train0 = perf()
    try:
        while True:
            why = stop_reason(a, step, t_train0)
            t0 = perf()
            recorder.begin(step, t0)
            rows = microbatch_rows(a, step)
            total = sum(rows)
            base = step * total
            td = perf()
            if gc_knob is not None:
                gc_knob.step(step)
            model.zero_grad(set_to_none=False)
            sync()
            compute = perf() - td
            comm = 0.0
            ins: list = []
            outs: list = []
            sends: list = []
            # -- all forwards
            for m in range(M):
                off = base + sum(rows[:m])
                if first:
                    x = rows_at(pool_x, off, rows[m])
                else:
                    x = torch.empty(rows[m], H, device=device)
                    tw = perf()
                    dist.recv(x, src=s - 1, tag=m)
                    comm += perf() - tw
                    x.requires_grad_()
                tc = perf()
                out = model(x)
                if last:
                    out = loss_fn(out, rows_at(pool_y, off, rows[m])) * (rows[m] / total)
                sync()
                compute += perf() - tc
                if not last:
                    tw = perf()
                    sends.append(dist.isend(out.detach(), dst=s + 1, tag=m))
                    comm += perf() - tw
                ins.append(x)
                outs.append(out)
            # -- all backwards, last microbatch first
            for m in reversed(range(M)):
                if last:
                    tc = perf()
                    outs[m].backward()
                else:
                    g = torch.empty_like(outs[m])
                    tw = perf()
                    dist.recv(g, src=s + 1, tag=M + m)
                    comm += perf() - tw
                    tc = perf()
                    outs[m].backward(g)
                sync()
                compute += perf() - tc
                if not first:
                    tw = perf()
                    sends.append(dist.isend(ins[m].grad, dst=s - 1, tag=M + m))
                    comm += perf() - tw
            # -- sends done, stop vote
            tw = perf()
            for w in sends:
                w.wait()
            vote.fill_(1.0 if why is not None else 0.0)
            dist.all_reduce(vote, op=dist.ReduceOp.SUM)
            stop = bool(vote.item() > 0)
            comm += perf() - tw
            # -- optimizer
            tc = perf()
            opt.step()
            sync()
            t3 = perf()
            compute += t3 - tc
            if a.seq_len_tokens is not None:
                recorder.end(step, t3 - t0, compute, comm, tokens=total, dataloader_s=td - t0)
            else:
                recorder.end(step, t3 - t0, compute, comm)
            step += 1
            if stop:
                break
    finally:
        recorder.close()

    if last:
        loss_sum = float(sum(o.item() for o in outs))
    dist.barrier()
    dist.destroy_process_group()
    why = why or "a peer's vote"
    loss_text = f", final loss {loss_sum:.4f}" if last else ""
    print(
        f"[stage {s}] done: {step} steps in {time.perf_counter() - t_train0:.2f}s "
        f"({recorder.summary()}{loss_text}, stop: {why})",
        flush=True,
    )
    if recorder.ab:
        print(f"[stage {s}] {recorder.periods.ab_text()}", flush=True)
    return 0


if __name__ == "__main__":
    run_main(main)
