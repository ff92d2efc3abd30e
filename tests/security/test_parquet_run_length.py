"""Root decodes a Parquet file that someone handed it to at most
``parquetbound.DECODED_RATIO`` times the file's size: run-length (or dictionary)
encoded rows of one repeated number cost a few bytes a million rows, so a file of a
few MB states billions of rows and decodes to GBs, within every bound that is not a
ratio (an import's 16 GiB, each of a steps table's files' 2**25 rows, a dataset
part's 2 GiB).

Root's real commands run under an address-space limit (``prlimit``), so a missed
bomb fails in the test instead of filling the host; each file must be refused in one
line naming it, from its footer, before a column is decoded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faultlab.datasets import manifest
from faultlab.labeler.importers.trace.read import TRACE_COLUMNS
from faultlab.report.synthetic import make_run
from tests.helpers import REPO, ROOT, give_to_nobody
from tests.security.test_parquet_bombs import _refused, _rle_rows

pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("prlimit"), reason="needs root (the files are nobody's) and prlimit")

#: the word of the ratio's refusal (a failed malloc under the limit names the file too)
WORD = "run-length"


def _repeated(real: pa.Table, path: Path, n: int, groups: int = 1) -> None:
    """``path`` holding ``real``'s first row ``n * groups`` times, run-length encoded
    (the run id and the text as they were, so that no other check refuses it first)."""
    _rle_rows(real, path, n, groups, text=None)


def _one_row(columns: dict) -> pa.Table:
    return pa.table({k: pa.array([v]) for k, v in columns.items()})


#: one row of each import format's Parquet file, repeated into the bombs
IMPORTS = {
    "straggler-trace": ("trace-x.parquet", _one_row({c: ("forward-compute" if c == "optype" else 1.0 if c in ("start_ts", "duration") else 1)
                                                      for c in TRACE_COLUMNS})),
    "long": ("telemetry.parquet", _one_row({"component": "rank:0", "peer_group": "dp", "timestamp": 1.7e9, "metric": "step_s", "value": 1.0})),
    "perseus": ("metrics.parquet", _one_row({"host": "h0", "ts": 1.7e9, "disk_id": "d0", "throughput": 1.0, "latency": 1.0})),
}


@pytest.mark.parametrize("fmt", sorted(IMPORTS))
def test_an_imported_files_run_length_rows_are_refused_from_its_footer(tmp_path, fmt):
    """A public trace's Parquet file of 2**26 rows of one row's values (a few MB; GBs
    decoded): root's label --import refuses it in one line naming the file."""
    name, row = IMPORTS[fmt]
    src = tmp_path / "trace"
    src.mkdir()
    _repeated(row, src / name, 1 << 24, groups=4)
    give_to_nobody(src)
    _refused(["label", "--import", fmt, str(src / name), "--out", str(tmp_path / "out")], name, WORD)


def test_a_steps_table_of_many_run_length_files_is_refused_from_their_footers(tmp_path):
    """A partitioned steps table of 16 blocks, each one file of 2**24 rows of one
    rank-step: every file is within a steps file's bounds (2**25 rows, 4 GiB stated),
    the table states 2**28 rows. Root's score --run refuses the first file from its
    footer."""
    run = make_run(tmp_path / "run", ranks=2, duration_s=20)
    real = pq.read_table(run / "steps.parquet")
    (run / "steps.parquet").unlink()
    for k in range(16):
        block = run / "steps" / f"step_block={k}"
        block.mkdir(parents=True)
        _repeated(real, block / "part-0.parquet", 1 << 24)
    give_to_nobody(run)
    _refused(["score", "--detector", "peer-median", "--boot", "0", "--run", str(run)], "part-0.parquet", WORD)


def test_a_dataset_part_of_run_length_rows_is_refused_from_its_footer(tmp_path):
    """A copy of faultlab-sw-v1 whose first test run's steps part holds 2**24 rows of
    one rank-step (within a part's 2**25 rows and 2 GiB stated), its manifest
    rewritten to match: root's score refuses the part from its footer."""
    ds = tmp_path / "ds"
    shutil.copytree(REPO / "datasets" / "faultlab-sw-v1", ds)
    rid = json.loads((ds / "splits.json").read_text())["test"][0]
    part = ds / "data" / "steps" / f"run={rid}" / "part-0.parquet"
    _repeated(pq.read_table(part), part, 1 << 24)
    (ds / manifest.NAME).write_text(manifest.text({f.relative_to(ds).as_posix(): manifest.sha256(f, ds) for f in manifest._files(ds)}))
    give_to_nobody(ds)
    _refused(["score", "--detector", "peer-median", "--boot", "0", "--dataset", str(ds)], f"run={rid}/part-0.parquet", WORD)
