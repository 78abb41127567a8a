"""The admin's part of readiness and release blocks: minReadySeconds at create, blocking a release per tenant.

docs/controller.md#readiness-before-success-minreadyseconds, docs/controller.md#blocking-a-release-per-tenant.
"""

from __future__ import annotations

import pytest

from fleet.models import AuditEntry
from rollout.models import Release, ReleaseBlock, Rollout
from tests.admin.test_create import ADD, form_data, pools  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db


def test_create_with_min_ready_seconds(root, tenant, pools):  # noqa: F811
    preview = root.post(ADD, {**form_data(tenant, pools, min_ready_seconds="120"), "_preview": "1"})
    assert preview.status_code == 200
    assert "2 min" in preview.content.decode()  # min ready, in words
    assert not Rollout.objects.exists()
    root.post(ADD, {**form_data(tenant, pools, min_ready_seconds="120"), "_confirm": "1"})
    assert Rollout.objects.get().min_ready_seconds == 120


def test_a_bad_min_ready_seconds_is_refused_and_nothing_written(root, tenant, pools):  # noqa: F811
    response = root.post(ADD, {**form_data(tenant, pools, min_ready_seconds="86401"), "_confirm": "1"})
    assert "minReadySeconds" in response.content.decode()
    assert not Rollout.objects.exists()


def test_staff_block_and_unblock_a_release_for_their_tenant(staff, tenant, releases):
    release = Release.objects.get(version="1.0.0")
    listing = staff.get("/admin/rollout/release/").content.decode()
    assert f"/admin/rollout/release/{release.pk}/block/" in listing
    form = staff.get(f"/admin/rollout/release/{release.pk}/block/")
    assert form.status_code == 200
    assert staff.post(f"/admin/rollout/release/{release.pk}/block/", {"reason": ""}).status_code == 200  # form error
    assert not ReleaseBlock.objects.exists()
    done = staff.post(f"/admin/rollout/release/{release.pk}/block/", {"reason": "bad canary"})
    assert done.status_code == 302
    block = ReleaseBlock.objects.get()
    assert (block.tenant_id, block.reason, block.blocked_by.username) == (tenant.pk, "bad canary", "staff")
    assert "bad canary" in staff.get(f"/admin/rollout/release/{release.pk}/change/").content.decode()
    again = staff.post(f"/admin/rollout/release/{release.pk}/block/", {"reason": "twice"})
    assert "invalid_state" in again.content.decode()
    assert staff.post(f"/admin/rollout/release/{release.pk}/unblock/").status_code == 302
    assert not ReleaseBlock.objects.exists()
    actions = list(AuditEntry.objects.filter(tenant=tenant).values_list("action", "actor_via"))
    assert ("release.block", "admin") in actions
    assert ("release.unblock", "admin") in actions


def test_a_superuser_of_no_tenant_cannot_block(root, releases):
    release = Release.objects.get(version="1.0.0")
    assert root.get(f"/admin/rollout/release/{release.pk}/block/").status_code == 403
