"""The module's options, read from settings.ROLLOUT (README.md#configuration).

Validation happens in rollout/checks.py as system checks; here values are
only read, with defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

DEFAULT_EVERY = 30


@dataclass(frozen=True)
class ModuleSettings:
    """settings.ROLLOUT, read with defaults (README.md#configuration).

    Not a rollout's options: those are rollout.rollouts.spec.RolloutOptions.
    """

    pins: tuple[str, ...]
    threshold: int | None  # None when misconfigured (the system checks say why)
    downloads_url: str | None
    every: int


def options() -> ModuleSettings:
    raw = getattr(settings, "ROLLOUT", {}) or {}
    release = raw.get("release") or {}
    threshold = release.get("threshold", 1)
    every = raw.get("every", DEFAULT_EVERY)
    return ModuleSettings(
        pins=tuple(release.get("pins") or ()),
        # Never fall back to a weaker threshold: a bad one disables registering.
        threshold=threshold if type(threshold) is int and threshold >= 1 else None,
        downloads_url=(raw.get("downloadsUrl") or None),
        every=every if isinstance(every, int) and every >= 1 else DEFAULT_EVERY,
    )


def binary_url(version: str, platform: str) -> str | None:
    """``{downloadsUrl}/bcd/{version}/{platform}``, or None without a downloads URL."""
    base = options().downloads_url
    if not base:
        return None
    return f"{base.rstrip('/')}/bcd/{version}/{platform}"
