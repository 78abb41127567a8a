"""A duration as a person says it (the console's plan preview, the demo's plan line): no Django, no rule."""

from __future__ import annotations


def duration_text(seconds: int | None) -> str:
    """A duration as a person says it, to its two largest units: ``605015`` -> ``7 days``, ``3900`` -> ``1 h 5 min``."""
    if seconds is None:
        return "unbounded: a pool with a disruption budget of 0 never starts a node"
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        hours += round(minutes / 60)
        if hours == 24:
            days, hours = days + 1, 0
        return f"{days} day{'s' if days > 1 else ''}" + (f" {hours} h" if hours else "")
    parts = [f"{n} {unit}" for n, unit in ((hours, "h"), (minutes, "min"), (secs, "s")) if n]
    return " ".join(parts[:2]) or "0 s"
