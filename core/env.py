"""Small typed parsers for settings read from the environment.

They never raise on a malformed value for a module option: the raw value is kept
so that the system checks (rollout/checks.py) can report it with a clear message.
"""

from __future__ import annotations

import os
from typing import overload


@overload
def env_str(name: str, default: str) -> str: ...
@overload
def env_str(name: str, default: None = None) -> str | None: ...
def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return value.strip()


def env_bool(name: str, default: bool = False) -> bool:
    value = env_str(name)
    if value is None:
        return default
    return value.lower() in {"1", "true", "yes", "on"}


def env_int_or_raw(name: str, default: int) -> int | str:
    """An integer, or the raw string when it is not one (reported by a check)."""
    value = env_str(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        return value


def env_list(name: str) -> list[str]:
    value = env_str(name)
    if value is None:
        return []
    return [item.strip() for item in value.split(",") if item.strip()]
