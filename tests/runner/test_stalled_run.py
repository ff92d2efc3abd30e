"""A run whose ranks stop making steps ends, its ranks stopped, and says why.

Ranks stopped all at once (SIGSTOP: none of them reaches a collective's timeout), or a
docker rank whose output its container's root holds open, kept ``faultlab run``
waiting for them, and its testbed's lease renewed, for good. A real local run of two
ranks trains; once rank 0 has recorded steps, both ranks are SIGSTOPped by their
PIDs. The run must fail with the stall's one line within ``STALL_S`` (set to 5 s
here) and leave no rank behind. Should it not end by itself within a minute more, the
test's own thread SIGKILLs the ranks (the run then fails for a rank that died, which
the test reports as the stall never seen).
"""

from __future__ import annotations

import io
import os
import signal
import threading
import time

import psutil
import pytest
from rich.console import Console

from faultlab import runner
from faultlab.errors import FaultlabError
from faultlab.scenario import Scenario

#: seconds the test's thread waits, after stopping the ranks, before it ends them itself
GIVE_UP_S = 65


def _ranks_of(run_id: str) -> list[psutil.Process]:
    """This process's children that are ranks of ``run_id`` (by argv; the test started them)."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            a = p.cmdline()
        except psutil.Error:  # ended meanwhile
            continue
        if "--run-id" in a and run_id in a:
            found.append(p)
    return found


def _stop_ranks_once_training(run_dir, run_id: str, done: threading.Event, seen: dict) -> None:
    """SIGSTOP the ranks of ``run_id`` once rank 0 has recorded a step; SIGKILL them
    if the run has not ended ``GIVE_UP_S`` s later."""
    end = time.monotonic() + 180
    while time.monotonic() < end and not done.is_set():
        steps = list(run_dir.rglob("steps-rank0.jsonl"))
        ranks = _ranks_of(run_id)
        if steps and steps[0].stat().st_size > 0 and len(ranks) == 2:
            for p in ranks:
                p.send_signal(signal.SIGSTOP)
            seen["stopped"] = [p.pid for p in ranks]
            break
        time.sleep(0.05)
    if done.wait(GIVE_UP_S):
        return
    seen["gave_up"] = True
    for pid in seen.get("stopped", []):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_run_whose_ranks_make_no_step_is_stopped_and_fails_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "STALL_S", 5.0, raising=False)
    run_id = f"stall-{tmp_path.name[-6:]}".replace("_", "-")
    sc = Scenario.model_validate({"name": "stall", "seed": 1, "testbed": {"backend": "local", "nodes": 2},
                                  "workload": {"kind": "ddp", "steps": 1_000_000, "hidden": 32, "batch": 16}})
    done, seen = threading.Event(), {}
    t = threading.Thread(target=_stop_ranks_once_training, args=(tmp_path / "run", run_id, done, seen), daemon=True)
    t.start()
    try:
        with pytest.raises(FaultlabError) as e:
            runner.run(sc, tmp_path / "run", console=Console(file=io.StringIO()), progress=False, run_id=run_id)
    finally:
        done.set()
        t.join(10)
    assert seen.get("stopped"), "the ranks never recorded a step"
    assert not seen.get("gave_up"), f"the stopped run did not end by itself: {e.value}"
    assert "no training step for 5s" in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert not [p for p in seen["stopped"] if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
