"""Times as faultlab's messages show them: wall clock in UTC and the time from now."""

from __future__ import annotations

import math
import time

#: past this many seconds away the date is shown too, and the time from now in days
DAY_S = 86400


def when(ts: float | None) -> str:
    """A unix time ``ts`` (s) in words: ``HH:MM:SS UTC (in Ns)`` when it falls on
    today's UTC date, ``YYYY-MM-DD HH:MM:SS UTC (in N days)`` otherwise, ``(Ns ago)``
    / ``(N days ago)`` once it has passed; ``an unknown
    time`` without one, ``a time out of range (VALUE)`` for one no calendar holds (not
    finite, past year 9999: a deadline another user wrote). Raises nothing."""
    if ts is None or ts == 0:
        return "an unknown time"
    try:
        if not math.isfinite(ts):
            raise ValueError(ts)
        t = time.gmtime(ts)
        if t.tm_year > 9999:
            raise ValueError(ts)
    except (OverflowError, OSError, ValueError, TypeError):
        return f"a time out of range ({ts!r:.24})"
    left = ts - time.time()
    today = time.gmtime()[:3] == t[:3]
    clock = time.strftime("%H:%M:%S UTC" if today else "%Y-%m-%d %H:%M:%S UTC", t)
    if left < 0:  # a deadline that has passed says so, even by a fraction of a second: never "in 0s"
        return f"{clock} ({-left:.0f}s ago)" if -left < DAY_S else f"{clock} ({-left / DAY_S:.0f} days ago)"
    return f"{clock} (in {left:.0f}s)" if left < DAY_S else f"{clock} (in {left / DAY_S:.0f} days)"
