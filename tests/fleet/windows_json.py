"""Maintenance windows as the API takes them (docs/api.md#pools), drawn by Hypothesis: for the arithmetic's tests
(test_windows.py) and the parser's (test_windows_parse.py)."""

from __future__ import annotations

from hypothesis import strategies as st

ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "UTC"]

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
