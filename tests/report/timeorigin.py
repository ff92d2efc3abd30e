"""The first fault's start as the HTML report and the Perfetto trace of one run show
it: both count from the run's first training step (one time origin), so the two agree
to the report's 0.1 s rounding."""

from __future__ import annotations

import json
import re
from pathlib import Path

from faultlab.report import export_trace, write_report


def first_fault_in_report_and_trace(run_dir: Path, tmp: Path) -> dict:
    """Write the report and the trace of ``run_dir`` under ``tmp`` and return, for the
    earliest fault in the trace: ``fault_id``, ``trace_s`` (its slice's ``ts``, s),
    ``report_s`` (its start in the report's faults table, s), and the run start as
    each shows it: ``trace_run_start_s`` (the origin instant's ``args.run_start_s``)
    and ``report_run_start`` (the report's "run start" row, or None)."""
    html = write_report(run_dir, tmp / "report.html").read_text()
    trace = json.loads(export_trace(run_dir, tmp / "trace.json").read_text())
    faults = [e for e in trace["traceEvents"] if e["ph"] == "X" and e.get("cat") == "fault"]
    first = min(faults, key=lambda e: e["ts"])
    fid = first["args"]["fault_id"]
    row = re.search(rf'<td class="mono">{re.escape(fid)}</td>.*?<td class="num">([+-]\d+\.\d)s</td>', html, re.S)
    origin = [e for e in trace["traceEvents"] if e["ph"] == "i" and e["name"].startswith("first training step")]
    started = re.search(r"<dt>run start</dt><dd>(.*?)</dd>", html)
    return {"fault_id": fid, "trace_s": first["ts"] / 1e6, "report_s": float(row.group(1)),
            "trace_origin_ts": origin[0]["ts"] if origin else None,
            "trace_run_start_s": origin[0]["args"].get("run_start_s") if origin else None,
            "report_run_start": started.group(1) if started else None}
