"""System checks of the fleet's settings: a bad value stops ``migrate`` and the servers with a clear message.

| id | problem |
| --- | --- |
| fleet.E001 | API_KEY_RATE is not a rate such as ``1200/min`` (docs/operations.md#request-limits) |
| fleet.E002 | AGENT_TOKEN_RATE is not a rate such as ``5/heartbeat`` or ``30/min`` |
| fleet.E003 | CACHE_URL is not a ``redis://``, ``rediss://`` or ``unix://`` URL |
| fleet.E004 | FLEET_WATCH_RECONNECT_SECONDS is not an integer >= 1 (docs/fleet.md#watch) |
| fleet.E005 | WEB_THREADS is not an integer >= 1 |
| fleet.E006 | FLEET_WATCH_PING_SECONDS is not an integer >= 1 |
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


_POSITIVE = (
    ("FLEET_WATCH_RECONNECT_SECONDS", 1, "fleet.E004", "seconds before a web process LISTENs again"),
    ("FLEET_WATCH_PING_SECONDS", 30, "fleet.E006", "seconds a LISTEN connection may stay quiet before a ping"),
    ("WEB_THREADS", 4, "fleet.E005", "threads per web process"),
)


@register(TAG)
def check_positive_integers(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for name, default, code, meaning in _POSITIVE:
        value = getattr(settings, name, default)
        if type(value) is not int or value < 1:
            errors.append(
                Error(
                    f"{name} must be an integer >= 1, not {value!r}.",
                    hint=f"Set {name} to the {meaning}, an integer >= 1 (default {default}).",
                    id=code,
                )
            )
    return errors
