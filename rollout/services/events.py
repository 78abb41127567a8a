"""Rollout events: one row and one structured log line per transition."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import structlog

from rollout.models import Rollout, RolloutEvent

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
    return event
