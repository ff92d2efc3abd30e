"""Times as faultlab's messages show them: wall clock in UTC and seconds from now."""

from __future__ import annotations

import time


def when(ts: float | None) -> str:
    """``HH:MM:SS UTC (in Ns)`` for a unix time ``ts`` (s), wall clock in UTC and
    seconds from now; ``an unknown time`` without one."""
    if not ts:
        return "an unknown time"
    return f"{time.strftime('%H:%M:%S UTC', time.gmtime(ts))} (in {max(0.0, ts - time.time()):.0f}s)"
