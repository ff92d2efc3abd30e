"""One rank of a synchronous data-parallel training job, instrumented per step.

Run one process per rank::

    python -m faultlab.benchmarks.ddp --rank R --world-size W \\
        --master-addr A --master-port P --out TELEMETRY_DIR --run-id ID \\
        --node NODE [--peer-group dp] [--duration-s 60] [--steps N] \\
        [--hidden 512] [--batch 64] [--threads 1] [--seed 0] [--device cpu|cuda]
        [--agent-dir DIR|none]

The model is a 256-HIDDEN-256 MLP trained with SGD on synthetic data (a fixed pool
of batches per rank, targets from a fixed random teacher shared by all ranks).

This is data-parallel training as DDP does it, without the overlap, so compute and
communication are measured apart: DistributedDataParallel starts the gradient
all-reduce of a bucket while backward is still running, and then local work and
waiting for peers cannot be told apart. Here, after backward, all gradients are
flattened into one buffer, reduced with a single ``dist.all_reduce`` (SUM), divided
by the world size and copied back; then the optimizer steps.

Per step, one JSON object is appended to ``TELEMETRY_DIR/steps-rank{R}.jsonl``
(line-buffered, so a killed run stays readable up to its last whole line)::

    run_id, rank, node, peer_group, step, t_start, compute_s, comm_s, step_s, gc_s

- ``t_start``: unix time (s) when the step began on this rank.
- ``compute_s``: forward + backward + flatten + unflatten + optimizer step, in
  seconds (local work only).
- ``comm_s``: seconds inside the all-reduce, including waiting for slower peers
  (the straggler itself waits least).
- ``step_s``: the whole step in seconds (``compute_s + comm_s`` plus a few µs of
  bookkeeping). Writing the record happens between steps and is not counted.
- ``gc_s``: seconds the process spent in Python garbage collection during the step
  (any thread, measured with ``gc.callbacks``; collections of the in-workload agent's
  gc-storm included, since they stop this thread too). Overlaps compute_s/comm_s.
  A collection run by another thread can be counted in the following step (its
  closing callback may run after this thread got the GIL back); sums over a few
  steps are exact. A stall by another thread's collection lands in ``comm_s`` when
  it hits while this thread waits in the all-reduce (which finishes without the GIL
  but cannot return until the collection ends): read ``gc_s`` beside both.

In-workload agent: each rank starts ``faultlab.benchmarks.agent`` before importing
torch, so faults that act from inside the interpreter (``gc-storm``) can target the
rank by its PID. ``--agent-dir`` is its control folder; the default is the agent's
``default_dir()`` (``$FAULTLAB_AGENT_DIR``, else ``/run/faultlab/agents`` as root,
else ``$XDG_RUNTIME_DIR/faultlab/agents``), the same folder the injector looks in, so
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
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m faultlab.benchmarks.ddp", description=__doc__.split("\n\n")[0])
    p.add_argument("--rank", type=int, required=True, help="global rank (0..W-1)")
    p.add_argument("--world-size", type=int, required=True, help="number of ranks")
    p.add_argument("--master-addr", required=True, help="IPv4 address of rank 0's rendezvous")
    p.add_argument("--master-port", type=int, required=True, help="TCP port of rank 0's rendezvous")
    p.add_argument("--out", required=True, help="telemetry folder; steps-rank{R}.jsonl is appended there")
    p.add_argument("--run-id", required=True)
    p.add_argument("--node", default="local", help="node name written in every record")
    p.add_argument("--peer-group", default="dp", help="peer group written in every record")
    p.add_argument("--duration-s", type=float, default=None, help="stop after this many seconds of training")
    p.add_argument("--steps", type=int, default=None, help="stop after this many steps")
    p.add_argument("--hidden", type=int, default=512, help="hidden width of the 256-H-256 MLP")
    p.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cpu: gloo; cuda: nccl")
    p.add_argument("--local-rank", type=int, default=None, help="GPU index (default: rank %% GPUs)")
    p.add_argument("--iface", default=None, help="network interface for gloo/nccl (GLOO_SOCKET_IFNAME)")
    p.add_argument("--timeout-s", type=float, default=120.0, help="init and collective timeout (s)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--agent-dir", default=None,
                   help="control folder of the in-workload agent (default: $FAULTLAB_AGENT_DIR, else /run/faultlab/agents as root); 'none': no agent")
    a = p.parse_args(argv)
    if a.world_size < 1 or not 0 <= a.rank < a.world_size:
        p.error(f"--rank {a.rank} is not in 0..{a.world_size - 1}")
    for name in ("hidden", "batch", "threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be >= 1")
    if a.steps is not None and a.steps < 1:
        p.error("--steps must be >= 1")
    if a.duration_s is not None and a.duration_s <= 0:
        p.error("--duration-s must be > 0")
    if a.steps is None and a.duration_s is None:
        a.duration_s = 60.0
    return a


_stop_requested = False


def _on_sigterm(signum, frame):
    global _stop_requested
    if _stop_requested:  # second request: leave now
        os._exit(128 + signum)
    _stop_requested = True


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    # Before importing torch, so its thread pools are sized once.
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    if a.iface:
        os.environ["GLOO_SOCKET_IFNAME"] = a.iface
        os.environ.setdefault("NCCL_SOCKET_IFNAME", a.iface)
    t_boot = time.perf_counter()

    from faultlab.benchmarks import agent as fl_agent

    fl_agent.install_gc_timer()
    if (a.agent_dir or "").strip().lower() != "none":
        try:
            fl_agent.start(a.agent_dir or None)
        except OSError as e:
            print(f"[rank {a.rank}] warning: faultlab agent not started ({e}); gc-storm cannot target this rank", flush=True)
    gc_seconds = fl_agent.gc_seconds

    import datetime
    import statistics

    import torch
    import torch.distributed as dist

    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass

    signal.signal(signal.SIGTERM, _on_sigterm)

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
    print(
        f"[rank {a.rank}/{a.world_size} node {a.node}] {backend} up in {time.perf_counter() - t_boot:.2f}s "
        f"(iface={os.environ.get('GLOO_SOCKET_IFNAME', 'default')}, hidden={a.hidden}, batch={a.batch}, threads={a.threads})",
        flush=True,
    )

    # Same initial weights and teacher on every rank; different data per rank.
    torch.manual_seed(a.seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, a.hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(a.hidden, 256),
    ).to(device)
    teacher = torch.randn(256, 256) / 16.0
    gen = torch.Generator().manual_seed(a.seed * 100003 + a.rank + 1)
    pool = []
    for _ in range(16):
        x = torch.randn(a.batch, 256, generator=gen)
        pool.append((x.to(device), torch.tanh(x @ teacher).to(device)))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    loss_fn = torch.nn.MSELoss()

    params = [p for p in model.parameters() if p.requires_grad]
    n_grad = sum(p.numel() for p in params)
    buf = torch.zeros(n_grad + 1, dtype=torch.float32, device=device)  # last element: stop vote
    views = []
    off = 0
    for p in params:
        views.append((p, buf[off : off + p.numel()]))
        off += p.numel()
    world = float(a.world_size)

    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"steps-rank{a.rank}.jsonl"
    step_times = []
    step = 0
    t_train0 = time.perf_counter()
    with open(path, "a", buffering=1) as f:  # line-buffered: one write(2) per record
        while True:
            if _stop_requested:
                why = "SIGTERM"
            elif a.steps is not None and step + 1 >= a.steps:
                why = "steps"
            elif a.duration_s is not None and time.perf_counter() - t_train0 >= a.duration_s:
                why = "duration"
            else:
                why = None
            want_stop = why is not None
            t_start = time.time()
            t0 = time.perf_counter()
            g0 = gc_seconds()
            x, y = pool[step % len(pool)]
            model.zero_grad(set_to_none=False)
            loss = loss_fn(model(x), y)
            loss.backward()
            for p, v in views:
                v.copy_(p.grad.reshape(-1))
            buf[-1] = 1.0 if want_stop else 0.0
            sync()
            t1 = time.perf_counter()
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)
            sync()
            t2 = time.perf_counter()
            stop = bool(buf[-1].item() > 0)
            buf[:-1].div_(world)
            for p, v in views:
                p.grad.copy_(v.view_as(p))
            opt.step()
            sync()
            t3 = time.perf_counter()
            gc_s = gc_seconds() - g0
            rec = {
                "run_id": a.run_id,
                "rank": a.rank,
                "node": a.node,
                "peer_group": a.peer_group,
                "step": step,
                "t_start": t_start,
                "compute_s": (t1 - t0) + (t3 - t2),
                "comm_s": t2 - t1,
                "step_s": t3 - t0,
                "gc_s": gc_s,
            }
            f.write(json.dumps(rec) + "\n")
            step_times.append(t3 - t0)
            step += 1
            if stop:
                break

    # All ranks leave together: a rank that tears gloo down while its peer is still
    # finishing the last all-reduce makes the peer abort at exit (seen here ~1 run in
    # 4 without the barrier: "terminate called without an active exception").
    dist.barrier()
    dist.destroy_process_group()
    why = why or "a peer's vote"
    print(
        f"[rank {a.rank}] done: {step} steps in {time.perf_counter() - t_train0:.2f}s "
        f"(median step {statistics.median(step_times) * 1e3:.1f} ms, final loss {loss.item():.4f}, stop: {why})",
        flush=True,
    )
    return 0


def _stop_agent() -> None:
    """Stop the in-workload agent (removes its files); os._exit skips atexit."""
    mod = sys.modules.get("faultlab.benchmarks.agent")
    if mod is not None:
        try:
            mod.stop(timeout_s=1.0)
        except Exception:
            pass


if __name__ == "__main__":
    try:
        rc = main()
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
