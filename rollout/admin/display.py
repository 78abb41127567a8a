"""Display helpers of the rollout pages: progress bars, labels, durations (no rule, no write)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from uuid import UUID

from django.urls import reverse
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.timezone import localtime

from rollout.models import NodeUpgrade, Rollout
from rollout.rollouts.reads import WaveStats

# --- rollouts: display helpers --------------------------------------------------------------
State = NodeUpgrade.State

# (css class, label, upgrade states) of the progress bar's segments, in order.
SEGMENTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("succeeded", "succeeded", (State.SUCCEEDED,)),
    ("failed", "failed", (State.FAILED,)),
    ("in-flight", "in flight", (State.IN_FLIGHT,)),
    ("pending", "pending", (State.PENDING,)),
    ("other", "skipped/cancelled/rolled back", (State.SKIPPED, State.CANCELLED, State.ROLLED_BACK)),
)


def counts_total(waves: Iterable[WaveStats]) -> dict[str, int]:
    """Counts by upgrade state summed over waves."""
    totals = dict.fromkeys(State.values, 0)
    for wave in waves:
        for state, n in wave.counts.items():
            totals[state] += n
    return totals


def progress_bar(counts: Mapping[str, Any]) -> SafeString:
    """Proportional coloured segments, with the counts as a tooltip."""
    parts = [(css, label, sum(counts.get(key, 0) for key in keys)) for css, label, keys in SEGMENTS]
    total = sum(n for _, _, n in parts)
    title = ", ".join(f"{n} {label}" for _, label, n in parts) if total else "no nodes"
    segments = format_html_join(
        "",
        '<span class="rollout-seg rollout-seg-{}" style="width: {}%"></span>',
        ((css, f"{n * 100 / total:.3f}") for css, _, n in parts if n),
    )
    return format_html(
        '<div class="rollout-progress" title="{}" role="img" aria-label="{}">{}</div>', title, title, segments
    )


def short_id(rollout: Rollout) -> str:
    return str(rollout.pk)[:8]


def rollout_label(rollout: Rollout) -> str:
    return f"{rollout.release.version} · {short_id(rollout)}"


def rollout_link(rollout: Rollout) -> SafeString:
    url = reverse("admin:rollout_rollout_change", args=[rollout.pk])
    return format_html('<a href="{}">{}</a>', url, rollout_label(rollout))


def when(moment) -> str:
    return date_format(localtime(moment), "DATETIME_FORMAT") if moment else "-"


def short_when(moment) -> str:
    """A time in a narrow column: ``2026-12-06 04:26`` in the current time zone."""
    return localtime(moment).strftime("%Y-%m-%d %H:%M") if moment else "-"


def duration_text(seconds: int | None) -> str:
    if seconds is None:
        return "unbounded: a pool with a disruption budget of 0 never starts a node"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n} {unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "min"), (secs, "s")) if n]
    return " ".join(parts) or "0 s"


def uuid_or_none(value: Any) -> UUID | None:
    try:
        return UUID(str(value))
    except ValueError:
        return None
