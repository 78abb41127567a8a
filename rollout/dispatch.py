"""Publishing the module's Celery tasks, by name, after the commit that asked for them.

The controller asks for work (a tick, a timeout sweep) without importing the
tasks module, which imports the controller: tasks are looked up by name in the
Celery app (``current_app.tasks[name]``, which also honours eager mode).

Two rules hold for every message published here:

- **Publishing never fails the caller.** It happens after the commit (the
  rows it is about are already written); when the broker is down the error is
  logged and dropped. The periodic tick (``rollout/all``) redoes everything a
  lost message would have done, so a lost message costs at most one period.
- **No message waits past the broker's redelivery horizon.** Redis redelivers
  an unacknowledged message after its visibility timeout, so a message due later
  would be copied again and again in worker memory; RabbitMQ closes the channel
  of a consumer that holds a message past its ``consumer_timeout`` (30 minutes
  by default). A due time farther out than ``max_delay()`` is not published at
  all: the periodic tick covers it (docs/operations.md#brokers).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, TypedDict

import structlog
from celery import current_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

log = structlog.get_logger("rollout")

TICK_TASK = "rollout/tick"
TICK_ALL_TASK = "rollout/all"
TIMEOUTS_DUE_TASK = "rollout/timeouts-due"
NODE_UPGRADE_TIMEOUT_TASK = "rollout/node-upgrade-timeout"
WEBHOOK_DELIVER_TASK = "rollout/webhook-deliver"
WEBHOOKS_DUE_TASK = "rollout/webhooks-due"
GATES_DUE_TASK = "rollout/gates-due"


class _Timing(TypedDict, total=False):
    """When a message is due; a key left out is Celery's default (now)."""

    eta: datetime
    countdown: float


#: Never schedule closer than this to the redelivery horizon (a worker may take the message late).
VISIBILITY_MARGIN = timedelta(minutes=5)
#: RabbitMQ's default ``consumer_timeout`` (rabbitmq.conf): a deployment must not lower it.
RABBITMQ_CONSUMER_TIMEOUT = timedelta(minutes=30)


def redelivery_horizon() -> timedelta:
    """How long the broker lets a worker hold a message unacknowledged."""
    if str(getattr(settings, "CELERY_BROKER_URL", "")).startswith(("amqp://", "amqps://", "pyamqp://")):
        return RABBITMQ_CONSUMER_TIMEOUT
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}
    return timedelta(seconds=options.get("visibility_timeout", 3600))


def max_delay() -> timedelta:
    """How far ahead a message may be due: well inside the broker's redelivery horizon."""
    horizon = redelivery_horizon()
    return max(horizon - VISIBILITY_MARGIN, horizon / 2)


def publish(name: str, *, args: list[Any], eta: datetime | None = None, countdown: float | None = None) -> bool:
    """Publish task ``name`` now; False (logged) when it is due too far ahead or the broker refuses it."""
    if eta is not None and eta - timezone.now() > max_delay():
        log.debug("task.not_scheduled", task=name, eta=eta.isoformat(), why="beyond the redelivery horizon")
        return False
    timing: _Timing = {}
    if eta is not None:
        timing["eta"] = eta
    if countdown is not None:
        timing["countdown"] = countdown
    try:
        current_app.tasks[name].apply_async(args=tuple(args), **timing)
    except Exception as exc:  # any broker failure: the periodic tick makes up for the message
        log.warning("task.publish_failed", task=name, error=f"{type(exc).__name__}: {exc}"[:300])
        return False
    return True


def publish_on_commit(
    name: str, *, args: list[Any], eta: datetime | None = None, countdown: float | None = None
) -> None:
    """Publish task ``name`` once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: publish(name, args=args, eta=eta, countdown=countdown))
