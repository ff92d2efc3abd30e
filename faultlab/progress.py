"""Progress of a demo, a run or a campaign, for the person watching.

Two forms, one interface (:class:`Progress`):

- **live** (stdout is a terminal, not ``--json``, no ``CI`` variable): a rich status
  line redrawn in place: phase, wall time elapsed, steps done (of the total where
  known), the faults in force; phase lines are printed above it as phases end.
- **plain** (stdout is not a terminal, ``CI`` is set, or ``--json``): the same phase
  lines, and while training a one-line heartbeat every ``HEARTBEAT_S`` seconds
  (``  training +34.2s: step 1234, in force: nic-slow@n2``), so a log never sits
  silent; with ``--json`` nothing goes to stdout (the lines go to stderr).

Times: a "+12.3s" is seconds since the run's first training step (the time origin
every printed and plotted run time uses, see RunDir.time_origin); a phase line ends
with how long the phase took, "(3.1s)", never a clock of its own.
"""

from __future__ import annotations

import os
import sys
import time

from rich.console import Console
from rich.progress import BarColumn, Progress as RichProgress, SpinnerColumn, TextColumn, TimeElapsedColumn

HEARTBEAT_S = 10.0


def is_live(console: Console, as_json: bool = False) -> bool:
    """Whether to draw a live status line: a terminal, not --json, not CI."""
    if as_json or os.environ.get("CI"):
        return False
    return console.is_terminal and sys.stdout.isatty()


class Progress:
    """``with Progress(console) as p: p.phase("testbed up", "4 nodes"); p.tick(...)``.

    ``prefix`` ("run 3/20") starts every line; ``as_json`` sends the lines to stderr
    so stdout stays machine-readable; ``live`` forces a form (default: :func:`is_live`).
    """

    def __init__(self, console: Console | None = None, *, prefix: str = "", as_json: bool = False, live: bool | None = None):
        self.console = console or Console(highlight=False)
        if as_json:
            self.console = Console(stderr=True, soft_wrap=True, highlight=False)
        self.live = is_live(self.console, as_json) if live is None else live
        self.prefix = f"{prefix} " if prefix else ""
        self.t_phase = time.monotonic()
        self.t_start = self.t_phase
        self.current = "starting"
        self._last_beat = 0.0
        self._rich = None
        self._task = None

    def __enter__(self) -> Progress:
        if self.live:
            self._rich = RichProgress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=24),
                                      TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                                      console=self.console, transient=True)
            self._task = self._rich.add_task(self.prefix + self.current, total=None, status="")
            self._rich.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None

    def phase(self, name: str, detail: str = "") -> None:
        """A phase begins: print the line that ends the previous one (with its
        duration) and show ``name`` as the current phase."""
        now = time.monotonic()
        if self.current != "starting":
            self.line(f"{self.current} done ({now - self.t_phase:.1f}s)")
        self.current, self.t_phase = name, now
        self.line(f"{name}{': ' + detail if detail else ''} ...")
        if self._rich is not None:
            self._rich.update(self._task, description=self.prefix + name, status="", total=None, completed=0)

    def line(self, text: str) -> None:
        """Print one line (above the live status line, if any)."""
        self.console.print(f"{self.prefix}{text}", markup=False, highlight=False)

    def tick(self, t_rel: float, step: int, *, total_s: float | None = None, total_steps: int | None = None,
             faults: list[str] = ()) -> None:
        """Training status: ``t_rel`` seconds since the first step, ``step`` the last
        step done, ``faults`` the faults in force (``TYPE@NODE``)."""
        force = ", ".join(faults) or "none"
        status = f"+{t_rel:.1f}s: step {step + 1}{f'/{total_steps}' if total_steps else ''}, faults in force: {force}"
        if self._rich is not None:
            total = total_s or total_steps
            done = min(t_rel, total_s) if total_s else (step + 1)
            self._rich.update(self._task, total=total, completed=done)
        self.beat(status)

    def beat(self, status: str) -> None:
        """Show ``status`` on the live line, or print it as a heartbeat line at most
        every HEARTBEAT_S seconds (plain form)."""
        if self._rich is not None:
            self._rich.update(self._task, status=status)
            return
        now = time.monotonic()
        if now - self._last_beat >= HEARTBEAT_S:
            self._last_beat = now
            self.line(f"  {self.current} {status}")

    def done(self) -> None:
        """End the last phase (print its duration)."""
        if self.current != "starting":
            self.line(f"{self.current} done ({time.monotonic() - self.t_phase:.1f}s)")
            self.current = "starting"
