"""Times as the API writes them: ISO 8601 in UTC with ``Z``, as DRF renders datetimes (TIME_ZONE is UTC)."""

from __future__ import annotations

from datetime import UTC, datetime


def api_datetime(value: datetime | None) -> str | None:
    """``2026-12-04T21:18:32.123456Z``; None stays None."""
    if value is None:
        return None
    text = value.astimezone(UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text
