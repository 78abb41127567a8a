"""Raising a rollout's tick request, one prepared statement, on every state that decides it (the rollout's state, a
tick already queued or not, a tick running or not): it raises it only when none is queued and the rollout is active
or paused, and says to send the tick only when no tick runs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from rollout.controller.tick_requests import tick_request_raise
from rollout.models import Rollout, TickRequest
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
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
def test_the_statement_raises_only_an_idle_request_of_a_rollout_that_ticks(tenant, releases, state, queued):
    fleet(tenant, {"a": (1, "1")})
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100], soak_seconds=0))
    reason = Rollout.PausedReason.OPERATOR if state == Rollout.State.PAUSED else None
    # approvals_required: a rollout awaiting approval needs some (rollout_awaiting_needs_approvals).
    Rollout.objects.filter(pk=rollout.pk).update(state=state, paused_reason=reason, approvals_required=1)
    TickRequest.objects.filter(rollout=rollout).update(queued=queued)
    by_statement = outcome(tick_request_raise, rollout.id)
    raises = not queued and state in Rollout.ACTIVE_STATES
    assert by_statement == (raises, queued or raises)


@pytest.mark.parametrize(
    ("running_for", "sends"),
    [(None, True), (timedelta(seconds=30), False), (timedelta(seconds=-1), True)],
    ids=["no tick running", "a tick running", "a lapsed mark"],
)
def test_the_statement_raises_the_request_but_sends_nothing_while_a_tick_runs(tenant, releases, running_for, sends):
    fleet(tenant, {"a": (1, "1")})
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100], soak_seconds=0))
    running_until = None if running_for is None else timezone.now() + running_for
    TickRequest.objects.filter(rollout=rollout).update(queued=False, running_until=running_until)
    assert outcome(tick_request_raise, rollout.id) == (sends, True)
