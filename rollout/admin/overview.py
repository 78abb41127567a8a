"""Rollout's sections of the admin's front page (fleet/admin_overview.py, registered in rollout/hooks.py): the
rollouts in progress (not yet over: scheduled, awaiting approval, active, paused) with their progress and gates,
and the controller's health. Display only, through the rollouts' admin (its tenant scope and permissions)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from rollout.admin.display import counts_total, counts_words, gates_summary, progress_bar, when
from rollout.controller.health import (
    BEAT_COMMAND,
    WORKER_COMMAND,
    controller_health,
    controller_stale_after,
    rollouts_without_controller,
)
from rollout.models import Rollout, RolloutGate
from rollout.rollouts.reads import rollout_waves

#: The most rollouts in progress the front page lists (the rest: the rollouts' list, filtered by state).
SHOWN = 15


def rollout_overview(request: HttpRequest) -> list[tuple[str, Any]]:
    model_admin = admin.site.get_model_admin(Rollout)
    if not model_admin.has_view_permission(request):
        return []
    scoped = model_admin.get_queryset(request)
    going = scoped.exclude(state__in=Rollout.TERMINAL_STATES).select_related("release").order_by("-created_at")
    rollouts = list(going[:SHOWN])
    waves = rollout_waves(rollouts)
    gates: dict[Any, list[RolloutGate]] = {rollout.id: [] for rollout in rollouts}
    for gate in RolloutGate.objects.filter(rollout__in=rollouts).order_by("position"):
        gates[gate.rollout_id].append(gate)
    rows = []
    for rollout in rollouts:
        stats = waves.get(rollout.id, [])
        totals = counts_total(stats)
        rows.append(
            {
                "rollout": rollout,
                "url": reverse("admin:rollout_rollout_change", args=[rollout.pk]),
                "wave": f"{min(rollout.current_wave + 1, len(stats))} of {len(stats)}" if stats else "-",
                "bar": progress_bar(totals),
                "counts": counts_words(totals),
                "gates": gates_summary(gates[rollout.id]),
            }
        )
    now = timezone.now()
    health = controller_health(now=now)
    controller = {
        "healthy": health.healthy,
        "last_tick": when(health.last_tick_at),
        "stalled": rollouts_without_controller(scoped, now=now),
        "stale_after": int(controller_stale_after().total_seconds()),
        "worker": WORKER_COMMAND,
        "beat": BEAT_COMMAND,
    }
    in_progress = render_to_string(
        "admin/rollout/overview.html",
        {
            "rows": rows,
            "more": going.count() - len(rows) if len(rows) == SHOWN else 0,
            "list_url": reverse("admin:rollout_rollout_changelist"),
        },
    )
    health_html = render_to_string("admin/rollout/overview_controller.html", {"controller": controller})
    return [("Rollouts in progress", in_progress), ("Controller", health_html)]
