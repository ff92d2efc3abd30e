"""A process named by PID *and* start time, so a reused PID never reads as the process
it replaced. Standard library only (the in-workload agent imports it).

The start time is field 22 of ``/proc/PID/stat`` (clock ticks since boot; proc(5)):
two processes that ever held one PID on a running host differ in it. The line is
parsed after the *last* ``)``, since the command name (field 2) is chosen by the
process (``prctl(PR_SET_NAME)``, up to 15 bytes) and may hold spaces, parentheses and
newlines: a name such as ``x) T 1 (`` read at the first ``)`` shifts every field.
``stat_fields`` is that parser in Python, ``STAT_SH`` the same in POSIX sh (for the
scripts faultlab hands to ``sh``: the pause loop, its revert, the lease watchdog).
"""

from __future__ import annotations

import os

#: how many SIGCONTs ``proc_resume`` (in ``STAT_SH``) sends a target that stays stopped
RESUME_TRIES = 20

#: POSIX sh functions (sh and coreutils only), the shell twin of ``stat_fields``:
#:
#: - ``proc_stat PID``: reads ``/proc/PID/stat`` and sets ``ps_state`` (field 3),
#:   ``ps_ppid`` (field 4) and ``ps_start`` (field 22) from what follows its *last*
#:   ``") "``; returns 1 (all empty) when there is no such process or the line is
#:   malformed. The last line is
#:   the one kept, so a name with a newline in it changes nothing; ``read`` is a
#:   builtin, so this forks nothing. Needs the default ``IFS``.
#: - ``proc_resume PID START``: while PID is the process started at START, send it
#:   SIGCONT until it is seen not stopped (state other than ``T``): at most
#:   ``RESUME_TRIES`` signals, 50 ms apart. Returns 0 once it runs or is gone (or the
#:   PID now names another process), 1 when it is still stopped after them.
STAT_SH = r"""
proc_stat() {
  ps_state=; ps_ppid=; ps_start=; _ps_line=; _ps_last=
  { while IFS= read -r _ps_line; do _ps_last=$_ps_line; done; } 2>/dev/null < "/proc/$1/stat" || return 1
  case "$_ps_last" in *") "*) ;; *) return 1 ;; esac
  set -- ${_ps_last##*") "}
  [ "$#" -ge 20 ] || return 1
  ps_state=$1; ps_ppid=$2; ps_start=${20}
}
proc_resume() {
  _ps_n=0
  while proc_stat "$1" && [ "$ps_start" = "$2" ]; do
    if [ "$_ps_n" -gt 0 ]; then
      [ "$ps_state" = T ] || return 0
      [ "$_ps_n" -lt TRIES ] || return 1
      sleep 0.05
    fi
    kill -CONT "$1" 2>/dev/null
    _ps_n=$((_ps_n + 1))
  done
  return 0
}
""".replace("TRIES", str(RESUME_TRIES))


def stat_fields(stat_text: str) -> list[str] | None:
    """The fields of a ``/proc/PID/stat`` line from field 3 (the state) on, split after
    its *last* ``)``; None when there is no ``)`` or fewer than 20 fields follow it."""
    _, paren, tail = stat_text.rpartition(")")
    fields = tail.split()
    if not paren or len(fields) < 20:
        return None
    return fields


def real_uid(status_text: str) -> int | None:
    """The real uid (the user who started it) in a ``/proc/PID/status`` text, or None
    when its ``Uid:`` line is missing or malformed. A setuid-root program another user
    starts runs with effective uid 0, but it is that user's process."""
    for ln in status_text.splitlines():
        if ln.startswith("Uid:"):
            f = ln.split()
            return int(f[1]) if len(f) >= 3 and f[1].isdigit() else None
    return None


def read_stat(pid: int | str = "self") -> list[str] | None:
    """``stat_fields`` of ``/proc/PID/stat`` on this host, or None when there is no such
    process (or its stat cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except (OSError, ValueError):
        return None
    return stat_fields(text)


def parse_starttime(stat_text: str) -> int | None:
    """The start time (field 22) of a ``/proc/PID/stat`` line, or None when malformed."""
    return _start_of(stat_fields(stat_text))


def _start_of(fields: list[str] | None) -> int | None:
    try:
        return int(fields[19]) if fields else None  # fields[0] is field 3 (state)
    except ValueError:
        return None


def parse_state(stat_text: str) -> str | None:
    """The state (field 3: ``R``, ``S``, ``T``, ``Z``...) of a ``/proc/PID/stat`` line,
    or None when malformed."""
    fields = stat_fields(stat_text)
    return fields[0] if fields else None


def starttime(pid: int | str = "self") -> int | None:
    """The start time of ``pid`` on this host (clock ticks since boot), or None when
    there is no such process (or its stat cannot be read)."""
    return _start_of(read_stat(pid))


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
