"""The controller's periodic schedule, created in code, in one place, idempotently."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from rollout import conf
from rollout.dispatch import TICK_ALL_TASK


def periodic_tick_ensure(*, every: int | None = None, reset: bool = False) -> Any:
    """Create the ``rollout/all`` PeriodicTask (every ROLLOUT["every"] seconds) if missing.

    An existing task keeps the interval an operator set in the admin unless
    ``reset`` is given (``manage.py setup_periodic_tasks --reset``). Each run
    expires before the next one is due, so a backlog never piles up ticks.
    """
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    seconds = every or conf.options().every
    with transaction.atomic():
        # django-celery-beat has no unique constraint on intervals: an operator may have added a
        # second "30 seconds" in the admin, so take the oldest rather than get_or_create (which
        # raises MultipleObjectsReturned and would stop `migrate`).
        schedule = (
            IntervalSchedule.objects.filter(every=seconds, period=IntervalSchedule.SECONDS).order_by("id").first()
        ) or IntervalSchedule.objects.create(every=seconds, period=IntervalSchedule.SECONDS)
        task = PeriodicTask.objects.filter(name=TICK_ALL_TASK).first()
        if task is None:
            task = PeriodicTask.objects.create(
                name=TICK_ALL_TASK,
                task=TICK_ALL_TASK,
                interval=schedule,
                expire_seconds=max(1, int(seconds * 0.9)),
                description="Advance every active rollout (settle, judge, start, soak and advance).",
            )
        elif reset:
            task.interval = schedule
            task.crontab = None
            task.expire_seconds = max(1, int(seconds * 0.9))
            task.enabled = True
            task.save()
    return task


def on_post_migrate(sender: Any, **kwargs: Any) -> None:
    periodic_tick_ensure()
