"""The runner: one scenario -> one run directory.

Jepsen's shape: set up the testbed (netns nodes, or local processes), start the ranks,
run the fault schedule while they train (each fault a nemesis with inject and a revert
in a ``finally``), record everything in the run directory, tear down.

- Telemetry is flushed as the job runs (ranks append JSONL every step; the journal
  ``events.jsonl`` records every inject and revert as it happens), so a run killed
  half-way stays readable: ``meta.json`` keeps ``complete: false`` and
  ``RunDir.read_table`` rebuilds steps and injections from the raw files.
- Faults end by their leases even if the runner is SIGKILLed; the netns testbed has a
  lease of its own (renewed while the runner lives) whose watchdog removes it.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.markup import escape as rich_escape

from faultlab import injectors, schema, workdirs
from faultlab.benchmarks.launch import RankFailure, launch_ranks, log_tail, stop_ranks, wait_ranks
from faultlab.errors import BadInput, FaultlabError, printable
from faultlab.evidence import verify_text
from faultlab.knobfaults import workload_injections
from faultlab.lifecycle.cmd import Cmd
from faultlab.lifecycle.lease import Lease
from faultlab.nodes import LEASE_HERE, LEASE_ON_NODE, LocalNode
from faultlab.nodes import dockerd
from faultlab.nodes.backends import make_testbed
from faultlab.progress import Progress
from faultlab.rundir import RunDir, new_run_id
from faultlab.scenario import RUN_ID_MAX, FaultSpec, Scenario, check_run_name, rank_types
from faultlab.telemetry import remote
from faultlab.telemetry.collect import TelemetryCollector
from faultlab.telemetry.hostsampler import HostSampler

# The testbed's lease runs out this many seconds after the runner last renewed it
# (every 10 s while it lives): a SIGKILLed runner's testbed is gone within ~30 s.
TESTBED_LEASE_S = 30.0


#: the signals that stop a run: its faults are reverted and its nodes torn down, the
#: run recorded with code 128 + the signal's number (130 for SIGINT, 143 for SIGTERM)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

#: seconds a run waits for rank 0's next training step (and, at the end, for the ranks to
#: exit after their last step) before it stops the ranks and fails: twice the ranks'
#: collective timeout (``--timeout-s``, 120 s), past which a rank waiting on a stalled peer
#: has failed by itself. Without it, ranks all stopped at once (SIGSTOP), or a docker rank
#: whose output its container's root holds open, kept the run and its testbed's lease
#: alive for good
STALL_S = 240.0


class _Stop(BaseException):
    """A stop signal arrived during a run (``signum``)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_stop(signum, frame):
    raise _Stop(signum)


def _defer_stops(res: "RunResult") -> None:
    """From here on, a stop signal is noted in ``res`` (:func:`_note_stop`) instead of
    raised: the faults' revert and the teardown always run to their end."""
    for s in STOP_SIGNALS:
        signal.signal(s, functools.partial(_note_stop, res))


def _note_stop(res: "RunResult", signum, frame) -> None:
    """A stop signal during teardown: noted in ``res.signal`` (the caller stops after
    this run), never cutting the teardown short."""
    if res.signal is None:
        res.signal = signal.Signals(signum)


@dataclass
class _Due:
    """One occurrence of a scheduled fault."""

    spec: FaultSpec
    index: int
    at_s: float | None
    at_step: int | None
    active: object = None
    done: bool = False
    error: str | None = None


@dataclass
class RunResult:
    """What ``run`` leaves: the run directory, its injections rows, the exit code (0
    ok, 128 + the signal's number when one of :data:`STOP_SIGNALS` stopped it), that
    signal (None when none) and the faults that could not be injected."""

    rundir: RunDir
    injections: list[dict] = field(default_factory=list)
    failed_faults: list[str] = field(default_factory=list)
    code: int = 0
    signal: signal.Signals | None = None


class _StepWatch:
    """Follows rank 0's telemetry file to know the current step, cheaply. On a docker
    or ssh node that file is its root's to write (the collector copies up to 1 GiB of
    it), and the run's loop polls it every 0.1 s: a poll reads at most
    :attr:`POLL_BYTES` and :attr:`POLL_LINES` lines (rank 0 writes one line a step),
    so a file of a billion empty lines costs the loop no more than that a poll (it
    took 342 s and 1 GiB of memory for 64 MiB of them in one poll)."""

    POLL_BYTES = 4 << 20
    POLL_LINES = 10_000

    def __init__(self, path: Path):
        self.path, self.pos, self.step, self.first_ts = path, 0, -1, None

    def poll(self) -> int:
        if not self.path.exists():
            return self.step
        with open(self.path, "rb") as f:
            f.seek(self.pos)
            chunk = f.read(self.POLL_BYTES)
        end = chunk.rfind(b"\n")
        if end < 0:  # no whole line yet; a full chunk without one is no step record: passed over
            self.pos += len(chunk) if len(chunk) == self.POLL_BYTES else 0
            return self.step
        lines = chunk[:end].split(b"\n", self.POLL_LINES)
        if len(lines) > self.POLL_LINES:  # the rest is read by the next polls
            lines.pop()
        self.pos += sum(len(x) + 1 for x in lines)
        for line in lines:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                continue
            # a docker or ssh node's root writes this file: a record that is no step record is passed over
            start = _start_of(rec)
            if start is None or type(rec.get("step")) is not int:
                continue
            self.step = max(self.step, rec["step"])
            if self.first_ts is None:
                self.first_ts = start
        return self.step


def _start_of(rec) -> float | None:
    """A step record's ``t_start`` (unix s), None unless a finite number: json reads
    ``NaN`` and ``Infinity`` as floats and a 400-digit integer as an int that no float
    holds, and the first record's start is the run's ``t0``."""
    t = rec.get("t_start") if isinstance(rec, dict) else None
    if type(t) not in (int, float):
        return None
    try:
        t = float(t)
    except OverflowError:
        return None
    return t if math.isfinite(t) else None


def testbed_lease(testbed) -> "Lease":
    """The lease of a testbed this process brought up (``testbed-<id>``, type
    ``testbed``): its watchdog tears the testbed down ``TESTBED_LEASE_S`` after the
    last renewal; ``faultlab recover`` leaves it alone while this process lives."""
    return Lease.create_for(LocalNode("local"), f"testbed-{testbed.id}", "testbed", testbed.bridge,
                            {"nodes": len(testbed.nodes)}, [Cmd(argv) for argv in testbed.teardown_argv()],
                            time.time() + TESTBED_LEASE_S)


def workload_args(sc: Scenario) -> list[str]:
    """The rank worker's arguments for the scenario's workload."""
    w = sc.workload
    args = ["--hidden", str(w.hidden), "--batch", str(w.batch), "--threads", str(w.threads), "--seed", str(sc.seed)]
    if w.steps is not None:
        args += ["--steps", str(w.steps)]
    st = w.stragglers
    if st.seq_len is not None:
        args += ["--seq-len-tokens", str(st.seq_len.tokens), "--seq-len-sigma", str(st.seq_len.sigma),
                 "--seq-len-window", st.seq_len.window_arg()]
        if st.seq_len.rebalance:
            args.append("--rebalance")
    if st.gc is not None:
        args += ["--gc-mode", st.gc.mode, "--gc-every", str(st.gc.every_steps), "--gc-garbage-mb", str(st.gc.garbage_mb),
                 "--gc-window", st.gc.window_arg()]
    if st.slow_shard is not None:
        args += ["--slow-shard-rank", str(st.slow_shard.rank), "--slow-shard-factor", str(st.slow_shard.factor),
                 "--slow-shard-window", st.slow_shard.window_arg()]
    if w.data is not None:
        args += ["--data-dir", w.data.dir, "--checkpoint-every", str(w.data.checkpoint_every)]
    if w.kind == "pipeline":
        args += ["--stages", str(w.stages)]
        if w.layers_per_stage:
            args += ["--layers", ",".join(map(str, w.layers_per_stage))]
    return args


@dataclass
class _Live:
    """What one run has started so far, for its teardown: each stays None (empty)
    until that step made it. ``nodes``: the nodes the ranks run on; ``remote_nodes``:
    those of an inventory or testbed (their node samplers' rows are collected)."""

    nodes: list = field(default_factory=list)
    remote_nodes: list = field(default_factory=list)
    master: tuple[str, int] = ("127.0.0.1", 0)
    testbed: object = None
    tb_lease: object = None
    ranks: list = field(default_factory=list)
    collector: object = None
    sampler: object = None
    watch: object = None
    #: local backend: the 0700 folder of the ranks' rendezvous store file (removed at the run's end)
    store_dir: str | None = None
    #: when the ssh nodes' samplers were started (unix s): how many samples they can have written
    samplers_since: float | None = None


def run(sc: Scenario, out_dir: Path, *, console: Console | None = None, progress=True, run_id: str | None = None,
        nodes: list | None = None, allow_unverified: bool = False) -> RunResult:
    """Run scenario ``sc`` into ``out_dir`` (must be new or empty).

    ``progress``: True for a faultlab.progress.Progress on ``console`` (live on a
    terminal, plain one-line events otherwise), a Progress to report to (its owner
    opens and closes it), or False for none. ``run_id`` (default
    :func:`faultlab.rundir.new_run_id` of the scenario's name) goes to meta.json and
    every table; give the one the folder was named after. A fault whose verify does
    not confirm it is reverted at once and recorded ``status=unverified`` (listed in
    ``failed_faults``) unless ``allow_unverified``.

    ``nodes``: run on these nodes (an inventory's SshNodes, one rank each, in order)
    instead of bringing up a testbed of ``sc.testbed.backend``; nothing is created or
    removed on them but the ranks, their telemetry folder and the faults.

    Steps: :func:`_bring_up_nodes`, :func:`_start_ranks`, :func:`_wait_first_step`,
    :func:`_train` (the fault schedule), and in any case :func:`_tear_down`.

    Returns a RunResult. Raises BadInput (``--out`` exists, netns without root),
    FaultlabError when the workload fails (after teardown; the run directory stays,
    marked incomplete).
    """
    _check_run_args(sc, nodes)
    con = console or Console(highlight=False)
    run_id = run_id or new_run_id(sc.name)
    try:
        check_run_name(run_id, RUN_ID_MAX)  # it names the ranks' telemetry folders on the nodes
    except ValueError as e:
        raise BadInput(f"run id {e}", field="run_id") from None
    own = progress is True
    prog = Progress(con) if own else (progress or None)
    rd = RunDir.create(out_dir, run_id=run_id, scenario=sc.model_dump(mode="json"), seed=sc.seed)
    res = RunResult(rd)
    rd.event("run-start", backend=sc.testbed.backend, scenario=sc.name)
    due = [_Due(f, i, at, st) for i, f in enumerate(sc.faults) for at, st in f.occurrences()]
    live = _Live()
    old = {s: signal.signal(s, _raise_stop) for s in STOP_SIGNALS}
    if own:
        prog.__enter__()
    finished = False
    try:
        _bring_up_nodes(sc, nodes, live, rd, prog)
        _start_ranks(sc, live, rd, run_id, prog, con)
        t0 = _wait_first_step(live, rd, prog)
        _train(sc, live, due, rd, res, con, prog, t0, allow_unverified)
        finished = True
    except (_Stop, KeyboardInterrupt) as e:
        _defer_stops(res)  # a second signal waits until the run's end (faults reverted, testbed down) is done
        res.signal = signal.Signals(getattr(e, "signum", signal.SIGINT))
        res.code = 128 + res.signal
        rd.event("interrupted", signal=res.signal.name)
        con.print(f"[red]interrupted ({res.signal.name})[/]: reverting faults and tearing down")
    finally:
        _defer_stops(res)
        host = _tear_down(live, due, rd, res, con)
        _write_tables(sc, rd, res, host, live, run_id, con)
        for s, h in old.items():
            signal.signal(s, h)
        if prog and finished:
            prog.done()
        if own:
            prog.__exit__(None, None, None)
    if res.code == 0:
        rd.finish(failed_faults=res.failed_faults)
    return res


def _check_run_args(sc: Scenario, nodes: list | None) -> None:
    """Raise BadInput for inventory nodes that do not match the scenario, or a
    backend that needs root without it."""
    if nodes and len(nodes) != sc.testbed.nodes:
        raise BadInput(f"{len(nodes)} inventory nodes for a scenario of {sc.testbed.nodes}", field="testbed.nodes",
                       fix="load the scenario with the inventory's node names (faultlab.scenario.load(..., nodes=))")
    if sc.testbed.backend != "local" and os.geteuid() != 0 and not nodes:
        raise BadInput(f"backend {sc.testbed.backend} needs root (namespaces, tc, cgroups)", field="testbed.backend", fix="run as root, or use backend: local")


#: the prefix of a local run's rendezvous folder in the temporary folder (``workdirs.make``:
#: the controller's PID and start time follow)
STORE_PREFIX = "faultlab-rdv-"


def _bring_up_nodes(sc: Scenario, nodes: list | None, live: _Live, rd: RunDir, prog) -> None:
    """The run's nodes into ``live``: the inventory's (connected), a testbed of the
    scenario's backend (brought up, with its lease), or local processes."""
    n = sc.testbed.nodes
    if nodes:
        live.nodes = live.remote_nodes = list(nodes)
        _phase(prog, "connecting to the nodes", f"{len(nodes)} inventory nodes over SSH")
        for x in live.nodes:
            x.connect()
        live.master = (live.nodes[0].address, 29500)
        rd.event("inventory-nodes", nodes=[x.describe() for x in live.nodes])
    elif sc.testbed.backend != "local":
        kinds = {"netns": "network-namespace nodes on a bridge", "docker": "docker containers on an internal network",
                 "ssh": "containers reached over SSH"}
        _phase(prog, "bringing up the testbed", f"{n} {kinds[sc.testbed.backend]}")
        live.testbed = make_testbed(sc.testbed.backend, n).up()
        live.tb_lease = testbed_lease(live.testbed)
        live.nodes = live.remote_nodes = live.testbed.nodes
        live.master = (live.nodes[0].address, 29500)
        if sc.testbed.backend == "netns":  # nodes of this host's file system: no store port on the bridge either
            live.store_dir = _store_dir()
        rd.event("testbed-up", bridge=live.testbed.bridge, subnet=str(live.testbed.subnet), nodes=[x.describe() for x in live.nodes])
    else:
        live.nodes = [LocalNode(name=f"n{i}", address="127.0.0.1") for i in range(n)]
        live.store_dir = _store_dir()
        live.master = ("127.0.0.1", 0)


def _store_dir() -> str:
    """A fresh 0700 folder of this user's for the ranks' rendezvous store file, those of
    killed runs swept first. Ranks of this host's file system (local and netns nodes)
    rendezvous through it: a TCP store on 127.0.0.1 or on the testbed's bridge took any
    local user's connection, who could break the run or grow rank 0's memory without
    bound (8 MiB a key, any number of keys)."""
    workdirs.sweep(tempfile.gettempdir(), STORE_PREFIX)
    return workdirs.make(tempfile.gettempdir(), STORE_PREFIX)


def _start_ranks(sc: Scenario, live: _Live, rd: RunDir, run_id: str, prog, con: Console) -> None:
    """One rank per node, the telemetry collector, the node samplers of ssh nodes
    (a failure is recorded and printed, not fatal) and the local host sampler."""
    w = sc.workload
    module = "faultlab.benchmarks.pipeline" if w.kind == "pipeline" else "faultlab.benchmarks.ddp"
    _phase(prog, "starting ranks", f"{len(live.nodes)} ranks ({w.kind}, gloo); each imports torch and joins the process group")
    live.ranks = launch_ranks(
        [(x, i) for i, x in enumerate(live.nodes)], telemetry_dir=rd.telemetry_dir(), run_id=run_id,
        master_addr=live.master[0], master_port=live.master[1], duration_s=w.duration, log_dir=rd.path / "logs",
        extra_args=workload_args(sc),
        rank_args=sc.testbed.rank_args([getattr(x, "group_labels", {}) for x in live.nodes]),  # inventory nodes' labels
        store_file=os.path.join(live.store_dir, "store") if live.store_dir else None,
        **({"module": module} if w.kind == "pipeline" else {}),
    )
    rd.event("ranks-started", pids={r.rank: r.pid for r in live.ranks})
    placement: dict[str, list[int]] = {}
    for r in live.ranks:
        placement.setdefault(r.node.name, []).append(r.rank)
    rd.update_meta(placement=placement)  # a node's collected step records keep these ranks only
    live.collector = TelemetryCollector(live.nodes, run_id, rd.telemetry_dir()).start()
    live.samplers_since = time.time()
    for name, err in remote.start_node_samplers(live.ranks, run_id, until=remote.until_for(w.duration)).items():
        rd.event("node-sampler-failed", node=name, error=err)
        con.print(f"  [yellow]no host metrics from node {name}:[/] {rich_escape(printable(err))}", markup=True)
    live.sampler = HostSampler(
        {r.node.name: [r.popen] for r in live.ranks if r.node.lease_host() == LEASE_HERE}, interval_s=1.0, run_id=run_id,
        netns={x.name: x.netns for x in live.nodes if getattr(x, "netns", None)},
        peers={x.address: x.name for x in live.nodes if x.address and not x.address.startswith("127.")},
    ).start()


def _renew(live: _Live) -> None:
    if live.tb_lease:
        live.tb_lease.renew(time.time() + TESTBED_LEASE_S)


def _wait_first_step(live: _Live, rd: RunDir, prog, timeout_s: float = 180.0) -> float:
    """Wait until rank 0 records its first training step (renewing the testbed's
    lease); returns that step's start (unix s), recorded as the run's ``t0``. Raises
    FaultlabError when a rank dies or none trains within ``timeout_s``."""
    first = live.nodes[0]
    live.watch = _StepWatch(rd.telemetry_dir() / (first.name if first.collects_telemetry else ".") / "steps-rank0.jsonl")
    t_wait = time.time()
    while live.watch.first_ts is None:
        _renew(live)
        live.watch.poll()
        _check_ranks(live.ranks)
        if time.time() - t_wait > timeout_s:
            raise FaultlabError(f"ranks did not start training within {timeout_s:g}s", field="workload", fix=f"see {rd.path / 'logs'}")
        if prog:
            prog.beat(f"waiting for the first training step ({time.time() - t_wait:.0f}s)")
        time.sleep(0.1)
    t0 = live.watch.first_ts
    rd.event("training-start", t0=t0)
    rd.update_meta(t0=t0)  # the time origin of every printed and plotted run time
    return t0


def _train(sc: Scenario, live: _Live, due: list[_Due], rd: RunDir, res: RunResult, con: Console, prog, t0: float,
           allow_unverified: bool) -> None:
    """While the ranks train: start and stop each fault occurrence on schedule
    (seconds after ``t0`` or a step), renew the testbed's lease every 10 s, report
    progress; then wait for the ranks to exit. Raises FaultlabError when a rank dies."""
    w = sc.workload
    last_renew = time.time()
    last_step, last_step_at = live.watch.step, time.time()
    ends_at = time.time() + w.duration if w.duration else None  # root's clock: rank 0's t_start is its node's to write
    _phase(prog, "training", f"{'%gs' % w.duration if w.duration else '%d steps' % w.steps}; times below count from the first training step")
    while any(r.popen.poll() is None for r in live.ranks):
        now = time.time() - t0
        step = live.watch.poll()
        _check_ranks(live.ranks)
        if step != last_step:
            if _is_progress(w, live.ranks, step, ends_at):
                last_step_at = time.time()
            last_step = step
        _check_stall(live, rd, step, time.time() - last_step_at)
        for d in due:
            if d.done or d.error:
                continue
            if d.active is None:
                if (d.at_s is not None and now >= d.at_s) or (d.at_step is not None and step >= d.at_step):
                    _start(d, live.nodes, live.ranks, live.testbed, rd, res, con, t0, injectors, allow_unverified)
            elif time.time() >= d.active.start_ts + d.spec.duration:
                _stop(d, rd, res, con, t0)
        if time.time() - last_renew > 10:
            _renew(live)
            last_renew = time.time()
        if prog:
            prog.tick(now, step, total_s=w.duration, total_steps=w.steps,
                      faults=[_in_force(d) for d in due if d.active is not None and not d.done])
        time.sleep(0.1)
    _not_reached(due, rd, res, con)
    _phase(prog, "finishing", "waiting for the ranks to exit, tearing down")
    wait_ranks_done(live.ranks)
    rd.event("ranks-done")


def _not_reached(due: list[_Due], rd: RunDir, res: RunResult, con: Console) -> None:
    """Each fault occurrence the run ended before (its time or step never came) is a
    failed fault, said in one line: the run's ``t0`` is rank 0's first step record,
    which a docker or ssh node's root writes (one far in the future held every timed
    fault back), and a ``steps`` workload may end before a fault's ``at``. It was
    left out silently: no injections row, exit 0."""
    for d in due:
        if d.active is not None or d.done or d.error:
            continue
        when = f"at {d.at_s:g}s" if d.at_s is not None else f"at step {d.at_step}"
        d.error = f"not injected: the run's training ended before {when}"
        res.failed_faults.append(f"faults[{d.index}] {d.spec.type}: {d.error}")
        rd.event("inject-failed", index=d.index, type=d.spec.type, error=d.error)
        con.print(f"  faults[{d.index}] {d.spec.type} {d.error}", markup=False)


def _tear_down(live: _Live, due: list[_Due], rd: RunDir, res: RunResult, con: Console) -> pd.DataFrame | None:
    """Whatever happened: revert the faults still in force, stop the ranks, the
    samplers and the collector, take the testbed down (its lease released only when
    that went clean). Returns the local host sampler's rows (None when it never
    started)."""
    for d in due:
        if d.active is not None and not d.done:
            _stop(d, rd, res, con, None)
    if live.ranks:
        stop_ranks(live.ranks)
    if live.store_dir:
        shutil.rmtree(live.store_dir, ignore_errors=True)
    host = live.sampler.stop() if live.sampler else None
    if live.collector is not None:
        live.collector.stop()
        for (node, name), why in sorted(live.collector.skipped.items()):
            rd.event("telemetry-skipped", node=node, file=name, why=why)
            con.print(f"  telemetry {name} of node {node} not copied: {why}", markup=False)
    if live.testbed is not None:
        errs = live.testbed.down()
        rd.event("testbed-down", errors=errs)
        if not errs and live.tb_lease:
            live.tb_lease.release()
        if getattr(live.testbed, "started_dockerd", False):
            con.print(dockerd.left_running(), markup=False)
    return host


def _write_tables(sc: Scenario, rd: RunDir, res: RunResult, host: pd.DataFrame | None, live: _Live,
                  run_id: str, con: Console) -> None:
    """The run's steps, host (with the ssh nodes' rows) and injections tables: the
    injected faults and the workload's straggler knobs (faultlab.knobfaults). Step
    records a node sent of ranks not placed on it are skipped, each node's one line
    printed and a ``telemetry-skipped`` event."""
    steps = rd.read_raw_steps()
    for skip in rd.steps_skipped:
        rd.event("telemetry-skipped", node=skip.node, file=skip.file, why=skip.line())
        con.print(f"  {skip.line()}", markup=False)
    rd.write_table("steps", steps)
    if host is not None:
        rd.write_table("host", _with_remote_host(host, rd, live, run_id, con))
    rows = res.injections + workload_injections(sc, steps, run_id)
    rd.write_table("injections", pd.DataFrame(rows) if rows else _empty("injections"))


def _with_remote_host(host: pd.DataFrame, rd: RunDir, live: _Live, run_id: str, con: Console) -> pd.DataFrame:
    """The local sampler's rows plus those the node samplers of ssh nodes wrote (see
    faultlab.telemetry.remote), in time order. A node's file holding more samples than
    its sampler can have written since it started (one a second) is read only that
    far: one line printed and a ``telemetry-skipped`` event."""
    names = [x.name for x in live.remote_nodes if x.lease_host() == LEASE_ON_NODE]
    if not names:
        return host
    peers = {x.address: x.name for x in live.remote_nodes if x.address}
    cap = remote.max_samples(live.samplers_since) if live.samplers_since is not None else None
    skipped: dict[str, int] = {}
    extra = remote.host_rows(rd.telemetry_dir(), names, peers, run_id, max_samples=cap, skipped=skipped)
    for node, kept in sorted(skipped.items()):
        why = f"samples past the first {kept} (its sampler writes one a second) not read"
        rd.event("telemetry-skipped", node=node, file=f"{remote.PREFIX}{node}.jsonl", why=why)
        con.print(f"  telemetry {remote.PREFIX}{node}.jsonl of node {node}: {why}", markup=False)
    return pd.concat([host, extra], ignore_index=True).sort_values(["ts", "node"], kind="stable", ignore_index=True)


def _phase(prog, name: str, detail: str = "") -> None:
    if prog:
        prog.phase(name, detail)


def _in_force(d: _Due) -> str:
    """``TYPE@NODE`` of an active fault occurrence."""
    node = d.active.injector.node.name
    return f"{d.spec.type}@{node}"


def _empty(name):
    return schema.empty(name)


def wait_ranks_done(ranks, timeout_s: float = 60) -> None:
    """Wait for the ranks to exit at the run's end (:func:`wait_ranks`). A rank that
    exits non-zero, or one still running after ``timeout_s`` s, is a FaultlabError of
    one line quoting its log's tail through ``errors.printable``, as
    :func:`_check_ranks` quotes it: a rank's output is its node's, whose root may
    write escape sequences into it, and it never reaches the terminal raw or as a
    traceback."""
    try:
        wait_ranks(ranks, timeout_s=timeout_s)
    except RankFailure as e:
        raise FaultlabError(str(e), field="workload") from None


def _is_progress(w, ranks, step: int, ends_at: float | None) -> bool:
    """Whether rank 0's new ``step`` restarts the stall clock (:func:`_check_stall`):
    only while every rank still runs (ranks leave together, so none makes a step once
    one has left), the step is one of the workload's (below ``steps``) and its
    ``duration`` has not passed on this host's clock since the first step was seen. On a
    docker or ssh node the step records are its root's to write, and its rank's handle
    counts as running while anything there holds the rank's output: records appended
    after its peers had left, or past the workload's end, kept the run alive for good."""
    if w.steps is not None and step >= w.steps:
        return False
    if ends_at is not None and time.time() > ends_at:
        return False
    return all(r.popen.poll() is None for r in ranks)


def _check_stall(live: _Live, rd: RunDir, step: int, since_s: float) -> None:
    """Raise FaultlabError (the run's teardown then stops the ranks) when rank 0 has
    recorded no new step for :data:`STALL_S` seconds while ranks still run."""
    if since_s < STALL_S:
        return
    still = [r.rank for r in live.ranks if r.popen.poll() is None]
    raise FaultlabError(f"no training step for {STALL_S:g}s (rank 0's last was step {step}) while ranks {still} still run: "
                        f"stopped, the run failed", field="workload",
                        fix=f"see {rd.path / 'logs'}: a rank is stopped or hung (a process-pause longer than the collective timeout, "
                            f"a SIGSTOP, a node holding a rank's output open)")


def _check_ranks(ranks) -> None:
    for r in ranks:
        if r.popen.poll() not in (None, 0):
            raise FaultlabError(f"rank {r.rank} died with {r.popen.returncode}: {log_tail(r.log_path, 5)}", field="workload")


def build_injector(spec: FaultSpec, nodes, ranks, testbed, injectors):
    """The injector of ``spec`` on the run's nodes and ranks: rank faults target the
    rank's PID (label ``rank:N``), node faults the node (a rank given for a node
    fault means the node that rank runs on). A docker rank whose own process has ended
    is refused in one line (FaultlabError): its handle counts it as running while
    anything in its container holds its output, and its host PID may by then be
    another host process's, which the fault would stop, throttle or move."""
    opts = spec.options()
    if spec.type in rank_types():
        r = ranks[spec.rank]
        if getattr(r.popen, "ended", lambda: False)():
            raise FaultlabError(f"rank {r.rank}'s process on node {r.node.name} has ended (its output is still held open there): "
                                f"{spec.type} is not applied to its old PID {r.pid}", field="faults",
                                fix=f"see the rank's log; node {r.node.name}'s root may have ended it")
        inj = injectors.build(spec.type, r.node, target=str(r.pid), duration_s=spec.duration, opts=opts)
        if hasattr(inj, "label"):
            inj.label = f"rank:{r.rank}"
        return inj
    node = nodes[spec.rank] if spec.rank is not None else next(x for x in nodes if x.name == spec.node)
    inj = injectors.build(spec.type, node, target=None, duration_s=spec.duration, opts=opts)
    if spec.type == "nic-slow" and inj.peer is None and inj.rate_bit_per_s:
        if testbed is not None:
            inj.probe_peer, inj.probe_peer_addr = LocalNode("host"), testbed.bridge_address
        else:  # inventory nodes: measure against another node of the run
            other = next((x for x in nodes if x is not node and getattr(x, "address", None)), None)
            if other is not None and node.lease_host() == LEASE_ON_NODE:
                inj.probe_peer, inj.probe_peer_addr = other, other.address
    return inj


def _start(d: _Due, nodes, ranks, testbed, rd: RunDir, res: RunResult, con: Console, t0: float, injectors,
           allow_unverified: bool = False) -> None:
    try:
        inj = build_injector(d.spec, nodes, ranks, testbed, injectors)
        d.active = injectors.apply(inj, d.spec.duration, grace_s=15.0)
    except FaultlabError as e:
        d.error = str(e)
        res.failed_faults.append(f"faults[{d.index}] {d.spec.type}: {e}")
        rd.event("inject-failed", index=d.index, type=d.spec.type, error=str(e))
        con.print(f"  [yellow]faults[{d.index}] {d.spec.type} not injected:[/] {rich_escape(str(e))}")  # e quotes node and agent text
        return
    a = d.active
    rd.event("inject", fault_id=a.fault_id, index=d.index, type=inj.type, node=inj.node.name, target=a.plan.target,
             params=inj.params, severity=inj.severity, start_ts=a.start_ts, verify=a.evidence.get("verify"))
    v = a.evidence.get("verify", {})
    con.print(f"  +{a.start_ts - t0:5.1f}s inject {inj.type} on {inj.node.name} ({a.plan.target}); {verify_text(v, inj)}", markup=False)
    if not v.get("ok") and not allow_unverified:
        _unverified(d, rd, res, con, t0)


def _unverified(d: _Due, rd: RunDir, res: RunResult, con: Console, t0: float) -> None:
    """A fault whose verify did not confirm it is a failed inject: reverted at once,
    its injections row ``status=unverified``, ``verified`` false (the labeler counts
    it as not in force; a failed revert keeps ``revert-failed``), listed in
    ``failed_faults`` and said plainly. ``--allow-unverified`` keeps such faults."""
    a = d.active
    status = a.revert()
    if status in ("reverted", "expired"):
        a.status = "unverified"
    d.done = True
    row = a.injection_row(rd.run_id)
    res.injections.append(row)
    rd.event("revert", fault_id=a.fault_id, status=a.status, end_ts=a.end_ts, row=row)
    end = "reverted at once" if a.status == "unverified" else f"revert: {status}: left {'; '.join(a.evidence.get('left_behind') or ['?'])}"
    msg = (f"faults[{d.index}] {d.spec.type} on {a.injector.node.name} ({a.plan.target}) was not in force: "
           f"{verify_text(a.evidence.get('verify'), a.injector)}; {end} (--allow-unverified keeps such a fault)")
    res.failed_faults.append(msg)
    con.print(f"  +{a.end_ts - t0:5.1f}s NOT IN FORCE: {msg}", markup=False)


def _stop(d: _Due, rd: RunDir, res: RunResult, con: Console, t0: float | None) -> None:
    a = d.active
    status = a.revert()
    d.done = True
    row = a.injection_row(rd.run_id)
    res.injections.append(row)
    rd.event("revert", fault_id=a.fault_id, status=status, end_ts=a.end_ts, row=row)
    if t0 is not None:
        con.print(f"  +{a.end_ts - t0:5.1f}s revert {a.fault_id}: {status}", markup=False)
