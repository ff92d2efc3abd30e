"""Root's scoring of a run someone else handed over (``faultlab score --run DIR``, and
a dataset's runs alike) costs what the run's tables cost, never their product: the
window grids (a row of windows for each label, alarm and component) are bounded in
cells, not only in windows, and the labels are grouped by component with one sort,
never a pass over every label for each component.

The run folder is nobody's; its steps and labels are rewritten by hand (a few hundred
KB). Root's command runs under an address-space limit and a CPU-time limit (the work
done, not wall time on a loaded host), so a miss fails here instead of filling the
host's memory or holding a core.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faultlab.report.synthetic import make_run
from tests.helpers import FL, ROOT, give_to_nobody

pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("prlimit"), reason="needs root (the run is nobody's) and prlimit")


def _score(run: Path, tmp_path: Path, cpu_s: int) -> subprocess.CompletedProcess:
    give_to_nobody(run)
    return subprocess.run(["prlimit", f"--cpu={cpu_s}", f"--as={3 << 30}", "--", *FL, "score", "--detector", "constant",
                           "--run", str(run), "--boot", "0"], capture_output=True, text=True, timeout=900, cwd=tmp_path)


def _with_labels(run: Path, n: int, component, source: str | None = None) -> None:
    lab = pq.read_table(run / "labels.parquet")
    df = lab.to_pandas().iloc[np.zeros(n, int)].reset_index(drop=True)
    df["component"] = [component(k) for k in range(n)]
    if source is not None:
        df["source"] = source
    df["start_ts"] = df["start_ts"].to_numpy() + np.arange(n) * 1e-3
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False, schema=lab.schema), run / "labels.parquet")


def test_a_run_whose_steps_span_a_million_windows_for_thousands_of_labels_is_refused_before_its_window_grid(tmp_path):
    """One step 9.9e6 s after the others: 990,001 windows of 10 s (within
    ``MAX_WINDOWS``), and 5,000 labels: a 4.6 GiB grid of label cells (without the bound: numpy's
    ``Unable to allocate``, a traceback, under the 3 GiB limit)."""
    run = make_run(tmp_path / "run", ranks=2, duration_s=20)
    st = pq.read_table(run / "steps.parquet")
    df = st.to_pandas()
    far = df.iloc[[-1]].copy()
    far["t_start"] = df["t_start"].min() + 9.9e6
    far["step"] = df["step"].max() + 1
    pq.write_table(pa.Table.from_pandas(pd.concat([df, far], ignore_index=True), preserve_index=False, schema=st.schema),
                   run / "steps.parquet")
    _with_labels(run, 5000, lambda k: "rank:0")
    cp = _score(run, tmp_path, cpu_s=120)
    err = cp.stderr.strip()
    assert cp.returncode == 2, err[-2000:]
    assert "Traceback" not in err and "allocate" not in err and len(err.splitlines()) == 1, err[-2000:]
    assert "window" in err and "cells" in err and "5000 label(s)" in err, err


def test_a_run_whose_every_label_names_a_new_component_is_scored_by_its_labels_not_their_square(tmp_path):
    """200,000 labels, each on a component of its own (4e10 compares grouped by a pass
    over every label for each component; without the bound: past the 120 CPU seconds the scoring
    may use)."""
    run = make_run(tmp_path / "run", ranks=2, duration_s=20)
    _with_labels(run, 200_000, lambda k: f"rank:{k + 10}")
    cp = _score(run, tmp_path, cpu_s=120)
    err = cp.stderr.strip()
    assert cp.returncode == 0 and "Traceback" not in err, (cp.returncode, err[-2000:])
    assert "200000" in cp.stdout.replace(",", ""), cp.stdout[-2000:]


@pytest.mark.parametrize("source", ["observed", "injected-unmanifested"])
def test_a_run_of_as_many_ranks_as_labels_is_refused_before_every_alarm_meets_every_label(tmp_path, source):
    """30,000 ranks of one step and a label on each: the constant detector alarms every
    rank, and the event-level matrix of 30,001 alarms x 30,000 labels is 6.7 GiB (without the bound:
    numpy's ``Unable to allocate``, a traceback, under the 3 GiB limit); labels of faults
    that slowed nothing are paired with the alarms too."""
    n = 30_000
    run = make_run(tmp_path / "run", ranks=2, duration_s=20)
    st = pq.read_table(run / "steps.parquet")
    df = st.to_pandas()
    steps = df.iloc[np.zeros(n, int)].reset_index(drop=True)
    steps["rank"] = np.arange(n).astype(steps["rank"].dtype)
    steps["step"] = 0
    steps["t_start"] = df["t_start"].min()
    pq.write_table(pa.Table.from_pandas(steps, preserve_index=False, schema=st.schema), run / "steps.parquet")
    _with_labels(run, n, lambda k: f"rank:{k}", source=source)
    cp = _score(run, tmp_path, cpu_s=120)
    err = cp.stderr.strip()
    assert cp.returncode == 2, err[-2000:]
    assert "Traceback" not in err and "allocate" not in err and len(err.splitlines()) == 1, err[-2000:]
    assert "labels" in err and "30000 label(s)" in err and "pairs" in err, err
