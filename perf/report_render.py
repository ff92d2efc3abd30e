"""Render time and size of the HTML report and the Perfetto export for a 4-rank,
5-minute run (the issue's bar: report <= 10 s and <= 5 MB).

    python3 perf/report_render.py [--ranks 4] [--duration 300] [--out DIR]

The run is synthetic (faultlab.report.synthetic: drawn step times, real labels), of
the shape of a real one: ~26 ms steps, host metrics once a second, per-peer TCP RTT.
Each figure is the median of --repeat renders. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--duration", type=float, default=300.0, help="seconds of training")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="folder for the run (default: a temporary one)")
    a = ap.parse_args()
    from faultlab.report import export_trace, write_report
    from faultlab.report.synthetic import make_run

    base = a.out or Path(tempfile.mkdtemp(prefix="faultlab-report-perf-"))
    run = make_run(base / "run", ranks=a.ranks, duration_s=a.duration)
    import pandas as pd

    steps = pd.read_parquet(run / "steps.parquet")
    rep, exp = [], []
    for _ in range(a.repeat):
        t = time.perf_counter()
        html = write_report(run)
        rep.append(time.perf_counter() - t)
        t = time.perf_counter()
        trace = export_trace(run)
        exp.append(time.perf_counter() - t)
    print(json.dumps({
        "ranks": a.ranks, "duration_s": a.duration, "steps": int(steps["step"].nunique()), "step_rows": len(steps),
        "report_render_s": round(statistics.median(rep), 2), "report_mb": round(html.stat().st_size / 1e6, 2),
        "export_s": round(statistics.median(exp), 2), "trace_mb": round(trace.stat().st_size / 1e6, 1),
        "report_ok": statistics.median(rep) <= 10 and html.stat().st_size <= 5e6, "run_dir": str(run),
    }, indent=1))


if __name__ == "__main__":
    main()
