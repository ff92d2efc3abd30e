"""The rank harness shared by the ddp and pipeline workloads.

It holds their common flags (:func:`add_common_args`, :func:`check_common_args`),
starting a rank (:func:`boot`: thread settings, the in-workload agent,
torch.distributed, the SIGTERM handler), the step loop that stops every rank at the same
step (:func:`run_steps`, :func:`stop_reason`), leaving together (:func:`finish`) and the
process exit (:func:`run_main`). Each workload brings its own model and step."""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
import time
import traceback
from typing import NamedTuple

from faultlab.benchmarks.knobs import MAX_GARBAGE_MB, MAX_TOKENS_FACTOR, GcKnob, parse_window
from faultlab.benchmarks.steplog import StepRecorder


def add_common_args(p: argparse.ArgumentParser, *, peer_group: str) -> None:
    """The flags ddp and pipeline ranks share (rendezvous, run length, telemetry,
    agent, straggler knobs)."""
    p.add_argument("--rank", type=int, required=True, help="global rank (0..W-1)")
    p.add_argument("--world-size", type=int, required=True, help="number of ranks")
    p.add_argument("--master-addr", required=True, help="IPv4 address of rank 0's rendezvous")
    p.add_argument("--master-port", type=int, required=True, help="TCP port of rank 0's rendezvous")
    p.add_argument("--master-listen-fd", type=int, default=None,
                   help="rank 0: an inherited socket already listening at the rendezvous address (its store's socket)")
    p.add_argument("--store-file", default=None,
                   help="ranks of one host: the rendezvous store is this file (in a folder of the launcher's alone), no TCP store")
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
    p.add_argument("--seq-len-window", type=parse_window, default=(0, None), metavar="FROM:TO",
                   help="steps the imbalance is in force, FROM inclusive, TO exclusive or empty (the run's end); outside it the step's sequences are rebalanced")
    p.add_argument("--gc-window", type=parse_window, default=(0, None), metavar="FROM:TO",
                   help="steps the GC knob makes garbage (and plans collections), FROM:TO as --seq-len-window")


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
    # imported only when a rank starts it: _stop_agent stops it when sys.modules holds it
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
    # torch is imported here, not at the top: boot() sizes its thread pools first
    # (OMP_NUM_THREADS) and starts the in-workload agent before torch loads
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

    timeout = datetime.timedelta(seconds=a.timeout_s)
    if a.store_file:  # ranks of one host: a file of the launcher's private folder, no port anyone may connect to
        store = dist.FileStore(a.store_file, a.world_size)
    else:  # rank 0's store listens on the launcher's socket when given one: the port was never free for another to take
        store = dist.TCPStore(a.master_addr, a.master_port, a.world_size, a.rank == 0, timeout=timeout,
                              master_listen_fd=a.master_listen_fd if a.rank == 0 else None)
    dist.init_process_group(backend, store=store, rank=a.rank, world_size=a.world_size, timeout=timeout)
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


def seqlen_text(a: argparse.Namespace) -> str:
    if a.seq_len_tokens is None:
        return "off"
    return f"{a.seq_len_tokens}/sigma {a.seq_len_sigma:g}" + ("/rebalance" if a.rebalance else "")


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
    return GcKnob(a.gc_mode, a.gc_every, a.gc_garbage_mb, seed=a.seed, rank=a.rank, window=a.gc_window)


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
