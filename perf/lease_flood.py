"""Root's ``faultlab recover`` beside another user's lease folder of N made-up records
(valid records of faults that do not exist, written by nobody), timed for this
checkout and, with ``--before``, for another checkout's code, side by side with their
ratio. Each run is sandboxed (``tests.helpers.sandboxed_root_beside_records``: private
PID, mount and network namespaces, fresh tmpfs over faultlab's host-wide places), so
it sees only those records and never touches another fault on this host.

``--before`` is a folder that imports as ``faultlab`` of the other version, with its
``injectors``, ``labeler`` and ``benchmarks`` folders copied inside it as in the
installed package (``git archive REV faultlab injectors labeler benchmarks`` laid out
so); it goes first on that run's ``PYTHONPATH``.

    sudo python3 perf/lease_flood.py [--records 400] [--before /tmp/faultlab-old/pkg]
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests package of this checkout

from tests.helpers import sandboxed_root_beside_records  # noqa: E402  (needs the checkout on sys.path)


def timed_recover(n: int, pythonpath: str | None, timeout: float) -> tuple[float, int, int]:
    """(wall seconds, exit code, output lines) of root's recover beside ``n`` records."""
    env = {k: v for k, v in os.environ.items() if k != "FAULTLAB_LEASE_DIR"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    t = time.perf_counter()
    # from / : `python -m` puts the working folder first on sys.path, ahead of PYTHONPATH
    cp = sandboxed_root_beside_records(n, [sys.executable, "-m", "faultlab.cli", "recover"], env=env, timeout=timeout, cwd="/")
    return time.perf_counter() - t, cp.returncode, len((cp.stdout + cp.stderr).splitlines())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=400, help="made-up records in nobody's lease folder")
    ap.add_argument("--before", default=None, help="a folder that imports as the other version's faultlab")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds each recover may take")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("perf/lease_flood.py: run as root (namespaces, another user)", file=sys.stderr)
        return 2
    runs = ([("before", a.before)] if a.before else []) + [("this checkout", None)]
    got = {}
    for label, path in runs:
        got[label] = timed_recover(a.records, path, a.timeout)
        s, rc, lines = got[label]
        print(f"{label:>14}: recover beside {a.records} made-up records: {s:8.1f} s  (exit {rc}, {lines} output lines)", flush=True)
    if a.before:
        print(f"{'ratio':>14}: before / this checkout = {got['before'][0] / got['this checkout'][0]:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
