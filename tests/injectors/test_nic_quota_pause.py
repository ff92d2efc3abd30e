"""Injectors on real parts: qdiscs between namespaces, cgroup quotas on real processes,
SIGSTOP duty cycles, leases that revert after the controller is SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faultlab import procid
from faultlab.errors import BadInput, Refused
from faultlab.injectors import CpuContention, NicSlow, ProcessPause, apply
from faultlab.lifecycle.lease import load_leases
from faultlab.nodes import LocalNode
from faultlab.probe import measure_throughput
from tests.helpers import FAULT_QDISC, FL, cpu_rate, deadline_now, needs_root


def _qdiscs(node) -> str:
    return node.run(["tc", "qdisc", "show"], scope="net").stdout


@needs_root
def test_tbf_cap_measured_between_namespaces(testbed2, no_residue):
    n0, n1 = testbed2.nodes
    before = _qdiscs(n0)
    free = measure_throughput(n1, n0, n0.address, 8 << 20)["bit_per_s"]
    assert free > 200e6, "uncapped veth should carry far more than the cap"
    active = apply(NicSlow(n0, 40e6), 30)
    try:
        down = measure_throughput(n1, n0, n0.address, 3 << 20)["bit_per_s"]  # n0's ingress
        up = measure_throughput(n0, n1, n1.address, 3 << 20)["bit_per_s"]  # n0's egress
        assert 0.7 * 40e6 < down < 1.1 * 40e6
        assert 0.7 * 40e6 < up < 1.1 * 40e6
        assert active.evidence["verify"]["ok"]
        assert load_leases(n0), "a lease record exists while the fault is in force"
    finally:
        assert active.revert() == "reverted"
    assert _qdiscs(n0) == before
    assert "flifb" not in n0.run(["ip", "link"], scope="net").stdout
    assert measure_throughput(n1, n0, n0.address, 8 << 20)["bit_per_s"] > 200e6
    assert not load_leases(n0)


@needs_root
def test_nic_slow_verify_measures_throughput_with_probe_peer(testbed2, no_residue):
    n0, _ = testbed2.nodes
    inj = NicSlow(n0, 30e6, probe_peer=LocalNode("host"), probe_peer_addr=testbed2.bridge_address)
    active = apply(inj, 30)
    try:
        v = active.evidence["verify"]
        assert v["ok"] and v["throughput_under_cap"]
        assert v["ingress_measured_bit_per_s"] <= 30e6 * 1.15
        assert v["egress_measured_bit_per_s"] <= 30e6 * 1.15
    finally:
        active.revert()
    row = active.injection_row("r1")
    assert row["verified"] and row["status"] == "reverted" and row["end_ts"] > row["start_ts"]
    assert json.loads(row["evidence"])["at_revert"]["egress"]["bytes"] > 0


@needs_root
def test_nic_slow_refuses_foreign_qdisc_and_keeps_it(testbed2, no_residue):
    n0, _ = testbed2.nodes
    n0.run(["tc", "qdisc", "add", "dev", "fleth0", "root", "handle", "1:", "tbf", "rate", "1gbit", "burst", "64kb", "latency", "10ms"], scope="net", check=True)
    try:
        with pytest.raises(Refused, match="did not create"):
            apply(NicSlow(n0, 10e6), 10)
        assert "tbf 1: dev fleth0 root" in _qdiscs(n0), "the foreign qdisc is untouched"
        assert not load_leases(n0)
    finally:
        n0.run(["tc", "qdisc", "del", "dev", "fleth0", "root"], scope="net")


@needs_root
def test_nic_slow_twice_on_same_interface_is_refused(testbed2, no_residue):
    n0, _ = testbed2.nodes
    a = apply(NicSlow(n0, 10e6), 30)
    try:
        with pytest.raises(Refused, match="already has a faultlab nic-slow"):
            apply(NicSlow(n0, 20e6), 30)
    finally:
        a.revert()


@needs_root
def test_nic_slow_missing_interface(testbed2):
    with pytest.raises(BadInput, match="--target: interface 'eth7' does not exist"):
        NicSlow(testbed2.nodes[0], 10e6, iface="eth7").probe()


@needs_root
def test_quota_slows_busy_loop_and_revert_restores(busy_loop, no_residue):
    pid = busy_loop.pid
    before_cg = open(f"/proc/{pid}/cgroup").read()
    active = apply(CpuContention(LocalNode("local"), [pid], 0.3), 30)
    try:
        # the quota is a cap, whatever else loads the machine: at most 0.3 of a CPU
        # (a loaded machine may give less, so there is no lower bound; the kernel's
        # throttling counters show the cap was what held it)
        during = cpu_rate(pid)
        assert active.evidence["verify"]["ok"]
        assert active.evidence["verify"]["cpu_stat"]["nr_throttled"] > 0
        assert during < 0.36, during
    finally:
        assert active.revert() == "reverted"
    assert open(f"/proc/{pid}/cgroup").read() == before_cg
    stat = active.evidence["at_revert"]["cpu_stat"]
    assert stat["nr_throttled"] > 0


@needs_root
def test_a_quota_shows_in_the_host_metrics_as_run_delay(busy_loop, no_residue):
    # a busy loop held at 10% of a CPU waits ~0.9 s per second, runnable but throttled:
    # the kernel counts it as run delay (schedstat), and the host sampler reports it
    from faultlab.telemetry.hostsampler import HostSampler

    active = apply(CpuContention(LocalNode("local"), [busy_loop.pid], 0.1), 30)
    try:
        with HostSampler({"n": [busy_loop.pid]}, interval_s=0.25, tcp=False, gpu=False) as hs:
            time.sleep(1.6)
        assert active.evidence["verify"]["ok"]
    finally:
        assert active.revert() == "reverted"
    df = hs.frame()
    delay = df[df.metric == "proc_run_delay_s_per_s"]["value"]
    assert len(delay) >= 3, df.metric.value_counts()
    # units: seconds per second of one thread, so at most ~1; throttled most of the time
    assert 0.5 < delay.median() <= 1.05, delay.tolist()


@needs_root
def test_quota_revert_after_target_restarted(no_residue):
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    active = apply(CpuContention(LocalNode("local"), [p.pid], 0.5), 30)
    p.kill()
    p.wait()
    assert active.revert() == "reverted"  # the target is gone: nothing to move, cgroup removed


def test_process_pause_duty_cycle(busy_loop, no_residue):
    pid = busy_loop.pid
    active = apply(ProcessPause(LocalNode("local"), pid, 0.2, 0.4, 30), 30)
    try:
        assert active.evidence["verify"]["ok"]
        during = cpu_rate(pid, 2.0)
        assert during < 0.8  # stopped half of every period: a cap whatever the load
    finally:
        assert active.revert() == "reverted"
    time.sleep(0.3)
    assert open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[0] != "T"


def test_revert_twice_is_noop(busy_loop, no_residue):
    """A second ``ActiveFault.revert()`` answers the status it recorded (nothing runs
    again here). That the revert *commands* really run again and still work (what a
    watchdog firing after the controller's revert does) is
    tests/lifecycle/test_recover_revert.py::test_second_revert_runs_its_commands_again."""
    active = apply(ProcessPause(LocalNode("local"), busy_loop.pid, 0.1, 0.3, 30), 30)
    assert active.revert() == "reverted"
    assert active.revert() == "reverted"


def test_lease_watchdog_reverts_after_controller_sigkill(busy_loop, no_residue):
    """The controller applies a pause under a 6 s lease with no grace and is SIGKILLed
    at once: the detached watchdog must still end the fault (stop the loop, SIGCONT)
    and remove the lease. The pause loop itself is given 120 s, so only the watchdog's
    revert can end it in time (with the revert lines skipped this test fails: the
    target keeps being stopped)."""
    code = (
        "import sys, time\n"
        "from faultlab.injectors import ProcessPause, apply\n"
        "from faultlab.nodes import LocalNode\n"
        f"a = apply(ProcessPause(LocalNode('local'), {busy_loop.pid}, 0.5, 0.6, 120.0), 6.0, grace_s=0.0)\n"
        "print(a.fault_id, flush=True)\n"
        "time.sleep(60)\n"
    )
    ctl = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    fault_id = ctl.stdout.readline().strip()
    assert fault_id.startswith("process-")
    os.kill(ctl.pid, signal.SIGKILL)
    ctl.wait()
    leases = load_leases(LocalNode("local"))
    assert [le.fault_id for le in leases] == [fault_id]
    deadline_now(fault_id)  # the lease's end now, not at its 6 s
    deadline = time.time() + 25
    while time.time() < deadline and load_leases(LocalNode("local")):
        time.sleep(0.2)
    assert not load_leases(LocalNode("local")), "the watchdog removed the lease at the deadline"
    assert not _pause_loops_of(busy_loop.pid), "the watchdog stopped the pause loop"
    for _ in range(20):  # never seen stopped again (the loop stops it 5/6 of the time)
        time.sleep(0.1)
        assert _state(busy_loop.pid) != "T"


def _state(pid: int) -> str:
    return open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[0]


def _pause_loops_of(pid: int) -> list[int]:
    """PIDs of live faultlab-pause loops whose target is ``pid``: the loop shells only,
    matched by the loop's own argv (``sh -c LOOP faultlab-pause PIDFILE PID ...``, see
    injectors/pause.py START_SH), so not the ``setsid -f sh -c LOOP faultlab-pause ...``
    wrapper that starts it (faultlab-pause and the PID in its argv too, for a few ms), and
    not the short-lived subshells each ``$(...)`` in the loop forks (same argv, and
    their parent is the loop; CI saw one in a snapshot and not in the next)."""
    found = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            argv = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
            fields = open(f"/proc/{p}/stat").read().rpartition(")")[2].split()
        except OSError:
            continue
        loop_argv = len(argv) > 5 and argv[:2] == [b"sh", b"-c"] and argv[3] == b"faultlab-pause"
        if loop_argv and argv[5] == str(pid).encode() and fields[0] != "Z":
            found[int(p)] = int(fields[1])  # its parent's PID
    return sorted(p for p, parent in found.items() if parent not in found)


def test_pause_stops_the_target_repeatedly(busy_loop, no_residue):
    """A duty cycle, not one stop: the target is seen stopped, running, stopped again
    at least three times (a loop that stops it once fails this)."""
    active = apply(ProcessPause(LocalNode("local"), busy_loop.pid, 0.15, 0.3, 30), 30)
    try:
        episodes, prev = 0, None
        end = time.time() + 20
        while time.time() < end and episodes < 3:
            st = _state(busy_loop.pid)
            if st == "T" and prev not in (None, "T"):
                episodes += 1
            prev = st
            time.sleep(0.005)
        assert episodes >= 3, f"stopped {episodes} time(s) after the first"
    finally:
        assert active.revert() == "reverted"


@pytest.mark.parametrize("case", ["loop-starttime", "bystander-starttime", "look-alike"])
def test_stale_pause_pidfile_never_signals_another_process(busy_loop, no_residue, case):
    """The loop dies (SIGKILL), its PID is taken by another process, the pidfile stays:
    revert must not SIGTERM that process: the pidfile holds the loop's PID and start
    time, and the revert signals only a process that has both and the loop's cmdline.

    - ``loop-starttime``: a ``sleep`` bystander, the loop's start time recorded;
    - ``bystander-starttime``: the reused PID also has the recorded start time (start
      times count 10 ms ticks, so a process started in the loop's tick has the
      loop's); only the cmdline check tells them apart (a bystander started right
      after apply can share the tick);
    - ``look-alike``: a process with the loop's cmdline (``faultlab-pause PIDFILE``)
      whose start time is its own plus one tick, never its own: only the start-time
      check spares it.
    """
    active = apply(ProcessPause(LocalNode("local"), busy_loop.pid, 0.1, 0.3, 30), 30)
    pidfile = Path(active.facts["pidfile"])
    first = pidfile.read_text().split()
    os.kill(int(first[0]), signal.SIGKILL)
    while _pause_loops_of(busy_loop.pid):
        time.sleep(0.05)
    # one process each (no shell child left behind by kill)
    argv = ([sys.executable, "-c", "import time; time.sleep(60)", "faultlab-pause", str(pidfile), str(busy_loop.pid)]
            if case == "look-alike" else ["sleep", "60"])
    other = subprocess.Popen(argv)
    try:
        recorded = {"loop-starttime": first[1], "bystander-starttime": str(procid.starttime(other.pid)),
                    "look-alike": str(procid.starttime(other.pid) + 1)}[case]
        pidfile.write_text(f"{other.pid} {recorded}\n")
        assert active.revert() == "reverted"
        time.sleep(0.2)
        assert other.poll() is None, f"revert signalled a process that is not the loop ({case})"
        assert _state(busy_loop.pid) != "T" and not pidfile.exists()
    finally:
        other.kill()
        other.wait()


def test_pause_pidfile_names_the_loop_once_inject_returns(busy_loop, no_residue):
    """``setsid -f`` returns before the loop runs, so inject returns only once the
    pidfile names the loop: a revert right after inject (a SIGTERM during inject, or no
    verify) finds the pidfile and ends the loop, which would otherwise go on stopping
    the target until its deadline."""
    active = apply(ProcessPause(LocalNode("local"), busy_loop.pid, 0.1, 0.3, 30), 30, verify=False)
    try:
        pidfile = Path(active.facts["pidfile"])
        assert pidfile.exists() and len(pidfile.read_text().split()) == 2
    finally:
        assert active.revert() == "reverted"
    assert not _pause_loops_of(busy_loop.pid) and _state(busy_loop.pid) != "T"


@pytest.mark.parametrize("content", ["-1\n", "1 2; kill -9 1\n", "\n", "abc def\n"])
def test_pause_pidfile_that_is_not_digits_is_ignored(tmp_path, content):
    """STOP_SH reads the pidfile as digits only: ``-1`` (every process) or shell text
    is never passed to kill."""
    from faultlab.injectors.pause import STOP_SH

    pf = tmp_path / "x.pause.pid"
    pf.write_text(content)
    cp = subprocess.run(["sh", "-x", "-c", STOP_SH, "sh", str(pf)], capture_output=True, text=True, timeout=10)
    assert cp.returncode == 0 and " kill " not in cp.stderr and not pf.exists(), cp.stderr


def test_pause_loop_survives_a_group_kill_of_faultlab(busy_loop, no_residue):
    """``faultlab inject`` and its whole process group get SIGKILL mid-fault: the pause
    loop runs in its own session, so it is not killed half-way through a stop; the
    target keeps cycling and is running (not stopped) once the fault ends."""
    fl = [sys.executable, "-c", "from faultlab.cli import app; app()"]
    p = subprocess.Popen([*fl, "inject", "--type", "process-pause", "--target", str(busy_loop.pid), "--pause", "200ms",
                          "--period", "300ms", "--duration", "10s", "--grace", "1s", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        end = time.time() + 30
        while time.time() < end and not _pause_loops_of(busy_loop.pid):
            time.sleep(0.05)
        loops = _pause_loops_of(busy_loop.pid)
        assert loops, "no pause loop started"
        while _state(busy_loop.pid) != "T" and time.time() < end:  # kill it in the middle of a stop
            time.sleep(0.005)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        assert os.getsid(loops[0]) != p.pid, "the loop shares the controller's session"
        assert _pause_loops_of(busy_loop.pid) == loops, "the group kill took the loop with it"
        for le in load_leases(LocalNode("local")):  # the fault's end now, not at its 10 s
            deadline_now(le.fault_id)
        end = time.time() + 30
        while time.time() < end and (_pause_loops_of(busy_loop.pid) or load_leases(LocalNode("local"))):
            time.sleep(0.1)
        assert not _pause_loops_of(busy_loop.pid) and not load_leases(LocalNode("local"))
        for _ in range(10):
            time.sleep(0.05)
            assert _state(busy_loop.pid) != "T"
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@needs_root
def test_lease_watchdog_reverts_qdisc_after_sigkill(testbed2, no_residue):
    n0, _ = testbed2.nodes
    code = (
        "import time\n"
        "from faultlab.injectors import NicSlow, apply\n"
        "from faultlab.nodes import NetnsNode\n"
        f"n = NetnsNode(name='n0', netns={n0.netns!r}, iface='fleth0')\n"
        "a = apply(NicSlow(n, 10e6), 5.0, grace_s=0.0)\n"
        "print(a.fault_id, flush=True)\n"
        "time.sleep(60)\n"
    )
    ctl = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert ctl.stdout.readline().startswith("nic-")
    assert FAULT_QDISC.search(_qdiscs(n0))
    ctl.kill()
    ctl.wait()
    deadline = time.time() + 25
    while time.time() < deadline and FAULT_QDISC.search(_qdiscs(n0)):
        time.sleep(0.2)
    assert not FAULT_QDISC.search(_qdiscs(n0)) and "ingress" not in _qdiscs(n0)
    assert "flifb" not in n0.run(["ip", "link"], scope="net").stdout
    while time.time() < deadline and load_leases(n0):
        time.sleep(0.2)
    assert not load_leases(n0)


def test_failed_inject_leaves_nothing(no_residue):
    """An inject step that fails half-way is reverted before the error propagates."""
    with pytest.raises(BadInput, match="no process"):
        apply(CpuContention(LocalNode("local"), [2**22 + 17], 0.5), 10)
    assert not load_leases(LocalNode("local"))


@needs_root
def test_slow_link_to_one_peer_only(testbed3, no_residue):
    """--peer: only traffic between n0 and n1 is capped; n0<->n2 runs free."""
    n0, n1, n2 = testbed3.nodes
    active = apply(NicSlow(n0, 30e6, peer=n1.address), 30)
    try:
        to_peer = measure_throughput(n0, n1, n1.address, 2 << 20)["bit_per_s"]
        from_peer = measure_throughput(n1, n0, n0.address, 2 << 20)["bit_per_s"]
        other = measure_throughput(n0, n2, n2.address, 16 << 20)["bit_per_s"]
        other_in = measure_throughput(n2, n0, n0.address, 16 << 20)["bit_per_s"]
        assert to_peer < 30e6 * 1.15 and from_peer < 30e6 * 1.15
        assert other > 150e6 and other_in > 150e6
        assert active.plan.target == f"fleth0->{n1.address}"
    finally:
        assert active.revert() == "reverted"
    assert not FAULT_QDISC.search(_qdiscs(n0))


@needs_root
def test_force_replaces_foreign_tbf_and_restores_it(testbed2, no_residue):
    n0, n1 = testbed2.nodes
    n0.run(["tc", "qdisc", "add", "dev", "fleth0", "root", "handle", "7:", "tbf", "rate", "900mbit", "burst", "64kb", "latency", "10ms"], scope="net", check=True)
    before = json.loads(n0.run(["tc", "-j", "qdisc", "show", "dev", "fleth0", "root"], scope="net").stdout)[0]
    try:
        active = apply(NicSlow(n0, 20e6, force=True), 30)
        assert "tbf 7:" not in _qdiscs(n0)
        assert measure_throughput(n1, n0, n0.address, 1 << 20)["bit_per_s"] < 20e6 * 1.15
        assert active.revert() == "reverted"
        after = json.loads(n0.run(["tc", "-j", "qdisc", "show", "dev", "fleth0", "root"], scope="net").stdout)[0]
        assert after["kind"] == "tbf" and after["handle"] == "7:"
        assert after["options"]["rate"] == before["options"]["rate"]
        assert abs(after["options"]["burst"] - before["options"]["burst"]) <= 0.01 * before["options"]["burst"]
    finally:
        n0.run(["tc", "qdisc", "del", "dev", "fleth0", "root"], scope="net")


@needs_root
@pytest.mark.parametrize(
    "qdisc,refusal,kept",
    [
        # a classful foreign root: --force cannot stand in for it
        (["handle", "7:", "htb", "default", "1"], "could not", "htb 7:"),
        # a tbf with options --force could not rebuild exactly on revert
        (["handle", "1234:", "tbf", "rate", "77mbit", "burst", "32k", "latency", "50ms", "peakrate", "100mbit", "minburst", "1540"],
         "cannot rebuild the foreign tbf", "peakrate"),
    ],
    ids=["classful-root", "tbf-with-peakrate"],
)
def test_force_refuses_a_foreign_root_it_could_not_restore(testbed2, no_residue, qdisc, refusal, kept):
    n0, _ = testbed2.nodes
    n0.run(["tc", "qdisc", "add", "dev", "fleth0", "root", *qdisc], scope="net", check=True)
    try:
        with pytest.raises(Refused, match=refusal):
            apply(NicSlow(n0, 20e6, force=True), 10)
        assert kept in _qdiscs(n0)
    finally:
        n0.run(["tc", "qdisc", "del", "dev", "fleth0", "root"], scope="net")


def _kernel_has_netem(node) -> bool:
    return NicSlow(node, None, delay_s=0.001)._netem_supported()[0]


@needs_root
def test_netem_delay_plan_and_kernel_probe(testbed2, no_residue):
    """delay/jitter/loss: the exact netem commands planned; on a kernel without netem
    (like this CI machine) a clear refusal and nothing applied; with netem, the
    measured RTT grows. (Real check of the delay itself: a kernel with sch_netem.)"""
    n0, n1 = testbed2.nodes
    inj = NicSlow(n0, 50e6, delay_s=0.02, jitter_s=0.005, loss_pct=0.5)
    facts = {"iface": "fleth0", "ifb": inj.ifb, "qdiscs_before": [], "foreign_root": None}
    plan = inj.plan(facts)
    assert plan.inject[0].argv == ("tc", "qdisc", "add", "dev", "fleth0", "root", "handle", inj.handle, "netem", "delay", "20000us",
                                   "5000us", "distribution", "normal", "loss", "0.5%", "rate", "50000000bit", "limit", "10000")
    if not _kernel_has_netem(n0):
        with pytest.raises(Refused, match="no netem qdisc"):
            apply(inj, 10)
        assert not FAULT_QDISC.search(_qdiscs(n0)) and not load_leases(n0)
        return
    active = apply(NicSlow(n0, None, delay_s=0.02), 30)
    try:
        cp = n1.run(["ping", "-c", "3", "-i", "0.2", n0.address], scope="net")
        rtts = [float(x.split("time=")[1].split()[0]) for x in cp.stdout.splitlines() if "time=" in x]
        assert rtts and min(rtts) >= 35
    finally:
        active.revert()


# -- stale reverts, concurrent injects, nesting and teardown ----------------------------


@needs_root
def test_stale_revert_of_one_fault_never_touches_a_later_fault(testbed2, no_residue):
    """Fault A is reverted by hand but its lease's revert lines run late (a watchdog
    of a killed controller): fault B on the same interface must survive them."""
    from faultlab.lifecycle.lease import Lease

    n0, _ = testbed2.nodes
    a = apply(NicSlow(n0, 10e6), 30)
    stale = dict(a.lease.record)
    a.revert()
    b = apply(NicSlow(n0, 20e6), 30)
    try:
        Lease(a.lease.path, stale).run_revert()  # A's lines, late
        q = _qdiscs(n0)
        assert b.injector.handle in q and "ingress" in q, q
        links = n0.run(["ip", "link"], scope="net").stdout
        assert b.injector.ifb in links
    finally:
        assert b.revert() == "reverted"


@needs_root
def test_concurrent_injects_on_one_interface_one_wins_other_refused(testbed2, no_residue):
    n0, _ = testbed2.nodes
    argv = [*FL, "inject", "--type", "nic-slow", "--node", f"netns:{n0.netns}", "--rate", "10mbit", "--duration", "4s", "--json"]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=60) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 3, 3], [o[1] for o in outs]
    winner = next(json.loads(o[0]) for p, o in zip(procs, outs) if p.returncode == 0)
    assert winner["status"] == "reverted" and winner["verify"]["ok"]
    assert all("already has a faultlab nic-slow" in o[1] for p, o in zip(procs, outs) if p.returncode == 3)


@needs_root
@pytest.mark.skipif(not Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists(),
                    reason="no cgroup v1 cpu controller at /sys/fs/cgroup/cpu (a v2-only host): the v2 nesting is "
                           "tests/injectors/test_cgroup_nesting.py")
def test_quota_nests_in_the_targets_cgroup_keeps_its_limit_and_survives_its_removal(no_residue):
    """The faultlab cgroup is made inside the target's own cgroup: the target's own 20%
    limit still holds under a looser 0.8 fault (a fault only ever slows), and the
    target's cgroup cannot vanish under the fault."""
    own = "/sys/fs/cgroup/cpu/fltest-own"
    os.mkdir(own)
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        open(f"{own}/cpu.cfs_period_us", "w").write("10000")
        open(f"{own}/cpu.cfs_quota_us", "w").write("2000")
        open(f"{own}/cgroup.procs", "w").write(str(p.pid))
        active = apply(CpuContention(LocalNode("local"), [p.pid], 0.8), 30)
        try:
            assert active.facts["cgroup"].startswith(own + "/faultlab-")
            assert cpu_rate(p.pid, 1.5) < 0.26
            with pytest.raises(OSError):
                os.rmdir(own)  # busy: it holds the faultlab cgroup
        finally:
            assert active.revert() == "reverted"
        assert "fltest-own" in open(f"/proc/{p.pid}/cgroup").read()
    finally:
        p.kill()
        p.wait()
        os.rmdir(own)


def test_pause_refuses_a_process_already_stopped(busy_loop, no_residue):
    os.kill(busy_loop.pid, signal.SIGSTOP)
    try:
        time.sleep(0.1)
        with pytest.raises(Refused, match="already stopped"):
            apply(ProcessPause(LocalNode("local"), busy_loop.pid, 0.1, 0.3, 10), 10)
        assert open(f"/proc/{busy_loop.pid}/stat").read().rpartition(")")[2].split()[0] in ("T", "t")
    finally:
        os.kill(busy_loop.pid, signal.SIGCONT)


@needs_root
def test_testbed_lease_teardown_ends_processes_that_ignore_sigterm(no_residue):
    """The teardown a testbed lease's watchdog runs when its controller died: a process
    left inside a faultlab namespace that ignores SIGTERM (a rank blocked in a
    collective whose peers are gone) is killed after the grace, then the namespaces and
    links go. Nothing outside the namespaces is touched."""
    from faultlab.nodes.testbed import NetnsTestbed

    tb = NetnsTestbed(2).up()
    outside = subprocess.Popen(["sleep", "60"])  # same command, not in a namespace
    n0 = tb.nodes[0]
    stuck = None
    try:
        stuck = subprocess.Popen(["ip", "netns", "exec", n0.netns, "sh", "-c", "trap '' TERM; sleep 60 & wait; sleep 60"])
        deadline = time.time() + 10
        while not subprocess.run(["ip", "netns", "pids", n0.netns], capture_output=True, text=True).stdout.strip():
            assert time.time() < deadline, "the process never joined the namespace"
            time.sleep(0.05)
        t0 = time.time()
        for argv in tb.teardown_argv():  # as the watchdog runs them: each may find its object gone
            cp = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
            assert cp.returncode == 0 or "Cannot find device" in cp.stderr, (argv, cp.stderr)
        assert stuck.wait(timeout=10) == -signal.SIGKILL
        assert time.time() - t0 < 15
        assert subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.count(n0.netns) == 0
        assert outside.poll() is None  # the same command outside our namespaces lives on
    finally:
        outside.kill()
        outside.wait()
        for ns in [n.netns for n in tb.nodes]:  # on failure: what the test started in them
            for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
                os.kill(int(pid), signal.SIGKILL)
        if stuck is not None and stuck.poll() is None:
            import psutil

            for child in psutil.Process(stuck.pid).children(recursive=True):
                child.kill()
            stuck.kill()
        if stuck is not None:
            stuck.wait()
        tb.down()


def test_tc_handles_are_allocated_not_derived():
    from faultlab.injectors.nic import allocate_handles, taken_handles

    assert allocate_handles("nic-abc123", set()) == ("fabc:", "eabc:")
    assert allocate_handles("nic-abc456", {"abc"}) == ("fabd:", "eabd:")
    assert allocate_handles("nic-fff000", {"fff"}) == ("f000:", "e000:")
    lines = ["ip netns exec n0 tc qdisc del dev fleth0 root handle fabc:", "tc qdisc del dev x parent f001:1 handle e123: netem"]
    assert taken_handles(lines) == {"abc", "123"}
    with pytest.raises(Refused, match="4096"):
        allocate_handles("nic-000000", {f"{i:03x}" for i in range(4096)})


@needs_root
def test_two_faults_sharing_three_hex_digits_never_share_a_handle(testbed2, no_residue):
    """Fault A's state is gone but its watchdog (holding its revert commands) still
    lives, its record lost; fault B, whose id shares A's first three hex digits, goes
    on the same interface. B gets a handle of its own, never A's ``fabc:``, so A's
    late revert cannot delete B's root qdisc."""
    n0, _ = testbed2.nodes
    a = apply(NicSlow(n0, 10e6, fault_id="nic-abc123"), 60)
    b = None
    try:
        assert a.plan.fault_id == "nic-abc123" and a.injector.handle == "fabc:"
        a.lease.path.unlink()  # the record is lost; the watchdog still holds A's revert
        for cmd in a.plan.revert:  # A's state is cleaned out of band
            n0.run(list(cmd.argv), scope=cmd.scope)
        b = apply(NicSlow(n0, 20e6, fault_id="nic-abc456"), 60)
        assert b.injector.handle != "fabc:"
        for cmd in a.plan.revert:  # A's watchdog fires late
            n0.run(list(cmd.argv), scope=cmd.scope)
        q = n0.run(["tc", "qdisc", "show", "dev", n0.iface], scope="net").stdout
        assert f"qdisc tbf {b.injector.handle} root" in q, q
    finally:
        if b is not None:
            assert b.revert() == "reverted"
        a.lease.release()


def test_foreground_pause_ends_when_its_target_exits(no_residue):
    """The target of a 60 s foreground pause is SIGKILLed: the loop stops itself, and
    the inject says so and ends within seconds, exit 0, nothing left (never a fault
    held on nothing for the full 60 s)."""
    target = subprocess.Popen(["sleep", "300"])
    inj = subprocess.Popen([*FL, "inject", "--type", "process-pause", "--target", str(target.pid),
                            "--pause", "100ms", "--period", "300ms", "--duration", "60s"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        said = ""
        while not said.startswith("injected "):  # the CLI's progress lines go to stderr
            line = inj.stderr.readline()
            assert line, "inject ended before it printed 'injected'"
            said = line
        target.kill()
        target.wait()
        t0 = time.time()
        out, err = inj.communicate(timeout=20)
        assert inj.returncode == 0, (out, err)
        assert time.time() - t0 < 10
        told = " ".join(err.split())  # rich wraps lines at 80 columns in a pipe
        assert f"process {target.pid} exited" in told and "ending it" in told, err
        assert out.strip().endswith(": reverted"), out
    finally:
        if inj.poll() is None:
            inj.terminate()
            inj.communicate(timeout=30)
        if target.poll() is None:
            target.kill()
            target.wait()
