"""Rollout events: one row and one structured log line per transition, and the webhook deliveries of it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import structlog

from rollout.models import Rollout, RolloutEvent
from rollout.services.webhooks import deliveries_create

log = structlog.get_logger("rollout")


def event_record(*, rollout: Rollout, kind: str, at: datetime, **data: Any) -> RolloutEvent:
    event = RolloutEvent.objects.create(rollout=rollout, kind=kind, at=at, data=data)
    log.info(
        kind,
        tenant=rollout.tenant_id,
        rollout=str(rollout.id),
        version=rollout.release.version,
        state=rollout.state,
        **data,
    )
    # Rows only (same transaction); the POSTs happen in their own tasks, after the commit.
    deliveries_create(event=event, rollout=rollout)
    return event
