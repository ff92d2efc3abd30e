"""Parsing of quantities with explicit units. Every parser raises BadInput naming the field."""

from __future__ import annotations

import re

from faultlab.errors import BadInput

_DURATION = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_RATE = {  # bits per second
    "bit": 1,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
}
#: bytes per second, the same units every byte-rate option takes (io-slow --read-bps):
#: SI (10mb = 10 000 000 bytes/s) and IEC (1mib = 1 048 576 bytes/s)
BYTE_UNITS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2.0**10, "mib": 2.0**20, "gib": 2.0**30, "tib": 2.0**40}
#: refused everywhere: tc reads "mbps" as bytes/s, ss and iperf print it as bits/s
AMBIGUOUS = {"bps", "kbps", "mbps", "gbps"}
RATE_FIX = "write 50mbit for bits/s or 6mb for bytes/s (units: bit, kbit, mbit, gbit; b, kb, mb, gb, kib, mib, gib)"
_NUM = r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)"  # ASCII digits only: '５０mbit' is refused
MAX_DURATION_S = 7 * 24 * 3600.0  # a fault longer than a week is a typo
#: the shortest duration any option takes (a timer, a tc or sleep granularity below it
#: is noise; 0.00001ms would be a 10 ns fault)
MIN_DURATION_S = 1e-3
MAX_RATE_BIT_S = 400e9


def parse_duration(text: str | float | int, field: str = "duration", *, allow_zero: bool = False,
                   min_s: float = MIN_DURATION_S) -> float:
    """Parse ``"30s"``, ``"500ms"``, ``"2m"``, ``"1h"`` into seconds (float in
    [``min_s``, one week], 1 ms by default; or exactly 0 with ``allow_zero``).

    The same vocabulary as rates (:func:`parse_rate`): a bare number (no unit) and a
    space before the unit (``"10 ms"``) are refused. Raises BadInput naming ``field``
    and the fix.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        raise BadInput(f"{text!r} has no unit", field=field, fix="write e.g. 30s, 500ms or 2m")
    s = str(text).strip().lower()
    if re.fullmatch(_NUM, s):
        raise BadInput(f"{text!r} has no unit", field=field, fix=f"write e.g. {s}s or {s}ms")
    if re.fullmatch(_NUM + r"\s+[a-z]+", s):
        raise BadInput(f"{text!r} has a space before its unit", field=field, fix=f"write e.g. {s.split()[0]}{s.split()[-1]}")
    m = re.fullmatch(_NUM + r"([a-z]+)", s)
    if not m:
        if s.startswith("-"):
            raise BadInput(f"{text!r} is negative", field=field, fix="give a positive duration such as 30s")
        raise BadInput(f"{text!r} is not a duration", field=field, fix="write e.g. 30s, 500ms or 2m")
    value, unit = float(m.group(1)), m.group(2)
    if not unit.isascii():
        raise BadInput(f"unknown unit {unit!r} in {text!r}", field=field, fix="use ms, s, m or h")
    if unit not in _DURATION:
        raise BadInput(f"unknown unit {unit!r} in {text!r}", field=field, fix="use ms, s, m or h")
    seconds = value * _DURATION[unit]
    if seconds == 0 and allow_zero:
        return 0.0
    if seconds <= 0:
        raise BadInput(f"{text!r} is not positive", field=field, fix="give a positive duration such as 30s")
    if seconds < min_s:
        raise BadInput(f"{text!r} is below {_fmt_s(min_s)}", field=field, fix=f"give at least {_fmt_s(min_s)}")
    if seconds > MAX_DURATION_S:
        raise BadInput(f"{text!r} is longer than a week", field=field, fix="give at most 7*24h; a fail-slow fault that long is a typo")
    return seconds


def _fmt_s(seconds: float) -> str:
    """``0.001`` -> ``1ms``, ``2.0`` -> ``2s`` (for messages)."""
    return f"{seconds * 1e3:g}ms" if seconds < 1 else f"{seconds:g}s"


def parse_rate(text: str, field: str = "rate") -> float:
    """Parse a network rate into bit/s: ``"50mbit"`` -> 5e7, ``"6mb"`` -> 4.8e7.

    One vocabulary for every rate option: ``bit/kbit/mbit/gbit`` are bits per second;
    ``b/kb/mb/gb`` (SI) and ``kib/mib/gib`` (IEC) are *bytes* per second, as for
    io-slow's ``--read-bps``. ``bps/kbps/mbps/gbps`` are refused: tc reads them as
    bytes/s, ss and iperf print them as bits/s. A space inside (``"100 mbit"``), a
    bare number or an unknown unit is refused as well, each being a common typo. Raises
    BadInput naming ``field`` and the fix.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        raise BadInput(f"{text!r} has no unit", field=field, fix=RATE_FIX)
    s = str(text).strip()
    if re.fullmatch(_NUM, s):
        raise BadInput(f"{text!r} has no unit", field=field, fix=RATE_FIX)
    if re.fullmatch(_NUM + r"\s+[A-Za-z/]+", s):
        raise BadInput(f"{text!r} has a space before its unit", field=field, fix="write e.g. 100mbit")
    m = re.fullmatch(_NUM + r"([A-Za-z/]+)", s)
    if not m:
        if s.startswith("-"):
            raise BadInput(f"{text!r} is negative", field=field, fix="give a positive rate such as 50mbit")
        raise BadInput(f"{text!r} is not a rate", field=field, fix=RATE_FIX)
    value, unit = float(m.group(1)), m.group(2).lower()
    if unit.endswith("/s") or unit in ("mbits", "mbit/sec"):
        raise BadInput(f"unknown unit {m.group(2)!r}", field=field, fix="the option is already per second: " + RATE_FIX)
    if unit in AMBIGUOUS:
        raise BadInput(f"{text!r} is ambiguous (tc reads {unit} as bytes/s, most tools as bits/s)", field=field, fix=RATE_FIX)
    if unit in _RATE:
        bits = value * _RATE[unit]
    elif unit in BYTE_UNITS:
        bits = value * BYTE_UNITS[unit] * 8
    else:
        raise BadInput(f"unknown unit {m.group(2)!r}", field=field, fix=RATE_FIX)
    if not bits <= MAX_RATE_BIT_S:
        raise BadInput(f"{text!r} is above {MAX_RATE_BIT_S / 1e9:g}gbit", field=field, fix="give a cap below the link's speed, e.g. 50mbit")
    if bits < 8000:
        raise BadInput(f"{text!r} is below 8kbit, which tc cannot shape", field=field, fix="give at least 8kbit")
    return bits


def parse_fraction(value, field: str = "cpu_fraction") -> float:
    """Parse a fraction in [0.001, 1] (below 0.001 the CFS period would exceed 1 s).
    Raises BadInput for anything else."""
    if isinstance(value, str) and not value.strip().isascii():
        raise BadInput(f"{value!r} is not a number", field=field, fix="give a fraction such as 0.3")
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        raise BadInput(f"{value!r} is not a number", field=field, fix="give a fraction such as 0.3") from None
    if not (0.001 <= f <= 1):
        raise BadInput(f"{value!r} is outside [0.001, 1]", field=field, fix="give a fraction such as 0.3 (30% of one CPU left)")
    return f
