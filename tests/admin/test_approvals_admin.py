"""Approving and denying in the admin, held to the API's rules; the Tenant's approvals.

See docs/controller.md#approvals."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from fleet.models import AuditEntry, Permission, Tenant
from fleet.services.iam import grant_add, tenant_set_rollout_approvals
from rollout.models import Rollout, RolloutApproval, RolloutEvent
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.admin.conftest import staff_client
from tests.admin.test_rollouts import detail, flash
from tests.factories import fleet

pytestmark = pytest.mark.django_db

LIST = "/admin/rollout/rollout/"


def superuser(username: str) -> tuple[Client, object]:
    user = get_user_model().objects.create_superuser(username, f"{username}@example.com", None)
    client = Client()
    client.force_login(user)
    return client, user


def approver(tenant: Tenant, username: str) -> Client:
    client = staff_client(tenant, username, fleet_admin=False)
    user = get_user_model().objects.get(username=username)
    grant_add(tenant=tenant, user=user, permission=Permission.ROLLOUT_APPROVE)
    return client


def decide(client: Client, rollout: Rollout, slug: str, comment: str | None = None):
    return client.post(f"{LIST}{rollout.pk}/{slug}/", {} if comment is None else {"comment": comment})


@pytest.fixture
def made_by_root(tenant, releases):
    """A rollout awaiting one approval, created in the admin's way by the superuser ``root``."""
    tenant_set_rollout_approvals(tenant=tenant, approvals=1)
    client, user = superuser("root")
    made = fleet(tenant, {"gpu-a": (5, "0.2")})
    spec = rollout_spec(version="1.0.0", pool_ids=[made["gpu-a"][0].pool_id])
    return client, rollout_create(tenant=tenant, spec=spec, created_by=user)


def test_a_superuser_cannot_approve_the_rollout_they_created(made_by_root):
    root, rollout = made_by_root
    body = root.get(detail(rollout)).content.decode()
    assert "rollout-decision-approve" in body
    assert "rollout-decision-deny" in body
    assert "awaiting approval" in body
    response = decide(root, rollout, "approve", "mine")
    assert response.status_code == 200
    assert "self_approval" in response.content.decode()
    assert Rollout.objects.get().state == "awaiting_approval"
    assert not RolloutApproval.objects.exists()


def test_another_superuser_approves_it_and_it_starts(made_by_root):
    _, rollout = made_by_root
    other, _ = superuser("admin2")
    assert other.get(f"{LIST}{rollout.pk}/approve/").status_code == 200
    response = decide(other, rollout, "approve", "ok from admin")
    assert response.status_code == 302
    assert "Approved" in flash(response)[0]
    assert Rollout.objects.get().state == "active"
    assert RolloutEvent.objects.filter(kind="rollout.approved").count() == 1
    entry = AuditEntry.objects.get(action="rollout.approve")
    assert (entry.actor_user, entry.actor_via) == ("admin2", "admin")
    body = other.get(detail(rollout)).content.decode()
    assert "ok from admin" in body  # the approvals on the page
    assert "rollout-decision-approve" not in body  # no longer awaiting
    assert decide(other, rollout, "approve").status_code == 200  # the page again, with the code
    assert "already_approved" in decide(other, rollout, "approve").content.decode()


def test_a_staff_approver_of_the_tenant_approves_and_denies(tenant, made_by_root):
    _, rollout = made_by_root
    alice = approver(tenant, "alice")
    assert "rollout-decision-approve" in alice.get(detail(rollout)).content.decode()
    assert decide(alice, rollout, "deny", "freeze").status_code == 302
    assert Rollout.objects.get().state == "denied"
    assert AuditEntry.objects.get(action="rollout.deny").after == {"state": "denied", "comment": "freeze"}


def test_deny_needs_a_comment_and_writes_nothing_without_one(tenant, made_by_root):
    _, rollout = made_by_root
    alice = approver(tenant, "alice")
    for comment in (None, "", "x" * 501):
        response = decide(alice, rollout, "deny", comment)
        assert response.status_code == 200
        assert 'class="errorlist' in response.content.decode()
    assert Rollout.objects.get().state == "awaiting_approval"
    assert not AuditEntry.objects.filter(action="rollout.deny").exists()


def test_without_the_approve_grant_no_buttons_and_no_pages(tenant, made_by_root):
    _, rollout = made_by_root
    operator = staff_client(tenant, "operator")  # compute:fleet:admin alone
    assert "rollout-decision-approve" not in operator.get(detail(rollout)).content.decode()
    assert operator.get(f"{LIST}{rollout.pk}/approve/").status_code == 403
    assert decide(operator, rollout, "approve").status_code == 403
    assert decide(operator, rollout, "deny", "no").status_code == 403
    assert Rollout.objects.get().state == "awaiting_approval"


def test_another_tenants_approver_does_not_find_it(other_tenant, made_by_root):
    _, rollout = made_by_root
    outsider = approver(other_tenant, "mallory")
    assert decide(outsider, rollout, "approve").status_code == 404
    assert Rollout.objects.get().state == "awaiting_approval"


def test_abort_is_offered_while_awaiting_approval(made_by_root):
    root, rollout = made_by_root
    assert f"{rollout.pk}/abort/" in root.get(detail(rollout)).content.decode()
    assert root.post(f"{LIST}{rollout.pk}/abort/").status_code == 302
    assert Rollout.objects.get().state == "aborted"


def test_the_list_filters_rollouts_awaiting_approval_and_mine_to_approve(tenant, made_by_root):
    root, rollout = made_by_root
    tenant_set_rollout_approvals(tenant=tenant, approvals=0)
    made = fleet(tenant, {"gpu-b": (2, "1")})
    running = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", pool_ids=[made["gpu-b"][0].pool_id]))
    short, other = f"{rollout.pk}/change/", f"{running.pk}/change/"  # their rows' links
    body = root.get(LIST).content.decode()
    assert "?approval=awaiting" in body
    assert "?state__exact=awaiting_approval" in body
    for query in ({"approval": "awaiting"}, {"state__exact": "awaiting_approval"}):
        body = root.get(LIST, query).content.decode()
        assert short in body
        assert other not in body
    assert short not in root.get(LIST, {"approval": "mine"}).content.decode()  # root created it
    alice = approver(tenant, "alice")
    assert short in alice.get(LIST, {"approval": "mine"}).content.decode()
    decide(alice, rollout, "approve")
    assert short not in alice.get(LIST, {"approval": "mine"}).content.decode()


# --- the Tenant's approvals: a superuser's to change -------------------------------------------


def test_a_superuser_changes_the_tenants_approvals_and_it_is_audited(tenant):
    root, _ = superuser("root")
    url = f"/admin/fleet/tenant/{tenant.pk}/change/"
    assert 'name="rollout_approvals"' in root.get(url).content.decode()
    response = root.post(url, {"slug": "acme", "name": "Acme", "rollout_approvals": "2"})
    assert response.status_code == 302
    tenant.refresh_from_db()
    assert (tenant.rollout_approvals, tenant.name) == (2, "Acme")
    entry = AuditEntry.objects.get(action="tenant.update")
    assert (entry.actor_user, entry.actor_via, entry.after) == ("root", "admin", {"rolloutApprovals": 2})
    response = root.post(url, {"slug": "acme", "name": "Acme", "rollout_approvals": "6"})
    assert response.status_code == 200  # the form again, with the error
    assert Tenant.objects.get().rollout_approvals == 2


def test_a_staff_fleet_admin_sees_the_approvals_but_cannot_change_them(tenant):
    tenant_set_rollout_approvals(tenant=tenant, approvals=1)
    staff = staff_client(tenant, "ops", app_labels=("fleet",))
    url = f"/admin/fleet/tenant/{tenant.pk}/change/"
    body = staff.get(url).content.decode()
    assert 'name="rollout_approvals"' not in body
    assert "Rollout approvals" in body  # shown read-only
    staff.post(url, {"slug": "acme", "name": "renamed", "rollout_approvals": "0"})
    tenant.refresh_from_db()
    assert tenant.rollout_approvals == 1
    assert not AuditEntry.objects.filter(action="tenant.update", actor_via="admin").exists()
