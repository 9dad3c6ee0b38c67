"""Change windows: when, in UTC, a restore may be committed.

Kept free of the lockstep bindings so it can be tested with plain Python
(`python3 -m unittest windows_test` in this folder).

A window spec is a comma-separated list of `DAYS HH:MM-HH:MM`, where DAYS is a
day (`mon`), a range (`mon-fri`, wrapping allowed: `fri-mon`), a list joined
by `+` (`sat+sun`) or `*` for every day. A window whose end is not after its
start runs past midnight into the next day (`fri 22:00-02:00` is Friday 22:00
to Saturday 02:00). Example: `mon-fri 09:00-17:00, sat 10:00-12:00`.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import List

DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]


class SpecError(ValueError):
    pass


@dataclass(frozen=True)
class Window:
    text: str
    days: frozenset  # weekday numbers (Monday = 0) on which the window opens
    start: int  # minutes after midnight
    end: int  # minutes after midnight; <= start means the next day

    def contains(self, now: datetime) -> bool:
        minute = now.hour * 60 + now.minute
        today = now.weekday()
        yesterday = (today - 1) % 7
        if self.start < self.end:
            return today in self.days and self.start <= minute < self.end
        # Runs past midnight: the late part of a day it opens on, or the
        # early part of the day after.
        return (today in self.days and minute >= self.start) or (
            yesterday in self.days and minute < self.end
        )


def _day(name: str, spec: str) -> int:
    try:
        return DAYS.index(name.strip().lower())
    except ValueError:
        raise SpecError(f"`{spec}`: unknown day `{name}` (use {', '.join(DAYS)})")


def _days(text: str, spec: str) -> frozenset:
    if text == "*":
        return frozenset(range(7))
    days = set()
    for part in text.split("+"):
        if "-" in part:
            first, last = (_day(d, spec) for d in part.split("-", 1))
            span = (last - first) % 7
            days.update((first + i) % 7 for i in range(span + 1))
        else:
            days.add(_day(part, spec))
    return frozenset(days)


def _minutes(text: str, spec: str) -> int:
    try:
        hours, minutes = text.split(":")
        value = int(hours) * 60 + int(minutes)
    except ValueError:
        raise SpecError(f"`{spec}`: `{text}` is not HH:MM")
    if not 0 <= value <= 24 * 60:
        raise SpecError(f"`{spec}`: `{text}` is not a time of day")
    return value


def parse(spec: str) -> List[Window]:
    windows = []
    for text in (w.strip() for w in spec.split(",")):
        if not text:
            continue
        try:
            days, times = text.split()
            start, end = times.split("-")
        except ValueError:
            raise SpecError(f"`{text}`: expected `DAYS HH:MM-HH:MM`")
        windows.append(Window(text, _days(days, text), _minutes(start, text), _minutes(end, text)))
    if not windows:
        raise SpecError("no window given")
    return windows


def open_window(windows: List[Window], now: datetime):
    """The first window containing `now` (a UTC datetime), or None."""
    return next((w for w in windows if w.contains(now)), None)
