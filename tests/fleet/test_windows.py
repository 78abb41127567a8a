"""Maintenance windows (docs/api.md#pools): the time arithmetic against a minute-by-minute model (parsing:
test_windows_parse.py).

No database: fleet.windows is pure. The reference model below is written from the docs' words,
not from the module: one flag per UTC minute, set for every minute t with
occurrence_start(d) <= t < occurrence_start(d) + duration for some listed local day d.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.windows import (
    MaintenanceWindow,
    finish_after_open_seconds,
    is_open,
    next_opening,
    open_until,
    parse_windows,
)
from tests.fleet.windows_json import window_json

# Instants where the test zones change offset in 2026 (plus one quiet instant), in UTC.
DST_CHANGES = [
    datetime(2026, 3, 29, 1, 0, tzinfo=UTC),  # Europe/Berlin spring forward
    datetime(2026, 10, 25, 1, 0, tzinfo=UTC),  # Europe/Berlin fall back
    datetime(2026, 3, 8, 7, 0, tzinfo=UTC),  # America/New_York spring forward
    datetime(2026, 11, 1, 6, 0, tzinfo=UTC),  # America/New_York fall back
    datetime(2026, 4, 4, 15, 0, tzinfo=UTC),  # Australia/Lord_Howe 30-minute fall back
    datetime(2026, 10, 3, 15, 30, tzinfo=UTC),  # Australia/Lord_Howe 30-minute spring forward
    datetime(2026, 7, 15, 12, 0, tzinfo=UTC),  # nothing changes
]
HORIZON_MINUTES = 8 * 24 * 60


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def local(tz: str, *args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=ZoneInfo(tz), fold=fold)


def window(days: str, start: str, minutes: int, tz: str = "UTC") -> MaintenanceWindow:
    (parsed,) = parse_windows([{"days": days.split(), "start": start, "durationMinutes": minutes, "timezone": tz}])
    return parsed


# -- the reference model ---------------------------------------------------------------------------


class MinuteModel:
    """One flag per UTC minute from ``origin`` on: is any window open during that minute."""

    def __init__(self, windows: list[dict], origin: datetime, minutes: int) -> None:
        self.origin = origin
        self.flags = bytearray(minutes)
        base = origin.date()
        for w in windows:
            zone = ZoneInfo(w["timezone"])
            hour, minute = (int(part) for part in w["start"].split(":"))
            for offset in range(-10, minutes // 1440 + 3):  # local days around the span, with slack
                d = base + timedelta(days=offset)
                if ["mon", "tue", "wed", "thu", "fri", "sat", "sun"][d.weekday()] not in w["days"]:
                    continue
                begin = datetime(d.year, d.month, d.day, hour, minute, tzinfo=zone).astimezone(UTC)
                first = int((begin - origin).total_seconds()) // 60
                low, high = max(first, 0), min(first + w["durationMinutes"], minutes)
                if low < high:  # every minute t of [begin, begin + duration) within the span is open
                    self.flags[low:high] = b"\x01" * (high - low)

    def minute(self, at: datetime) -> int:
        return int((at - self.origin).total_seconds()) // 60

    def instant(self, minute: int) -> datetime:
        return self.origin + timedelta(minutes=minute)

    def is_open(self, at: datetime) -> bool:
        return bool(self.flags[self.minute(at)])

    def next_opening(self, at: datetime) -> datetime:
        if self.is_open(at):
            return at
        m = self.minute(at) + 1
        while not self.flags[m]:
            m += 1
        return self.instant(m)

    def open_until(self, at: datetime) -> datetime | None:
        if not self.is_open(at):
            return at
        m, limit = self.minute(at) + 1, self.minute(at + timedelta(minutes=HORIZON_MINUTES)) + 1
        while m < limit and self.flags[m]:
            m += 1
        end = self.instant(m)
        return None if end >= at + timedelta(minutes=HORIZON_MINUTES) else end

    def finish_after(self, at: datetime, seconds: int) -> datetime:
        """``at`` on a whole minute: the instant ``seconds`` of open minutes have passed."""
        if seconds == 0:
            return at
        whole, rest = divmod(seconds, 60)
        m = self.minute(at)
        while True:
            if self.flags[m]:
                if whole == 0:
                    return self.instant(m) + timedelta(seconds=rest)
                whole -= 1
                if whole == 0 and rest == 0:
                    return self.instant(m + 1)
            m += 1


# -- strategies ------------------------------------------------------------------------------------

windows_json = st.lists(window_json, min_size=1, max_size=3)
instants = st.builds(
    lambda anchor, seconds: anchor + timedelta(seconds=seconds),
    st.sampled_from(DST_CHANGES),
    st.integers(-10 * 86400, 10 * 86400),
)
PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def model_for(ws: list[dict], at: datetime, days: int = 9) -> MinuteModel:
    origin = at.replace(second=0, microsecond=0)
    return MinuteModel(ws, origin, days * 1440 + 10)


# -- properties ------------------------------------------------------------------------------------


@PROPERTY
@given(ws=windows_json, at=instants)
def test_is_open_matches_the_minute_model(ws: list[dict], at: datetime) -> None:
    model = model_for(ws, at, days=1)
    windows = parse_windows(ws)
    assert is_open(windows, at) is model.is_open(at)
    # The same instant seen in another zone is the same answer.
    assert is_open(windows, at.astimezone(ZoneInfo("Asia/Kolkata"))) is model.is_open(at)


@PROPERTY
@given(ws=windows_json, at=instants)
def test_next_opening_matches_the_minute_model(ws: list[dict], at: datetime) -> None:
    model = model_for(ws, at)
    result = next_opening(parse_windows(ws), at)
    assert result == model.next_opening(at)
    assert result.utcoffset() == timedelta(0)


@PROPERTY
@given(ws=windows_json, at=instants)
def test_open_until_matches_the_minute_model(ws: list[dict], at: datetime) -> None:
    model = model_for(ws, at)
    assert open_until(parse_windows(ws), at) == model.open_until(at)


@PROPERTY
@given(ws=windows_json, at=instants, share=st.floats(0, 1))
def test_finish_after_open_seconds_matches_the_minute_model(ws: list[dict], at: datetime, share: float) -> None:
    at = at.replace(second=0)
    model = MinuteModel(ws, at, 30 * 1440)
    seconds = int(sum(model.flags) * 60 * share)  # never beyond what the model covers
    assert finish_after_open_seconds(parse_windows(ws), at, seconds) == model.finish_after(at, seconds)


# -- examples --------------------------------------------------------------------------------------


def test_no_windows_is_always_open() -> None:
    at = utc(2026, 5, 1, 3, 4, 5)
    assert parse_windows(None) == ()
    assert parse_windows([]) == ()
    assert is_open((), at)
    assert next_opening((), at) == at
    assert open_until((), at) is None
    assert finish_after_open_seconds((), at, 90.5) == at + timedelta(seconds=90.5)


def test_window_crossing_midnight() -> None:
    ws = [window("mon", "22:00", 180, "Europe/Berlin")]  # Monday 22:00 to Tuesday 01:00 local
    assert not is_open(ws, local("Europe/Berlin", 2026, 6, 15, 21, 59))
    assert is_open(ws, local("Europe/Berlin", 2026, 6, 15, 22, 0))
    assert is_open(ws, local("Europe/Berlin", 2026, 6, 16, 0, 59, 59))
    assert not is_open(ws, local("Europe/Berlin", 2026, 6, 16, 1, 0))
    assert open_until(ws, local("Europe/Berlin", 2026, 6, 16, 0, 30)) == utc(2026, 6, 15, 23, 0)
    assert next_opening(ws, local("Europe/Berlin", 2026, 6, 16, 1, 0)) == utc(2026, 6, 22, 20, 0)


def test_sunday_window_wraps_into_monday() -> None:
    ws = [window("sun", "23:00", 180)]
    assert is_open(ws, utc(2026, 6, 22, 1, 0))  # Monday 01:00
    assert not is_open(ws, utc(2026, 6, 22, 2, 0))
    assert open_until(ws, utc(2026, 6, 22, 1, 0)) == utc(2026, 6, 22, 2, 0)
    assert next_opening(ws, utc(2026, 6, 22, 2, 0)) == utc(2026, 6, 28, 23, 0)


def test_spring_forward_start_in_the_gap_uses_the_offset_before_the_change() -> None:
    # 2026-03-29 02:30 does not exist in Berlin; fold=0 reads it as CET: 01:30 UTC, i.e. 03:30 CEST.
    ws = [window("sun", "02:30", 60, "Europe/Berlin")]
    assert next_opening(ws, utc(2026, 3, 29, 0, 0)) == utc(2026, 3, 29, 1, 30)
    assert open_until(ws, utc(2026, 3, 29, 1, 30)) == utc(2026, 3, 29, 2, 30)  # 04:30 CEST: real 60 minutes
    ny = [window("sun", "02:30", 60, "America/New_York")]
    assert next_opening(ny, utc(2026, 3, 8, 0, 0)) == utc(2026, 3, 8, 7, 30)  # read as EST


def test_duration_is_real_elapsed_time_across_a_dst_change() -> None:
    # Sunday 01:00 CET (00:00 UTC) plus 180 real minutes is 03:00 UTC: 05:00 CEST, not 04:00 wall time.
    ws = [window("sun", "01:00", 180, "Europe/Berlin")]
    assert open_until(ws, local("Europe/Berlin", 2026, 3, 29, 1, 0)) == local("Europe/Berlin", 2026, 3, 29, 5, 0)
    # A daily 24-hour window leaves the extra hour of the 25-hour fall-back day closed.
    daily = [window("mon tue wed thu fri sat sun", "00:00", 1440, "Europe/Berlin")]
    assert open_until(daily, utc(2026, 10, 24, 12, 0)) == local("Europe/Berlin", 2026, 10, 25, 23, 0)
    assert not is_open(daily, local("Europe/Berlin", 2026, 10, 25, 23, 30))
    assert open_until(daily, utc(2026, 7, 1, 12, 0)) is None  # no change within 8 days: open indefinitely


def test_fall_back_ambiguous_start_takes_the_first_occurrence() -> None:
    ws = [window("sun", "02:30", 60, "Europe/Berlin")]
    # Compared in UTC: Python never finds an ambiguous local time equal to a time of another zone.
    first = local("Europe/Berlin", 2026, 10, 25, 2, 30).astimezone(UTC)
    second = local("Europe/Berlin", 2026, 10, 25, 2, 30, fold=1).astimezone(UTC)
    assert next_opening(ws, utc(2026, 10, 24, 12, 0)) == first == utc(2026, 10, 25, 0, 30)
    assert is_open(ws, first)
    assert not is_open(ws, second)  # the second 02:30 (CET) is one real hour later: closed
    ny = [window("sun", "01:30", 30, "America/New_York")]
    assert next_opening(ny, utc(2026, 11, 1, 0, 0)) == utc(2026, 11, 1, 5, 30)  # EDT, the first 01:30


def test_lord_howe_half_hour_change_and_kolkata_half_hour_offset() -> None:
    lh = [window("sun", "02:15", 30, "Australia/Lord_Howe")]  # 02:00-02:30 is skipped on 2026-10-04
    assert next_opening(lh, utc(2026, 10, 3, 0, 0)) == utc(2026, 10, 3, 15, 45)
    kolkata = [window("wed", "09:00", 60, "Asia/Kolkata")]
    assert next_opening(kolkata, utc(2026, 6, 15, 0, 0)) == utc(2026, 6, 17, 3, 30)


def test_overlapping_and_touching_windows_merge() -> None:
    touching = [window("mon", "09:00", 60), window("mon", "10:00", 60)]
    assert open_until(touching, utc(2026, 6, 15, 9, 30)) == utc(2026, 6, 15, 11, 0)
    overlapping = [window("mon", "10:30", 60), window("mon", "09:00", 120)]
    assert open_until(overlapping, utc(2026, 6, 15, 9, 0)) == utc(2026, 6, 15, 11, 30)
    always = [window("mon", "00:00", 10080)]  # one week from each Monday: never closed in UTC
    assert open_until(always, utc(2026, 6, 17, 5, 0)) is None


def test_open_until_and_next_opening_when_closed_or_open() -> None:
    ws = [window("mon", "09:00", 60)]
    closed, opened = utc(2026, 6, 15, 8, 0), utc(2026, 6, 15, 9, 15)
    assert open_until(ws, closed) == closed  # closed now: open for no time
    assert next_opening(ws, closed) == utc(2026, 6, 15, 9, 0)
    assert next_opening(ws, opened) == opened
    assert next_opening(ws, local("Europe/Berlin", 2026, 6, 15, 11, 15)).tzinfo is UTC  # result in UTC


def test_finish_after_open_seconds_counts_closed_hours() -> None:
    office = [window("mon tue wed thu fri", "09:00", 480)]  # 09:00-17:00 UTC on weekdays
    friday_4pm = utc(2026, 6, 19, 16, 0)
    assert finish_after_open_seconds(office, friday_4pm, 2 * 3600) == utc(2026, 6, 22, 10, 0)  # Monday 10:00
    assert finish_after_open_seconds(office, friday_4pm, 3600) == utc(2026, 6, 19, 17, 0)  # exactly at closing
    assert finish_after_open_seconds(office, utc(2026, 6, 20, 12, 0), 60) == utc(2026, 6, 22, 9, 1)
    assert finish_after_open_seconds(office, friday_4pm, 0) == friday_4pm
    # Far beyond a year the rest is spread at the year's open ratio (8h a day, 5 days in 7).
    years = finish_after_open_seconds(office, utc(2026, 1, 5, 9, 0), 3 * 365 * 24 * 3600 * (40 / 168))
    assert abs(years - utc(2029, 1, 5, 9, 0)) < timedelta(days=7)


def test_naive_instants_and_bad_amounts_are_refused() -> None:
    ws = [window("mon", "09:00", 60)]
    with pytest.raises(ValueError, match="aware"):
        is_open(ws, datetime(2026, 6, 15, 9, 0))
    with pytest.raises(ValueError, match="open_seconds"):
        finish_after_open_seconds(ws, utc(2026, 6, 15), -1)
    with pytest.raises(ValueError, match="open_seconds"):
        finish_after_open_seconds(ws, utc(2026, 6, 15), float("inf"))
