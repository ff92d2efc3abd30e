"""Times in faultlab's messages: a deadline that is not today shows its date; one no
calendar holds (written by another user into a lease record) is one phrase, never a
traceback."""

from __future__ import annotations

import re
import time

from faultlab.timefmt import when


def test_a_time_today_is_a_clock_and_seconds():
    now = time.time()
    soon = now + 30 if time.gmtime(now + 30)[:3] == time.gmtime(now)[:3] else now - 30
    assert re.fullmatch(r"\d\d:\d\d:\d\d UTC \((in \d+s|\d+s ago)\)", when(soon)), when(soon)


def test_a_time_that_has_passed_says_how_long_ago():
    now = time.time()
    assert re.fullmatch(r"(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d UTC \(\d+s ago\)", when(now - 90)), when(now - 90)
    week = now - 7 * 86400
    assert when(week).startswith(time.strftime("%Y-%m-%d ", time.gmtime(week))) and when(week).endswith("(7 days ago)")
    assert "in 0s" not in when(now - 5)


def test_a_deadline_passed_by_a_fraction_of_a_second_is_ago_not_in_0s():
    s = when(time.time() - 0.2)
    assert s.endswith("(0s ago)"), s


def test_a_far_deadline_shows_its_date_and_days():
    far = time.time() + 8203496733  # a deadline of another user's record, year 2286
    s = when(far)
    assert s.startswith(time.strftime("%Y-%m-%d ", time.gmtime(far))) and s.endswith(" days)"), s
    assert time.strftime("%Y", time.gmtime(far)) == "2286"
    tomorrow = time.time() + 1.5 * 86400
    assert when(tomorrow).startswith(time.strftime("%Y-%m-%d ", time.gmtime(tomorrow)))


def test_times_no_calendar_holds_are_one_phrase():
    for v in (float("nan"), float("inf"), -float("inf"), 1e308, 1e400, 10**26, -1e308):
        s = when(v)
        assert s.startswith("a time out of range (") and len(s) < 60 and "\n" not in s, (v, s)
    assert when(None) == when(0) == "an unknown time"
