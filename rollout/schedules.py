"""The controller's periodic schedule, created in code, in one place, idempotently."""

from __future__ import annotations

from typing import Any

import structlog
from django.db import transaction

from rollout import conf
from rollout.dispatch import GATES_DUE_TASK, TICK_ALL_TASK, WEBHOOKS_DUE_TASK

log = structlog.get_logger(__name__)

WEBHOOKS_SWEEP_SECONDS = 30
#: The shortest gateIntervalSeconds: each gate is asked within this of being due.
GATES_SWEEP_SECONDS = 5


#: Seconds in one of django-celery-beat's IntervalSchedule periods.
PERIOD_SECONDS = {"days": 86400, "hours": 3600, "minutes": 60, "seconds": 1, "microseconds": 1e-6}


def tick_every_stored() -> int | None:
    """The interval (seconds) of the stored ``rollout/all`` task, the schedule the beat really runs; None when
    there is none (no task, or a crontab one). One query."""
    from django_celery_beat.models import PeriodicTask

    row = (
        PeriodicTask.objects.filter(name=TICK_ALL_TASK, interval__isnull=False)
        .values_list("interval__every", "interval__period")
        .first()
    )
    if row is None:
        return None
    every, period = row
    return max(1, round(every * PERIOD_SECONDS.get(period, 1)))


def _tick_schedule_write(task: Any, *, seconds: int) -> None:
    from django_celery_beat.models import IntervalSchedule

    # django-celery-beat has no unique constraint on intervals: an operator may have added a second
    # "30 seconds" in the admin, so take the oldest rather than get_or_create (which raises
    # MultipleObjectsReturned and would stop `migrate`).
    schedule = (
        IntervalSchedule.objects.filter(every=seconds, period=IntervalSchedule.SECONDS).order_by("id").first()
    ) or IntervalSchedule.objects.create(every=seconds, period=IntervalSchedule.SECONDS)
    task.interval = schedule
    task.crontab = None
    task.expire_seconds = max(1, int(seconds * 0.9))
    task.enabled = True
    task.save()


def periodic_tick_ensure(*, every: int | None = None, reset: bool = False) -> Any:
    """Bring the ``rollout/all`` PeriodicTask to every ROLLOUT["every"] seconds, unless a person changed it.

    Created when missing. An existing task is brought to the configured interval when its stored interval is
    the one the code last wrote (``TickScheduleWritten``), or when nothing was recorded yet (an installation
    migrated before the record existed). A stored interval that differs from the record was changed in the
    admin: it wins, and ``manage.py check`` warns (rollout.W005) until ROLLOUT_EVERY agrees or
    ``setup_periodic_tasks --reset`` (``reset``) writes the configured one. Each run expires before the next
    one is due, so a backlog never piles up ticks.
    """
    from django_celery_beat.models import PeriodicTask

    from rollout.models import TickScheduleWritten

    seconds = every or conf.options().every
    with transaction.atomic():
        task = PeriodicTask.objects.select_for_update().filter(name=TICK_ALL_TASK).first()
        written = TickScheduleWritten.objects.select_for_update().filter(id=1).first()
        stored = tick_every_stored() if task is not None else None
        if task is None:
            task = PeriodicTask(
                name=TICK_ALL_TASK,
                task=TICK_ALL_TASK,
                description="Advance every active rollout (settle, judge, start, soak and advance).",
            )
            _tick_schedule_write(task, seconds=seconds)
        elif stored == seconds:
            pass  # as configured (set so by the code or by a person): nothing to write
        elif reset or written is None or stored == written.every:
            _tick_schedule_write(task, seconds=seconds)
        else:
            return task  # changed by a person: theirs wins (and is not recorded as the code's)
        TickScheduleWritten.objects.update_or_create(id=1, defaults={"every": seconds})
    return task


def _periodic_ensure(*, name: str, seconds: int, expire_seconds: int, description: str) -> Any:
    """The PeriodicTask ``name`` every ``seconds``, created if missing (an existing one is left as it is)."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    with transaction.atomic():
        task = PeriodicTask.objects.filter(name=name).first()
        if task is None:
            schedule = (
                IntervalSchedule.objects.filter(every=seconds, period=IntervalSchedule.SECONDS).order_by("id").first()
            ) or IntervalSchedule.objects.create(every=seconds, period=IntervalSchedule.SECONDS)
            task = PeriodicTask.objects.create(
                name=name, task=name, interval=schedule, expire_seconds=expire_seconds, description=description
            )
    return task


def periodic_webhooks_ensure() -> Any:
    """Create the ``rollout/webhooks-due`` PeriodicTask (every 30 s) if missing: it publishes the webhook
    deliveries whose next attempt is due (retries beyond the broker's visibility timeout, lost messages)."""
    return _periodic_ensure(
        name=WEBHOOKS_DUE_TASK,
        seconds=WEBHOOKS_SWEEP_SECONDS,
        expire_seconds=int(WEBHOOKS_SWEEP_SECONDS * 0.9),
        description="Publish the webhook deliveries whose next attempt is due.",
    )


def periodic_gates_ensure() -> Any:
    """Create the ``rollout/gates-due`` PeriodicTask (every 5 s) if missing: it asks the gates that are due
    (docs/controller.md#gates)."""
    return _periodic_ensure(
        name=GATES_DUE_TASK,
        seconds=GATES_SWEEP_SECONDS,
        expire_seconds=GATES_SWEEP_SECONDS - 1,
        description="Ask the rollouts' gates that are due, and store their results.",
    )


def on_post_migrate(sender: Any, **kwargs: Any) -> None:
    periodic_tick_ensure()
    periodic_webhooks_ensure()
    periodic_gates_ensure()


def on_beat_init(sender: Any = None, **kwargs: Any) -> None:
    """A starting beat brings ``rollout/all`` to ROLLOUT_EVERY as ``migrate`` does (unless a person changed it in
    the admin): a beat started with another interval than the last ``migrate`` runs the configured one. The
    DatabaseScheduler sees the change at its next sync. A database that does not answer yet changes nothing here:
    the scheduler reports it."""
    from django.db import DatabaseError

    try:
        periodic_tick_ensure()
    except DatabaseError as exc:
        log.warning("schedule.not_ensured", error=f"{type(exc).__name__}: {exc}"[:300])
