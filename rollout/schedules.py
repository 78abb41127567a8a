"""The controller's periodic schedule, created in code, in one place, idempotently."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from rollout import conf
from rollout.dispatch import GATES_DUE_TASK, TICK_ALL_TASK, WEBHOOKS_DUE_TASK

WEBHOOKS_SWEEP_SECONDS = 30
#: The shortest gateIntervalSeconds: each gate is asked within this of being due.
GATES_SWEEP_SECONDS = 5


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
