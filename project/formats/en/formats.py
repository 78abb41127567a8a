"""The console's one date-time format, with its time zone (docs/console.md): ``2026-12-07 23:00 UTC``.

Django's English formats ("Dec. 7, 2026, 11 p.m.") drop the minutes on the hour and the zone; every date
the admin shows (its own fields, the lists, the rollout pages) goes through these (``FORMAT_MODULE_PATH``).
"""

DATETIME_FORMAT = "Y-m-d H:i T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i"
