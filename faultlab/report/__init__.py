"""See a run: a self-contained HTML report and a Perfetto (Chrome trace) export.

- :func:`faultlab.report.html.write_report`: ``RUN_DIR``, a dataset folder or a
  scores JSON file -> one HTML page (jinja2 template, matplotlib plots embedded as
  base64 PNG; it loads nothing from the network).
- :func:`faultlab.report.perfetto.export_trace`: ``RUN_DIR`` -> Chrome trace JSON
  (the Trace Event Format that ui.perfetto.dev and chrome://tracing load).
"""

import importlib

# The names are loaded on first use (PEP 562), so that ``faultlab --help`` and every
# command other than report/export do not import matplotlib and jinja2.
_LAZY = {"write_report": "faultlab.report.html", "export_trace": "faultlab.report.perfetto"}

__all__ = ["write_report", "export_trace"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
