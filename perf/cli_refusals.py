"""The test suite's CLI refusals (tests/cli/test_commands.py BAD: bad input that
faultlab refuses in one line) run as the tests run them: one ``faultlab`` process per
command line (``tests.helpers.fl``), against all of them in one child process through
the same entry point (``tests.helpers.fl_many``). Prints both wall times side by side,
their ratio, and whether every command got the same exit code and output both ways
(an interface list in an error names this host's links, which may change between the
two passes: such a line is shown, not counted as a difference).

    python3 perf/cli_refusals.py [--repeat 1]
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests package of this checkout

from tests.cli.test_commands import BAD  # noqa: E402  (needs the checkout on sys.path)
from tests.helpers import fl, fl_many  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="passes of each way (the best is shown)")
    a = ap.parse_args()
    state = tempfile.mkdtemp(prefix="fl-perf-cli-")
    os.environ.setdefault("FAULTLAB_LEASE_DIR", str(Path(state) / "leases"))
    os.environ.setdefault("FAULTLAB_STATE_DIR", state)
    argvs = [argv for argv, _ in BAD]
    one, many = [], []
    for _ in range(a.repeat):
        t = time.perf_counter()
        each = [fl(*argv) for argv in argvs]
        one.append(time.perf_counter() - t)
        t = time.perf_counter()
        batch = fl_many(argvs)
        many.append(time.perf_counter() - t)
    differ = [" ".join(x.args[3:]) for x, y in zip(each, batch) if (x.returncode, x.stdout, x.stderr) != (y.returncode, y.stdout, y.stderr)]
    print(f"{len(argvs)} refused command lines, best of {a.repeat}:")
    print(f"  one process each (fl)       {min(one):8.1f} s")
    print(f"  one child process (fl_many) {min(many):8.1f} s")
    print(f"  ratio                       {min(one) / min(many):8.1f}x")
    print(f"  commands whose exit code or output differ: {len(differ)}")
    for d in differ:
        print(f"    {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
