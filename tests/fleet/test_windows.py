"""Maintenance windows (docs/api.md#pools): parsing, and the time arithmetic against a minute-by-minute model.

No database: fleet.windows is pure. The reference model below is written from the docs' words,
not from the module: one flag per UTC minute, set for every minute t with
occurrence_start(d) <= t < occurrence_start(d) + duration for some listed local day d.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.windows import (
    MaintenanceWindow,
    WindowError,
    finish_after_open_seconds,
    is_open,
    next_opening,
    open_until,
    parse_windows,
)

FIELD = "policy.maintenanceWindows"
ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "UTC"]
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

day_names = st.sets(st.sampled_from(["mon", "tue", "wed", "thu", "fri", "sat", "sun"]), min_size=1).map(
    lambda days: [d for d in ["mon", "tue", "wed", "thu", "fri", "sat", "sun"] if d in days]
)
starts = st.builds(
    "{:02d}:{:02d}".format,
    st.one_of(st.sampled_from([0, 1, 2, 3, 23]), st.integers(0, 23)),  # DST changes happen at 0..3
    st.one_of(st.sampled_from([0, 15, 30, 45]), st.integers(0, 59)),
)
durations = st.one_of(st.integers(1, 240), st.sampled_from([30, 60, 1440, 10079, 10080]), st.integers(1, 10080))
window_json = st.fixed_dictionaries(
    {"days": day_names, "start": starts, "durationMinutes": durations, "timezone": st.sampled_from(ZONES)}
)
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


@settings(max_examples=100, deadline=None)
@given(ws=st.lists(window_json, max_size=4))
def test_as_json_parses_back_to_the_same_windows(ws: list[dict]) -> None:
    windows = parse_windows(ws)
    assert [w.as_json() for w in windows] == ws  # the strategy lists days in week order
    assert parse_windows(json.loads(json.dumps([w.as_json() for w in windows]))) == windows


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def damaged_windows(draw: st.DrawFn) -> object:
    """Mostly valid windows with one key set to any JSON value (or dropped), or any JSON at all."""
    if draw(st.booleans()):
        return draw(json_values)
    ws = draw(st.lists(window_json, min_size=1, max_size=3))
    victim = ws[draw(st.integers(0, len(ws) - 1))]
    key = draw(st.sampled_from(["days", "start", "durationMinutes", "timezone", "extra"]))
    if draw(st.booleans()):
        victim.pop(key, None)
    else:
        victim[key] = draw(json_values)
    return ws


@settings(max_examples=100, deadline=None)
@given(value=damaged_windows())
def test_parse_refuses_any_json_with_window_error_only(value: object) -> None:
    error = None
    try:
        parsed = parse_windows(value)
    except WindowError as exc:
        error = exc
    if error is None:
        assert all(isinstance(w, MaintenanceWindow) for w in parsed)
    else:
        assert error.code == "invalid_window"
        assert str(error).startswith(f"{error.field} ")


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


def test_parse_gives_windows_and_back_the_api_form() -> None:
    value = [
        {"days": ["sun", "mon", "wed"], "start": "23:05", "durationMinutes": 90, "timezone": "Europe/Berlin"},
        {"days": ["sat"], "start": "00:00", "durationMinutes": 10080},
    ]
    first, second = parse_windows(value)
    assert first == MaintenanceWindow(frozenset({0, 2, 6}), time(23, 5), 90, "Europe/Berlin")
    assert first.as_json() == {
        "days": ["mon", "wed", "sun"],
        "start": "23:05",
        "durationMinutes": 90,
        "timezone": "Europe/Berlin",
    }
    assert second.timezone == "UTC"
    assert len(parse_windows([value[1]] * 32)) == 32
    assert hash(first) == hash(parse_windows(value)[0])


GOOD = {"days": ["mon"], "start": "09:00", "durationMinutes": 60, "timezone": "UTC"}


def with_(**changes: object) -> list[dict]:
    return [{**GOOD, **changes}]


def without(key: str) -> list[dict]:
    return [{k: v for k, v in GOOD.items() if k != key}]


PARSE_ERRORS = [
    ("not a list", FIELD),
    ({"days": ["mon"]}, FIELD),
    ([GOOD] * 33, FIELD),
    ([1], f"{FIELD}[0]"),
    ([GOOD, None], f"{FIELD}[1]"),
    (with_(extra=1), f"{FIELD}[0].extra"),
    (without("days"), f"{FIELD}[0].days"),
    (without("start"), f"{FIELD}[0].start"),
    (without("durationMinutes"), f"{FIELD}[0].durationMinutes"),
    (with_(days="mon"), f"{FIELD}[0].days"),
    (with_(days=[]), f"{FIELD}[0].days"),
    (with_(days=None), f"{FIELD}[0].days"),
    (with_(days=["mon", "tue", "mon"]), f"{FIELD}[0].days[2]"),
    (with_(days=["Mon"]), f"{FIELD}[0].days[0]"),
    (with_(days=["mon", 1]), f"{FIELD}[0].days[1]"),
    (with_(days=["monday"]), f"{FIELD}[0].days[0]"),
    *[
        (with_(start=bad), f"{FIELD}[0].start")
        for bad in ["9:00", "24:00", "23:60", "09:00:00", " 09:00", "09:00\n", "0900", "\uff10\uff19:00", 900, None, ""]
    ],
    *[
        (with_(durationMinutes=bad), f"{FIELD}[0].durationMinutes")
        for bad in [0, -1, 10081, True, False, 60.0, "60", None]
    ],
    *[
        (with_(timezone=bad), f"{FIELD}[0].timezone")
        for bad in [
            "",
            "localtime",
            "posixrules",
            "/etc/localtime",
            "../../etc/passwd",
            "Europe/../Europe/Berlin",
            "posix/Europe/Berlin",
            "right/UTC",
            "europe/berlin",
            "Europe/Berlin\x00",
            "Europe/\udc80",
            "Mars/Olympus",
            None,
            5,
        ]
    ],
]


@pytest.mark.parametrize(("value", "field"), PARSE_ERRORS)
def test_parse_errors_name_the_field(value: object, field: str) -> None:
    with pytest.raises(WindowError) as caught:
        parse_windows(value)
    assert caught.value.field == field
    assert caught.value.code == "invalid_window"
    assert isinstance(caught.value, ValueError)
    message = str(caught.value)
    assert message.startswith(f"{field} ")
    assert message.endswith(".")


def test_parse_error_uses_the_given_field_name() -> None:
    with pytest.raises(WindowError, match=r"^pool\.windows\[0\]\.start ") as caught:
        parse_windows(with_(start="25:00"), field="pool.windows")
    assert caught.value.field == "pool.windows[0].start"


def test_direct_construction_is_checked() -> None:
    with pytest.raises(ValueError, match="days"):
        MaintenanceWindow(frozenset(), time(9), 60, "UTC")
    with pytest.raises(ValueError, match="duration"):
        MaintenanceWindow(frozenset({0}), time(9), 0, "UTC")
    with pytest.raises(ValueError, match="start"):
        MaintenanceWindow(frozenset({0}), time(9, 0, 30), 60, "UTC")
    with pytest.raises(ValueError, match="time zone"):
        MaintenanceWindow(frozenset({0}), time(9), 60, "localtime")
    # A fold on the start time cannot change the fold=0 rule.
    folded = MaintenanceWindow(frozenset({6}), time(2, 30, fold=1), 60, "Europe/Berlin")
    assert folded.occurrence_start(date(2026, 10, 25)) == utc(2026, 10, 25, 0, 30)
