"""Step records a node's root writes for rank 0 do not keep a run alive past its stall bound.

Root's ``faultlab run`` fails a run whose rank 0 records no new step for
``runner.STALL_S``, and a new step resets that clock. On a docker or ssh node, rank 0's
step records are whatever the node's root writes in its telemetry file (the collector
copies it), and its rank's handle counts as running while anything there holds the
rank's output open. Two ways to keep root's run and its testbed's lease alive for good:

- rank 0's node alone: its peers trained with it and left (exit 0), its rank's output is
  held open, and it appends a step record now and then. Ranks leave together, so no
  rank makes a step once one has left.
- every node together (an inventory of one party's hosts): all ranks stopped (no
  collective times out) and rank 0's file fed steps past the workload's end (its
  ``duration`` on root's clock, its last step).

Here real local runs of two ranks stand in for the nodes: rank 0's handle is made to
count as running after its process ended (as a docker rank's handle does while its
output is held), and the test appends the records to rank 0's file as the node's root
would. ``STALL_S`` is 5 s; should a run not end by itself ``GIVE_UP_S`` after the
records start, the test stops feeding and lets the ranks go.
"""

from __future__ import annotations

import io
import json
import math
import signal
import subprocess
import threading
import time

import psutil
import pytest
from rich.console import Console

from faultlab import runner
from faultlab.errors import FaultlabError
from faultlab.scenario import Scenario

#: seconds the records are fed before the test gives up on the run ending by itself
GIVE_UP_S = 45


class _HeldOutput:
    """A rank's handle that counts as running after its process ended, until it is
    signalled or the test lets it go: what a docker rank's handle does while anything in
    its container holds the rank's output open."""

    def __init__(self, popen: subprocess.Popen):
        self.inner, self.released = popen, threading.Event()
        self.pid = popen.pid

    @property
    def returncode(self):
        return self.inner.returncode if self.released.is_set() else None

    def poll(self):
        return self.inner.poll() if self.released.is_set() else None

    def send_signal(self, sig):
        self.released.set()
        if self.inner.poll() is None:
            self.inner.send_signal(sig)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout=None):
        if not self.released.wait(timeout):
            raise subprocess.TimeoutExpired("rank 0", timeout)
        return self.inner.wait(timeout)


def _feed(path, first: int, done: threading.Event, seen: dict) -> None:
    """Append rank 0's step records from ``first`` on, one every 0.3 s, as its node's root."""
    seen["fed_at"] = time.monotonic()
    lines = [x for x in path.read_text().splitlines() if x.strip()]
    rec = json.loads(lines[-1])  # a whole record, as rank 0 writes them
    step = first
    while not done.is_set() and time.monotonic() - seen["fed_at"] < GIVE_UP_S:
        with open(path, "a") as f:
            f.write(json.dumps({**rec, "step": step, "t_start": time.time()}) + "\n")
        step += 1
        time.sleep(0.3)
    seen["gave_up"] = not done.is_set()


def _ranks_of(run_id: str) -> list[psutil.Process]:
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            a = p.cmdline()
        except psutil.Error:
            continue
        if "--run-id" in a and run_id in a:
            found.append(p)
    return found


def _run(tmp_path, monkeypatch, workload: dict, attacker) -> tuple[FaultlabError | None, dict, float]:
    monkeypatch.setattr(runner, "STALL_S", 5.0)
    run_id = f"fake-{tmp_path.name[-6:]}".replace("_", "-")
    sc = Scenario.model_validate({"name": "fake", "seed": 1, "testbed": {"backend": "local", "nodes": 2},
                                  "workload": {"kind": "ddp", "hidden": 32, "batch": 16, **workload}})
    done, seen, held = threading.Event(), {}, []
    real_launch = runner.launch_ranks

    def launch(*a, **kw):
        ranks = real_launch(*a, **kw)
        ranks[0].popen = _HeldOutput(ranks[0].popen)
        held.append(ranks[0].popen)
        return ranks

    monkeypatch.setattr(runner, "launch_ranks", launch)
    t = threading.Thread(target=attacker, args=(tmp_path / "run", run_id, held, done, seen), daemon=True)
    t.start()
    err = None
    t_start = time.monotonic()
    try:
        runner.run(sc, tmp_path / "run", console=Console(file=io.StringIO()), progress=False, run_id=run_id)
    except FaultlabError as e:
        err = e
    finally:
        done.set()
        for h in held:
            h.released.set()
        t.join(10)
        for p in _ranks_of(run_id):
            p.kill()
    return err, seen, time.monotonic() - t_start


def _steps_file(run_dir):
    found = list(run_dir.rglob("steps-rank0.jsonl"))
    return found[0] if found else None


def test_rank_0s_node_cannot_keep_a_run_alive_with_step_records_once_its_peers_have_left(tmp_path, monkeypatch):
    def attacker(run_dir, run_id, held, done, seen):
        # the ranks train their few steps and leave; rank 0's handle stays "running"
        end = time.monotonic() + 150
        while time.monotonic() < end and not done.is_set():
            if held and held[0].inner.poll() is not None and _steps_file(run_dir):
                break
            time.sleep(0.1)
        else:
            return
        _feed(_steps_file(run_dir), 1000, done, seen)

    err, seen, took = _run(tmp_path, monkeypatch, {"steps": 5}, attacker)
    assert "fed_at" in seen, "the ranks never finished their steps"
    assert not seen.get("gave_up"), f"root's run was still waiting {GIVE_UP_S}s after rank 0's node began feeding it steps ({err})"
    assert err is not None and "no training step for 5s" in str(err), str(err)


@pytest.mark.parametrize("workload", [{"duration": "6s"}, {"steps": 40}], ids=["duration", "steps"])
def test_stopped_ranks_cannot_keep_a_run_alive_with_step_records_past_the_workloads_end(tmp_path, monkeypatch, workload):
    def attacker(run_dir, run_id, held, done, seen):
        end = time.monotonic() + 150
        while time.monotonic() < end and not done.is_set():
            f = _steps_file(run_dir)
            ranks = _ranks_of(run_id)
            if f and f.stat().st_size > 0 and len(ranks) == 2:
                for p in ranks:
                    p.send_signal(signal.SIGSTOP)
                break
            time.sleep(0.05)
        else:
            return
        seen["stopped"] = True
        last = max(json.loads(x)["step"] for x in f.read_text().splitlines() if x.strip())
        # past the workload's end: its last step (steps) or, fed fast, past its duration
        _feed(f, max(last + 1, workload.get("steps", 0)), done, seen)

    err, seen, took = _run(tmp_path, monkeypatch, workload, attacker)
    assert seen.get("stopped"), "the ranks never recorded a step"
    assert not seen.get("gave_up"), f"root's run was still waiting {GIVE_UP_S}s after the stopped ranks' node began feeding it steps ({err})"
    assert err is not None and "no training step for 5s" in str(err), str(err)


def test_a_fault_held_back_by_rank_0s_first_step_record_is_reported_not_injected(tmp_path):
    """The run's time origin ``t0`` is rank 0's first step record's ``t_start``, which
    its node's root writes: one far in the future held every timed fault of the run
    back (on every node), and the run ended with those faults left out silently, exit 0.
    Here the first record of rank 0's file is written before rank 0 trains, as its
    node's root would."""
    run_id = f"origin-{tmp_path.name[-6:]}".replace("_", "-")
    sc = Scenario.model_validate({
        "name": "origin", "seed": 1, "testbed": {"backend": "local", "nodes": 2},
        "workload": {"kind": "ddp", "duration": "6s", "hidden": 32, "batch": 16},
        "faults": [{"type": "process-pause", "rank": 1, "at": "2s", "duration": "2s", "params": {"pause": "100ms", "period": "300ms"}}]})
    done = threading.Event()

    def first_record():
        end = time.monotonic() + 120
        while time.monotonic() < end and not done.is_set():
            tel = tmp_path / "run" / "telemetry"
            if tel.is_dir():
                with open(tel / "steps-rank0.jsonl", "a") as f:
                    f.write(json.dumps({"run_id": run_id, "rank": 0, "node": "n0", "peer_group": "dp", "step": 0,
                                        "t_start": time.time() + 10 ** 7, "compute_s": 0.01, "comm_s": 0.01, "step_s": 0.02}) + "\n")
                return
            time.sleep(0.005)

    t = threading.Thread(target=first_record, daemon=True)
    t.start()
    try:
        res = runner.run(sc, tmp_path / "run", console=Console(file=io.StringIO()), progress=False, run_id=run_id)
    finally:
        done.set()
        t.join(10)
        for p in _ranks_of(run_id):
            p.kill()
    assert res.injections or res.failed_faults, "the scheduled fault was neither injected nor reported: the run said nothing of it"
    assert not res.injections and "not injected" in res.failed_faults[0], res.failed_faults


@pytest.mark.parametrize("start", ["NaN", "Infinity", "1" + "0" * 400], ids=["nan", "inf", "bigint"])
def test_a_step_record_whose_start_is_no_time_is_no_step_record(tmp_path, start):
    """JSON as Python reads it takes ``NaN`` and ``Infinity`` for numbers: rank 0's node's
    root writing one as its first record's ``t_start`` made it the run's ``t0`` (meta.json),
    the run going on with it (its timed faults held back for good), and root's own
    ``faultlab report`` then refusing the run folder ("t0 nan is no unix time"); a
    400-digit integer, which no float holds, ended root's run in an OverflowError."""
    run_id = f"nan-{tmp_path.name[-6:]}".replace("_", "-")
    sc = Scenario.model_validate({"name": "nan", "seed": 1, "testbed": {"backend": "local", "nodes": 2},
                                  "workload": {"kind": "ddp", "duration": "4s", "hidden": 32, "batch": 16}})
    done = threading.Event()

    def first_record():
        end = time.monotonic() + 120
        while time.monotonic() < end and not done.is_set():
            tel = tmp_path / "run" / "telemetry"
            if tel.is_dir():
                with open(tel / "steps-rank0.jsonl", "a") as f:
                    f.write('{"run_id": "%s", "rank": 0, "node": "n0", "peer_group": "dp", "step": 99999, "t_start": %s, '
                            '"compute_s": 0.01, "comm_s": 0.01, "step_s": 0.02}\n' % (run_id, start))
                return
            time.sleep(0.005)

    t = threading.Thread(target=first_record, daemon=True)
    t.start()
    try:
        try:
            runner.run(sc, tmp_path / "run", console=Console(file=io.StringIO()), progress=False, run_id=run_id)
        except FaultlabError:
            pass  # the run may fail for the record (its steps table) in one line; its time origin is what is judged
    finally:
        done.set()
        t.join(10)
        for p in _ranks_of(run_id):
            p.kill()
    t0 = json.loads((tmp_path / "run" / "meta.json").read_text()).get("t0")
    assert isinstance(t0, float) and math.isfinite(t0), f"the run's t0 is {t0!r}"
