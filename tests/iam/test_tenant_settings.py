"""A tenant's rolloutApprovals: settenant, the default for new tenants, GET /tenant/, the approve grant.

See docs/controller.md#approvals and docs/api.md#the-tenant.
"""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.test import override_settings

from fleet import checks
from fleet.models import AuditEntry, Grant, Permission, Tenant
from fleet.services.iam import principal_for_key, tenant_create
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

URL = "/api/compute/tenant/"


def test_settenant_sets_the_approvals_and_audits_the_change(tenant, capsys):
    call_command("settenant", "acme", "--rollout-approvals", "2")
    assert "2 approval(s)" in capsys.readouterr().out
    assert Tenant.objects.get().rollout_approvals == 2
    entry = AuditEntry.objects.get(action="tenant.update")
    assert (entry.actor_via, entry.object_type, entry.before, entry.after) == (
        "command",
        "tenant",
        {"rolloutApprovals": 0},
        {"rolloutApprovals": 2},
    )
    call_command("settenant", "acme", "--rollout-approvals", "2")  # no change: no entry
    assert AuditEntry.objects.filter(action="tenant.update").count() == 1
    call_command("settenant", "acme", "--rollout-approvals", "0")
    assert Tenant.objects.get().rollout_approvals == 0


@pytest.mark.parametrize("value", ["6", "-1", "two"])
def test_settenant_refuses_a_number_out_of_0_to_5_and_changes_nothing(tenant, value):
    with pytest.raises(CommandError):
        call_command("settenant", "acme", "--rollout-approvals", value)
    assert Tenant.objects.get().rollout_approvals == 0
    assert not AuditEntry.objects.filter(action="tenant.update").exists()


def test_settenant_refuses_an_unknown_tenant_or_nothing_to_change(tenant):
    with pytest.raises(CommandError, match="No tenant"):
        call_command("settenant", "nope", "--rollout-approvals", "1")
    with pytest.raises(CommandError, match="Nothing to change"):
        call_command("settenant", "acme")


def test_the_database_keeps_approvals_within_0_to_5(tenant):
    with pytest.raises(IntegrityError), transaction.atomic():
        Tenant.objects.filter(pk=tenant.pk).update(rollout_approvals=6)


def test_new_tenants_take_rollout_approvals_from_the_environment(settings):
    settings.ROLLOUT_APPROVALS = 3
    assert tenant_create(slug="strict").rollout_approvals == 3
    call_command("createtenant", "stricter")
    assert Tenant.objects.get(slug="stricter").rollout_approvals == 3
    settings.ROLLOUT_APPROVALS = 0
    assert tenant_create(slug="relaxed").rollout_approvals == 0


@pytest.mark.parametrize("value", [6, -1, "2", True])
def test_a_bad_rollout_approvals_setting_is_a_system_check_error(value):
    with override_settings(ROLLOUT_APPROVALS=value):
        assert [message.id for message in checks.check_rollout_approvals()] == ["fleet.E009"]
    with override_settings(ROLLOUT_APPROVALS=5):
        assert checks.check_rollout_approvals() == []


def test_the_tenant_representation(tenant, api):
    assert api.get(URL).json() == {"slug": "acme", "rolloutApprovals": 0}
    call_command("settenant", "acme", "--rollout-approvals", "3")
    assert api.get(URL).json() == {"slug": "acme", "rolloutApprovals": 3}


def test_an_approver_reads_the_tenant_a_key_without_grants_does_not(tenant, ungranted_api, anonymous_api, capsys):
    call_command("createapikey", "--tenant", "acme", "--user", "alice", "--grant", "compute:rollout:approve")
    approver = client_for(tenant, "unused", admin=False)
    approver.credentials(HTTP_AUTHORIZATION=f"Bearer {capsys.readouterr().out.strip().splitlines()[-1]}")
    assert approver.get(URL).json()["slug"] == "acme"
    assert ungranted_api.get(URL).json()["code"] == "permission_denied"
    assert anonymous_api.get(URL).status_code == 401


@pytest.mark.parametrize("method", ["put", "patch", "post", "delete"])
def test_the_tenants_own_keys_never_change_it(tenant, api, method):
    response = getattr(api, method)(URL, {"rolloutApprovals": 0, "slug": "x"}, format="json")
    assert response.status_code == 405
    assert Tenant.objects.get().slug == "acme"
    call_command("settenant", "acme", "--rollout-approvals", "2")
    response = getattr(api, method)(URL, {"rolloutApprovals": 0}, format="json")
    assert response.status_code == 405
    assert Tenant.objects.get().rollout_approvals == 2


def test_createapikey_grants_approve_alone_or_with_the_admin_grant(capsys):
    call_command("createtenant", "acme")
    call_command("createapikey", "--tenant", "acme", "--user", "alice", "--grant", "compute:rollout:approve")
    approver = principal_for_key(capsys.readouterr().out.strip().splitlines()[-1])
    assert (approver.can_approve, approver.is_fleet_admin) == (True, False)
    call_command(
        "createapikey",
        "--tenant",
        "acme",
        "--user",
        "bob",
        "--grant",
        "compute:rollout:approve",
        "--grant",
        "compute:fleet:admin",
    )
    both = principal_for_key(capsys.readouterr().out.strip().splitlines()[-1])
    assert (both.can_approve, both.is_fleet_admin) == (True, True)
    assert set(Grant.objects.filter(user__username="bob").values_list("permission", "scope")) == {
        (Permission.ROLLOUT_APPROVE, "fleet"),
        (Permission.FLEET_ADMIN, "fleet"),
    }
    call_command("createapikey", "--tenant", "acme", "--user", "carol", "--grant", "compute:fleet:admin")
    admin_only = principal_for_key(capsys.readouterr().out.strip().splitlines()[-1])
    assert (admin_only.can_approve, admin_only.is_fleet_admin) == (False, True)
