"""A rank's step telemetry, stdlib only: step records appended as JSON lines in
batches (:class:`StepLog`), step periods split by whether the step was recorded
(:class:`PeriodLog`, for ``--telemetry-ab``), and the per-step recorder of a training
loop (:class:`StepRecorder`). The record's fields are listed in
:mod:`faultlab.benchmarks.ddp`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path


class StepLog:
    """Appends step records (dicts of JSON-able values) as JSON lines to ``path``, in
    batches.

    ``add`` only keeps the dict (a step's bookkeeping must stay a few µs: encoding a
    record right after the step's compute, with cold caches, took ~16 µs here); the
    kept records are encoded and written together on the first record (at once), then
    when ``flush_s`` seconds have passed since the last write (0: every record), and on
    ``flush()``/``close()``. Each batch is whole lines written with ``os.write`` on an
    ``O_APPEND`` descriptor, so a process killed at any moment leaves whole lines up to
    its last batch. Raises OSError when the file cannot be opened or written, ValueError
    for ``flush_s < 0``. A context manager.
    """

    def __init__(self, path: str | Path, flush_s: float = 0.5):
        if not flush_s >= 0:
            raise ValueError(f"flush_s {flush_s} must be >= 0")
        self.path, self.flush_s = Path(path), float(flush_s)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._buf: list[dict] = []
        self._last: float | None = None

    def add(self, rec: dict) -> None:
        self._buf.append(rec)
        if self._last is None or time.monotonic() - self._last >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        if self._buf and self._fd is not None:
            dumps = json.dumps
            data = "".join([dumps(r) + "\n" for r in self._buf]).encode()
            self._buf.clear()
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
        self._last = time.monotonic()

    def close(self) -> None:
        if self._fd is not None:
            try:
                self.flush()
            finally:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> StepLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class PeriodLog:
    """Step periods (s from the start of one step to the start of the next, so the
    bookkeeping between steps is counted), split by whether the step was recorded.

    With ``--telemetry-ab N`` blocks of N recorded and N unrecorded steps alternate;
    ``paired_diff_s()`` is the median over block pairs of (mean recorded period - mean
    unrecorded period), which cancels load drift slower than a block pair."""

    def __init__(self, block: int = 0):
        self.block = block
        self.all: list[float] = []
        self.on: list[float] = []
        self.off: list[float] = []
        self._pairs: dict[int, tuple[list[float], list[float]]] = {}
        self._prev: tuple[float, bool, int] | None = None

    def mark(self, t: float, recorded: bool, step: int = 0) -> None:
        if self._prev is not None:
            t_prev, rec_prev, step_prev = self._prev
            d = t - t_prev
            self.all.append(d)
            (self.on if rec_prev else self.off).append(d)
            if self.block:
                pair = self._pairs.setdefault(step_prev // (2 * self.block), ([], []))
                pair[0 if rec_prev else 1].append(d)
        self._prev = (t, recorded, step)

    def paired_diff_s(self) -> float:
        diffs = [sum(a) / len(a) - sum(b) / len(b) for a, b in self._pairs.values() if a and b]
        return median(diffs)

    def ab_text(self) -> str:
        return (f"telemetry A/B: median period recorded {median(self.on) * 1e3:.4f} ms ({len(self.on)} steps), "
                f"unrecorded {median(self.off) * 1e3:.4f} ms ({len(self.off)} steps), "
                f"paired difference {self.paired_diff_s() * 1e6:.2f} us")


class StepRecorder:
    """The per-step telemetry of a rank's training loop (ddp and pipeline): which steps
    are recorded (all, or alternate blocks with ``--telemetry-ab N``), the step records
    written through a :class:`StepLog` to ``OUT/steps-rankR.jsonl`` (none with
    ``--no-telemetry``), every step time (s) and the step periods (:class:`PeriodLog`).

    Per step: ``begin(step, t0)`` at its start (``t0`` a ``time.perf_counter()``
    reading; notes the wall-clock ``t_start`` and the GC clock when recorded), then
    ``end(step, step_s, compute_s, comm_s, ...)`` (seconds). ``close()`` flushes.
    Raises OSError when the output folder or file cannot be made."""

    def __init__(self, a: argparse.Namespace, gc_seconds):
        out_dir = Path(a.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.a, self.gc_seconds = a, gc_seconds
        self.log = None if a.no_telemetry else StepLog(out_dir / f"steps-rank{a.rank}.jsonl", a.flush_s)
        self.ab = a.telemetry_ab
        self.periods = PeriodLog(self.ab)
        self.step_times: list[float] = []
        self.on = False
        self._t_start = self._g0 = 0.0

    def begin(self, step: int, t0: float) -> None:
        self.on = self.log is not None and (self.ab == 0 or (step // self.ab) % 2 == 0)
        self.periods.mark(t0, self.on, step)
        if self.on:
            self._t_start = time.time()
            self._g0 = self.gc_seconds()

    def end(self, step: int, step_s: float, compute_s: float, comm_s: float,
            tokens: int | None = None, dataloader_s: float | None = None) -> None:
        self.step_times.append(step_s)
        if not self.on:
            return
        a = self.a
        rec = {
            "run_id": a.run_id,
            "rank": a.rank,
            "node": a.node,
            "peer_group": a.peer_group,
            "step": step,
            "t_start": self._t_start,
            "compute_s": compute_s,
            "comm_s": comm_s,
            "step_s": step_s,
            "gc_s": self.gc_seconds() - self._g0,
        }
        if tokens is not None:
            rec["tokens"] = tokens
        if dataloader_s is not None:
            rec["dataloader_s"] = dataloader_s
        self.log.add(rec)

    def close(self) -> None:
        if self.log is not None:
            self.log.close()

    def summary(self) -> str:
        """``"median step X ms, median period Y ms"``."""
        return f"median step {median(self.step_times) * 1e3:.3f} ms, median period {median(self.periods.all) * 1e3:.3f} ms"


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")
