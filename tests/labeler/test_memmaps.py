"""The controller's maps (faultlab.labeler.memmaps): rows read from the file give what
numpy's indexing of the same array gives."""

from __future__ import annotations

import numpy as np
import pytest

from faultlab.labeler.memmaps import WorkMaps


@pytest.fixture
def maps(tmp_path):
    S, R = 50, 7
    m = WorkMaps(tmp_path, S, R)
    m.create("a", np.float32)
    a = m.open("a")
    a[:] = np.arange(S * R, dtype=np.float32).reshape(S, R)
    a.flush()
    del a
    return m, np.arange(S * R, dtype=np.float32).reshape(S, R)


@pytest.mark.parametrize("key", [
    np.array([3, -1, 3, 0, 49, -50]),  # negative, unsorted, repeated
    (np.array([4, 1, -2]), 2),
    (np.array([4, 1, 4]), slice(1, 5)),
    (np.array([4, 1, -2]), np.array([0, 6, -1])),  # paired with the rows, not crossed
    (np.array([1, 2, 3]), np.array([True, False, True, False, False, False, True])),
    (np.array([10, 11]), [0, 3]),
    (np.array([0, 1]), np.array([[1], [2]])),
], ids=["rows", "rows-int", "rows-slice", "rows-cols-paired", "rows-mask", "rows-list", "rows-broadcast"])
def test_released_map_indexed_by_row_arrays_gives_numpys_values(maps, key):
    m, ref = maps
    got = m.view("a")[key]
    assert got.shape == ref[key].shape and np.array_equal(got, ref[key])


def test_work_maps_rows_reads_negative_rows_as_numpy_does(maps):
    m, ref = maps
    rows = np.array([-1, 0, -50, 7])
    assert np.array_equal(m.rows("a", rows), ref[rows])  # not the file's header read as data
    with pytest.raises(IndexError):
        m.rows("a", np.array([50]))
    with pytest.raises(IndexError):
        m.rows("a", np.array([-51]))
