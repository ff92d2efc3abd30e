"""Chaos test of the injectors themselves: randomized inject / verify / revert cycles
through the real CLI.

Some cycles have the controller killed by SIGKILL at a random moment, some signal
storms (1-5 SIGINT/SIGTERM at random moments of inject, verify and revert), some the
lease record deleted or truncated while the fault runs, some a full lease folder; each
exit code is checked against the state left at that moment (``judge``), and the residue
after every lease has ended must be empty.

Used by ``tests/lifecycle/test_chaos.py`` (a short run in CI) and ``perf/chaos.py`` (200 cycles:
50 with SIGKILL, 50 storms). Targets are test hosts of its own: a 2-node netns testbed, a
busy-loop process, and (for gc-storm) a process running the in-workload agent.
Everything it starts it ends by PID.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from faultlab import procid, workdirs
from faultlab.doctor import diagnose
from faultlab.injectors import FAULT_TYPES
from faultlab.lifecycle.hostview import cgroups_named
from faultlab.nodes import LocalNode, NetnsTestbed

FL = [sys.executable, "-P", "-m", "faultlab.cli"]  # -P: the working folder is not on sys.path


@dataclass
class Targets:
    """What the faults hit: netns nodes, a busy process, an agent process, a path."""

    netns: list[str]
    busy_pid: int
    agent_pid: int | None
    io_path: str
    procs: list[subprocess.Popen] = field(default_factory=list)
    #: the fault ids this run made (see ``_FaultIds``); None: count every faultlab cgroup
    fault_ids: set[str] | None = None


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

    rep = diagnose(LocalNode("local"))["types"]
    return [t for t in FAULT_TYPES if rep.get(t, {}).get("ok")]


#: a faultlab cgroup's name: ``faultlab-<fault id>``
_CGROUP_ID = re.compile(r"^faultlab-([a-z]+-[0-9a-f]{4,12})$")
#: a fault id in a controller's output
_FAULT_ID = re.compile(r"\b([a-z]+-[0-9a-f]{6})\b")


def _ours(t: Targets, cg: Path) -> bool:
    """Whether faultlab cgroup ``cg`` is this run's: its fault id is one the run made
    (``t.fault_ids``), or it holds one of the run's targets. Another faultlab on the
    host (a test beside the run) makes cgroups of its own that are not this run's residue."""
    if t.fault_ids is None:
        return True
    m = _CGROUP_ID.match(cg.name)
    if m and m.group(1) in t.fault_ids:
        return True
    for name in ("cgroup.procs", "tasks"):
        try:
            pids = (cg / name).read_text().split()
        except OSError:
            continue
        if str(t.busy_pid) in pids or (t.agent_pid and str(t.agent_pid) in pids):
            return True
    return False


class _FaultIds(threading.Thread):
    """Collects the fault ids of the records in the run's lease folders every 10 ms
    into ``ids`` (a record exists from before a fault's first inject command until it
    is released, so every fault that applied anything is seen); ids named in a
    controller's output are added by the caller."""

    def __init__(self, dirs: list[Path], ids: set[str]):
        super().__init__(daemon=True)
        self.dirs, self.ids, self.done = dirs, ids, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.01):
            for d in self.dirs:
                try:
                    names = os.listdir(d)
                except OSError:
                    continue
                self.ids.update(n.split(".", 1)[0] for n in names if n.endswith(".json") and not n.startswith("."))


def residue(t: Targets, lease_dir: Path) -> list[str]:
    """Everything faultlab-made still present on the targets (empty: clean): qdiscs and
    devices in the run's netns nodes, its faultlab cgroups (``_ours``), a stopped or
    gone target, files in its lease folder, processes started with it as their lease
    folder, gc-storm agent files."""
    left = []
    for ns in t.netns:
        q = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "show"], capture_output=True, text=True).stdout
        for line in q.splitlines():
            if re.search(r"qdisc \w+ [ef][0-9a-f]{3}: ", line) or " ingress " in line:
                left.append(f"{ns}: {line.strip()}")
        links = subprocess.run(["ip", "-n", ns, "-br", "link"], capture_output=True, text=True).stdout
        left += [f"{ns}: link {ln.split()[0]}" for ln in links.splitlines() if ln.startswith(("flifb", "flprb"))]
    for p in cgroups_named("faultlab-"):
        if _ours(t, p):
            left.append(f"cgroup {p}")
    for pid in (t.busy_pid, t.agent_pid):
        if pid:
            fields = procid.read_stat(pid)
            st = fields[0] if fields else "gone"
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


def _wait_clean(t: Targets, lease_dirs: list[Path], deadline: float) -> list[str]:
    left = [x for d in lease_dirs for x in residue(t, d)]
    while left and time.time() < deadline:
        time.sleep(0.25)
        left = [x for d in lease_dirs for x in residue(t, d)]
    return sorted(set(left))


#: what a cycle does to its controller or its lease (see ``plan_cycles``)
ACTIONS = ("plain", "sigkill", "storm", "lease-deleted", "lease-truncated", "full-folder")


def plan_cycles(rng: random.Random, cycles: int, kills: int, storms: int, damaged: int, full: int) -> list[str]:
    """One action per cycle, seeded: ``kills`` SIGKILLs of the controller, ``storms``
    signal storms (1-5 SIGINT/SIGTERM at random moments of inject, verify and revert),
    ``damaged`` lease records deleted or truncated while the fault runs, ``full``
    injects into a full lease folder; the rest plain (some with one SIGTERM)."""
    acts = (["sigkill"] * kills + ["storm"] * storms + [rng.choice(["lease-deleted", "lease-truncated"]) for _ in range(damaged)]
            + ["full-folder"] * full)
    acts = acts[:cycles] + ["plain"] * max(0, cycles - len(acts))
    rng.shuffle(acts)
    return acts


def full_lease_dir(base: Path) -> tuple[Path, callable]:
    """A lease folder ``base/full/leases`` on a 16 KiB tmpfs mounted at ``base/full`` and
    filled to the last byte, so the first lease write fails with ENOSPC; returns the folder
    and a callable that unmounts it. Root only (mount); raises ``CalledProcessError`` when
    the mount fails. Used by the full-folder cycles here and by ``tests/lifecycle/test_fault_always_ends.py``."""
    m = base / "full"
    m.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k,mode=0700", "tmpfs", str(m)], check=True)
    (m / "leases").mkdir(mode=0o755)
    fd = os.open(m / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    return m / "leases", lambda: subprocess.run(["umount", str(m)], capture_output=True)


def _storm(p: subprocess.Popen, rng: random.Random, duration: float) -> int:
    """1-5 SIGINT/SIGTERM at random moments over the controller's life."""
    n = rng.randint(1, 5)
    time.sleep(rng.uniform(0.0, duration + 1.5))
    for _ in range(n):
        try:
            p.send_signal(rng.choice([signal.SIGINT, signal.SIGTERM]))
        except ProcessLookupError:
            break
        time.sleep(rng.choice([0.0, 0.01, rng.uniform(0.0, 0.5)]))
    return n


def _damage_lease(lease_dir: Path, how: str, p: subprocess.Popen) -> bool:
    """Delete or truncate the record of the controller's fault once it is written."""
    end = time.time() + 15
    while time.time() < end and p.poll() is None:
        recs = [f for f in lease_dir.glob("*.json")]
        if recs:
            try:
                os.unlink(recs[0]) if how == "lease-deleted" else os.truncate(recs[0], 0)
                return True
            except OSError:
                return False
        time.sleep(0.02)
    return False


#: where faultlab's own code lives: a traceback through none of these came before it ran
_OWN_CODE = re.compile(r'File "[^"]*/(?:faultlab|injectors|labeler|benchmarks)/[^"/]+\.py"')


def before_faultlab_ran(err: str) -> bool:
    """Whether ``err`` is Python's own KeyboardInterrupt from before faultlab's code
    could install a handler (interpreter start: ``site``, ``.pth`` files, ``runpy``
    finding ``faultlab.cli``): a traceback ending in ``KeyboardInterrupt`` with no
    frame in faultlab's sources.

    Nothing can have been applied then; the exit is non-zero (1 or -SIGINT). A SIGINT
    that comes once ``faultlab.cli`` runs ends it quietly (SIG_DFL until the inject's
    own handlers)."""
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    return bool(lines) and lines[-1].strip() == "KeyboardInterrupt" and "Traceback" in err and not _OWN_CODE.search(err)


def judge(rc: int | None, err: str, left_at_exit: list[str], action: str) -> str | None:
    """Why the exit code does not match the state left (None: it matches). 0 only when
    nothing faultlab made remains at exit; a non-zero exit leaving something must say
    it was handed to the lease or not fully reverted; SIGKILL may leave what its lease
    ends; a full lease folder is a one-line error naming FAULTLAB_LEASE_DIR."""
    if action == "full-folder":
        lines = [ln for ln in err.splitlines() if ln.strip()]
        if rc == 0 or len(lines) != 1 or "FAULTLAB_LEASE_DIR" not in lines[0]:
            return f"full lease folder: rc={rc}, stderr {err.strip()[-200:]!r}"
        return f"full lease folder left {left_at_exit}" if left_at_exit else None
    if action == "sigkill" and rc == -signal.SIGKILL:
        return None
    if before_faultlab_ran(err) and rc != 0:
        return f"interrupted before faultlab ran, yet {left_at_exit} left" if left_at_exit else None
    if "Traceback" in err:
        return f"traceback: {err.strip()[-300:]}"
    if rc == 0:
        return f"exit 0 with {left_at_exit} left" if left_at_exit else None
    if left_at_exit and "handed to its lease" not in err and "not fully reverted" not in err:
        return f"rc={rc} left {left_at_exit} without saying so: {err.strip()[-200:]!r}"
    return None


#: the prefix of a chaos run's state folder in the temporary folder
STATE_PREFIX = "faultlab-chaos-"


def state_folder() -> Path:
    """A fresh state folder for this chaos run in the temporary folder, named for this
    process (faultlab.workdirs); those of chaos runs killed before their clean-up (their
    maker gone) are removed first."""
    workdirs.sweep(tempfile.gettempdir(), STATE_PREFIX)
    return Path(workdirs.make(tempfile.gettempdir(), STATE_PREFIX))


def run_chaos(cycles: int, kills: int, seed: int = 0, *, storms: int = 0, damaged: int = 0, full: int = 0,
              types: list[str] | None = None, log=print) -> dict:
    """Run ``cycles`` random fault cycles through the CLI: ``kills`` with the controller
    SIGKILLed at a random moment, ``storms`` with 1-5 SIGINT/SIGTERM at random moments,
    ``damaged`` with the lease record deleted or truncated while the fault runs,
    ``full`` into a full lease folder (see ``plan_cycles``).

    Returns a report: cycles per type and action, outcomes (exit codes), ``mismatches``
    (an exit code that does not match the state left, see ``judge``), the residue left
    once every lease has ended (must be empty), errors, and wall time (s). Needs root
    for nic-slow, cgroup types and the full folder (types the machine cannot run are
    skipped)."""

    rng = random.Random(seed)
    types = types or runnable_types()
    state = state_folder()
    lease_dir = state / "leases"
    env = dict(os.environ, FAULTLAB_LEASE_DIR=str(lease_dir), FAULTLAB_STATE_DIR=str(state), FAULTLAB_AGENT_DIR=str(state / "agents"))
    old_env = {k: os.environ.get(k) for k in ("FAULTLAB_LEASE_DIR", "FAULTLAB_STATE_DIR", "FAULTLAB_AGENT_DIR")}
    os.environ.update({k: env[k] for k in old_env})
    report: dict = {"cycles": 0, "killed": 0, "storms": 0, "signals_sent": 0, "damaged": 0, "full_folder": 0, "unverified": 0, "by_type": {},
                    "by_action": {}, "outcomes": {}, "mismatches": [], "residue": [], "errors": [], "seed": seed}
    t0 = time.time()
    tb = NetnsTestbed(2).up() if "nic-slow" in types else None
    procs: list[subprocess.Popen] = []
    full_dir, unmount = (None, None)
    ids = None
    try:
        if full:
            full_dir, unmount = full_lease_dir(state)
        dirs = [lease_dir] + ([full_dir] if full_dir else [])
        t = _start_targets(types, env, tb, state, procs)
        t.fault_ids = set()
        ids = _FaultIds(dirs, t.fault_ids)
        ids.start()
        for i, action in enumerate(plan_cycles(rng, cycles, kills, storms, damaged, full)):
            ftype = rng.choice(types)
            args = _options(ftype, rng, t)
            if args is None:
                continue
            duration = rng.uniform(0.8, 2.0)
            argv = [*FL, "inject", "--type", ftype, *args, "--duration", f"{duration:.2f}s", "--grace", "0s", "--json"]
            cenv = dict(env, FAULTLAB_LEASE_DIR=str(full_dir)) if action == "full-folder" else env
            p = subprocess.Popen(argv, env=cenv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
            _perturb(p, action, rng, duration, lease_dir, report)
            out, err = p.communicate(timeout=180)
            t.fault_ids.update(_FAULT_ID.findall(out + err))
            left_now = sorted(set(x for d in dirs for x in residue(t, d)))
            bad = judge(p.returncode, err, left_now, action)
            # every lease ends by its deadline (at most the duration from now), then the
            # watchdog needs a moment
            left = _wait_clean(t, dirs, time.time() + duration + 8)
            _record_cycle(report, i, ftype, action, args, p.returncode, err, left_now, left, bad)
            if left:
                log(f"cycle {i} {ftype} {action}: LEFT {left}")
                subprocess.run([*FL, "recover"], env=env, capture_output=True)
            else:
                log(f"cycle {i:3d} {ftype:15s} {action:15s} rc={p.returncode} {'MISMATCH ' + bad if bad else 'clean'}")
    finally:
        if ids is not None:
            ids.done.set()
        for p in procs:
            p.kill()
            p.wait()
        subprocess.run([*FL, "recover"], env=env, capture_output=True)
        if tb:
            tb.down()
        if unmount:
            unmount()
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        subprocess.run(["rm", "-rf", str(state)])
    report["wall_s"] = round(time.time() - t0, 1)
    return report


def _start_targets(types: list[str], env: dict, tb, state: Path, procs: list) -> Targets:
    """The processes faults target, appended to ``procs`` as they start (so a failure
    half-way still ends them): a busy loop, and for gc-storm a process running the
    faultlab agent (given a second to start it)."""
    busy = subprocess.Popen([sys.executable, "-P", "-c", "while True: pass"], env=env)
    procs.append(busy)
    agent_pid = None
    if "gc-storm" in types:
        code = "import time\nfrom faultlab.benchmarks import agent\nagent.start()\nwhile True:\n    sum(range(10000))\n"
        ag = subprocess.Popen([sys.executable, "-P", "-c", code], env=env)
        procs.append(ag)
        agent_pid = ag.pid
        time.sleep(1.0)
    return Targets([n.netns for n in tb.nodes] if tb else [], busy.pid, agent_pid, str(state))


def _perturb(p: subprocess.Popen, action: str, rng: random.Random, duration: float, lease_dir: Path, report: dict) -> None:
    """What the cycle's ``action`` does to the running ``faultlab inject`` ``p``: a
    SIGKILL at a random moment, a signal storm, a damaged lease record; a plain cycle
    gets a SIGTERM part-way 15% of the time. Counts it in ``report``."""
    if action == "sigkill":
        time.sleep(rng.uniform(0.0, duration + 1.5))
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        report["killed"] += 1
    elif action == "storm":
        report["signals_sent"] += _storm(p, rng, duration)
        report["storms"] += 1
    elif action.startswith("lease-"):
        report["damaged"] += _damage_lease(lease_dir, action, p)
    elif action == "full-folder":
        report["full_folder"] += 1
    elif rng.random() < 0.15:
        time.sleep(rng.uniform(0.5, duration))
        p.send_signal(signal.SIGTERM)


def _bump(d: dict, key: str) -> None:
    d[key] = d.get(key, 0) + 1


def _record_cycle(report: dict, i: int, ftype: str, action: str, args: list[str], rc: int, err: str,
                  left_now: list[str], left: list[str], bad: str | None) -> None:
    """Count one finished cycle in ``report``: its type, action and exit code, an exit
    code that does not match the state left (``bad``), an unverified fault, a record
    damaged before it was read back, an error of a cycle that should have gone clean,
    and what was ``left`` once its lease had ended."""
    if bad:
        report["mismatches"].append({"cycle": i, "type": ftype, "action": action, "why": bad})
    report["cycles"] += 1
    _bump(report["by_type"], ftype)
    _bump(report["by_action"], action)
    _bump(report["outcomes"], f"{action} rc={rc}")
    if before_faultlab_ran(err):
        _bump(report["outcomes"], "interrupted at interpreter start (before faultlab ran)")
    if rc == 3 and "verify:" in err:
        report["unverified"] += 1  # reverted and said so: the measured check failed (a loaded machine)
    elif action.startswith("lease-") and "FAULTLAB_LEASE_DIR" in err and not left_now:
        _bump(report["outcomes"], "record damaged before read-back (refused, nothing applied)")
    elif rc == 1 and "ended at its deadline before the fault was in force" in err and not left_now:
        # a lease shorter than the inject took on a loaded machine: said so, nothing left
        _bump(report["outcomes"], "lease ended before the fault was in force (reverted, said so)")
    elif (rc not in (0, -signal.SIGKILL, -signal.SIGTERM, -signal.SIGINT) and action in ("plain", "lease-deleted", "lease-truncated")
          and "handed to its lease" not in err):
        report["errors"].append(f"cycle {i} {ftype} {action} {' '.join(args)}: rc={rc} {err.strip()[-300:]}")
    if left:
        report["residue"].append({"cycle": i, "type": ftype, "action": action, "left": left})


def main(argv: list[str] | None = None) -> int:

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--kills", type=int, default=50, help="cycles whose controller is SIGKILLed")
    ap.add_argument("--storms", type=int, default=50, help="cycles with 1-5 SIGINT/SIGTERM at random moments")
    ap.add_argument("--damaged", type=int, default=20, help="cycles whose lease record is deleted or truncated")
    ap.add_argument("--full", type=int, default=10, help="cycles into a full lease folder")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    rep = run_chaos(a.cycles, a.kills, a.seed, storms=a.storms, damaged=a.damaged, full=a.full)
    print(json.dumps(rep, indent=1))
    return 0 if not rep["residue"] and not rep["errors"] and not rep["mismatches"] else 1


if __name__ == "__main__":
    sys.exit(main())
