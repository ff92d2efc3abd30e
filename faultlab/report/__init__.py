"""See a run: a self-contained HTML report and a Perfetto (Chrome trace) export.

- :func:`faultlab.report.html.write_report`: ``RUN_DIR``, a dataset folder or a
  scores JSON file -> one HTML page (jinja2 template, matplotlib plots embedded as
  base64 PNG; it loads nothing from the network).
- :func:`faultlab.report.perfetto.export_trace`: ``RUN_DIR`` -> Chrome trace JSON
  (the Trace Event Format that ui.perfetto.dev and chrome://tracing load).
"""

from faultlab.report.html import write_report
from faultlab.report.perfetto import export_trace

__all__ = ["write_report", "export_trace"]
