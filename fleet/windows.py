"""Maintenance windows of a pool (docs/api.md#pools): parsing and time arithmetic, free of Django.

Semantics (the API promises these; the tests check them against a minute-by-minute model):

- An *occurrence* of a window begins on every local calendar day listed in ``days`` at the local
  wall time ``start`` in the window's ``timezone``. That wall time becomes an instant with PEP 495
  ``fold=0``, which is zoneinfo's rule for the two DST edge cases:

  * spring forward, a wall time in the gap (02:30 on 2026-03-29 in Europe/Berlin) does not exist;
    ``fold=0`` reads it with the offset in force *before* the change, so it is 01:30 UTC
    (shown after the change as 03:30 CEST);
  * fall back, a wall time that happens twice (02:30 on 2026-10-25 in Europe/Berlin) is the
    *first* of the two (00:30 UTC, still CEST).

- An occurrence lasts ``duration_minutes`` of real elapsed time from that instant, not of wall
  time: a 02:00 window of 120 minutes on a spring-forward day closes at 05:00 local. An occurrence
  may run past midnight and past the end of the week (a Sunday 23:00 window of 180 minutes is
  still open on Monday at 01:00). Intervals are half-open: open at the start instant, closed at
  the end instant.
- Several windows: the pool is open while any occurrence of any window is open. Overlapping or
  touching occurrences merge into one open stretch (``open_until`` reports the end of the stretch).
- No window (``None`` or ``[]`` in the API, ``()`` here) means always open.

Every function takes an aware ``datetime`` and works on instants; results are in UTC. They are
called per pool per controller tick, so they compute from the few occurrences around the instant
(the longest window is 7 days, so no occurrence that began more than 8 local days earlier can
still be open) instead of stepping through minutes.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

DAY_NAMES: tuple[str, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
MAX_WINDOWS = 32
MAX_DURATION_MINUTES = 7 * 24 * 60
DEFAULT_TIMEZONE = "UTC"
# ``open_until`` stops merging after this long and answers None ("open indefinitely").
OPEN_UNTIL_HORIZON = timedelta(days=8)

_KEYS = frozenset({"days", "start", "durationMinutes", "timezone"})
_REQUIRED_KEYS = ("days", "start", "durationMinutes")
_START_RE = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")
# Every window opens at least once per 7 local days; a local week lasts at most a few hours more
# than 7 real days, so 8 days of look-ahead always finds the next opening.
_LOOKAHEAD = timedelta(days=8)
# finish_after_open_seconds walks the exact calendar this far, then extrapolates (see there).
_FINISH_CHUNK = timedelta(days=28)
_FINISH_EXACT_HORIZON = timedelta(days=371)
# The shortest interval: [at, at + _INSTANT) holds the instant ``at`` only.
_INSTANT = timedelta(microseconds=1)


class WindowError(ValueError):
    """A refused ``policy.maintenanceWindows`` value; ``str(exc)`` is a sentence naming ``field``."""

    code = "invalid_window"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field} {message}")
        self.field = field


@lru_cache(maxsize=1)
def _known_timezones() -> frozenset[str]:
    """IANA names: the tzdata package's list, else the system's minus its non-IANA files.

    ``zoneinfo.available_timezones()`` also lists files of the system database that are not
    IANA zone names (``localtime``, ``posixrules``), which must not be accepted.
    """
    try:
        from importlib import resources

        with resources.files("tzdata").joinpath("zones").open("r") as f:
            names = frozenset(line.strip() for line in f if line.strip())
        if names:
            return names
    except (ImportError, OSError):
        pass
    import zoneinfo

    return frozenset(zoneinfo.available_timezones() - {"localtime", "posixrules", "posix", "right"})


def _load_zone(name: str) -> ZoneInfo | None:
    """The zone, or None for anything that is not a loadable IANA name (never raises)."""
    if not isinstance(name, str) or name not in _known_timezones():
        return None
    try:
        return ZoneInfo(name)
    except Exception:  # ZoneInfoNotFoundError (a KeyError), ValueError, OSError, UnicodeError...
        return None


@dataclass(frozen=True)
class MaintenanceWindow:
    """One weekly window: ``days`` are 0=Monday..6=Sunday, ``start`` a local wall time."""

    days: frozenset[int]
    start: time
    duration_minutes: int
    timezone: str = DEFAULT_TIMEZONE
    # Held so that a zone is read from disk once, not again whenever ZoneInfo's small cache drops it.
    zone: ZoneInfo = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Built by parse_windows from checked JSON; these guard direct construction in code.
        if not self.days or not all(type(d) is int and 0 <= d <= 6 for d in self.days):
            raise ValueError(f"days must be a non-empty set of 0..6, got {self.days!r}")
        if not isinstance(self.days, frozenset):
            object.__setattr__(self, "days", frozenset(self.days))
        if self.start.tzinfo is not None or self.start.second or self.start.microsecond:
            raise ValueError(f"start must be a naive whole-minute time, got {self.start!r}")
        if type(self.duration_minutes) is not int or not 1 <= self.duration_minutes <= MAX_DURATION_MINUTES:
            raise ValueError(f"duration_minutes must be 1..{MAX_DURATION_MINUTES}, got {self.duration_minutes!r}")
        zone = _load_zone(self.timezone)
        if zone is None:
            raise ValueError(f"unknown time zone {self.timezone!r}")
        object.__setattr__(self, "zone", zone)

    @property
    def duration(self) -> timedelta:
        return timedelta(minutes=self.duration_minutes)

    def as_json(self) -> dict[str, Any]:
        """The API form, days in week order."""
        return {
            "days": [DAY_NAMES[d] for d in sorted(self.days)],
            "start": f"{self.start.hour:02d}:{self.start.minute:02d}",
            "durationMinutes": self.duration_minutes,
            "timezone": self.timezone,
        }

    def occurrence_start(self, day: date) -> datetime:
        """The UTC instant the occurrence on local ``day`` begins (whether or not ``day`` is listed)."""
        # Built from hour and minute so that a fold set on ``start`` can never leak in: fold=0.
        local = datetime(day.year, day.month, day.day, self.start.hour, self.start.minute, tzinfo=self.zone)
        return local.astimezone(UTC)

    def occurrences(self, lo: datetime, hi: datetime) -> list[tuple[datetime, datetime]]:
        """The occurrences ``(start, end)`` in UTC that overlap ``[lo, hi)``, in order."""
        zone = self.zone
        # An occurrence open at ``lo`` began at most duration (+ a day of DST and local-date slack) earlier.
        first = (lo - self.duration).astimezone(zone).date() - timedelta(days=1)
        last = hi.astimezone(zone).date() + timedelta(days=1)
        duration = self.duration
        found = []
        day = first
        while day <= last:
            if day.weekday() in self.days:
                begin = self.occurrence_start(day)
                end = begin + duration
                if end > lo and begin < hi:
                    found.append((begin, end))
            day += timedelta(days=1)
        return found


def parse_windows(value: object, field: str = "policy.maintenanceWindows") -> tuple[MaintenanceWindow, ...]:
    """Check the JSON value of ``policy.maintenanceWindows`` strictly; ``None`` or ``[]`` is ``()``.

    Raises WindowError (code ``invalid_window``) naming the first offending field, e.g.
    ``policy.maintenanceWindows[2].start``.
    """
    if value is None:
        return ()
    if not isinstance(value, list):
        raise WindowError(field, "must be a list of windows or null.")
    if len(value) > MAX_WINDOWS:
        raise WindowError(field, f"must hold at most {MAX_WINDOWS} windows, got {len(value)}.")
    return tuple(_parse_window(item, f"{field}[{i}]") for i, item in enumerate(value))


def _parse_window(item: object, field: str) -> MaintenanceWindow:
    if not isinstance(item, dict):
        raise WindowError(field, 'must be an object with "days", "start", "durationMinutes" and "timezone".')
    unknown = sorted((repr(k) if not isinstance(k, str) else k) for k in item if k not in _KEYS)
    if unknown:
        raise WindowError(f"{field}.{unknown[0]}", "is not a window field (days, start, durationMinutes, timezone).")
    for key in _REQUIRED_KEYS:
        if key not in item:
            raise WindowError(f"{field}.{key}", "is required.")
    tz = item.get("timezone", DEFAULT_TIMEZONE)
    return MaintenanceWindow(
        days=_parse_days(item["days"], f"{field}.days"),
        start=_parse_start(item["start"], f"{field}.start"),
        duration_minutes=_parse_duration(item["durationMinutes"], f"{field}.durationMinutes"),
        timezone=_parse_timezone(tz, f"{field}.timezone"),
    )


def _parse_days(value: object, field: str) -> frozenset[int]:
    if not isinstance(value, list) or not value:
        raise WindowError(field, 'must be a non-empty list of days ("mon" to "sun").')
    days: set[int] = set()
    for j, name in enumerate(value):
        if not isinstance(name, str) or name not in DAY_NAMES:
            raise WindowError(f"{field}[{j}]", 'must be one of "mon", "tue", "wed", "thu", "fri", "sat", "sun".')
        day = DAY_NAMES.index(name)
        if day in days:
            raise WindowError(f"{field}[{j}]", f'repeats "{name}".')
        days.add(day)
    return frozenset(days)


def _parse_start(value: object, field: str) -> time:
    match = _START_RE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise WindowError(field, 'must be a 24-hour time "HH:MM" from "00:00" to "23:59".')
    return time(int(match[1]), int(match[2]))


def _parse_duration(value: object, field: str) -> int:
    # A JSON integer: bool is an int subclass in Python and 60.0 is a float; both are refused.
    if type(value) is not int or not 1 <= value <= MAX_DURATION_MINUTES:
        raise WindowError(field, f"must be an integer from 1 to {MAX_DURATION_MINUTES} (minutes).")
    return value


def _parse_timezone(value: object, field: str) -> str:
    if not isinstance(value, str) or _load_zone(value) is None:
        raise WindowError(field, 'must be an IANA time zone name such as "Europe/Berlin" or "UTC".')
    return value


# -- time arithmetic -------------------------------------------------------------------------------


def _utc(at: datetime) -> datetime:
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError("an aware datetime is required")
    return at.astimezone(UTC)


def _merged(windows: Iterable[MaintenanceWindow], lo: datetime, hi: datetime) -> list[tuple[datetime, datetime]]:
    """The open stretches within ``[lo, hi)``: occurrences merged when they overlap or touch, clipped."""
    spans = sorted(span for w in windows for span in w.occurrences(lo, hi))
    merged: list[tuple[datetime, datetime]] = []
    for begin, end in spans:
        if merged and begin <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((begin, end))
    return [(max(begin, lo), min(end, hi)) for begin, end in merged]


def is_open(windows: Sequence[MaintenanceWindow], at: datetime) -> bool:
    """Whether any window is open at ``at`` (no windows: always open)."""
    at = _utc(at)
    if not windows:
        return True
    return any(begin <= at < end for w in windows for begin, end in w.occurrences(at, at + _INSTANT))


def next_opening(windows: Sequence[MaintenanceWindow], at: datetime) -> datetime:
    """``at`` (in UTC) when open now, else the earliest later instant at which a window opens."""
    at = _utc(at)
    if not windows:
        return at
    stretches = _merged(windows, at, at + _LOOKAHEAD)
    # Never empty: every window opens at least once within any 8 days (see _LOOKAHEAD).
    return stretches[0][0]


def opening_window(windows: Sequence[MaintenanceWindow], opens_at: datetime) -> MaintenanceWindow | None:
    """The window with an occurrence that begins at ``opens_at`` (a ``next_opening``), or None."""
    opens_at = _utc(opens_at)
    return next(
        (w for w in windows if any(begin == opens_at for begin, _ in w.occurrences(opens_at, opens_at + _INSTANT))),
        None,
    )


def open_until(windows: Sequence[MaintenanceWindow], at: datetime) -> datetime | None:
    """When open at ``at``, the instant the open stretch ends (merging overlapping and touching windows).

    None: open for at least OPEN_UNTIL_HORIZON (8 days) from ``at``, i.e. open indefinitely for a
    controller; always so with no windows. Closed at ``at``: ``at`` itself (open for no time).
    """
    at = _utc(at)
    if not windows:
        return None
    horizon = at + OPEN_UNTIL_HORIZON
    stretches = _merged(windows, at, horizon)
    if not stretches or stretches[0][0] != at:
        return at
    end = stretches[0][1]
    return None if end >= horizon else end


def finish_after_open_seconds(windows: Sequence[MaintenanceWindow], start: datetime, open_seconds: float) -> datetime:
    """The instant by which ``open_seconds`` of open time have passed from ``start`` (UTC).

    For the dry run's estimate: closed hours do not count. Exact over the first year of calendar;
    beyond it the rest is spread at the open ratio of that year (an estimate of an estimate).
    """
    start = _utc(start)
    if not math.isfinite(open_seconds) or open_seconds < 0:
        raise ValueError(f"open_seconds must be a finite number >= 0, got {open_seconds!r}")
    remaining = timedelta(seconds=open_seconds)
    if not windows or not remaining:
        return start + remaining
    cursor = start
    open_so_far = timedelta(0)
    while cursor - start < _FINISH_EXACT_HORIZON:
        chunk_end = cursor + _FINISH_CHUNK
        for begin, end in _merged(windows, cursor, chunk_end):
            if remaining <= end - begin:
                return begin + remaining
            remaining -= end - begin
            open_so_far += end - begin
        cursor = chunk_end
    # Each window is open at least a minute a week, so the ratio is positive.
    ratio = open_so_far / (cursor - start)
    return cursor + remaining / ratio
