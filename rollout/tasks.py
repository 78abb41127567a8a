"""Celery tasks: thin wrappers over rollout/services/controller.py.

All are idempotent and ``acks_late``: a task delivered twice, or late (Redis
redelivers ETA tasks after its visibility timeout), finds its rows already
moved and does nothing.
"""

from __future__ import annotations

import structlog
from celery import shared_task
from django.db import OperationalError
from django.utils import timezone

from rollout.models import NodeUpgrade
from rollout.services import controller

log = structlog.get_logger("rollout")

RETRY = {
    "acks_late": True,
    "autoretry_for": (OperationalError,),
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": 5,
}

TICK_ALL_TASK = "rollout/all"


@shared_task(name=TICK_ALL_TASK, **RETRY)
def rollouts_tick_all() -> int:
    """The periodic controller tick (django-celery-beat, every ROLLOUT["every"] seconds)."""
    return controller.rollouts_tick_all()


@shared_task(name="rollout/tick", **RETRY)
def rollout_tick(rollout_id: str) -> None:
    """A tick of one rollout, asked for when a node settles or a soak ends."""
    controller.rollout_tick(rollout_id=rollout_id)


@shared_task(name="rollout/node-upgrade-timeout", **RETRY)
def node_upgrade_timeout(node_upgrade_id: int) -> None:
    """Fail one in-flight node at its deadline (a no-op when it already settled)."""
    upgrade = NodeUpgrade.objects.filter(pk=node_upgrade_id).only("rollout_id", "state").first()
    if upgrade is None or upgrade.state != NodeUpgrade.State.IN_FLIGHT:
        return
    if controller.node_upgrades_fail_overdue(now=timezone.now(), ids=[node_upgrade_id]):
        controller.rollout_request_tick(rollout_id=upgrade.rollout_id)
