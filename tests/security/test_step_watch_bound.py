"""Rank 0's step file, which the run's loop follows every 0.1 s, is a docker or ssh
node's root's to write (the collector copies up to 1 GiB of it): one poll reads a
bounded part of it, so a file of empty lines or a line with no end never stalls root's
run loop (64 MiB of newlines held one poll for 342 s and 1 GiB of memory)."""

from __future__ import annotations

import json
import time

from faultlab.runner import _StepWatch


def _record(step: int) -> bytes:
    return json.dumps({"step": step, "t_start": 1000.0 + step, "rank": 0}).encode() + b"\n"


def test_a_step_file_of_empty_lines_costs_one_poll_little(tmp_path):
    f = tmp_path / "steps-rank0.jsonl"
    with open(f, "wb") as out:
        for _ in range(64):
            out.write(b"\n" * (1 << 20))
        out.write(_record(7))
    w = _StepWatch(f)
    t = time.monotonic()
    w.poll()
    assert time.monotonic() - t < 5
    assert 0 < w.pos <= _StepWatch.POLL_BYTES and w.step == -1


def test_a_line_with_no_end_is_passed_over_a_poll_at_a_time(tmp_path):
    f = tmp_path / "steps-rank0.jsonl"
    f.write_bytes(b"x" * (_StepWatch.POLL_BYTES + 100) + b"\n" + _record(3))
    w = _StepWatch(f)
    for _ in range(3):
        w.poll()
    assert w.step == 3 and w.first_ts == 1003.0


def test_rank0s_records_are_all_followed_across_polls(tmp_path):
    f = tmp_path / "steps-rank0.jsonl"
    f.write_bytes(b"".join(_record(k) for k in range(25_000)) + b'{"step": 25000, "t_st')  # a torn last line
    w = _StepWatch(f)
    assert w.poll() == _StepWatch.POLL_LINES - 1 and w.first_ts == 1000.0
    for _ in range(3):
        w.poll()
    assert w.step == 24_999
    with open(f, "ab") as out:
        out.write(b'art": 26000.0}\n')
    assert w.poll() == 25_000
