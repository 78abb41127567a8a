"""System checks of the fleet's settings: a bad value stops ``migrate`` and the servers with a clear message.

| id | problem |
| --- | --- |
| fleet.E001 | API_KEY_RATE is not a rate such as ``1200/min`` (docs/operations.md#request-limits) |
| fleet.E002 | AGENT_TOKEN_RATE is not a rate such as ``5/heartbeat`` or ``30/min`` |
| fleet.E003 | CACHE_URL is not a ``redis://``, ``rediss://`` or ``unix://`` URL |
| fleet.E004 | FLEET_WATCH_RECONNECT_SECONDS is not an integer >= 1 (docs/fleet.md#watch) |
| fleet.E005 | WEB_THREADS is not an integer >= 1 |
| fleet.E006 | FLEET_WATCH_PING_SECONDS is not an integer >= 1 |
| fleet.E007 | DATABASE_URL is not PostgreSQL (SQLite, another engine, a scheme naming none): PostgreSQL alone |
| fleet.E008 | WEB_SESSIONS_IN_PROGRESS is not an integer >= 0 (docs/operations.md#admission-control) |
| fleet.E009 | ROLLOUT_APPROVALS is not an integer from 0 to 5 (docs/controller.md#approvals) |
| fleet.E010 | API_KEY_MAX_LIFETIME is not a lifetime such as ``90d``, ``12h`` or ``none`` (docs/api.md#api-keys) |
| fleet.W001 | no CACHE_URL: each web process counts requests alone (``check --deploy`` only) |
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from core.ratelimit import parse_rate
from fleet.models.iam import MAX_ROLLOUT_APPROVALS
from fleet.services.apikeys import max_lifetime
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
    return messages


@register(TAG, deploy=True)
def check_shared_counts(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A deployment's concern (several web processes), not every command's: ``manage.py check --deploy``."""
    if getattr(settings, "CACHE_URL", ""):
        return []
    return [
        Warning(
            "No CACHE_URL: each web process counts requests per credential alone (the limits are multiplied "
            "by the number of web processes).",
            hint="Set CACHE_URL to a Redis shared by every web process, e.g. redis://redis:6379/1.",
            id="fleet.W001",
        )
    ]


_POSITIVE = (
    ("FLEET_WATCH_RECONNECT_SECONDS", 1, "fleet.E004", "seconds before a web process LISTENs again"),
    ("FLEET_WATCH_PING_SECONDS", 30, "fleet.E006", "seconds a LISTEN connection may stay quiet before a ping"),
    ("WEB_THREADS", 4, "fleet.E005", "threads per web process"),
)
#: The same, where 0 is a meaning of its own.
_NATURAL = (
    ("WEB_SESSIONS_IN_PROGRESS", 256, "fleet.E008", "agent-session requests a web process takes at once (0: all)"),
)


@register(TAG)
def check_positive_integers(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for least, names in ((1, _POSITIVE), (0, _NATURAL)):
        for name, default, code, meaning in names:
            value = getattr(settings, name, default)
            if type(value) is not int or value < least:
                errors.append(
                    Error(
                        f"{name} must be an integer >= {least}, not {value!r}.",
                        hint=f"Set {name} to the {meaning}, an integer >= {least} (default {default}).",
                        id=code,
                    )
                )
    return errors


POSTGRESQL = "django.db.backends.postgresql"


@register(TAG, "database")
def check_database_engine(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """PostgreSQL alone: its statements, locks, LISTEN/NOTIFY and triggers are the only path the code has.
    project/settings.py keeps another engine of DATABASE_URL in DATABASE_REFUSED (and never connects to it)."""
    engines = {alias: database.get("ENGINE") for alias, database in settings.DATABASES.items()}
    if getattr(settings, "DATABASE_REFUSED", ""):
        engines["default"] = settings.DATABASE_REFUSED
    return [
        Error(
            f"The database {alias!r} uses {engine}: this project runs on PostgreSQL only (its statements, "
            "row and advisory locks, triggers and LISTEN/NOTIFY have no other path).",
            hint="Set DATABASE_URL to a PostgreSQL URL, e.g. postgres://postgres@127.0.0.1:5432/rollout; "
            "`make demo` runs a PostgreSQL of its own, nothing to install.",
            id="fleet.E007",
        )
        for alias, engine in engines.items()
        if engine != POSTGRESQL
    ]


@register(TAG)
def check_rollout_approvals(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    value = getattr(settings, "ROLLOUT_APPROVALS", 0)
    if type(value) is int and 0 <= value <= MAX_ROLLOUT_APPROVALS:
        return []
    return [
        Error(
            f"ROLLOUT_APPROVALS must be an integer from 0 to {MAX_ROLLOUT_APPROVALS}, not {value!r}.",
            hint="Set ROLLOUT_APPROVALS to how many approvals a new tenant's rollouts need (default 0: none).",
            id="fleet.E009",
        )
    ]


@register(TAG)
def check_api_key_max_lifetime(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    try:
        max_lifetime()
    except ValueError as exc:
        return [
            Error(
                f"API_KEY_MAX_LIFETIME: {exc}.",
                hint="Set API_KEY_MAX_LIFETIME to the longest a key made through the API may live (30d, 12h, 90m), or "
                "to none (the default): no cap.",
                id="fleet.E010",
            )
        ]
    return []
