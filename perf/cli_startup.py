"""Start-up time of the ``faultlab`` command: ``--help``, ``status --json`` and
``inject --dry-run --json``, each run as a user runs it (``python -m faultlab.cli``,
one process a command), side by side with the same command in a process that first
imports the labeler package (pandas, numpy, pyarrow), which is what each command costs
when the CLI imports every command module's dependencies at start-up.

    python3 perf/cli_startup.py [--repeat 10]

The two ways run interleaved (lean, loaded, lean, loaded, ...) so that other load on
the machine falls on both alike; prints for each command the median wall time and
the median CPU time (user + system) of the child process, both ways, and their
ratios, and whether each process imported pandas. One untimed process of each way
comes first, so that Python's compiled bytecode is cached as in CI; with
``PYTHONDONTWRITEBYTECODE`` set nothing is cached and every process compiles
faultlab's modules again (the script says which). Reads state only: status lists what
is in force, inject only plans (``--dry-run``).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: the commands timed (arguments of ``faultlab``)
COMMANDS = {
    "--help": ["--help"],
    "status --json": ["status", "--json"],
    "inject --dry-run": ["inject", "--type", "nic-slow", "--node", "local", "--target", "lo", "--rate", "50mbit",
                         "--dry-run", "--json"],
}

#: the CLI run as ``python -m faultlab.cli``; after it, whether pandas was imported goes to stderr
_RUN = r"""
import runpy, sys
{preload}
sys.argv = ["faultlab", *sys.argv[1:]]
try:
    runpy.run_module("faultlab.cli", run_name="__main__", alter_sys=True)
finally:
    sys.stderr.write("\npandas-imported=%s\n" % ("pandas" in sys.modules))
"""

#: the two ways: the CLI as it is, and after importing the labeler package first
WAYS = {"lean": _RUN.format(preload=""), "labeler loaded": _RUN.format(preload="import faultlab.labeler")}


def run_once(code: str, argv: list[str], env: dict) -> tuple[float, float, bool]:
    """(wall s, child CPU s, pandas imported) of one ``faultlab ARGV`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    cp = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=300)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cp.returncode != 0:
        raise SystemExit(f"faultlab {' '.join(argv)} exited {cp.returncode}: {cp.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, "pandas-imported=True" in cp.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10, help="processes of each command each way (the median is shown)")
    a = ap.parse_args()
    state = tempfile.mkdtemp(prefix="fl-perf-startup-")
    env = {**os.environ, "FAULTLAB_LEASE_DIR": str(Path(state) / "leases"), "FAULTLAB_STATE_DIR": state}
    cached = "no (PYTHONDONTWRITEBYTECODE is set)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "yes"
    print(f"faultlab start-up, median of {a.repeat} processes each ({sys.executable}); bytecode cached: {cached}")
    print(f"{'command':18} {'way':15} {'wall s':>8} {'cpu s':>8} {'pandas':>7}")
    for name, argv in COMMANDS.items():
        res = {way: [] for way in WAYS}
        for code in WAYS.values():  # untimed: writes the bytecode caches where Python may
            run_once(code, argv, env)
        for _ in range(a.repeat):
            for way, code in WAYS.items():
                res[way].append(run_once(code, argv, env))
        med = {way: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs), any(r[2] for r in rs))
               for way, rs in res.items()}
        for way, (wall, cpu, pandas) in med.items():
            print(f"{name:18} {way:15} {wall:8.3f} {cpu:8.3f} {'yes' if pandas else 'no':>7}")
        (lw, lc, _), (bw, bc, _) = med["lean"], med["labeler loaded"]
        print(f"{name:18} {'ratio':15} {bw / lw:7.2f}x {bc / lc:7.2f}x   (saved {bw - lw:.3f} s wall, {bc - lc:.3f} s cpu a process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
