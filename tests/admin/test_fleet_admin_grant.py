"""Every console write needs the IAM grant ``compute:fleet:admin`` on the user's tenant, as the API does.

A staff user keeps Django's model permissions after their grant is revoked: the
console must still refuse every write (add, change, delete, custom actions),
while viewing stays allowed. Superusers need no grant.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from fleet.models import Grant, Node, Pool, Workflow
from rollout.models import Release, Rollout, RolloutEvent
from tests.admin.conftest import make_rollout, staff_client
from tests.factories import fleet, manifest, signed

pytestmark = pytest.mark.django_db

LIST = "/admin/rollout/rollout/"


@pytest.fixture
def rollout(tenant, releases) -> Rollout:
    return make_rollout(tenant, {"gpu-a": (4, "0.5")})


def revoked(tenant, username: str = "revoked") -> Client:
    """Staff with every model permission of both apps whose fleet grant was revoked."""
    client = staff_client(tenant, username, app_labels=("rollout", "fleet"))
    Grant.objects.filter(user__username=username).delete()
    return client


def test_revoked_staff_cannot_operate_rollouts(tenant, rollout):
    client = revoked(tenant)
    body = client.get(f"{LIST}{rollout.pk}/change/").content.decode()
    assert f"{LIST}{rollout.pk}/pause/" not in body  # no buttons
    for slug in ("pause", "abort", "abort-rollback"):
        assert client.get(f"{LIST}{rollout.pk}/{slug}/").status_code == 403
        assert client.post(f"{LIST}{rollout.pk}/{slug}/", {"post": "yes"}).status_code == 403
    # The list offers no bulk action, and posting one anyway changes nothing.
    assert 'value="pause_selected"' not in client.get(LIST).content.decode()
    client.post(LIST, {"action": "pause_selected", "_selected_action": [rollout.pk], "post": "yes"})
    rollout.refresh_from_db()
    assert rollout.state == "active"
    assert not RolloutEvent.objects.filter(kind__in=["rollout.paused", "rollout.aborted"]).exists()


def test_revoked_staff_cannot_create_rollouts_or_register_releases(tenant, releases):
    fleet(tenant, {"gpu-b": (3, "1")})
    client = revoked(tenant)
    assert client.get(f"{LIST}add/").status_code == 403
    assert client.post(f"{LIST}add/", {"version": "1.0.0", "_confirm": "1"}).status_code == 403
    assert not Rollout.objects.exists()
    envelope = signed(manifest("2.0.0", 3)).decode()
    client.post("/admin/rollout/release/register/", {"envelope_text": envelope})
    assert not Release.objects.filter(version="2.0.0").exists()
    assert b"/admin/rollout/release/register/" not in client.get("/admin/rollout/release/").content


def test_revoked_staff_cannot_write_fleet_rows_but_still_view(tenant):
    pool = fleet(tenant, {"gpu-c": (2, "0.5")})["gpu-c"][0].pool
    node = Node.objects.filter(pool=pool).first()
    workflow = Workflow.objects.create(
        tenant=tenant, node=node, pool=pool, kind="remediation", state="active", started_at=timezone.now()
    )
    client = revoked(tenant)
    # Viewing stays allowed (view/change model permissions).
    assert client.get("/admin/fleet/pool/").status_code == 200
    page = client.get(f"/admin/fleet/pool/{pool.pk}/change/")
    assert page.status_code == 200
    assert b'name="_save"' not in page.content  # read-only
    # Writes are refused.
    assert client.get("/admin/fleet/pool/add/").status_code == 403
    client.post("/admin/fleet/pool/add/", {"tenant": tenant.pk, "name": "new", "disruption_budget": "0.5"})
    client.post(f"/admin/fleet/pool/{pool.pk}/change/", {"name": "renamed", "disruption_budget": "1"})
    assert client.post(f"/admin/fleet/pool/{pool.pk}/delete/", {"post": "yes"}).status_code == 403
    client.post("/admin/fleet/node/add/", {"tenant": tenant.pk, "pool": pool.pk, "name": "n-new", "arch": "amd64"})
    client.post("/admin/fleet/workflow/", {"action": "finish", "_selected_action": [workflow.pk]})
    assert list(Pool.objects.values_list("name", "disruption_budget")) == [("gpu-c", pool.disruption_budget)]
    assert not Node.objects.filter(name="n-new").exists()
    workflow.refresh_from_db()
    assert workflow.state == "active"


def test_the_grant_restores_writes_and_superusers_need_none(tenant, rollout, root):
    granted = staff_client(tenant, "granted", app_labels=("rollout", "fleet"))
    assert granted.get(f"{LIST}{rollout.pk}/pause/").status_code == 200
    assert granted.get("/admin/fleet/pool/add/").status_code == 200
    assert root.get(f"{LIST}{rollout.pk}/pause/").status_code == 200
    # A grant on another scope does not count.
    Grant.objects.filter(user__username="granted").update(scope="other")
    assert granted.get(f"{LIST}{rollout.pk}/pause/").status_code == 403
