"""Approvals at the same moment, on PostgreSQL: never counted twice, never started twice.

See docs/controller.md#approvals."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import DomainError
from fleet.services.iam import tenant_set_rollout_approvals, user_in_tenant
from rollout.models import Rollout, RolloutApproval, RolloutEvent
from rollout.rollouts.approvals import rollout_approve, rollout_deny
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.concurrency import run_together
from tests.factories import fleet

pytestmark = pytest.mark.django_db(transaction=True)


def awaiting(tenant, approvals: int) -> Rollout:
    tenant_set_rollout_approvals(tenant=tenant, approvals=approvals)
    fleet(tenant, {"a": (4, "1")})
    creator = user_in_tenant(tenant=tenant, username="carol")
    return rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0"), created_by=creator)


def approver(rollout: Rollout, username: str, outcomes: list):
    user = user_in_tenant(tenant=rollout.tenant, username=username)

    def approve() -> None:
        try:
            outcomes.append(rollout_approve(rollout_id=rollout.id, user=user).state)
        except DomainError as exc:
            outcomes.append(exc.code)

    return approve


def test_two_approvers_at_once_are_both_counted_and_start_it_once(tenant, releases):
    rollout = awaiting(tenant, 2)
    outcomes: list[str] = []
    errors = run_together(approver(rollout, "alice", outcomes), approver(rollout, "bob", outcomes))
    assert errors == []
    assert sorted(outcomes) == ["active", "awaiting_approval"]
    assert RolloutApproval.objects.filter(rollout=rollout).count() == 2
    assert RolloutEvent.objects.filter(rollout=rollout, kind="rollout.approved").count() == 1
    assert Rollout.objects.get(pk=rollout.pk).state == "active"


def test_one_user_approving_twice_at_once_is_recorded_once(tenant, releases):
    rollout = awaiting(tenant, 2)
    outcomes: list[str] = []
    errors = run_together(approver(rollout, "alice", outcomes), approver(rollout, "alice", outcomes))
    assert errors == []
    assert sorted(outcomes) == ["already_approved", "awaiting_approval"]
    assert RolloutApproval.objects.filter(rollout=rollout).count() == 1


def test_more_approvers_than_needed_at_once_start_it_once(tenant, releases):
    rollout = awaiting(tenant, 1)
    outcomes: list[str] = []
    errors = run_together(*(approver(rollout, name, outcomes) for name in ("alice", "bob", "dave")))
    assert errors == []
    assert sorted(outcomes) == ["active", "invalid_state", "invalid_state"]
    assert RolloutApproval.objects.filter(rollout=rollout).count() == 1
    assert RolloutEvent.objects.filter(rollout=rollout, kind="rollout.approved").count() == 1


def test_an_approval_and_a_denial_at_once_leave_one_outcome(tenant, releases):
    rollout = awaiting(tenant, 1)
    outcomes: list[str] = []

    def deny() -> None:
        try:
            outcomes.append(rollout_deny(rollout_id=rollout.id, comment="no").state)
        except DomainError as exc:
            outcomes.append(exc.code)

    errors = run_together(approver(rollout, "alice", outcomes), deny)
    assert errors == []
    final = Rollout.objects.get(pk=rollout.pk).state
    assert sorted(outcomes) == sorted([final, "invalid_state"])
    assert final in ("active", "denied")


def test_the_database_refuses_a_second_approval_of_one_user(tenant, releases):
    rollout = awaiting(tenant, 2)
    alice = get_user_model().objects.get(username="carol")
    RolloutApproval.objects.create(rollout=rollout, user=alice, username="carol", at=timezone.now())
    with pytest.raises(IntegrityError), transaction.atomic():
        RolloutApproval.objects.create(rollout=rollout, user=alice, username="carol", at=timezone.now())


def test_the_database_refuses_awaiting_approval_without_approvals_required(tenant, releases):
    rollout = awaiting(tenant, 1)
    with pytest.raises(IntegrityError), transaction.atomic():
        Rollout.objects.filter(pk=rollout.pk).update(approvals_required=0)
