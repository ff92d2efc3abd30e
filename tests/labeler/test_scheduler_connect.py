"""A scheduler given by address where nothing answers is one line naming --scheduler
within seconds (cluster.CONNECT_TIMEOUT_S), not after dask's 30 s connect timeout
(49 s on a loaded host)."""

from __future__ import annotations

import socket
import time

from faultlab import synthrun
from faultlab.labeler.cluster import CONNECT_TIMEOUT_S
from tests.helpers import fl, one_line_error

#: what the start-up (imports) and the refusal may add to the connect timeout on a
#: loaded host; dask's own timeout alone is 30 s
SLACK_S = 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_scheduler_is_one_line_within_the_connect_timeout(tmp_path):
    synthrun.write_run(tmp_path / "run", 4, 100, seed=0)
    addr = f"tcp://127.0.0.1:{_free_port()}"
    t = time.monotonic()
    cp = fl("label", tmp_path / "run", "--scheduler", addr)
    took = time.monotonic() - t
    one_line_error(cp, "--scheduler", addr, "tcp://HOST:PORT")
    assert took < CONNECT_TIMEOUT_S + SLACK_S, took
