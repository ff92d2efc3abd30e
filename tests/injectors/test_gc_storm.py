"""gc-storm: the in-workload agent (faultlab.benchmarks.agent) and the GcStorm injector.

Real processes: a Python child running the agent and a loop that reports its own
speed (iterations and slowest iteration per 0.2 s window), and a real 2-rank gloo job.
The agent's control folder is a temporary folder (FAULTLAB_AGENT_DIR) per test, and
each test checks that the folder is empty at its end (no heartbeat, command or status
file left). No assertion on speed (it moves with the load on a 2-core machine):
the storm is measured as GC time taken from the loop and GC-sized stalls.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from faultlab.benchmarks import agent as agent_mod
from faultlab.errors import BadInput, Refused
from faultlab.injectors import FAULT_TYPES, PLANNED_TYPES, GcStorm, apply, build
from faultlab.injectors import gc as gc_mod
from faultlab.injectors.gc import AS_OWNER_ENV, AS_OWNER_TIMEOUT_S
from faultlab.lifecycle.lease import load_leases
from faultlab.nodes import LocalNode
from tests.helpers import needs_root, wait_for

# A workload: the agent plus a pure-Python loop printing "unix_ts iterations max_iter_s
# gc_s" every 0.2 s (gc_s: seconds in garbage collection in that window, from the
# agent's GC timer). SIGTERM stops the agent (removing its files) and exits.
CHILD = r"""
import os, signal, sys, time
from faultlab.benchmarks import agent
agent.start(sys.argv[1])
def bye(*_):
    agent.stop(); os._exit(0)
signal.signal(signal.SIGTERM, bye)
print("ready", flush=True)
w0 = time.perf_counter(); n = 0; mx = 0.0; g0 = agent.gc_seconds()
while True:
    t = time.perf_counter()
    s = 0
    for i in range(2000):
        s += i
    d = time.perf_counter() - t
    n += 1; mx = max(mx, d)
    if t - w0 >= 0.2:
        g = agent.gc_seconds()
        print(f"{time.time():.3f} {n} {mx:.5f} {g - g0:.5f}", flush=True)
        w0 = t; n = 0; mx = 0.0; g0 = g
"""


@pytest.fixture
def agent_dir(tmp_path, monkeypatch):
    """A fresh control folder for this test (inherited by the processes it starts);
    nothing may be left in it at the end."""
    d = tmp_path / "agents"
    monkeypatch.setenv("FAULTLAB_AGENT_DIR", str(d))
    yield d
    left = sorted(p.name for p in d.iterdir()) if d.exists() else []
    assert not left, f"agent folder not clean: {left}"


class Child:
    def __init__(self, control_dir: Path):
        self.popen = subprocess.Popen([sys.executable, "-c", CHILD, str(control_dir)], stdout=subprocess.PIPE, text=True)
        self.windows: list[tuple[float, int, float, float]] = []
        line = self.popen.stdout.readline().strip()
        assert line == "ready", f"child said {line!r}"
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def _read(self):
        for line in self.popen.stdout:
            ts, n, mx, g = line.split()
            self.windows.append((float(ts), int(n), float(mx), float(g)))

    def stall(self, t0: float, t1: float) -> float:
        """Median over the windows between t0 and t1 of the slowest iteration (s): a
        GC burst shows as one iteration as long as the burst."""
        return statistics.median(w[2] for w in self._between(t0, t1))

    def gc_fraction(self, t0: float, t1: float) -> float:
        """Seconds in GC per second of the windows between t0 and t1. Unlike speed,
        this does not move with the load other tests put on the machine."""
        ws = self._between(t0, t1)
        return sum(w[3] for w in ws) / (0.2 * len(ws))

    def _between(self, t0: float, t1: float) -> list:
        ws = [w for w in list(self.windows) if t0 <= w[0] < t1]
        assert len(ws) >= 3, f"only {len(ws)} windows in [{t0:.2f}, {t1:.2f})"
        return ws

    def stop(self):
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


@pytest.fixture
def child(agent_dir):
    """Start a child workload with the agent (its heartbeat is there at once)."""
    started = []

    def make() -> Child:
        c = Child(agent_dir)
        started.append(c)
        return c

    yield make
    for c in started:
        c.stop()


def _files(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()} if d.exists() else set()


# -- the agent alone -----------------------------------------------------------------
def test_agent_heartbeat_and_stop_remove_files(child, agent_dir):
    c = child()
    hb = json.loads((agent_dir / f"{c.pid}.agent").read_text())
    assert hb["pid"] == c.pid and hb["starttime"] == agent_mod.proc_starttime(c.pid)
    assert abs(hb["heartbeat_ts"] - time.time()) < 3 and hb["python"].startswith("3.")
    c.stop()
    assert _files(agent_dir) == set()


def test_agent_prunes_files_of_dead_processes(agent_dir, child):
    agent_dir.mkdir(parents=True, mode=0o700)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for suffix in (".agent", ".gc-storm.status.json"):
        (agent_dir / f"{dead.pid}{suffix}").write_text("{}")
    c = child()
    assert _files(agent_dir) == {f"{c.pid}.agent"}


def test_agent_reports_malformed_command_and_clears_it(child, agent_dir):
    c = child()
    cmd = agent_mod.command_path(agent_dir, c.pid)
    cmd.write_text(json.dumps({"fault_id": "gc-bad", "rate_per_s": 500, "garbage_mb": 1, "deadline_ts": time.time() + 30}))
    st = agent_mod.status_path(agent_dir, c.pid)
    assert wait_for(st.exists, 3)
    s = json.loads(st.read_text())
    assert s["state"] == "error" and "rate_per_s" in s["error"] and s["fault_id"] == "gc-bad"
    cmd.unlink()
    assert wait_for(lambda: not st.exists(), 3)
    # nobody withdraws a bad command: the agent drops it at its deadline
    cmd.write_text(json.dumps({"fault_id": "gc-bad2", "rate_per_s": 5, "garbage_mb": -1, "deadline_ts": time.time() + 1.0}))
    assert wait_for(st.exists, 3)
    assert wait_for(lambda: not cmd.exists() and not st.exists(), 4)
    # an expired command is removed without a storm
    cmd.write_text(json.dumps({"fault_id": "gc-old", "rate_per_s": 5, "garbage_mb": 1, "deadline_ts": time.time() - 1}))
    assert wait_for(lambda: not cmd.exists(), 3)
    assert not st.exists()
    assert json.loads((agent_dir / f"{c.pid}.agent").read_text())["storms_done"] == 0


def test_validate_command():
    ok = {"fault_id": "gc-1", "rate_per_s": 5, "garbage_mb": 50.0, "deadline_ts": 1e9}
    assert agent_mod.validate_command(ok) is None
    assert "fault_id" in agent_mod.validate_command({**ok, "fault_id": ""})
    assert "rate_per_s" in agent_mod.validate_command({**ok, "rate_per_s": 0})
    assert "rate_per_s" in agent_mod.validate_command({**ok, "rate_per_s": True})
    assert "garbage_mb" in agent_mod.validate_command({**ok, "garbage_mb": 5000})
    assert "deadline_ts" in agent_mod.validate_command({**ok, "deadline_ts": "soon"})
    assert agent_mod.validate_command([1]) == "command is not a JSON object"


# -- the injector on a real process --------------------------------------------------
def test_storm_slows_the_loop_verify_and_revert(no_residue, child, agent_dir):
    c = child()
    time.sleep(1.2)
    t_base = time.time()
    inj = GcStorm(LocalNode("local"), c.pid, 5, 50, 30)
    active = apply(inj, 30)
    try:
        v = active.evidence["verify"]
        assert v["ok"], v
        assert v["status"]["fault_id"] == active.fault_id and v["status"]["bursts"] >= 1
        assert v["status"]["objects_per_burst"] == int(50 * 2**20 / agent_mod.OBJ_BYTES)
        assert {f"{c.pid}.gc-storm.json", f"{c.pid}.gc-storm.status.json"} <= _files(agent_dir)
        t_storm = time.time()
        time.sleep(2.0)
        t_end = time.time()
    finally:
        assert active.revert() == "reverted"
    # The slowdown as time taken from the loop (seconds in GC per second), not as its
    # speed: speed moves with whatever else loads this 2-core machine, GC time does not.
    assert c.gc_fraction(t_base - 1.0, t_base) < 0.02, "GC time before the storm"
    storm_stall, storm_gc = c.stall(t_storm, t_end), c.gc_fraction(t_storm, t_end)
    assert storm_stall > 0.03, f"no GC-sized stall in the loop: {storm_stall:.4f}s"
    assert storm_gc > 0.1, f"the loop's process spent only {storm_gc:.3f} s/s in GC"
    assert _files(agent_dir) == {f"{c.pid}.agent"}
    at_revert = active.evidence["at_revert"]["status"]
    assert at_revert["bursts"] >= 3 and at_revert["collect_s_total"] > 0
    assert 0 < inj.severity <= 1
    last = json.loads((agent_dir / f"{c.pid}.agent").read_text())["last_storm"]
    assert last["fault_id"] == active.fault_id and last["end"] == "revoked"
    row = active.injection_row("run-1")
    assert row["fault_type"] == "gc-storm" and row["verified"] and row["severity"] == inj.severity
    assert json.loads(row["params"]) == {"pid": c.pid, "rate_per_s": 5.0, "garbage_mb": 50.0}
    # Back to normal: no more GC time taken from the loop, no more GC-sized stalls.
    t_back = time.time()
    time.sleep(1.5)
    assert c.gc_fraction(t_back + 0.2, time.time()) < 0.02


# A process whose first full collection in the agent's thread takes 4 s (a gc callback
# holds it), as the full collection of a heap of many GB does: a workload whose own
# collections are rare (the uncoordinated-GC knob) keeps such a heap.
SLOW_FIRST_COLLECTION = r"""
import gc, os, signal, sys, threading, time
from faultlab.benchmarks import agent
slow = [True]
def hold(phase, info):
    if phase == "start" and info["generation"] == 2 and slow[0] and threading.current_thread().name == "faultlab-agent":
        slow[0] = False
        time.sleep(4.0)
gc.callbacks.append(hold)
agent.start(sys.argv[1])
def bye(*_):
    agent.stop(); os._exit(0)
signal.signal(signal.SIGTERM, bye)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def test_a_first_burst_longer_than_the_verify_timeout_is_in_force(no_residue, agent_dir):
    p = subprocess.Popen([sys.executable, "-c", SLOW_FIRST_COLLECTION, str(agent_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        inj = GcStorm(LocalNode("local"), p.pid, 5, 50, 30)
        assert inj._verify_timeout_s() < 4.0
        active = apply(inj, 30)
        try:
            v = active.evidence["verify"]
            assert v["ok"], v
            assert v["status"]["bursts"] == 0 and v["first_burst_running_s"] > 0
        finally:
            assert active.revert() == "reverted"
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(15)


def test_double_inject_refused_then_reinject_after_revert(no_residue, child, agent_dir):
    c = child()
    node = LocalNode("local")
    first = apply(GcStorm(node, c.pid, 10, 5, 30), 30)
    try:
        assert first.evidence["verify"]["ok"]
        with pytest.raises(Refused, match=f"already has a gc-storm \\({first.fault_id}\\)") as e:
            GcStorm(node, c.pid, 10, 5, 30).probe()
        assert e.value.field == "--target"
    finally:
        assert first.revert() == "reverted"
    assert first.revert() == "reverted"  # idempotent
    second = apply(GcStorm(node, c.pid, 10, 5, 30), 30)
    try:
        assert second.evidence["verify"]["ok"]
    finally:
        assert second.revert() == "reverted"


def test_agent_ends_storm_at_deadline_without_controller_or_watchdog(no_residue, child, agent_dir):
    """The controller applies a 6 s storm (with a long grace) and is SIGKILLed; the
    lease's watchdog is then stopped and its files removed. The agent alone ends the
    storm at the command's deadline and removes the command and status files."""
    c = child()
    code = (
        "import time\n"
        "from faultlab.injectors import GcStorm, apply\n"
        "from faultlab.nodes import LocalNode\n"
        f"a = apply(GcStorm(LocalNode('local'), {c.pid}, 5, 30, 6.0), 6.0, grace_s=120.0)\n"
        "print(a.fault_id, a.evidence['verify']['ok'], flush=True)\n"
        "time.sleep(120)\n"
    )
    ctl = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    fault_id, ok = ctl.stdout.readline().split()
    t_inj = time.time()
    os.kill(ctl.pid, signal.SIGKILL)
    ctl.wait()
    assert fault_id.startswith("gc-") and ok == "True"
    leases = load_leases(LocalNode("local"))
    assert [le.fault_id for le in leases] == [fault_id]
    leases[0].release()  # the watchdog is gone too now
    assert not load_leases(LocalNode("local"))
    cmd, st = agent_mod.command_path(agent_dir, c.pid), agent_mod.status_path(agent_dir, c.pid)
    assert cmd.exists()
    assert wait_for(lambda: not cmd.exists() and not st.exists(), 12), "the agent did not end the storm at its deadline"
    t_end = time.time()
    assert t_end - t_inj < 10
    last = json.loads((agent_dir / f"{c.pid}.agent").read_text())["last_storm"]
    assert last["fault_id"] == fault_id and last["end"] == "deadline" and last["bursts"] >= 2
    assert wait_for(lambda: sum(w[0] >= t_end + 0.2 for w in list(c.windows)) >= 4, 15), "the loop printed no windows after the storm"
    assert c.gc_fraction(t_inj, t_end - 0.3) > 0.1, "no GC time in the loop's process under the storm"
    assert c.gc_fraction(t_end + 0.2, time.time()) < 0.02, "GC time after the deadline"


# -- bad input and refusals ----------------------------------------------------------
def test_registered():
    assert FAULT_TYPES["gc-storm"] is GcStorm and "gc-storm" not in PLANNED_TYPES
    assert GcStorm.options == frozenset({"--gc-rate", "--garbage-mb"})


@pytest.mark.parametrize(
    "opts,target,field",
    [
        ({"--gc-rate": "0", "--garbage-mb": "50"}, "123", "--gc-rate"),
        ({"--gc-rate": "-1", "--garbage-mb": "50"}, "123", "--gc-rate"),
        ({"--gc-rate": "fast", "--garbage-mb": "50"}, "123", "--gc-rate"),
        ({"--gc-rate": "101", "--garbage-mb": "50"}, "123", "--gc-rate"),
        ({"--gc-rate": "nan", "--garbage-mb": "50"}, "123", "--gc-rate"),
        ({"--gc-rate": "inf", "--garbage-mb": "50"}, "123", "--gc-rate"),
        ({"--garbage-mb": "50"}, "123", "--gc-rate"),
        ({"--gc-rate": "5"}, "123", "--garbage-mb"),
        ({"--gc-rate": "5", "--garbage-mb": "0"}, "123", "--garbage-mb"),
        ({"--gc-rate": "5", "--garbage-mb": "4097"}, "123", "--garbage-mb"),
        ({"--gc-rate": "5", "--garbage-mb": "50mb"}, "123", "--garbage-mb"),
        ({"--gc-rate": "5", "--garbage-mb": "50"}, "12,13", "--target"),
        ({"--gc-rate": "5", "--garbage-mb": "50"}, None, "--target"),
        ({"--gc-rate": "5", "--garbage-mb": "50"}, "abc", "--target"),
        ({"--gc-rate": "5", "--garbage-mb": "50", "--rate": "50mbit"}, "123", "--rate"),
    ],
)
def test_bad_input_names_the_field(opts, target, field):
    with pytest.raises(BadInput) as e:
        build("gc-storm", LocalNode("local"), target=target, duration_s=10, opts=opts)
    assert e.value.field == field, str(e.value)


def test_good_options_and_dry_run_plan(agent_dir):
    inj = build("gc-storm", LocalNode("local"), target="pid:4321", duration_s=10, opts={"--gc-rate": "2.5", "--garbage-mb": "64"})
    assert (inj.rate_per_s, inj.garbage_mb, inj.pid, inj.target) == (2.5, 64.0, 4321, "pid:4321")
    assert inj.severity != inj.severity  # NaN before any measurement
    facts = {"cmd_path": str(agent_dir / "4321.gc-storm.json"), "status_path": str(agent_dir / "4321.gc-storm.status.json"),
             "heartbeat_path": str(agent_dir / "4321.agent"), "deadline_ts": 1_700_000_010.0}
    plan = inj.plan(facts).render(inj.node)
    assert len(plan["inject"]) == 1 and len(plan["revert"]) == 1
    assert facts["cmd_path"] in plan["inject"][0] and '"garbage_mb": 64.0' in plan["inject"][0]
    assert facts["cmd_path"] in plan["revert"][0] and facts["status_path"] in plan["revert"][0]
    assert not agent_dir.exists()  # plan is pure


def test_missing_process_is_bad_input(agent_dir):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    with pytest.raises(BadInput, match="no process") as e:
        GcStorm(LocalNode("local"), p.pid, 5, 50, 10).probe()
    assert e.value.field == "--target"


def test_process_without_agent_is_refused_naming_the_fix(no_residue, busy_loop, agent_dir):
    with pytest.raises(Refused) as e:
        apply(GcStorm(LocalNode("local"), busy_loop.pid, 5, 50, 10), 10)
    msg = str(e.value)
    assert "runs no faultlab agent" in msg and "agent.start()" in msg and "FAULTLAB_AGENT_DIR" in msg
    if sys.version_info < (3, 14):
        assert "sys.remote_exec needs Python >= 3.14" in msg
    assert not load_leases(LocalNode("local"))


def test_heartbeat_of_an_earlier_process_is_refused(busy_loop, agent_dir):
    agent_dir.mkdir(parents=True, mode=0o700)
    hb = agent_dir / f"{busy_loop.pid}.agent"
    hb.write_text(json.dumps({"pid": busy_loop.pid, "starttime": 1, "heartbeat_ts": time.time()}))
    try:
        with pytest.raises(Refused, match="earlier process"):
            GcStorm(LocalNode("local"), busy_loop.pid, 5, 50, 10).probe()
        hb.write_text(json.dumps({"pid": busy_loop.pid, "starttime": agent_mod.proc_starttime(busy_loop.pid), "heartbeat_ts": time.time() - 60}))
        with pytest.raises(Refused, match="not responding"):
            GcStorm(LocalNode("local"), busy_loop.pid, 5, 50, 10).probe()
    finally:
        hb.unlink()


# -- a real 2-rank job ---------------------------------------------------------------
def test_gc_storm_on_rank1_stalls_the_job(no_residue, tmp_path, agent_dir):
    """Two gloo ranks on loopback; a 3 s storm (3 bursts/s, 5 MB: each burst a full
    collection of a torch-sized heap, ~0.15-0.4 s here) on rank 1. The ranks train
    until SIGTERM (both stop at the same step), so the storm never outlives them.

    Where a stall lands depends on what rank 1 was doing: in compute_s when it was
    computing, in comm_s when it was inside the all-reduce (about half the bursts
    here; on a quiet machine, where a step is a few ms and mostly all-reduce, nearly
    all of them). So the test does not ask where it landed: gc_s shows rank 1's stall
    time, and the steps it collected in are slower than the ones it did not."""
    from faultlab.benchmarks.launch import free_port, launch_ranks, stop_ranks

    tel = tmp_path / "telemetry"
    procs = launch_ranks(
        [(LocalNode("n0"), 0), (LocalNode("n1"), 1)],
        telemetry_dir=tel, run_id="gc", master_addr="127.0.0.1", master_port=free_port(),
        duration_s=60, log_dir=tmp_path / "logs",
    )  # fmt: skip
    active = None
    try:
        r1 = tel / "steps-rank1.jsonl"
        assert wait_for(lambda: r1.exists() and len(r1.read_text().splitlines()) >= 40, 90), "rank 1 did not reach step 40"
        assert (agent_dir / f"{procs[1].pid}.agent").exists() and (agent_dir / f"{procs[0].pid}.agent").exists()
        inj = GcStorm(LocalNode("n1"), procs[1].pid, 3, 5, 30, label="rank:1")
        active = apply(inj, 30)
        assert active.evidence["verify"]["ok"], active.evidence["verify"]
        t_on = time.time()
        time.sleep(3.0)
        t_off = time.time()
        assert active.revert() == "reverted"
        time.sleep(0.3)
    finally:
        if active is not None:
            active.revert()
        rcs = stop_ranks(procs, grace_s=15)
    assert rcs == {0: 0, 1: 0}, rcs
    rows = {r: [json.loads(x) for x in (tel / f"steps-rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)}
    assert len(rows[0]) == len(rows[1])
    assert all(x["gc_s"] >= 0 for r in rows for x in rows[r])

    def window(r):
        return [x for x in rows[r] if t_on <= x["t_start"] < t_off]

    storm0, storm1 = window(0), window(1)
    assert len(storm1) >= 10, f"only {len(storm1)} steps under the storm"
    g0, g1 = (sum(x["gc_s"] for x in s) for s in (storm0, storm1))
    assert g1 > 0.1 * (t_off - t_on) and g0 < 0.05, (g0, g1)
    # The stall is the job's: a step in which rank 1 collected is slower than one in
    # which it did not (wherever the burst landed: in rank 1's compute, or inside the
    # all-reduce, where rank 0 waits with it). Compared within the same window, so
    # machine load moves both sides alike.
    stalled = [x["step_s"] for x in storm1 if x["gc_s"] > 0.005]
    clean = [x["step_s"] for x in storm1 if x["gc_s"] == 0]
    assert stalled and clean, (len(stalled), len(clean))
    # by the mean: a burst inside the all-reduce shows in gc_s while the step ends on
    # time, so only some collecting steps carry the stall (0.15-0.4 s each)
    assert statistics.mean(stalled) > 2 * statistics.median(clean), (statistics.mean(stalled), statistics.median(clean))
    final = active.evidence["at_revert"]["status"]
    assert final["bursts"] >= 4 and 0 < inj.severity <= 1
    assert active.injection_row("gc")["target"] == "rank:1"
    assert _files(agent_dir) == set()  # both ranks removed their heartbeat on exit


# -- trust: the control folder, planted links, other users' commands -------------------


@pytest.fixture
def request_cleanup():
    todo = []
    yield todo
    for f in reversed(todo):
        f()


def _nobody() -> tuple[int, int]:
    import pwd

    pw = pwd.getpwnam("nobody")
    return pw.pw_uid, pw.pw_gid


@pytest.mark.parametrize("how", ["mode-0777", "symlink", "mode-0755"] + (["owner-nobody"] if os.geteuid() == 0 else []))
def test_agent_refuses_an_untrusted_control_folder(tmp_path, how):
    """A control folder another user could plant commands in (wrong owner or mode, a
    symlink) is refused: start() raises (an OSError) and writes nothing."""
    d = tmp_path / "agents"
    if how == "symlink":
        real = tmp_path / "real"
        real.mkdir(mode=0o700)
        d.symlink_to(real)
    else:
        d.mkdir(mode=0o700)
        if how == "mode-0777":
            os.chmod(d, 0o777)
        elif how == "mode-0755":
            os.chmod(d, 0o755)
        else:
            os.chown(d, _nobody()[0], -1)
    code = ("import sys\nfrom faultlab.benchmarks import agent\n"
            "try:\n    agent.start(sys.argv[1])\nexcept OSError as e:\n    print('refused', e); sys.exit(0)\nprint('started')\n")
    cp = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True, timeout=30)
    assert cp.stdout.startswith("refused"), cp.stdout + cp.stderr
    assert str(d) in cp.stdout and "\n" not in cp.stdout.strip()
    assert not list(d.iterdir())


def test_agent_never_writes_through_a_planted_tmp_link(child, agent_dir, tmp_path):
    """A link planted at the heartbeat's temporary name ``PID.agent.tmp`` is never
    followed: the 0600 file it points at keeps its content."""
    c = child()
    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.chmod(victim, 0o600)
    for name in (f"{c.pid}.agent.tmp", f"{c.pid}.gc-storm.status.json.tmp"):
        (agent_dir / name).symlink_to(victim)
    hb = agent_dir / f"{c.pid}.agent"
    ts0 = json.loads(hb.read_text())["heartbeat_ts"]
    assert wait_for(lambda: json.loads(hb.read_text())["heartbeat_ts"] > ts0, 5)  # a new heartbeat was written
    assert victim.read_text() == "keep"
    for name in (f"{c.pid}.agent.tmp", f"{c.pid}.gc-storm.status.json.tmp"):
        (agent_dir / name).unlink()


@needs_root
def test_agent_ignores_a_command_file_of_another_user(child, agent_dir):
    """A command owned by another user (as if written through a folder they could
    write) is reported as untrusted and never run."""
    c = child()
    cmd = agent_mod.command_path(agent_dir, c.pid)
    cmd.write_text(json.dumps({"fault_id": "gc-evil1", "rate_per_s": 5, "garbage_mb": 1, "deadline_ts": time.time() + 30}))
    os.chown(cmd, _nobody()[0], -1)
    st = agent_mod.status_path(agent_dir, c.pid)
    assert wait_for(st.exists, 3)
    s = json.loads(st.read_text())
    assert s["state"] == "error" and "owned by uid" in s["error"], s
    cmd.unlink()
    assert wait_for(lambda: not st.exists(), 3)
    assert json.loads((agent_dir / f"{c.pid}.agent").read_text())["storms_done"] == 0


def test_agent_ignores_a_symlinked_command(child, agent_dir, tmp_path):
    c = child()
    target = tmp_path / "cmd.json"
    target.write_text(json.dumps({"fault_id": "gc-link1", "rate_per_s": 5, "garbage_mb": 1, "deadline_ts": time.time() + 30}))
    cmd = agent_mod.command_path(agent_dir, c.pid)
    cmd.symlink_to(target)
    st = agent_mod.status_path(agent_dir, c.pid)
    assert wait_for(st.exists, 3)
    assert "symlink" in json.loads(st.read_text())["error"]
    cmd.unlink()
    assert wait_for(lambda: not st.exists(), 3)


def test_injector_never_writes_through_a_planted_tmp_link(no_residue, child, agent_dir, tmp_path):
    """A link planted at the command file's temporary name ``PID.gc-storm.json.tmp``
    is never followed by root's inject: the root 0600 file it points at keeps its
    content."""
    c = child()
    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.chmod(victim, 0o600)
    (agent_dir / f"{c.pid}.gc-storm.json.tmp").symlink_to(victim)
    try:
        active = apply(GcStorm(LocalNode("local"), c.pid, 5, 1, 10), 10)
        active.revert()
    finally:
        (agent_dir / f"{c.pid}.gc-storm.json.tmp").unlink(missing_ok=True)
    assert victim.read_text() == "keep"


@pytest.mark.parametrize("mode", [0o777, 0o755])
def test_injector_refuses_an_untrusted_control_folder(no_residue, busy_loop, tmp_path, monkeypatch, mode):
    d = tmp_path / "agents"
    d.mkdir()
    os.chmod(d, mode)
    monkeypatch.setenv("FAULTLAB_AGENT_DIR", str(d))
    hb = d / f"{busy_loop.pid}.agent"
    hb.write_text(json.dumps({"pid": busy_loop.pid, "starttime": agent_mod.proc_starttime(busy_loop.pid), "heartbeat_ts": time.time()}))
    with pytest.raises(Refused, match="control folder is not trusted") as e:
        apply(GcStorm(LocalNode("local"), busy_loop.pid, 5, 1, 10), 10)
    assert str(d) in str(e.value) and "\n" not in str(e.value)
    assert not load_leases(LocalNode("local")) and sorted(p.name for p in d.iterdir()) == [hb.name]


@needs_root
def test_commands_in_another_users_folder_run_as_that_user(request_cleanup):
    """In a folder owned by the target's user, the inject and revert commands run as
    that user (setpriv): root never writes through a path that user controls."""
    import shutil
    import tempfile

    uid, gid = _nobody()
    base = Path(tempfile.mkdtemp(prefix="faultlab-test-"))  # /tmp/pytest-of-root is 0700: nobody cannot enter it
    request_cleanup.append(lambda: shutil.rmtree(base, ignore_errors=True))
    os.chmod(base, 0o755)
    d = base / "agents"
    d.mkdir(mode=0o700)
    os.chown(d, uid, gid)
    root_file = base / "rootonly"
    root_file.write_text("keep")
    os.chmod(root_file, 0o600)
    pid = os.getpid()
    inj = GcStorm(LocalNode("local"), pid, 5, 1, 10, agent_dir=str(d))
    facts = {"cmd_path": str(agent_mod.command_path(d, pid)), "status_path": str(agent_mod.status_path(d, pid)),
             "heartbeat_path": str(agent_mod.heartbeat_path(d, pid)), "deadline_ts": time.time() + 10,
             "dir_uid": uid, "owner_gid": gid}
    plan = inj.plan(facts)
    for cmd in (*plan.inject, *plan.revert):  # as that user, killed in time (below), in a session and environment of its own
        i = cmd.argv.index("setpriv")
        assert cmd.argv[i + 1] == f"--reuid={uid}" and cmd.argv[:10] == ("timeout", "--foreground", "-s", "KILL", str(AS_OWNER_TIMEOUT_S),
                                                                          "setsid", "env", "-i", "-C", "/") and AS_OWNER_ENV[0] in cmd.argv[:i]
    # the user planted a link to a root-only file at the final name: root's write (as nobody) cannot follow it
    os.symlink(root_file, facts["cmd_path"] + ".tmp.AAAAAA")
    cp = subprocess.run(list(plan.inject[0].argv), capture_output=True, text=True, timeout=10)
    assert cp.returncode == 0, cp.stderr
    st = os.lstat(facts["cmd_path"])
    assert st.st_uid == uid and json.loads(Path(facts["cmd_path"]).read_text())["fault_id"] == inj.fault_id
    assert root_file.read_text() == "keep"
    subprocess.run([*plan.revert[0].argv[:-1], "1"], capture_output=True, timeout=10, check=True)
    assert not os.path.lexists(facts["cmd_path"]) and not os.path.lexists(facts["cmd_path"] + ".tmp.AAAAAA")
    assert root_file.read_text() == "keep"


def _stop_sh_of(uid: int, status_path: str) -> list[int]:
    """PIDs of the processes of ``uid`` whose argv names ``status_path`` (the revert's sh)."""
    cp = subprocess.run(["pgrep", "-u", str(uid), "-f", status_path], capture_output=True, text=True)
    return [int(x) for x in cp.stdout.split()]


#: the owner-command bound the stopped-revert test plans with (s): above the few
#: seconds the test takes to find and stop the revert's sh
SHORT_OWNER_S = 8


@needs_root
def test_a_revert_the_target_user_stops_is_killed_in_time(request_cleanup, monkeypatch):
    """The revert runs as the target's user, who may stop it (SIGSTOP, from their own
    process): it is killed after ``AS_OWNER_TIMEOUT_S``, so neither root's revert nor
    the lease watchdog that runs the same line waits on that user for ever. The bound
    is set to ``SHORT_OWNER_S`` here (the same ``timeout`` line, a shorter number), so
    the test waits seconds, not half a minute."""
    import shutil
    import tempfile

    monkeypatch.setattr(gc_mod, "AS_OWNER_TIMEOUT_S", SHORT_OWNER_S)

    uid, gid = _nobody()
    base = Path(tempfile.mkdtemp(prefix="faultlab-test-"))
    request_cleanup.append(lambda: shutil.rmtree(base, ignore_errors=True))
    os.chmod(base, 0o755)
    d = base / "agents"
    d.mkdir(mode=0o700)
    os.chown(d, uid, gid)
    pid = os.getpid()
    inj = GcStorm(LocalNode("local"), pid, 5, 1, 10, agent_dir=str(d))
    facts = {"cmd_path": str(agent_mod.command_path(d, pid)), "status_path": str(agent_mod.status_path(d, pid)),
             "heartbeat_path": str(agent_mod.heartbeat_path(d, pid)), "deadline_ts": time.time() + 10,
             "dir_uid": uid, "owner_gid": gid}
    Path(facts["status_path"]).write_text("{}")  # the user keeps a status file: the revert polls
    os.chown(facts["status_path"], uid, gid)
    argv = inj.plan(facts).revert[0].argv
    assert argv[:5] == ("timeout", "--foreground", "-s", "KILL", str(SHORT_OWNER_S)), argv
    revert = subprocess.Popen(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def end_all():
        for p in _stop_sh_of(uid, facts["status_path"]):
            os.kill(p, signal.SIGKILL)
        if revert.poll() is None:
            revert.kill()
            revert.wait()
    request_cleanup.append(end_all)
    assert wait_for(lambda: _stop_sh_of(uid, facts["status_path"]), 20), "the revert's sh never ran as the user"
    for p in _stop_sh_of(uid, facts["status_path"]):  # the user stops it
        subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "kill", "-STOP", str(p)], check=True)
    try:
        revert.wait(timeout=SHORT_OWNER_S + 60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the revert the user stopped still runs {SHORT_OWNER_S + 60}s later")
    assert revert.returncode != 0  # killed, not "reverted"
    assert wait_for(lambda: not _stop_sh_of(uid, facts["status_path"]), 10), "the user's stopped sh was left"
