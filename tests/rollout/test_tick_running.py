"""A tick asked for while one runs (docs/controller.md#reacting-at-once): the ask raises the rollout's request and
sends nothing, because the running tick marked the request; that tick finds the request raised when it ends and
ticks again, in the same worker, or sends the tick as a message when it has ticked long enough, when it is the
periodic tick, or when it failed. A mark that a killed worker left lapses."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from fleet.models import NodeSession
from rollout.controller import tick as controller
from rollout.controller.settle import node_upgrade_settle_reported
from rollout.controller.tick import rollout_tick, rollouts_tick_all
from rollout.controller.tick_requests import RUNNING_LEASE, rollout_request_tick
from rollout.dispatch import TICK_TASK
from rollout.models import TickRequest
from tests.rollout import test_tick_waiter
from tests.rollout.test_tick_waiter import in_thread

pytestmark = pytest.mark.django_db(transaction=True)

# The waiter's fixtures: a rollout with one slot, and the ticks published (name, args, countdown).
one_slot = test_tick_waiter.one_slot
published = test_tick_waiter.published


def join_on_target(node_id) -> None:
    """The first node's agent rejoins on the target, from a web thread's connection: it settles and asks."""

    def join() -> bool:
        NodeSession.objects.filter(node_id=node_id).update(daemon_version="1.0.0")
        return node_upgrade_settle_reported(node_id=node_id, daemon_version="1.0.0")

    thread, results = in_thread(join)
    thread.join(timeout=30)
    assert results == [True]


@pytest.fixture
def joined_during_first_tick(one_slot, monkeypatch):
    """Ticks of ``one_slot``'s rollout, the first node's join arriving while the first one runs (after its
    commit, before its end); the results of the ticks run, in order."""
    rollout, first, second = one_slot
    ticked: list = []
    tick_once = controller._rollout_tick_unless_held

    def tick_and_join(*, rollout_id):
        result = tick_once(rollout_id=rollout_id)
        if not ticked:
            join_on_target(first.node_id)
        ticked.append(result)
        return result

    monkeypatch.setattr(controller, "_rollout_tick_unless_held", tick_and_join)
    return rollout, second, ticked


def request_of(rollout) -> TickRequest:
    return TickRequest.objects.get(rollout=rollout)


def test_a_join_while_a_tick_runs_sends_nothing_and_the_tick_goes_again(joined_during_first_tick, published):
    rollout, second, ticked = joined_during_first_tick
    assert not request_of(rollout).queued
    result = rollout_tick(rollout_id=rollout.id)
    assert len(ticked) == 2  # the second read the join's settle, and used the slot it freed
    assert ticked[0].started == 0
    assert result.started == 1
    second.refresh_from_db()
    assert second.state == "in_flight"
    assert published == []  # no message: the join's ask was the running tick's to see to
    request = request_of(rollout)
    assert not request.queued
    assert request.running_until is None


def test_a_tick_that_has_ticked_long_enough_sends_the_tick_it_was_asked_for(
    joined_during_first_tick, published, monkeypatch
):
    rollout, second, ticked = joined_during_first_tick
    monkeypatch.setattr(controller, "TICK_AGAIN_SECONDS", 0)
    rollout_tick(rollout_id=rollout.id)
    assert len(ticked) == 1
    assert published == [(TICK_TASK, [str(rollout.id)], 0.0)]
    request = request_of(rollout)
    assert request.queued  # the message's tick clears it
    assert request.running_until is None
    second.refresh_from_db()
    assert second.state == "pending"


def test_the_periodic_tick_sends_the_tick_it_was_asked_for_at_once(joined_during_first_tick, published):
    rollout, _, ticked = joined_during_first_tick
    assert rollout_tick(rollout_id=rollout.id, wait=False) is not None
    assert len(ticked) == 1
    assert published == [(TICK_TASK, [str(rollout.id)], 0.0)]
    assert request_of(rollout).queued


def test_a_tick_that_fails_leaves_the_ask_made_meanwhile_to_a_message_a_second_later(one_slot, published, monkeypatch):
    rollout, first, _ = one_slot

    def join_then_fail(*, rollout_id):
        join_on_target(first.node_id)
        raise RuntimeError("the tick failed")

    monkeypatch.setattr(controller, "_rollout_tick_unless_held", join_then_fail)
    with pytest.raises(RuntimeError, match="the tick failed"):
        rollout_tick(rollout_id=rollout.id)
    assert published == [(TICK_TASK, [str(rollout.id)], 1)]
    request = request_of(rollout)
    assert request.queued
    assert request.running_until is None


def test_a_failed_tick_asked_for_nothing_sends_nothing(one_slot, published, monkeypatch):
    rollout, _, _ = one_slot

    def fail(*, rollout_id):
        raise RuntimeError("the tick failed")

    monkeypatch.setattr(controller, "_rollout_tick_unless_held", fail)
    with pytest.raises(RuntimeError):
        rollout_tick(rollout_id=rollout.id)
    assert published == []
    assert request_of(rollout).running_until is None


def test_the_mark_of_a_worker_killed_while_it_ticked_lapses(one_slot, published):
    rollout, _, _ = one_slot
    marked = timezone.now()
    # The tick's start, and no end: the worker was killed.
    TickRequest.objects.filter(rollout=rollout).update(queued=False, running_until=marked + RUNNING_LEASE)
    rollout_request_tick(rollout_id=rollout.id)
    assert published == []  # left to the tick that marked it, as far as the asker can tell
    assert request_of(rollout).queued
    TickRequest.objects.filter(rollout=rollout).update(queued=False)
    with time_machine.travel(marked + RUNNING_LEASE + timedelta(seconds=1), tick=False):
        rollout_request_tick(rollout_id=rollout.id)
    assert published == [(TICK_TASK, [str(rollout.id)], 0.0)]


def test_the_periodic_tick_clears_a_mark_a_killed_worker_left(one_slot, published):
    rollout, _, _ = one_slot
    TickRequest.objects.filter(rollout=rollout).update(queued=True, running_until=timezone.now() + RUNNING_LEASE)
    assert rollouts_tick_all() == 1
    request = request_of(rollout)
    assert not request.queued
    assert request.running_until is None
    rollout_request_tick(rollout_id=rollout.id)
    assert [name for name, _, _ in published] == [TICK_TASK]


@pytest.mark.parametrize(("wait", "countdown"), [(False, 1), (True, 0.0)], ids=["periodic", "asked, a waiter there"])
def test_a_tick_that_found_its_rollout_held_sends_the_tick_asked_for_while_it_held_the_mark(
    one_slot, published, monkeypatch, wait, countdown
):
    rollout, first, _ = one_slot

    def join_while_held(*, rollout_id):
        join_on_target(first.node_id)
        return None  # another worker's tick holds the rollout

    monkeypatch.setattr(controller, "_rollout_tick_unless_held", join_while_held)
    monkeypatch.setattr(controller, "holder_awaited", lambda *, rollout_id: False)  # another worker waits already
    assert rollout_tick(rollout_id=rollout.id, wait=wait) is None
    assert published == [(TICK_TASK, [str(rollout.id)], countdown)]  # the join sent nothing: this is its tick
    request = request_of(rollout)
    assert request.queued
    assert request.running_until is None
