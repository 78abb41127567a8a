"""An asked tick that finds its rollout held by another worker's tick (docs/controller.md#reacting-at-once).

One worker per rollout waits for the holder's tick to end and then ticks, so a slot freed while the holder ran
is used at once; the others return at once and leave it to that waiter; the periodic tick never waits.
"""

import threading
import time

import pytest
from django.db import connection, connections

from demo.processes import wait_until
from fleet.models import NodeSession
from rollout import dispatch
from rollout.controller import tick as controller
from rollout.controller import tick_requests
from rollout.controller.settle import node_upgrade_settle_reported
from rollout.controller.tick import rollout_tick
from rollout.dispatch import TICK_TASK
from rollout.models import NodeUpgrade, Rollout, TickRequest
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.factories import fleet
from tests.rollout.test_concurrency import locked_elsewhere

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def published(monkeypatch) -> list[tuple[str, list, float | None]]:
    """The tasks published (name, args, countdown); nothing reaches a broker."""
    sent: list[tuple[str, list, float | None]] = []

    def record(name, *, args, eta=None, countdown=None):
        sent.append((name, args, countdown))
        return True

    monkeypatch.setattr(dispatch, "publish", record)
    return sent


@pytest.fixture(autouse=True)
def long_wait(monkeypatch):
    """A waiter that never gives up within a test, however loaded the machine (tests of giving up shorten it)."""
    monkeypatch.setattr(tick_requests, "HOLDER_WAIT_SECONDS", 60)


@pytest.fixture
def one_slot(tenant, releases):
    """A rollout over two nodes with one slot, the first node in flight: (rollout, the first node, the second)."""
    fleet(tenant, {"a": (2, "0.5")})["a"]
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100], soak_seconds=0))
    assert rollout_tick(rollout_id=rollout.id).started == 1
    first = NodeUpgrade.objects.get(rollout=rollout, state="in_flight")
    second = NodeUpgrade.objects.get(rollout=rollout, state="pending")
    return rollout, first, second


def lock_waits() -> int:
    """Backends of this database waiting for a lock (a tick waiting for the holder)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def in_thread(function):
    """Run ``function`` on a thread with its own connection; returns (thread, results)."""
    results: list = []

    def run():
        try:
            results.append(function())
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, results


def test_an_asked_tick_waits_for_the_holder_then_uses_the_slot_freed_meanwhile(one_slot, published):
    rollout, first, second = one_slot
    with locked_elsewhere(Rollout, rollout.id):  # another worker's tick, which read before the settle
        NodeSession.objects.filter(node_id=first.node_id).update(daemon_version="1.0.0")  # its agent rejoined
        assert node_upgrade_settle_reported(node_id=first.node_id, daemon_version="1.0.0") is True
        waiter, results = in_thread(lambda: rollout_tick(rollout_id=rollout.id))
        wait_until(lambda: lock_waits() == 1, timeout=10, poll=0.01, what="the waiter to wait")
        assert waiter.is_alive()
        assert results == []
    waiter.join(timeout=10)
    (result,) = results
    assert result.started == 1
    second.refresh_from_db()
    assert second.state == "in_flight"
    # The join's ask, and nothing for a second later.
    assert [countdown for name, _, countdown in published if name == TICK_TASK] == [0.0]


def test_only_one_worker_waits_for_the_holder_the_others_return_at_once(one_slot, published):
    rollout, first, second = one_slot
    with locked_elsewhere(Rollout, rollout.id):
        waiter, results = in_thread(lambda: rollout_tick(rollout_id=rollout.id))
        wait_until(lambda: lock_waits() == 1, timeout=10, poll=0.01, what="the waiter to wait")
        # The join settles while both wait; the second asked tick leaves the slot to the waiter, which reads later.
        NodeSession.objects.filter(node_id=first.node_id).update(daemon_version="1.0.0")
        assert node_upgrade_settle_reported(node_id=first.node_id, daemon_version="1.0.0") is True
        started = time.monotonic()
        assert rollout_tick(rollout_id=rollout.id) is None
        assert time.monotonic() - started < 1
        assert lock_waits() == 1
    waiter.join(timeout=10)
    assert results[0].started == 1
    second.refresh_from_db()
    assert second.state == "in_flight"
    # The join's ask, and nothing for a second later.
    assert [countdown for name, _, countdown in published if name == TICK_TASK] == [0.0]


def test_a_holder_that_outlasts_the_wait_leaves_a_tick_asked_a_second_later(one_slot, published, monkeypatch):
    rollout, _, second = one_slot
    monkeypatch.setattr(tick_requests, "HOLDER_WAIT_SECONDS", 1)
    TickRequest.objects.filter(rollout=rollout).update(queued=False)
    with locked_elsewhere(Rollout, rollout.id):
        started = time.monotonic()
        assert rollout_tick(rollout_id=rollout.id) is None
        assert 1 <= time.monotonic() - started < 5
        assert TickRequest.objects.get(rollout=rollout).queued
    assert published == [(TICK_TASK, [str(rollout.id)], 1)]
    second.refresh_from_db()
    assert second.state == "pending"


def test_the_periodic_tick_never_waits_it_asks_again_a_second_later(one_slot, published):
    rollout, _, _ = one_slot
    TickRequest.objects.filter(rollout=rollout).update(queued=False)
    with locked_elsewhere(Rollout, rollout.id):
        started = time.monotonic()
        assert rollout_tick(rollout_id=rollout.id, wait=False) is None
        assert time.monotonic() - started < 1
        assert TickRequest.objects.get(rollout=rollout).queued
    assert published == [(TICK_TASK, [str(rollout.id)], 1)]


def test_the_waiter_lets_its_lock_go_before_it_asks_again_and_when_it_is_done(one_slot, published, monkeypatch):
    """Asked while still the waiter, the tick a second later could be lost (docs/controller.md#reacting-at-once)."""
    rollout, _, _ = one_slot
    monkeypatch.setattr(tick_requests, "HOLDER_WAIT_SECONDS", 1)
    held_when_asked: list[int] = []
    ask = tick_requests.rollout_request_tick
    monkeypatch.setattr(
        tick_requests,
        "rollout_request_tick",
        lambda **kwargs: (held_when_asked.append(advisory_locks()), ask(**kwargs)),
    )
    with locked_elsewhere(Rollout, rollout.id):
        assert tick_requests.holder_awaited(rollout_id=rollout.id) is False
        assert held_when_asked == [0]
    assert tick_requests.holder_awaited(rollout_id=rollout.id) is True  # nothing holds it: no wait
    assert advisory_locks() == 0  # this connection stays open: the lock is let go, not dropped with it


def test_a_rollout_held_again_after_each_turn_is_asked_for_a_second_later(one_slot, published, monkeypatch):
    rollout, _, _ = one_slot
    waits: list[str] = []
    monkeypatch.setattr(controller, "_rollout_tick_unless_held", lambda rollout_id: None)
    monkeypatch.setattr(controller, "holder_awaited", lambda rollout_id: waits.append(rollout_id) or True)
    TickRequest.objects.filter(rollout=rollout).update(queued=False)
    assert rollout_tick(rollout_id=rollout.id) is None
    assert len(waits) == controller.TICK_ATTEMPTS - 1  # no wait after the last attempt: it would tick nothing
    assert published == [(TICK_TASK, [str(rollout.id)], 1)]


def advisory_locks() -> int:
    """Advisory locks this connection holds."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
        return cursor.fetchone()[0]
