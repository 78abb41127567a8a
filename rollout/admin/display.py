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

from core.durations import duration_text as duration_text  # the plan preview's (the demo's too)
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
    """The console's one date-time format, with its time zone: ``2026-12-07 23:00 UTC`` (project/formats)."""
    return date_format(localtime(moment), "DATETIME_FORMAT") if moment else "-"


short_when = when  # the lists' columns read as the pages do


def seconds_text(seconds: int) -> str:
    """``7 days (605015 s)``: in words, and the seconds the API takes."""
    return duration_text(seconds) if seconds < 60 else f"{duration_text(seconds)} ({seconds} s)"


def size_text(size: int | None) -> str:
    """Bytes in KiB, MiB or GiB, one decimal: ``200000`` -> ``195.3 KiB``."""
    if size is None:
        return "-"
    if size < 1024:
        return f"{size} bytes"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def uuid_or_none(value: Any) -> UUID | None:
    try:
        return UUID(str(value))
    except ValueError:
        return None


# (state, words) of a wave's counts, in the order they read beside its bar.
COUNT_WORDS = (
    (State.SUCCEEDED, "succeeded"),
    (State.FAILED, "failed"),
    (State.IN_FLIGHT, "in flight"),
    (State.PENDING, "pending"),
    (State.SKIPPED, "skipped"),
    (State.CANCELLED, "cancelled"),
    (State.ROLLED_BACK, "rolled back"),
)


def counts_words(counts: Mapping[str, int], *, failed_url: str | None = None) -> SafeString:
    """``3 succeeded · 1 failed · 6 pending``: the states with nodes, the failed count linking to them."""
    parts = []
    for state, words in COUNT_WORDS:
        n = counts.get(state, 0)
        if not n:
            continue
        if state == State.FAILED and failed_url:
            parts.append(format_html('<a href="{}" class="rollout-failed-count">{} {}</a>', failed_url, n, words))
        else:
            parts.append(format_html("{} {}", n, words))
    if not parts:
        return format_html("{}", "no nodes")
    return format_html_join(" · ", "{}", ((part,) for part in parts))


def gates_summary(gates: Iterable[Any]) -> SafeString:
    """Each gate's latest result as a badge beside the progress (its detail and time as the badge's title)."""
    return format_html_join(
        "",
        '<span class="rollout-gate rollout-gate-{}" title="{}">{}: {}</span>',
        ((gate.state, f"{gate.detail or gate.state} ({when(gate.at)})", gate.name, gate.state) for gate in gates),
    )
