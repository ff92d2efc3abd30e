"""A Dask scheduler given by address that is lost in the middle of a labeling (killed,
or its workers killed each time they run a task) ends ``faultlab label`` in one line,
exit 1, naming the scheduler's address: no traceback, and the run folder as it was
(no labels, no what-if, no work folder, no event).

The scheduler and its worker are real ``dask`` processes this test starts (TLS: the
labeler refuses a plain one of this host). The kill is
not timed: the worker's preload (:data:`KILLER`) sends SIGKILL the moment the first task
of a chosen pass starts on it, to the scheduler or to the worker itself (its nanny
restarts it, and the task kills each new one until Dask gives it up).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from faultlab.labeler import listener
from faultlab.synthrun import write_run
from tests.dasktls import tls_files
from tests.helpers import end_groups, fl, wait_for

pytest.importorskip("distributed", reason="dask.distributed is the 'scale' extra: pip install -e '.[scale]'")

#: a worker preload: SIGKILL to $KILL_PID (or this worker when it is ``self``) the moment a
#: task whose key starts with $KILL_AT starts executing here
KILLER = '''
import os, signal
from distributed.diagnostics.plugin import WorkerPlugin

class KillAtTask(WorkerPlugin):
    def transition(self, key, start, finish, **kw):
        if finish == "executing" and str(key).startswith(os.environ["KILL_AT"]):
            target = os.environ["KILL_PID"]
            os.kill(os.getpid() if target == "self" else int(target), signal.SIGKILL)

async def dask_setup(worker):
    await worker.plugin_add(KillAtTask(), name="kill-at-task")
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tree(folder) -> dict:
    """Every entry below ``folder``: its size and modification time."""
    out = {}
    for top, dirs, files in os.walk(folder):
        for n in dirs + files:
            st = os.lstat(os.path.join(top, n))
            out[os.path.relpath(os.path.join(top, n), folder)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.mark.parametrize("kill,at", [("scheduler", "_scan_block"), ("scheduler", "_fill_block"),
                                     ("scheduler", "_temporal_chunk"), ("workers", "_fill_block")],
                         ids=["scheduler-in-scan", "scheduler-in-read", "scheduler-in-temporal", "workers-in-read"])
def test_a_scheduler_lost_mid_labeling_is_one_line_and_leaves_the_run_folder_as_it_was(tmp_path, kill, at):
    run = tmp_path / "run"
    write_run(run, 4, 2000, seed=0, block_rows=2000)
    before = _tree(run)
    (tmp_path / "killer.py").write_text(KILLER)
    port = _free_port()
    tls = tls_files(tmp_path / "tls")
    env = dict(os.environ, DASK_TEMPORARY_DIRECTORY=str(tmp_path))  # their scratch folders, not TMP's shared one
    procs = []
    try:
        sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port),
                                  "--protocol", "tls", "--no-dashboard", *tls["cli"]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        procs.append(sched)
        worker_env = dict(env, KILL_AT=at, KILL_PID="self" if kill == "workers" else str(sched.pid))
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", f"tls://127.0.0.1:{port}", "--nworkers", "1",
                                       "--nthreads", "1", "--no-dashboard", "--preload", str(tmp_path / "killer.py"), *tls["cli"]],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=worker_env, start_new_session=True))
        assert wait_for(lambda: listener.listener_uids("127.0.0.1", port) == {os.geteuid()}, 180), "the scheduler did not start"
        addr = f"tls://127.0.0.1:{port}"
        cp = fl("label", run, "--scheduler", addr, env=tls["env"], timeout=400)
        if kill == "scheduler":
            assert sched.poll() is not None, "the scheduler was not killed: the pass never ran"
    finally:
        end_groups(procs)
    # stdout has the passes that finished ("scan: 4 block(s)"); the error is stderr's one line
    out = cp.stdout + cp.stderr
    assert "Traceback" not in out and cp.returncode == 1, (cp.returncode, out[-2000:])
    err = cp.stderr.strip().splitlines()
    assert len(err) == 1 and addr in err[0] and ("was lost" if kill == "scheduler" else "died each time") in err[0], out[-2000:]
    assert _tree(run) == before
