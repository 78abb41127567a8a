"""Raising a rollout's tick request has two paths and one rule: the prepared statement (PostgreSQL) and the ORM
(SQLite, the demo). Both run on every state that decides it (the rollout's state, a tick already queued or not),
each in a savepoint rolled back before the other; whether the call raised it, and the row after, must agree."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from rollout.models import Rollout, TickRequest
from rollout.services.create import rollout_create
from rollout.services.plan import rollout_spec
from rollout.services.ticks import _raise_orm, tick_request_raise
from tests.factories import fleet

pytestmark = pytest.mark.django_db


def outcome(path, rollout_id) -> tuple[bool, bool]:
    with transaction.atomic():
        raised = path(rollout_id=rollout_id)
        queued = TickRequest.objects.get(rollout_id=rollout_id).queued
        transaction.set_rollback(True)
    return raised, queued


@pytest.mark.parametrize("queued", [False, True])
@pytest.mark.parametrize("state", Rollout.State.values)
def test_the_statement_and_the_orm_path_agree(tenant, releases, state, queued):
    assert connection.vendor == "postgresql"  # the statement runs only there
    fleet(tenant, {"a": (1, "1")})
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100], soak_seconds=0))
    reason = Rollout.PausedReason.OPERATOR if state == Rollout.State.PAUSED else None
    Rollout.objects.filter(pk=rollout.pk).update(state=state, paused_reason=reason)
    TickRequest.objects.filter(rollout=rollout).update(queued=queued)
    by_statement = outcome(tick_request_raise, rollout.id)
    assert by_statement == outcome(_raise_orm, rollout.id)
    raises = not queued and state in Rollout.ACTIVE_STATES
    assert by_statement == (raises, queued or raises)
