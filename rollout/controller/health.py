"""Is a controller running? (docs/operations.md#health, docs/controller.md#no-controller)

Nothing moves a rollout but the tick: a Celery worker runs it, and beat asks for it at the interval of the
stored ``rollout/all`` periodic task. Without them a rollout sits still and says nothing, so each tick leaves a
trace: the rollout's ``last_tick_at``, and the one ``ControllerBeat`` row the periodic tick
writes whether or not a rollout runs. A controller is missing when the trace is older than
max(3 x the interval, 10 s): three periods missed, never less than 10 s. The interval is the one the beat
really runs, the stored task's (``ROLLOUT_EVERY`` only when there is none): an interval changed in the
environment or in the admin never makes a running controller look missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import QuerySet
from django.db.models.functions import Coalesce

from rollout import conf
from rollout.models import ControllerBeat, Rollout
from rollout.schedules import tick_every_stored

#: The commands that start a controller (README.md, docs/operations.md#the-stack): both are needed.
WORKER_COMMAND = "celery -A project worker"
BEAT_COMMAND = "celery -A project beat --scheduler django_celery_beat.schedulers:DatabaseScheduler"
#: Never judge a controller missing sooner than this, whatever the interval.
MIN_STALE_SECONDS = 10
#: Periods a controller may miss before it is judged missing.
MISSED_PERIODS = 3


_BEAT = ControllerBeat._meta.db_table
_BEAT_SQL = f"""
INSERT INTO {_BEAT} (id, last_tick_at) VALUES (1, %s)
ON CONFLICT (id) DO UPDATE SET last_tick_at = GREATEST(EXCLUDED.last_tick_at, {_BEAT}.last_tick_at)
"""  # noqa: S608 - the table name from the model, the value bound


#: (now, seconds): the stored interval read for the request or tick that asks at ``now`` (each passes one ``now``
#: to every rollout and row it judges), so a page of rollouts or rows reads it once.
_every_read: tuple[datetime, int] | None = None


def controller_every(*, now: datetime | None = None) -> int:
    """Seconds between the beat's ticks: the stored ``rollout/all`` task's interval (rollout/schedules.py), or
    ``ROLLOUT_EVERY`` when there is no such task. One query per ``now``."""
    global _every_read  # a one-entry memo, replaced whole (atomic under threads)
    read = _every_read
    if now is not None and read is not None and read[0] == now:
        return read[1]
    seconds = tick_every_stored() or conf.options().every
    if now is not None:
        _every_read = (now, seconds)
    return seconds


def controller_stale_after(*, now: datetime | None = None) -> timedelta:
    """max(3 x the beat's interval, 10 s): how long without a tick before a controller counts as missing."""
    return timedelta(seconds=max(MISSED_PERIODS * controller_every(now=now), MIN_STALE_SECONDS))


def rollout_ticked(*, rollout: Rollout, at: datetime) -> None:
    """Record that a tick is reconciling ``rollout`` (inside the tick's transaction, under its row lock)."""
    Rollout.objects.filter(pk=rollout.pk).update(last_tick_at=at)
    rollout.last_tick_at = at


def controller_beat_record(*, at: datetime) -> None:
    """The periodic tick ran at ``at``: one upsert of the one row (never moved back by a late worker)."""
    with connection.cursor() as cursor:
        cursor.execute(_BEAT_SQL, [at])


def controller_missing(rollout: Rollout, *, now: datetime) -> bool:
    """An active rollout not ticked for ``controller_stale_after()`` since its creation (its approval, when it
    awaited one: docs/controller.md#approvals) or its last tick."""
    if rollout.state != Rollout.State.ACTIVE:
        return False
    since = rollout.last_tick_at or rollout.approved_at or rollout.created_at
    return now - since > controller_stale_after(now=now)


def rollouts_without_controller(rollouts: QuerySet[Rollout], *, now: datetime) -> int:
    """How many of ``rollouts`` are active and held by a missing controller (``controller_missing``): one count."""
    since = Coalesce("last_tick_at", "approved_at", "created_at")
    return (
        rollouts.filter(state=Rollout.State.ACTIVE)
        .annotate(since=since)
        .filter(since__lt=now - controller_stale_after(now=now))
        .count()
    )


@dataclass(frozen=True)
class ControllerHealth:
    last_tick_at: datetime | None
    healthy: bool


def controller_health(*, now: datetime) -> ControllerHealth:
    """When the periodic tick last ran, and whether that is recent enough (``GET /api/compute/health``)."""
    last = ControllerBeat.objects.filter(id=1).values_list("last_tick_at", flat=True).first()
    healthy = last is not None and now - last <= controller_stale_after(now=now)
    return ControllerHealth(last_tick_at=last, healthy=healthy)
