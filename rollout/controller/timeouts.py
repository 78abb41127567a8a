"""Per-node timeouts on time, with one delayed message per rollout (docs/controller.md#celery).

A node in flight fails when its deadline passes: the ``rollout/timeouts-due`` task settles a rollout's
overdue nodes at that moment, and the periodic tick's sweep does it too, so a lost message never strands a
node. Each rollout has at most ONE such message, not one per tick that started nodes: a worker would hold
one delayed message per start time (hundreds in a long rollout), and a broker that came back would deliver
them all again, in front of the ticks (RabbitMQ requeues what a consumer held; docs/operations.md#broker-loss).

That one is due at the earliest deadline of its nodes in flight, its due time recorded
in the rollout's ``TickRequest.timeouts_due_at`` (a conditional UPDATE decides who publishes, as for ticks).
When it runs it settles that rollout's overdue nodes and publishes the next one, due at the next earliest
deadline (``timeouts_due_settle``). A tick that starts nodes publishes one only when none is due sooner
(``timeouts_due_arm``). One whose publish failed is forgotten at once; one that never ran ``LOST_AFTER`` past
its due time counts as lost with its broker. The periodic tick (and so a worker that connects to the broker,
rollout/tasks.py) publishes the missing ones (``timeouts_due_rearm``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import UUID

import structlog
from django.db.models import Min, Q
from django.utils import timezone

from rollout import dispatch
from rollout.controller.settle import node_upgrades_settle_overdue
from rollout.models import NodeUpgrade, TickRequest

log = structlog.get_logger("rollout")

#: A message due this long ago that has not run counts as lost (the broker lost it): another one is published.
LOST_AFTER = timedelta(minutes=1)


def timeouts_due_arm(*, rollout_id: UUID | str, at: datetime, now: datetime | None = None) -> bool:
    """Make sure the rollout's timeouts-due message is due at ``at`` or sooner; whether this call published one.

    Call it outside the transaction that started the nodes (after its commit): one short UPDATE."""
    now = now or timezone.now()
    if at - now > dispatch.max_delay():
        return False  # beyond the broker's redelivery horizon: the periodic tick's sweep (rollout/dispatch.py)
    lost = now - LOST_AFTER
    flipped = (
        TickRequest.objects.filter(rollout_id=rollout_id)
        .filter(Q(timeouts_due_at__isnull=True) | Q(timeouts_due_at__gt=at) | Q(timeouts_due_at__lt=lost))
        .update(timeouts_due_at=at)
    )
    if not flipped:
        return False  # one is due sooner: it arms the next when it runs
    if dispatch.publish(dispatch.TIMEOUTS_DUE_TASK, args=[str(rollout_id)], eta=at):
        return True
    TickRequest.objects.filter(rollout_id=rollout_id, timeouts_due_at=at).update(timeouts_due_at=None)
    return False


def timeouts_due_arm_safely(*, rollout_id: UUID | str, at: datetime) -> None:
    """``timeouts_due_arm`` as an on-commit callback: an error (the database gone meanwhile) is logged, not raised
    into the request or tick that committed; the periodic tick's sweep settles the nodes, its re-arm repairs."""
    try:
        timeouts_due_arm(rollout_id=rollout_id, at=at)
    except Exception as exc:
        log.warning(
            "rollout.timeouts_due_not_armed", rollout=str(rollout_id), error=f"{type(exc).__name__}: {exc}"[:300]
        )


def timeouts_due_settle(*, rollout_id: UUID | str, now: datetime) -> int:
    """The rollout's timeouts-due message runs: its overdue nodes settle, and the next message is published
    (the next earliest deadline of its nodes in flight). Returns the nodes that failed."""
    _, failed = node_upgrades_settle_overdue(now=now, rollout_ids=[rollout_id])
    TickRequest.objects.filter(rollout_id=rollout_id, timeouts_due_at__lte=now).update(timeouts_due_at=None)
    upcoming = _in_flight_due(now=now).filter(rollout_id=rollout_id).aggregate(first=Min("deadline"))["first"]
    if upcoming is not None:
        timeouts_due_arm(rollout_id=rollout_id, at=upcoming, now=now)
    return failed


def timeouts_due_rearm(*, now: datetime) -> int:
    """Publish the message of each rollout with nodes due later that has none (its publish failed, or it was lost
    with the broker): one statement over the nodes in flight. Returns the messages published."""
    missing = Q(rollout__tick_request__timeouts_due_at__isnull=True) | Q(
        rollout__tick_request__timeouts_due_at__lt=now - LOST_AFTER
    )
    rows = (
        _in_flight_due(now=now)
        .filter(missing, deadline__lte=now + dispatch.max_delay())
        .values("rollout_id")
        .annotate(first=Min("deadline"))
        .order_by()
    )
    return sum(timeouts_due_arm(rollout_id=row["rollout_id"], at=row["first"], now=now) for row in rows)


def _in_flight_due(*, now: datetime):  # type: ignore[no-untyped-def]  # a QuerySet of NodeUpgrade
    """Nodes in flight whose deadline is still ahead and decides them (not arrived: readiness judges those)."""
    return NodeUpgrade.objects.filter(state=NodeUpgrade.State.IN_FLIGHT, arrived_at__isnull=True, deadline__gt=now)
