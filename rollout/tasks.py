"""Celery tasks: thin wrappers over rollout/controller/tick.py.

All are idempotent and ``acks_late``: a task delivered twice, or late (Redis
redelivers ETA tasks after its visibility timeout), finds its rows already
moved and does nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypedDict

import structlog
from celery import bootsteps, current_app, shared_task
from django.db import OperationalError
from django.utils import timezone

from rollout import dispatch
from rollout.controller import gate_evaluation, settle, tick, tick_requests, timeouts
from rollout.dispatch import (
    GATES_DUE_TASK,
    NODE_UPGRADE_TIMEOUT_TASK,
    TICK_ALL_TASK,
    TICK_TASK,
    TIMEOUTS_DUE_TASK,
    WEBHOOK_DELIVER_TASK,
    WEBHOOKS_DUE_TASK,
)
from rollout.models import NodeUpgrade, Rollout
from rollout.rollouts import representation
from rollout.webhooks import deliveries
from rollout.webhooks.transport import headers_for, post_event, sign

log = structlog.get_logger("rollout")


class _RetryOptions(TypedDict):
    acks_late: bool
    autoretry_for: tuple[type[BaseException], ...]
    retry_backoff: int
    retry_backoff_max: int
    retry_jitter: bool
    max_retries: int


RETRY: _RetryOptions = {
    "acks_late": True,
    "autoretry_for": (OperationalError,),
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": 5,
}


@shared_task(name=TICK_ALL_TASK, **RETRY)
def rollouts_tick_all() -> int:
    """The periodic controller tick (django-celery-beat, every ROLLOUT["every"] seconds)."""
    return tick.rollouts_tick_all()


@shared_task(name=TICK_TASK, **RETRY)
def rollout_tick(rollout_id: str) -> None:
    """A tick of one rollout, asked for when a node settles or a soak ends."""
    tick.rollout_tick(rollout_id=rollout_id)


@shared_task(name=TIMEOUTS_DUE_TASK, **RETRY)
def rollout_timeouts_due(rollout_id: str) -> None:
    """The rollout's one timeouts-due message: its overdue nodes settle, the next one is published."""
    if timeouts.timeouts_due_settle(rollout_id=rollout_id, now=timezone.now()):
        tick_requests.rollout_request_tick(rollout_id=rollout_id)


@shared_task(name=NODE_UPGRADE_TIMEOUT_TASK, **RETRY)
def node_upgrade_timeout(node_upgrade_id: int) -> None:
    """Settle one in-flight node at its deadline (a no-op when it already settled or is not yet due)."""
    upgrade = NodeUpgrade.objects.filter(pk=node_upgrade_id).only("rollout_id", "state").first()
    if upgrade is None or upgrade.state != NodeUpgrade.State.IN_FLIGHT:
        return
    _, failed = settle.node_upgrades_settle_overdue(now=timezone.now(), ids=[node_upgrade_id])
    if failed:
        tick_requests.rollout_request_tick(rollout_id=upgrade.rollout_id)


def _rollout_representation(rollout: Rollout, now: datetime) -> dict[str, Any]:
    """The rollout as ``GET /rollouts/{id}/`` shows it now: a webhook's body carries it."""
    return representation.rollouts_json([rollout], now=now)[0]


@shared_task(name=WEBHOOK_DELIVER_TASK, soft_time_limit=45, time_limit=60, **RETRY)
def webhook_deliver(delivery_id: str) -> str | None:
    """One attempt of one webhook delivery (a no-op when it is gone, done, not due or taken).

    The POST runs outside any transaction and is bounded by the transport's 10 s timeout; the
    next attempt is scheduled by ``delivery_record`` (or picked up by the sweep).
    """
    claimed = deliveries.delivery_claim(
        delivery_id=delivery_id, now=timezone.now(), render_rollout=_rollout_representation
    )
    if claimed is None:
        return None
    result = post_event(
        claimed.url,
        claimed.body,
        headers_for(claimed.event, claimed.id, sign(claimed.secret, claimed.body)),
        allow_http=deliveries.allow_http(),
        timeout=10.0,
    )
    return deliveries.delivery_record(delivery_id=claimed.id, result=result, now=timezone.now())


@shared_task(name=WEBHOOKS_DUE_TASK, **RETRY)
def webhooks_due() -> int:
    """The periodic sweep: a task for each delivery whose next attempt is due (long retries, lost messages)."""
    return len(deliveries.deliveries_due(now=timezone.now()))


@shared_task(name=GATES_DUE_TASK, soft_time_limit=90, time_limit=120, **RETRY)
def gates_due() -> int:
    """The periodic evaluation of the gates that are due (docs/controller.md#gates), outside any tick."""
    return gate_evaluation.gates_evaluate_due()


class TickOnConnect(bootsteps.StartStopStep):
    """Each time a worker connects to the broker (its start, and its return after an outage) it asks for a
    periodic tick at once: a tick asked for while the broker was away (an agent's join, a create, beat's
    period, whose message expired or was lost with the broker) is not left to the next period, and the
    timeouts-due messages lost with the broker are published again (docs/operations.md#broker-loss).

    A consumer bootstep: Celery starts every step of the consumer again on each new broker connection."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def start(self, parent: object) -> None:
        if dispatch.publish(TICK_ALL_TASK, args=[]):
            log.info("rollout.tick_on_connect")


current_app.steps["consumer"].add(TickOnConnect)
