"""Chaos test of the injectors themselves: randomized inject / verify / revert cycles
through the real CLI, some with the controller killed by SIGKILL at a random moment,
then a residue check after the deadline plus a grace period.

Used by ``tests/test_chaos.py`` (a short run in CI) and ``perf/chaos.py`` (200 cycles,
50 with SIGKILL). Targets are test hosts of its own: a 2-node netns testbed, a
busy-loop process, and (for gc-storm) a process running the in-workload agent.
Everything it starts it ends by PID.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

FL = [sys.executable, "-m", "faultlab.cli"]


@dataclass
class Targets:
    """What the faults hit: netns nodes, a busy process, an agent process, a path."""

    netns: list[str]
    busy_pid: int
    agent_pid: int | None
    io_path: str
    procs: list[subprocess.Popen] = field(default_factory=list)


def _options(ftype: str, rng: random.Random, t: Targets) -> list[str] | None:
    """CLI arguments of one random fault of ``ftype`` on the targets (None: skip)."""
    if ftype == "nic-slow":
        return ["--node", f"netns:{rng.choice(t.netns)}", "--rate", f"{rng.choice([5, 10, 20, 50, 100, 200])}mbit"]
    if ftype == "cpu-contention":
        if rng.random() < 0.3:
            return ["--target", str(t.busy_pid), "--mode", "stress", "--workers", "1"]
        return ["--target", str(t.busy_pid), "--cpu-fraction", f"{rng.uniform(0.1, 0.9):.2f}"]
    if ftype == "process-pause":
        return ["--target", str(t.busy_pid), "--pause", f"{rng.choice([50, 100, 200])}ms", "--period", "300ms"]
    if ftype == "io-slow":
        return ["--target", str(t.busy_pid), "--path", t.io_path, "--write-bps", f"{rng.choice([1, 5, 20])}mb"]
    if ftype == "mem-bw":
        return ["--target", str(t.busy_pid), "--workers", "1"]
    if ftype == "gc-storm" and t.agent_pid:
        return ["--target", str(t.agent_pid), "--gc-rate", f"{rng.choice([2, 5])}", "--garbage-mb", "10"]
    return None


def runnable_types() -> list[str]:
    """Fault types registered and supported on this machine (per ``faultlab doctor``)."""
    from faultlab.doctor import diagnose
    from faultlab.injectors import FAULT_TYPES
    from faultlab.nodes import LocalNode

    rep = diagnose(LocalNode("local"))["types"]
    return [t for t in FAULT_TYPES if rep.get(t, {}).get("ok")]


def residue(t: Targets, lease_dir: Path) -> list[str]:
    """Everything faultlab-made still present on the targets (empty: clean)."""
    left = []
    for ns in t.netns:
        q = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "show"], capture_output=True, text=True).stdout
        for line in q.splitlines():
            if re.search(r"qdisc \w+ [ef][0-9a-f]{3}: ", line) or " ingress " in line:
                left.append(f"{ns}: {line.strip()}")
        links = subprocess.run(["ip", "-n", ns, "-br", "link"], capture_output=True, text=True).stdout
        left += [f"{ns}: link {ln.split()[0]}" for ln in links.splitlines() if ln.startswith(("flifb", "flprb"))]
    for p in Path("/sys/fs/cgroup").glob("**/faultlab-*"):
        left.append(f"cgroup {p}")
    for pid in (t.busy_pid, t.agent_pid):
        if pid:
            try:
                st = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
            except OSError:
                st = "gone"
            if st in ("T", "t", "gone"):
                left.append(f"target {pid} state {st}")
    if lease_dir.exists():
        left += [f"lease file {p.name}" for p in lease_dir.iterdir()]
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            env = (p / "environ").read_bytes()
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"FAULTLAB_LEASE_DIR={lease_dir}".encode() in env.split(b"\0") and any(
            k in cmd for k in ("faultlab-watchdog", "faultlab-pause", "faultlab-stress", "faultlab-membw", "faultlab.cli")
        ):
            left.append(f"process {p.name} {cmd[:60]}")
    agent_dir = os.environ.get("FAULTLAB_AGENT_DIR")
    if agent_dir and Path(agent_dir).exists():
        left += [f"agent file {p.name}" for p in Path(agent_dir).iterdir() if "gc-storm" in p.name]
    return left


def _wait_clean(t: Targets, lease_dir: Path, deadline: float) -> list[str]:
    left = residue(t, lease_dir)
    while left and time.time() < deadline:
        time.sleep(0.25)
        left = residue(t, lease_dir)
    return left


def run_chaos(cycles: int, kills: int, seed: int = 0, *, types: list[str] | None = None, log=print) -> dict:
    """Run ``cycles`` random fault cycles, ``kills`` of them with the controller
    SIGKILLed at a random moment. Returns a report: cycles per type, outcomes, the
    residue found (must be empty), and wall time (s). Needs root for nic-slow and
    cgroup types (types the machine cannot run are skipped)."""
    from faultlab.nodes.testbed import NetnsTestbed

    rng = random.Random(seed)
    types = types or runnable_types()
    state = Path(tempfile.mkdtemp(prefix="faultlab-chaos-"))
    lease_dir = state / "leases"
    env = dict(os.environ, FAULTLAB_LEASE_DIR=str(lease_dir), FAULTLAB_STATE_DIR=str(state), FAULTLAB_AGENT_DIR=str(state / "agents"))
    old_env = {k: os.environ.get(k) for k in ("FAULTLAB_LEASE_DIR", "FAULTLAB_STATE_DIR", "FAULTLAB_AGENT_DIR")}
    os.environ.update({k: env[k] for k in old_env})
    report: dict = {"cycles": 0, "killed": 0, "by_type": {}, "outcomes": {}, "residue": [], "errors": [], "seed": seed}
    t0 = time.time()
    tb = NetnsTestbed(2).up() if "nic-slow" in types else None
    procs: list[subprocess.Popen] = []
    try:
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], env=env)
        procs.append(busy)
        agent_pid = None
        if "gc-storm" in types:
            code = "import time\nfrom faultlab.benchmarks import agent\nagent.start()\nwhile True:\n    sum(range(10000))\n"
            ag = subprocess.Popen([sys.executable, "-c", code], env=env)
            procs.append(ag)
            agent_pid = ag.pid
            time.sleep(1.0)
        t = Targets([n.netns for n in tb.nodes] if tb else [], busy.pid, agent_pid, str(state))
        kill_at = set(rng.sample(range(cycles), min(kills, cycles)))
        for i in range(cycles):
            ftype = rng.choice(types)
            args = _options(ftype, rng, t)
            if args is None:
                continue
            duration = rng.uniform(0.8, 2.0)
            argv = [*FL, "inject", "--type", ftype, *args, "--duration", f"{duration:.2f}s", "--grace", "0s", "--json"]
            p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
            if i in kill_at:
                time.sleep(rng.uniform(0.0, duration + 1.5))
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.communicate()
                outcome = "sigkill"
                report["killed"] += 1
                # the lease deadline is at most duration (+ start-up) from now; then the
                # watchdog needs a moment
                left = _wait_clean(t, lease_dir, time.time() + duration + 8)
            else:
                term = rng.random() < 0.15
                if term:
                    time.sleep(rng.uniform(0.5, duration))
                    p.send_signal(signal.SIGTERM)
                out, err = p.communicate(timeout=120)
                outcome = "sigterm" if term else "completed"
                if p.returncode not in (0, None, -signal.SIGTERM):
                    outcome = f"failed rc={p.returncode}"
                    report["errors"].append(f"cycle {i} {ftype} {' '.join(args)}: rc={p.returncode} {err.strip()[-300:]}")
                left = _wait_clean(t, lease_dir, time.time() + 5)
            report["cycles"] += 1
            report["by_type"][ftype] = report["by_type"].get(ftype, 0) + 1
            key = outcome.split(":")[0]
            report["outcomes"][key] = report["outcomes"].get(key, 0) + 1
            if left:
                report["residue"].append({"cycle": i, "type": ftype, "outcome": outcome, "left": left})
                log(f"cycle {i} {ftype} {outcome}: LEFT {left}")
                subprocess.run([*FL, "recover"], env=env, capture_output=True)
            else:
                log(f"cycle {i:3d} {ftype:15s} {outcome:10s} clean")
    finally:
        for p in procs:
            p.kill()
            p.wait()
        subprocess.run([*FL, "recover"], env=env, capture_output=True)
        if tb:
            tb.down()
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        subprocess.run(["rm", "-rf", str(state)])
    report["wall_s"] = round(time.time() - t0, 1)
    return report


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    rep = run_chaos(a.cycles, a.kills, a.seed)
    print(json.dumps(rep, indent=1))
    return 0 if not rep["residue"] and not rep["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
