"""A short chaos run: random inject/verify/revert cycles through the CLI over every
fault type this machine can run, some controllers SIGKILLed, some signal storms,
lease records deleted or truncated, a full lease folder; every exit code matches the
state left, zero residue after.
(perf/chaos.py runs the 200-cycle version.)"""

from __future__ import annotations

from tests.helpers import needs_root






@needs_root
def test_chaos_short_run_leaves_zero_residue():
    from faultlab.chaos import run_chaos

    rep = run_chaos(cycles=16, kills=3, seed=7, storms=5, damaged=3, full=2, log=lambda *_: None)
    assert rep["cycles"] >= 14 and rep["killed"] == 3 and rep["storms"] == 5 and rep["full_folder"] == 2
    assert rep["residue"] == [], rep["residue"]
    assert rep["mismatches"] == [], rep["mismatches"]
    assert rep["errors"] == [], rep["errors"]


# A real traceback of `python -m faultlab.cli inject ...` given SIGINT 20 ms after it
# started (perf/chaos.py seed 0 saw one): Python's own handler, in site's .pth files.
_AT_START = '''Traceback (most recent call last):
  File "<frozen site>", line 186, in addpackage
  File "<string>", line 1, in <module>
  File "/work/h1/.venv/lib/python3.11/site-packages/__editable___faultlab_0_1_0_finder.py", line 5, in <module>
    from importlib.util import spec_from_file_location
  File "<frozen importlib._bootstrap_external>", line 729, in _compile_bytecode
KeyboardInterrupt
'''


def test_judge_tells_an_interrupt_before_faultlab_ran_from_one_inside_it():
    from faultlab.chaos import before_faultlab_ran, judge

    inside = _AT_START.replace('  File "<string>"', '  File "/src/faultlab/cli.py", line 30, in <module>\n  File "<string>"')
    assert before_faultlab_ran(_AT_START) and not before_faultlab_ran(inside)
    assert judge(1, _AT_START, [], "storm") is None and judge(-2, _AT_START, [], "storm") is None
    assert judge(1, _AT_START, ["cgroup /sys/fs/cgroup/cpu/faultlab-cpu-abcdef"], "storm")  # something left: never fine
    assert judge(1, inside, [], "storm").startswith("traceback")


@needs_root
def test_residue_counts_only_the_runs_own_faultlab_cgroups(tmp_path):
    """A faultlab cgroup another faultlab on the host made (a test beside the run) is
    not the run's residue; one of a fault id the run made, or holding its target, is."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pytest

    from faultlab.chaos import Targets, residue

    base = Path("/sys/fs/cgroup/cpu")
    if not (base / "cpu.cfs_quota_us").exists():
        pytest.skip("needs the cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
    fid = f"cpu-{os.urandom(3).hex()}"
    cg = base / f"faultlab-{fid}"
    busy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    cg.mkdir()
    try:
        t = Targets([], busy.pid, None, str(tmp_path), fault_ids={"cpu-000000"})
        assert f"cgroup {cg}" not in residue(t, tmp_path / "leases")
        t.fault_ids.add(fid)
        assert f"cgroup {cg}" in residue(t, tmp_path / "leases")
        t.fault_ids.discard(fid)
        (cg / "cgroup.procs").write_text(str(busy.pid))
        assert f"cgroup {cg}" in residue(t, tmp_path / "leases")
    finally:
        busy.kill()
        busy.wait()
        cg.rmdir()
