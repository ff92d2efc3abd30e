"""A process named by PID *and* start time, so a reused PID never reads as the process
it replaced. Standard library only (the in-workload agent imports it).

The start time is field 22 of ``/proc/PID/stat`` (clock ticks since boot; proc(5)):
two processes that ever held one PID on a running host differ in it. The line is
parsed after the *last* ``)``, since the command name (field 2) may itself hold
spaces and parentheses.
"""

from __future__ import annotations

import os


def parse_starttime(stat_text: str) -> int | None:
    """The start time (field 22) of a ``/proc/PID/stat`` line, or None when malformed."""
    fields = stat_text.rpartition(")")[2].split()
    try:
        return int(fields[19])  # fields[0] is field 3 (state)
    except (IndexError, ValueError):
        return None


def starttime(pid: int | str = "self") -> int | None:
    """The start time of ``pid`` on this host (clock ticks since boot), or None when
    there is no such process (or its stat cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except (OSError, ValueError):
        return None
    return parse_starttime(stat)


def exists(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (one of another user counts)."""
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):
        return False


def alive(pid, start: int | None = None) -> bool:
    """Whether the process recorded as ``pid`` (an int > 0) with start time ``start``
    still runs: the PID exists and, when ``start`` was recorded, has that start time
    (a reused PID is not alive). With no ``start`` (a record of an older version), or
    when the PID's stat cannot be read (``hidepid``), only the PID is checked.
    Anything that is not a positive int is not alive."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    now = starttime(pid) if isinstance(start, int) and not isinstance(start, bool) else None
    if now is None:
        return exists(pid)
    return now == start
