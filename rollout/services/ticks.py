"""Asking for a tick of one rollout soon, debounced (the join path, operator actions, the tick itself)."""

from __future__ import annotations

from uuid import UUID

import structlog

from rollout.dispatch import TICK_TASK, publish_on_commit
from rollout.models import Rollout, TickRequest

log = structlog.get_logger("rollout")


def rollout_request_tick(*, rollout_id: UUID | str, countdown: float = 0.0) -> None:
    """Ask for a tick of one rollout soon, debounced: at most one is queued at a time.

    The flag is cleared when the tick starts; the periodic tick clears it too,
    so a lost message delays a rollout by one period at most.
    """
    queued = TickRequest.objects.filter(
        rollout_id=rollout_id, queued=False, rollout__state__in=Rollout.ACTIVE_STATES
    ).update(queued=True)
    if queued:
        publish_on_commit(TICK_TASK, args=[str(rollout_id)], countdown=countdown)
