"""A run folder whose tables hold no rows is read like any other.

A run with no fault in its scenario writes an ``injections.parquet`` of no rows, which
pyarrow writes as one row group of no rows whose column chunks all state a data page
offset of 0; each is then read from byte 0 with a length of its own. The bounded
reader (``parquetpages.Pages``) took the second such read for the first chunk
rewritten, and ``faultlab label`` refused the run in one line.
"""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq

from faultlab import schema
from faultlab.report.synthetic import make_run
from tests.helpers import fl


def test_a_run_with_no_injections_is_labeled(tmp_path):
    run = make_run(tmp_path / "run", ranks=2, duration_s=20)
    empty = pd.DataFrame({f.name: pd.Series([], dtype=object) for f in schema.INJECTIONS})
    pq.write_table(schema.to_table("injections", empty), run / "injections.parquet")
    md = pq.ParquetFile(run / "injections.parquet").metadata
    assert md.num_rows == 0 and md.num_row_groups == 1  # the shape pyarrow writes, which the test is about
    cp = fl("label", str(run))
    assert cp.returncode == 0, cp.stderr[-1500:]
    assert "label(s)" in cp.stdout
