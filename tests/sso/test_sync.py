"""The groups → tenant and grants sync itself (fleet/services/sso.py; docs/operations.md#single-sign-on):
what it refuses writes nothing."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from fleet.models import AuditEntry, Grant, Membership, Permission
from fleet.services.iam import grant_add
from fleet.services.sso import SignInRefused, sso_user_sync
from fleet.sso.config import parse_role_map

RULES = parse_role_map(
    "sre=acme:compute:fleet:admin,globex-ops=globex:compute:fleet:admin,x=initech:compute:fleet:admin"
)


def sync(username: str, *groups: str):
    return sso_user_sync(username=username, email=f"{username}@example.com", groups=groups, rules=RULES)


def test_groups_giving_two_tenants_are_refused_and_nothing_is_written(tenant, other_tenant):
    with pytest.raises(SignInRefused, match="several tenants") as refused:
        sync("judy", "sre", "globex-ops")
    assert refused.value.reason == "several_tenants"
    assert not get_user_model().objects.filter(username="judy").exists()
    assert not AuditEntry.objects.exists()


def test_a_local_account_of_the_same_name_is_never_taken_over(tenant):
    local = get_user_model().objects.create_user("kim", password="a-local-password-1", is_staff=True)
    with pytest.raises(SignInRefused, match="local account") as refused:
        sync("kim", "sre")
    assert refused.value.reason == "local_account"
    assert not Grant.objects.filter(user=local).exists()
    assert not Membership.objects.filter(user=local).exists()
    get_user_model().objects.create_superuser("root", "root@example.com", None)
    with pytest.raises(SignInRefused, match="local account"):
        sync("root", "sre")


def test_a_tenant_that_does_not_exist_gives_nothing(tenant):
    assert sync("lee", "x") is None
    assert not get_user_model().objects.filter(username="lee").exists()


def test_a_grant_added_by_hand_is_taken_away_at_the_next_sign_in(tenant):
    user = sync("mia", "sre")
    grant_add(tenant=tenant, user=user, permission=Permission.ROLLOUT_APPROVE)
    sync("mia", "sre")
    assert set(Grant.objects.filter(user=user).values_list("permission", flat=True)) == {Permission.FLEET_ADMIN}
    entry = AuditEntry.objects.filter(action="user.sso_sign_in").order_by("-at").first()
    assert entry.before == {"grants": ["acme:compute:fleet:admin", "acme:compute:rollout:approve"]}
    assert entry.after["grants"] == ["acme:compute:fleet:admin"]


@pytest.mark.django_db(transaction=True)
def test_two_first_sign_ins_at_once_make_one_user():
    from fleet.services.iam import tenant_create
    from tests.concurrency import run_together

    tenant_create(slug="acme")
    assert run_together(*[lambda: sync("noor", "sre")] * 4, rounds=3) == []
    user = get_user_model().objects.get(username="noor")
    assert not user.has_usable_password()
    assert list(Grant.objects.filter(user=user).values_list("permission", flat=True)) == [Permission.FLEET_ADMIN]
