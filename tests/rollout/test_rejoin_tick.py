"""The join's settle and the tick it would ask for (docs/controller.md#reacting-at-once): a settle that finds a tick
of its rollout queued asks for nothing, because that tick's start (which clears its request before it reads
anything) waits for the settle's commit; one that finds none queued asks once it has committed. Staged with a
second connection, as a Celery worker's tick would be."""

from __future__ import annotations

import psycopg
import pytest
from django.db import transaction
from django.utils import timezone

from fleet.models import NodeSession
from fleet.services.sessions import agent_session_report_for_token
from rollout.controller.settle import node_upgrade_settle_reported
from rollout.controller.tick import rollout_tick
from rollout.controller.upgrade_transitions import Rejoined, succeed_rejoined
from rollout.models import NodeUpgrade, TickRequest
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.factories import fleet
from tests.watch.conftest import database_url

pytestmark = pytest.mark.django_db(transaction=True)

# The tick's first statement and its last (controller/tick_requests.py), as another worker runs them.
START = f"""
UPDATE {TickRequest._meta.db_table} SET queued = false, running_until = now() + interval '1 minute'
WHERE rollout_id = %s
"""  # noqa: S608
END = f"UPDATE {TickRequest._meta.db_table} SET running_until = NULL WHERE rollout_id = %s"  # noqa: S608


@pytest.fixture
def in_flight(tenant, releases):
    (node,) = fleet(tenant, {"a": (1, "1")})["a"]
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100], soak_seconds=0))
    assert rollout_tick(rollout_id=rollout.id).started == 1
    return node, rollout


def clear_from_another_worker(rollout_id, *, lock_timeout: str = "300ms") -> int:
    """A tick's start and end on a connection of its own: the rows its start cleared; LockNotAvailable past
    ``lock_timeout``."""
    with psycopg.connect(database_url(), autocommit=True) as conn:
        conn.execute(f"SET lock_timeout = '{lock_timeout}'")
        cleared = conn.execute(START, [rollout_id]).rowcount
        conn.execute(END, [rollout_id])
        return cleared


def test_a_queued_tick_starts_only_after_the_settle_that_relied_on_it_commits(in_flight):
    node, rollout = in_flight
    TickRequest.objects.filter(rollout=rollout).update(queued=True)
    with transaction.atomic():
        rejoined = succeed_rejoined(node_id=node.id, version="1.0.0", at=timezone.now())
        assert rejoined == Rejoined(rollout_id=rollout.id, tick_queued=True)
        with pytest.raises(psycopg.errors.LockNotAvailable):
            clear_from_another_worker(rollout.id)  # the queued tick waits: it will read this settle
    assert clear_from_another_worker(rollout.id) == 1  # committed: the tick starts, and reads it settled
    assert NodeUpgrade.objects.get(rollout=rollout, node=node).state == "succeeded"


def test_in_the_join_s_statement_a_queued_tick_starts_only_after_the_join_commits(in_flight):
    """As an agent's join runs the settle (rollout/hooks.py ``SETTLE_ON_JOIN``): the same lock, held by the join's
    transaction, and nothing asked for once it commits."""
    node, rollout = in_flight
    TickRequest.objects.filter(rollout=rollout).update(queued=True)
    NodeSession.objects.filter(node=node).update(left_at=timezone.now())  # the agent restarted
    with transaction.atomic():
        report = agent_session_report_for_token(
            token_hash=node.agent_token_hash, daemon_version="1.0.0", protocol_version=3
        )
        assert report is not None
        assert report.joined
        with pytest.raises(psycopg.errors.LockNotAvailable):
            clear_from_another_worker(rollout.id)  # the queued tick waits: it will read this settle
    assert TickRequest.objects.get(rollout=rollout).queued  # the join asked for nothing: that tick is queued
    assert clear_from_another_worker(rollout.id) == 1
    assert NodeUpgrade.objects.get(rollout=rollout, node=node).state == "succeeded"


def test_a_settle_that_finds_no_tick_queued_asks_for_one_and_holds_nothing(
    in_flight, django_capture_on_commit_callbacks
):
    node, rollout = in_flight
    assert not TickRequest.objects.get(rollout=rollout).queued
    with transaction.atomic():
        rejoined = succeed_rejoined(node_id=node.id, version="1.0.0", at=timezone.now())
        assert rejoined == Rejoined(rollout_id=rollout.id, tick_queued=False)
        assert clear_from_another_worker(rollout.id) == 1  # nothing locked: the tick starts at once
        transaction.set_rollback(True)
    with transaction.atomic():
        with django_capture_on_commit_callbacks(execute=False) as published:
            assert node_upgrade_settle_reported(node_id=node.id, daemon_version="1.0.0")
        assert TickRequest.objects.get(rollout=rollout).queued
        transaction.set_rollback(True)  # nothing is sent
    assert len(published) == 1  # the tick's message, after the commit
