"""Per-node timeouts with one delayed message per rollout (rollout/controller/timeouts.py): however many ticks
start nodes, a rollout has one ``rollout/timeouts-due`` message, due at its earliest deadline; when it runs it
publishes the next; one that could not be published, or was lost with the broker, is published again by the
periodic tick, and a worker asks for that tick as soon as it connects to the broker."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from rollout import dispatch
from rollout.controller import tick as controller
from rollout.controller import timeouts
from rollout.models import TickRequest
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from rollout.tasks import TickOnConnect, rollout_timeouts_due
from tests.factories import fleet
from tests.rollout.helpers import heartbeat_all, in_flight, rejoin, states, tick

pytestmark = pytest.mark.django_db

TIMEOUT = 600


def create(tenant):
    spec = rollout_spec(version="1.0.0", waves=[100], soak_seconds=0, upgrade_timeout_seconds=TIMEOUT)
    return rollout_create(tenant=tenant, spec=spec)


def due_messages(published) -> list:
    return [eta for name, _, eta in published if name == dispatch.TIMEOUTS_DUE_TASK]


def due_at(rollout):
    return TickRequest.objects.get(rollout=rollout).timeouts_due_at


def started_one_by_one(tenant, ticks: int, *, gap: int = 10):
    """A pool whose budget is one node: each tick starts one node, ``gap`` s after the previous one settled."""
    fleet(tenant, {"a": (ticks, str(1 / ticks))})
    rollout = create(tenant)
    deadlines = []
    with time_machine.travel(timezone.now(), tick=False) as clock:
        for _ in range(ticks):
            assert tick(rollout).started == 1
            (upgrade,) = in_flight(rollout)
            deadlines.append(upgrade.deadline)
            if len(deadlines) < ticks:
                rejoin(upgrade.node_id, "1.0.0")
                clock.shift(gap)
                heartbeat_all()
    return rollout, deadlines


def test_ticks_that_start_nodes_at_many_times_leave_one_message_per_rollout(tenant, releases, published):
    rollout, deadlines = started_one_by_one(tenant, 8)
    assert len(set(deadlines)) == 8
    # One message, due at the first deadline, not one per tick that started nodes (8 here).
    assert due_messages(published) == [deadlines[0]]
    assert due_at(rollout) == deadlines[0]


def test_the_message_fails_the_nodes_due_and_arms_none_when_nothing_else_is_in_flight(tenant, releases, published):
    fleet(tenant, {"a": (2, "0.5"), "b": (2, "0.5")})
    rollout = create(tenant)
    with time_machine.travel(timezone.now(), tick=False) as clock:
        assert tick(rollout).started == 2  # one per pool, due at the same time: one message
        assert len(due_messages(published)) == 1
        clock.shift(TIMEOUT + 1)
        heartbeat_all()
        published.clear()
        rollout_timeouts_due(str(rollout.id))
    assert states(rollout) == {"failed": 2, "pending": 2}
    assert due_at(rollout) is None
    assert due_messages(published) == []
    assert [name for name, _, _ in published] == [dispatch.TICK_TASK]  # a failure asks for a tick


def test_the_message_that_runs_arms_the_next_earliest_deadline(tenant, releases, published):
    rollout, deadlines = started_one_by_one(tenant, 4)
    # Every node but the last succeeded; the first deadline's message runs and finds the last one due later.
    with time_machine.travel(deadlines[0] + timedelta(seconds=1), tick=False):
        heartbeat_all()
        published.clear()
        rollout_timeouts_due(str(rollout.id))
    assert due_messages(published) == [deadlines[-1]]
    assert due_at(rollout) == deadlines[-1]
    assert len(in_flight(rollout)) == 1


def test_a_message_the_broker_refused_is_published_by_the_next_periodic_tick(tenant, releases, published, monkeypatch):
    fleet(tenant, {"a": (2, "0.5")})
    rollout = create(tenant)
    recorded = dispatch.publish
    monkeypatch.setattr(dispatch, "publish", lambda name, **kwargs: False)  # the broker is down
    assert tick(rollout).started == 1
    assert due_at(rollout) is None  # not published: not recorded as due
    monkeypatch.setattr(dispatch, "publish", recorded)  # it is back
    (upgrade,) = in_flight(rollout)
    controller.rollouts_tick_all()
    assert due_messages(published) == [upgrade.deadline]
    assert due_at(rollout) == upgrade.deadline


def test_a_message_lost_with_the_broker_is_published_again(tenant, releases, published):
    rollout, deadlines = started_one_by_one(tenant, 2, gap=300)
    assert due_messages(published) == [deadlines[0]]
    # The broker came back empty: the message due at the first deadline never ran.
    with time_machine.travel(deadlines[0] + timeouts.LOST_AFTER + timedelta(seconds=1), tick=False):
        heartbeat_all()
        published.clear()
        controller.rollouts_tick_all()
    assert due_messages(published) == [deadlines[-1]]
    assert due_at(rollout) == deadlines[-1]
    # A message due and not yet run is not lost: nothing is published twice.
    published.clear()
    controller.rollouts_tick_all()
    assert due_messages(published) == []


def test_a_worker_that_connects_to_the_broker_asks_for_a_periodic_tick_at_once(published):
    TickOnConnect(parent=None).start(parent=None)  # as the consumer starts it on each new connection
    assert [name for name, _, _ in published] == [dispatch.TICK_ALL_TASK]
