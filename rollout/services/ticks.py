"""Asking for a tick of one rollout soon, debounced (the join path, operator actions, the tick itself)."""

from __future__ import annotations

from uuid import UUID

import structlog
from django.db import connection

from core.statements import prepared_cursor
from rollout.dispatch import TICK_TASK, publish_on_commit
from rollout.models import Rollout, TickRequest
from rollout.services.statements import ASK_TICK_SQL

log = structlog.get_logger("rollout")


def rollout_request_tick(*, rollout_id: UUID | str, countdown: float = 0.0) -> None:
    """Ask for a tick of one rollout soon, debounced: at most one is queued at a time.

    The flag is cleared when the tick starts; the periodic tick clears it too,
    so a lost message delays a rollout by one period at most.
    """
    if tick_request_raise(rollout_id=rollout_id):
        publish_on_commit(TICK_TASK, args=[str(rollout_id)], countdown=countdown)


def tick_request_raise(*, rollout_id: UUID | str) -> bool:
    """Flip the rollout's tick request from idle to queued; whether this call flipped it (and so must send the
    tick). Only while the rollout is active or paused. On PostgreSQL one prepared statement."""
    if connection.vendor != "postgresql":
        return _raise_orm(rollout_id=rollout_id)
    with prepared_cursor() as cursor:
        cursor.execute(ASK_TICK_SQL, {"rollout": rollout_id, "asking": list(Rollout.ACTIVE_STATES)})
        return cursor.fetchone() is not None


def _raise_orm(*, rollout_id: UUID | str) -> bool:
    return bool(
        TickRequest.objects.filter(
            rollout_id=rollout_id, queued=False, rollout__state__in=Rollout.ACTIVE_STATES
        ).update(queued=True)
    )
