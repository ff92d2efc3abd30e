"""Time and peak memory of ``faultlab leaderboard`` (every available detector) on the
two published datasets at 1x and 4x the runs, printed side by side with their ratios.

    python3 perf/leaderboard.py [--split test|all] [--mode offline|replay] [DATASET ...]

4x: each dataset copied into a temporary one whose runs are its own four times over
(each copy's run id suffixed ``-cN`` in the folder names, splits.json, runs.json and
every table's ``run_id`` column; a fresh MANIFEST.sha256), so the work grows 4x and
everything else stays the same. Each leaderboard runs as the real CLI in its own
process; its wall time, CPU time (user + system: what a shared machine's load does
not inflate) and peak RSS (``os.wait4``'s ``ru_maxrss``) are measured. The
leaderboard keeps only per-run counts, so peak memory should stay flat (4x/1x ~ 1)
while time grows ~4x. Target: every detector offline at 1x in <= 120 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = [ROOT / "datasets" / "faultlab-hw-v1", ROOT / "datasets" / "faultlab-sw-v1"]
TARGET_S = 120.0


def copy_times(src: Path, dst: Path, n: int) -> Path:
    """``src`` as a dataset whose runs appear ``n`` times (copies ``-c1`` .. ``-c{n-1}``)."""
    from faultlab.datasets import manifest  # the repository's package, after sys.path is set

    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("data", manifest.NAME))
    splits = json.loads((src / "splits.json").read_text())
    runs = json.loads((src / "runs.json").read_text())
    ids = lambda rid, c: rid if c == 0 else f"{rid}-c{c}"  # noqa: E731
    for table_dir in (src / "data").iterdir():
        for part in table_dir.iterdir():
            rid = part.name.split("=", 1)[1]
            t = pq.read_table(part / "part-0.parquet")
            for c in range(n):
                out = dst / "data" / table_dir.name / f"run={ids(rid, c)}"
                out.mkdir(parents=True)
                tc = t
                if "run_id" in t.column_names:
                    tc = t.set_column(t.column_names.index("run_id"), "run_id", pa.array([ids(rid, c)] * t.num_rows, pa.string()))
                pq.write_table(tc, out / "part-0.parquet")
    for s in ("train", "test"):
        splits[s] = [ids(r, c) for c in range(n) for r in splits[s]]
    (dst / "splits.json").write_text(json.dumps(splits, indent=1))
    (dst / "runs.json").write_text(json.dumps([{**r, "run_id": ids(r["run_id"], c)} for c in range(n) for r in runs], indent=1))
    files = [p for p in dst.rglob("*") if p.is_file()]
    (dst / manifest.NAME).write_text(manifest.text({p.relative_to(dst).as_posix(): manifest.sha256(p) for p in files}))
    return dst


def measure(datasets: list[Path], split: str, mode: str, out: Path) -> tuple[float, float, float, dict]:
    """(wall s, CPU s, peak RSS MiB, leaderboard.json) of one ``faultlab leaderboard`` process."""
    argv = [sys.executable, "-m", "faultlab.cli", "leaderboard", "--split", split, "--mode", mode, "--out", str(out)]
    for d in datasets:
        argv += ["--dataset", str(d)]
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"faultlab leaderboard failed ({p.returncode}): {err.decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0, json.loads((out / "leaderboard.json").read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("datasets", nargs="*", type=Path, default=DEFAULT)
    ap.add_argument("--split", default="test", choices=["test", "train", "all"])
    ap.add_argument("--mode", default="offline", choices=["offline", "replay"])
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    rows = []
    with tempfile.TemporaryDirectory(prefix="fl-lbperf-") as tmp:
        tmp = Path(tmp)
        four = [copy_times(d, tmp / "x4" / d.name, 4) for d in a.datasets]
        for scale, sets in (("1x", a.datasets), ("4x", four)):
            wall, cpu, rss, board = measure(sets, a.split, a.mode, tmp / f"out-{scale}")
            runs = sum(d["n_runs"] for d in board["datasets"])
            dets = len(board["datasets"][0]["rows"])
            rows.append((scale, runs, dets, wall, cpu, rss))
    print(f"faultlab leaderboard, {a.mode}, {a.split} split, on {', '.join(d.name for d in a.datasets)} (one process each, this machine: {os.cpu_count()} cores)")
    print(f"{'scale':6} {'runs':>5} {'detectors':>9} {'wall s':>8} {'CPU s':>7} {'peak RSS MiB':>13}")
    for scale, runs, dets, wall, cpu, rss in rows:
        print(f"{scale:6} {runs:5d} {dets:9d} {wall:8.1f} {cpu:7.1f} {rss:13.0f}")
    (_, r1, _, w1, c1, m1), (_, r4, _, w4, c4, m4) = rows
    print(f"ratio 4x/1x: runs {r4 / r1:.2f}, wall {w4 / w1:.2f}, CPU {c4 / c1:.2f}, peak RSS {m4 / m1:.2f}")
    print(f"1x wall {w1:.1f} s vs target {TARGET_S:.0f} s: {'met' if w1 <= TARGET_S else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
