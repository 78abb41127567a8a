"""System checks of the fleet's settings: a bad value stops ``migrate`` and the servers with a clear message.

| id | problem |
| --- | --- |
| fleet.E001 | FLEET_WATCH_RECONNECT_SECONDS is not an integer >= 1 |
| fleet.E002 | WEB_THREADS is not an integer >= 1 |
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register

TAG = "fleet"
_POSITIVE = (
    ("FLEET_WATCH_RECONNECT_SECONDS", 1, "fleet.E001", "seconds before a web process LISTENs again"),
    ("WEB_THREADS", 8, "fleet.E002", "threads per web process"),
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
