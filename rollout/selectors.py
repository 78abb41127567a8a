"""Reads of rollouts for the API and the admin, in a constant number of queries."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any
from uuid import UUID

from django.db.models import Count

from rollout.models import NodeUpgrade, Rollout, RolloutWave

STATE_KEYS = {
    NodeUpgrade.State.PENDING: "pending",
    NodeUpgrade.State.IN_FLIGHT: "inFlight",
    NodeUpgrade.State.SUCCEEDED: "succeeded",
    NodeUpgrade.State.FAILED: "failed",
    NodeUpgrade.State.SKIPPED: "skipped",
    NodeUpgrade.State.ROLLED_BACK: "rolledBack",
    NodeUpgrade.State.CANCELLED: "cancelled",
}


def rollout_waves(rollouts: Iterable[Rollout]) -> dict[UUID, list[dict[str, Any]]]:
    """Per rollout, its waves with counts by state: two queries for any number of rollouts."""
    ids = [rollout.id for rollout in rollouts]
    counts: dict[tuple[UUID, int], dict[str, int]] = defaultdict(lambda: dict.fromkeys(STATE_KEYS.values(), 0))
    rows = (
        NodeUpgrade.objects.filter(rollout_id__in=ids)
        .values("rollout_id", "wave", "state")
        .annotate(n=Count("id"))
        .order_by()
    )
    for row in rows:
        counts[(row["rollout_id"], row["wave"])][STATE_KEYS[row["state"]]] = row["n"]
    waves: dict[UUID, list[dict[str, Any]]] = defaultdict(list)
    for wave in RolloutWave.objects.filter(rollout_id__in=ids).order_by("rollout_id", "index"):
        percent = wave.percent
        waves[wave.rollout_id].append(
            {
                "index": wave.index,
                "percent": int(percent) if percent == percent.to_integral_value() else float(percent),
                "total": wave.total,
                **counts[(wave.rollout_id, wave.index)],
                "startedAt": wave.started_at,
                "settledAt": wave.settled_at,
            }
        )
    return waves
