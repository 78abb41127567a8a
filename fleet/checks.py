"""System checks of the request limits (docs/operations.md#request-limits).

| id | what |
| --- | --- |
| fleet.E001 | API_KEY_RATE is not a rate such as ``1200/min`` |
| fleet.E002 | AGENT_TOKEN_RATE is not a rate such as ``5/heartbeat`` or ``30/min`` |
| fleet.E003 | CACHE_URL is not a ``redis://``, ``rediss://`` or ``unix://`` URL |
| fleet.W001 | no CACHE_URL on PostgreSQL: each web process counts requests alone |
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from core.ratelimit import parse_rate
from fleet.services.nodes import heartbeat_seconds

TAG = "fleet"
RATE_HINT = "A rate is <requests>/<unit>: 1200/min, 30/2min, 100/hour, 10/s"


@register(TAG)
def check_request_limits(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    for name, heartbeat, error_id, example in (
        ("API_KEY_RATE", None, "fleet.E001", "1200/min"),
        ("AGENT_TOKEN_RATE", heartbeat_seconds(), "fleet.E002", "5/heartbeat"),
    ):
        try:
            parse_rate(str(getattr(settings, name, "")), heartbeat_seconds=heartbeat)
        except ValueError as exc:
            per_heartbeat = ", or 5/heartbeat: 5 per heartbeatSeconds averaged over a minute" if heartbeat else ""
            messages.append(
                Error(f"{name}: {exc}.", hint=f"{RATE_HINT}{per_heartbeat} (default {example}).", id=error_id)
            )
    url = getattr(settings, "CACHE_URL", "") or ""
    if url and not url.startswith(("redis://", "rediss://", "unix://")):
        messages.append(
            Error(
                f"CACHE_URL {url!r} is not a Redis URL.",
                hint="CACHE_URL is the shared Redis where request counts meet, e.g. redis://redis:6379/1.",
                id="fleet.E003",
            )
        )
    if not url and settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        messages.append(
            Warning(
                "No CACHE_URL: each web process counts requests per credential alone (the limits are multiplied "
                "by the number of web processes).",
                hint="Set CACHE_URL to a Redis shared by every web process, e.g. redis://redis:6379/1.",
                id="fleet.W001",
            )
        )
    return messages
