"""step_frame gives a detector the labeler's time split: local time = compute_s +
dataloader_s (a NaN loader time counts 0), peer_ratio on local time, gc_s and
dataloader_s carried (NaN when the table has no such column)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from faultlab.scoring.detectors import step_frame


def _steps(dataloader) -> pd.DataFrame:
    f = pd.DataFrame({"run_id": "r", "rank": [0, 1, 2], "node": ["n0", "n1", "n2"], "peer_group": "dp", "step": 0,
                      "t_start": 1.8e9, "compute_s": [0.010, 0.010, 0.010], "comm_s": [0.05, 0.05, 0.0],
                      "step_s": [0.06, 0.06, 0.06], "gc_s": [0.001, np.nan, 0.0]})
    if dataloader is not None:
        f["dataloader_s"] = dataloader
    return f


def test_local_time_adds_the_dataloader_and_peer_ratio_uses_it():
    f = step_frame(_steps([0.0, np.nan, 0.040]))
    assert f["local_s"].tolist() == pytest.approx([0.010, 0.010, 0.050])
    # rank 2 waits 40 ms on its own disk: its compute equals its peers', its local time is 5x
    assert f["peer_ratio"].tolist() == pytest.approx([1.0, 1.0, 5.0])
    assert f["gc_s"].iloc[0] == 0.001 and np.isnan(f["gc_s"].iloc[1]) and np.isnan(f["dataloader_s"].iloc[1])


def test_without_a_dataloader_column_local_time_is_compute():
    f = step_frame(_steps(None).drop(columns="gc_s"))
    assert (f["local_s"] == f["compute_s"]).all() and f["dataloader_s"].isna().all() and f["gc_s"].isna().all()
    assert f["peer_ratio"].tolist() == pytest.approx([1.0, 1.0, 1.0])
