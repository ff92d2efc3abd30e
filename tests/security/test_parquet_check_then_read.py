"""A Parquet file another user owns is read as the file root checked, or refused.

Root checks a file's footer and text (``parquetbound.footer_over``, ``text_over``) and
then reads it. The file's owner may swap it in the window between: a new file renamed
over the path, or the same file rewritten in place. The swap is made by a hook run
right after the real text check (the last check before the read), with a file that
is valid Parquet of the same columns (so nothing but the swap can refuse it); the
read must give the checked table or one line naming the file, never the swapped one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faultlab import parquetbound, steptable
from faultlab.errors import BadInput
from faultlab.labeler.importers.long.read import read_long
from faultlab.report.synthetic import make_run
from faultlab.rundir import RunDir


def swap_after_text_check(monkeypatch, path: Path, replacement: bytes, in_place: bool) -> list:
    """Make the next text check of any file swap ``path`` for ``replacement`` once it
    has passed: renamed over the path, or written over the file's own bytes."""
    real = parquetbound.text_over
    swapped = []

    def text_over_then_swap(*args, **kw):
        over = real(*args, **kw)
        if not swapped:
            if in_place:
                with open(path, "r+b") as f:
                    f.truncate(0)
                    f.write(replacement)
            else:
                tmp = path.with_name(path.name + ".swap")
                tmp.write_bytes(replacement)
                os.rename(tmp, path)
            swapped.append(path)
        return over

    monkeypatch.setattr(parquetbound, "text_over", text_over_then_swap)
    return swapped


def parquet_bytes(table: pa.Table, tmp_path: Path) -> bytes:
    p = tmp_path / "replacement.parquet"
    pq.write_table(table, p)
    data = p.read_bytes()
    p.unlink()
    return data


def read_or_refused(read):
    try:
        return read()
    except BadInput as e:
        assert "\n" not in str(e)
        return None


@pytest.mark.parametrize("in_place", [False, True], ids=["renamed-over", "rewritten-in-place"])
def test_a_run_table_swapped_after_its_checks_is_read_as_checked_or_refused(tmp_path, monkeypatch, in_place):
    run = tmp_path / "run"
    make_run(run, ranks=2, duration_s=5, label=False)
    p = run / "host.parquet"
    checked = pd.read_parquet(p)
    other = checked.copy()
    other["node"] = "swapped-node-name"
    for c in other.columns:
        if pd.api.types.is_float_dtype(other[c]):
            other[c] = 4242.5
    swapped = swap_after_text_check(monkeypatch, p, parquet_bytes(pa.Table.from_pandas(other, preserve_index=False), tmp_path), in_place)
    got = read_or_refused(lambda: RunDir(run).read_table("host"))
    assert swapped, "the hook ran"
    if got is not None:
        assert not (got["node"] == "swapped-node-name").any()
        pd.testing.assert_frame_equal(got.reset_index(drop=True), checked.reset_index(drop=True), check_dtype=False)


def test_a_steps_file_renamed_over_after_its_checks_is_read_as_checked(tmp_path, monkeypatch):
    run = tmp_path / "run"
    make_run(run, ranks=2, duration_s=5, label=False)
    p = run / "steps.parquet"
    checked = pd.read_parquet(p)
    other = checked.copy()
    other["step_s"] = 4242.5
    swapped = swap_after_text_check(monkeypatch, p, parquet_bytes(pa.Table.from_pandas(other, preserve_index=False), tmp_path), False)
    got = steptable.read_table(p)
    assert swapped, "the hook ran"
    assert not (got["step_s"] == 4242.5).any()
    assert got["step_s"].tolist() == checked["step_s"].tolist()


def _long(value: float, n: int = 200) -> pa.Table:
    return pa.table({"component": [f"gpu{i % 4}" for i in range(n)], "peer_group": ["all"] * n,
                     "timestamp": [float(i // 4) for i in range(n)], "metric": ["step_time"] * n,
                     "value": [value] * n})


@pytest.mark.parametrize("in_place", [False, True], ids=["renamed-over", "rewritten-in-place"])
def test_an_imported_file_swapped_after_its_checks_is_read_as_checked_or_refused(tmp_path, monkeypatch, in_place):
    p = tmp_path / "telemetry.parquet"
    pq.write_table(_long(1.5), p)
    other = _long(4242.5, 400)
    swapped = swap_after_text_check(monkeypatch, p, parquet_bytes(other, tmp_path), in_place)
    got = read_or_refused(lambda: read_long(p))
    assert swapped, "the hook ran"
    if got is not None:
        assert len(got) == 200 and set(got["value"]) == {1.5}
