"""Start the ranks of a benchmark job on nodes, wait for them, stop them.

Each rank is ``python -P -m MODULE ...`` (``-P``: the working directory, which may be
anyone's folder, is not on ``sys.path``; ``faultlab.benchmarks.ddp`` by default,
``faultlab.benchmarks.pipeline`` for a pipeline job) started with
``node.spawn_workload(...)``; on a netns node that is ``ip netns exec NETNS
python ...``, which execs the command in place (no fork), so ``popen.pid`` is the
rank's own PID on every local backend; on a docker node it is ``docker exec`` and
``pid`` is the rank's host PID. A rank writes telemetry where
``node.workload_out`` says (the run directory, or a node-local folder collected back). Only PIDs this module started are ever
signalled.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from faultlab.nodes import Node

_MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass
class RankProc:
    """One started rank: its global ``rank``, the ``node`` it runs on, its ``popen``
    (whose ``pid`` is the rank's PID) and ``log_path`` (its stdout+stderr)."""

    rank: int
    node: Node
    popen: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid


class RankFailure(RuntimeError):
    """A rank exited non-zero, or the job ran past its timeout.

    Attributes: ``rank`` (the failing rank, or None on a timeout), ``returncode``
    (or None), ``log_tail`` (the last lines of the rank's log).
    """

    def __init__(self, message: str, *, rank: int | None = None, returncode: int | None = None, log_tail: str = ""):
        super().__init__(message)
        self.rank = rank
        self.returncode = returncode
        self.log_tail = log_tail


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` now (bind to port 0, read it, release it).

    Meant for the rendezvous port of local nodes; another process may take it before
    rank 0 binds it (rare). Raises OSError when ``host`` is not a local address.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def listen_rendezvous(host: str = "127.0.0.1") -> socket.socket:
    """A TCP socket listening on ``host`` at a port the kernel picks (its
    ``getsockname()[1]``), to hand to rank 0 (``launch_ranks(master_listen_fd=)``):
    the port is held from its choice on, and only on ``host``. Close it once the ranks
    started. Raises OSError when ``host`` is not a local address."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((host, 0))
        s.listen(128)
    except OSError:
        s.close()
        raise
    return s


def rank_iface(node: Node, master_addr: str) -> str | None:
    """The interface gloo should use on ``node`` (passed to the rank as ``--iface``).

    ``node.iface`` when set; else the interface holding ``node.address``; else the
    interface of the route from the node to ``master_addr`` (``lo`` for loopback).
    Gloo must be told: inside a namespace the host name resolves to an address the
    namespace lacks, and gloo then falls back to a loopback its peers cannot reach.
    Returns None when nothing can be found (gloo picks by itself).
    """
    if node.iface:
        return node.iface
    try:
        if node.address:
            cp = node.run(["ip", "-o", "-4", "addr", "show", "to", node.address], scope="net", timeout=10)
            for line in cp.stdout.splitlines():
                parts = line.split()
                if len(parts) > 1:
                    return parts[1].split("@")[0]
        cp = node.run(["ip", "-o", "route", "get", master_addr], scope="net", timeout=10)
    except Exception:
        return None
    parts = cp.stdout.split()
    if "dev" in parts and parts.index("dev") + 1 < len(parts):
        return parts[parts.index("dev") + 1]
    return None


def launch_ranks(
    placements: Sequence[tuple[Node, int]],
    *,
    telemetry_dir: str | Path,
    run_id: str,
    master_addr: str,
    master_port: int,
    duration_s: float | None,
    extra_args: Iterable[str] = (),
    log_dir: str | Path,
    world_size: int | None = None,
    peer_group: str | None = None,
    env: dict | None = None,
    module: str = "faultlab.benchmarks.ddp",
    rank_args: dict[int, Sequence[str]] | None = None,
    master_listen_fd: int | None = None,
    store_file: str | None = None,
) -> list[RankProc]:
    """Start one rank of the workload ``module`` per ``(node, rank)`` placement.

    ``module``: the rank worker run as ``python -m MODULE`` (``faultlab.benchmarks.ddp``
    or ``faultlab.benchmarks.pipeline``, or any module taking the same rendezvous and
    telemetry flags). ``peer_group``: written in every record (default: the module's
    own, ``dp`` for ddp and ``pp`` for pipeline).

    ``duration_s``: training time in seconds (None: leave it to ``extra_args``, e.g.
    ``["--steps", "40"]``; with neither, a rank trains 60 s). ``extra_args`` are
    appended to every rank's argv (``--hidden``, ``--batch``, ``--threads``, ...);
    ``rank_args`` ``{rank: argv}`` after them to that rank's alone (a node group's
    ``--compute-repeat`` and ``--peer-group``: the last of a flag wins).
    ``world_size`` defaults to ``len(placements)``. Each rank's stdout and stderr go
    to ``log_dir/rank{R}.log``; telemetry to ``telemetry_dir/steps-rank{R}.jsonl``.
    ``master_addr``/``master_port``: where rank 0 listens (rank 0 must be placed on
    the node that holds ``master_addr``). The gloo interface of each rank is found by
    ``rank_iface``. ``master_listen_fd``: a socket of this process already listening
    at ``master_addr:master_port`` (:func:`listen_rendezvous`), handed to rank 0 (a
    node on this host) as its rendezvous store's socket: no one can take the port
    between its choice and rank 0's start. ``store_file``: ranks all on this host
    rendezvous through a ``FileStore`` at this path (in a folder of this process's
    alone) instead of rank 0's TCP store, which any local user may connect to.

    Returns the RankProcs in placement order without waiting. Raises ValueError for
    duplicate or out-of-range ranks and for a ``module`` that is not a dotted
    Python module name. If starting a rank fails, the ranks already
    started are killed and the error is re-raised.
    """
    placements = list(placements)
    ranks = [r for _, r in placements]
    ws = world_size if world_size is not None else len(placements)
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"duplicate ranks in placements: {sorted(ranks)}")
    bad = [r for r in ranks if not 0 <= r < ws]
    if bad:
        raise ValueError(f"ranks {bad} are outside 0..{ws - 1} (world size {ws})")
    if not isinstance(module, str) or not _MODULE_RE.fullmatch(module):
        raise ValueError(f"module {module!r} is not a dotted Python module name")
    telemetry_dir = Path(telemetry_dir)
    log_dir = Path(log_dir)
    telemetry_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    run_env = dict(os.environ if env is None else env)
    run_env.setdefault("PYTHONUNBUFFERED", "1")

    ifaces: dict[int, str | None] = {}
    procs: list[RankProc] = []
    try:
        for node, rank in placements:
            key = id(node)
            if key not in ifaces:
                ifaces[key] = rank_iface(node, master_addr)
            argv = [
                sys.executable, "-P", "-m", module,  # -P: the caller's cwd is not on sys.path
                "--rank", str(rank),
                "--world-size", str(ws),
                "--master-addr", master_addr,
                "--master-port", str(master_port),
                "--out", node.workload_out(run_id, telemetry_dir),
                "--run-id", run_id,
                "--node", node.name,
            ]  # fmt: skip
            if peer_group is not None:
                argv += ["--peer-group", peer_group]
            if duration_s is not None:
                argv += ["--duration-s", f"{duration_s:g}"]
            if ifaces[key]:
                argv += ["--iface", ifaces[key]]
            argv += [str(x) for x in extra_args]
            argv += [str(x) for x in (rank_args or {}).get(rank, ())]
            kw = {}
            if store_file is not None:
                argv += ["--store-file", str(store_file)]
            if rank == 0 and master_listen_fd is not None:
                argv += ["--master-listen-fd", str(master_listen_fd)]
                kw["pass_fds"] = (master_listen_fd,)
            log_path = log_dir / f"rank{rank}.log"
            with open(log_path, "ab") as log:
                popen = node.spawn_workload(argv, env=run_env, stdout=log, stderr=subprocess.STDOUT, **kw)
            procs.append(RankProc(rank=rank, node=node, popen=popen, log_path=log_path))
    except BaseException:
        stop_ranks(procs, grace_s=0)
        raise
    return procs


def log_tail(path: str | Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file ('' when missing)."""
    try:
        data = Path(path).read_bytes()[-16384:]
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


def stop_ranks(procs: Sequence[RankProc], grace_s: float = 5.0) -> dict[int, int | None]:
    """Stop the ranks still running: SIGTERM and SIGCONT (a rank then stops at the next
    step with its peers, a stopped one too), wait up to ``grace_s`` seconds, then
    SIGKILL. Signals only the PIDs in ``procs``. Returns rank -> returncode."""
    live = [p for p in procs if p.popen.poll() is None]
    for p in live:
        try:
            if grace_s > 0:
                p.popen.send_signal(signal.SIGTERM)
                p.popen.send_signal(signal.SIGCONT)  # a stopped rank's SIGTERM waits for it; SIGKILL would leave its agent file
            else:
                p.popen.kill()
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    for p in live:
        try:
            p.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.popen.kill()
    for p in live:
        try:
            p.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    return {p.rank: p.popen.returncode for p in procs}


def wait_ranks(procs: Sequence[RankProc], timeout_s: float, *, grace_s: float = 5.0) -> dict[int, int]:
    """Wait until every rank exits, at most ``timeout_s`` seconds.

    Returns rank -> returncode (all 0). When a rank exits non-zero, or the timeout
    passes, the remaining ranks are stopped (``stop_ranks``: SIGTERM, then SIGKILL
    after ``grace_s`` seconds; only the PIDs in ``procs``) and RankFailure (a
    RuntimeError) is raised, naming the first failing rank and quoting its log tail.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        failed = None
        running = 0
        for p in procs:
            rc = p.popen.poll()
            if rc is None:
                running += 1
            elif rc != 0 and failed is None:
                failed = p
        if failed is not None:
            stop_ranks(procs, grace_s=grace_s)
            tail = log_tail(failed.log_path)
            raise RankFailure(
                f"rank {failed.rank} on node {failed.node.name} (pid {failed.pid}) exited with "
                f"{_rc_text(failed.popen.returncode)}; last lines of {failed.log_path}:\n{tail}",
                rank=failed.rank,
                returncode=failed.popen.returncode,
                log_tail=tail,
            )
        if running == 0:
            return {p.rank: p.popen.returncode for p in procs}
        if time.monotonic() >= deadline:
            still = [p.rank for p in procs if p.popen.poll() is None]
            stop_ranks(procs, grace_s=grace_s)
            first = next(p for p in procs if p.rank == still[0])
            tail = log_tail(first.log_path)
            raise RankFailure(
                f"ranks {still} still running after {timeout_s:g}s; stopped them. "
                f"Last lines of {first.log_path}:\n{tail}",
                log_tail=tail,
            )
        time.sleep(0.05)


def _rc_text(rc: int | None) -> str:
    if rc is None:
        return "no status"
    if rc < 0:
        try:
            return f"signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"signal {-rc}"
    return f"status {rc}"
