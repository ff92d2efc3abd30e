"""A page header whose map field states more items than the header's bytes can hold is
refused at once, not walked item by item.

Every Parquet file root reads from others is served to pyarrow through
``parquetpages.Pages``, which reads each column chunk's page headers (Thrift compact)
before pyarrow decodes a page, skipping the fields it does not need. A map's items of
bytes, doubles or booleans were skipped without looking at the buffer, so a header of
a dozen bytes stating a map of 2**62 of them held root's reader in that loop for good.
The file's owner writes it in place over a column chunk's first page header: the footer
is unchanged.
"""

from __future__ import annotations

import subprocess

import pyarrow.parquet as pq
import pytest

from faultlab import parquetpages
from faultlab.report.synthetic import make_run
from tests.helpers import fl

#: a page header's first field (id 1) of type map (11), 2**62 items, keys and values
#: of type byte (3), and nothing after it
MAP_BOMB = bytes([0x1B]) + bytes([0xFF] * 8 + [0x3F]) + bytes([0x33])


@pytest.mark.timeout(30)
def test_a_page_header_stating_a_map_longer_than_its_bytes_is_refused():
    with pytest.raises(parquetpages.PagesOver):
        parquetpages.page_bytes(MAP_BOMB + bytes(64), 1)


#: a page header whose uncompressed size (field 2) is a struct (12), empty, and nothing after
SIZE_AS_STRUCT = bytes([0x2C, 0x00, 0x00])


def test_a_page_header_field_of_another_type_than_its_own_is_refused():
    with pytest.raises(parquetpages.PagesOver):
        parquetpages.page_bytes(SIZE_AS_STRUCT + bytes(64), 1)


@pytest.mark.parametrize("header", [MAP_BOMB, SIZE_AS_STRUCT], ids=["huge-map", "size-as-struct"])
def test_roots_label_of_a_table_whose_first_page_header_is_malformed_ends_in_one_line(tmp_path, header):
    """The first page header of a run's host table overwritten in place (its footer
    unchanged): root's label ends in one line naming the file, exit 2, neither walking
    the header for good nor in a traceback."""
    run = make_run(tmp_path / "run", ranks=2, duration_s=20, label=False)
    host = run / "host.parquet"
    cc = pq.ParquetFile(host).metadata.row_group(0).column(0)
    at = cc.dictionary_page_offset if cc.has_dictionary_page and cc.dictionary_page_offset else cc.data_page_offset
    with open(host, "r+b") as f:
        f.seek(at)
        f.write(header)
    try:
        cp = fl("label", run, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("root's label walked the page header for good")
    err = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(err) == 1 and "host.parquet" in err[0] and "Traceback" not in cp.stderr, (cp.returncode, cp.stderr[-1500:])
