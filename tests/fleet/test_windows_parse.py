"""Maintenance windows (docs/api.md#pools) as the API takes them: parsed, refused with the field named, and
given back in the API's form. No database: fleet.windows is pure."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.windows import MaintenanceWindow, WindowError, parse_windows
from tests.fleet.windows_json import window_json

FIELD = "policy.maintenanceWindows"


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
    assert folded.occurrence_start(date(2026, 10, 25)) == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
