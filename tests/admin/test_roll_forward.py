"""The admin's "Roll forward to…" (docs/controller.md#undoing-a-bad-release): a superseding create, the API's rules."""

from __future__ import annotations

import pytest

from fleet.models import AuditEntry
from rollout.models import NodeUpgrade, Rollout
from tests.admin.conftest import make_rollout, staff_client
from tests.factories import manifest, release_stored
from tests.rollout.helpers import heartbeat_all, rejoin, tick

pytestmark = pytest.mark.django_db

LIST = "/admin/rollout/rollout/"


@pytest.fixture
def bad(tenant, releases) -> Rollout:
    """A rollout of 1.0.0 over 4 nodes (one at a time): one node confirmed it, one in flight; 1.0.1 registered."""
    release_stored(manifest("1.0.1", 3, archs=("amd64",)))
    rollout = make_rollout(tenant, {"gpu-a": (4, "0.25")}, waves=[100], soak_seconds=0)
    heartbeat_all()
    tick(rollout)
    rejoin(NodeUpgrade.objects.get(rollout=rollout, state="in_flight").node_id, "1.0.0")
    heartbeat_all()
    tick(rollout)
    return rollout


def test_the_page_offers_newer_releases_and_counts_the_nodes_on_the_bad_one(staff, bad):
    body = staff.get(f"{LIST}{bad.pk}/change/").content.decode()
    assert f"{LIST}{bad.pk}/roll-forward/" in body
    assert "Roll forward to" in body
    page = staff.get(f"{LIST}{bad.pk}/roll-forward/").content.decode()
    assert '<p id="roll-forward-count"><strong>1</strong> node(s) of this rollout run 1.0.0 now.</p>' in page
    assert '<option value="1.0.1">' in page
    assert '<option value="0.9.0">' not in page  # older: never offered


def test_rolling_forward_supersedes_and_goes_to_the_new_rollout(staff, bad):
    response = staff.post(f"{LIST}{bad.pk}/roll-forward/", {"version": "1.0.1"})
    new = Rollout.objects.get(supersedes=bad)
    assert response.status_code == 302
    assert response["Location"] == f"{LIST}{new.pk}/change/"
    assert Rollout.objects.get(pk=bad.pk).state == "superseded"
    assert (new.release.version, new.waves, new.soak_seconds) == ("1.0.1", [100], 0)
    assert NodeUpgrade.objects.filter(rollout=new, state="in_flight").count() == 1
    entry = AuditEntry.objects.get(action="rollout.supersede")
    assert entry.actor_via == "admin"
    old_page = staff.get(f"{LIST}{bad.pk}/change/").content.decode()
    assert "superseded by" in old_page
    assert f"{LIST}{new.pk}/change/" in old_page
    assert f"{LIST}{bad.pk}/roll-forward/" not in old_page  # finished: nothing more to roll forward


def test_a_finished_rollout_offers_no_roll_forward_and_the_page_refuses(staff, bad):
    staff.post(f"{LIST}{bad.pk}/abort/")
    assert Rollout.objects.get(pk=bad.pk).state == "aborted"
    assert f"{LIST}{bad.pk}/roll-forward/" not in staff.get(f"{LIST}{bad.pk}/change/").content.decode()
    page = staff.post(f"{LIST}{bad.pk}/roll-forward/", {"version": "1.0.1"}).content.decode()
    assert "supersede_invalid" in page
    assert not Rollout.objects.filter(supersedes=bad).exists()


def test_a_user_without_the_grant_cannot_roll_forward(tenant, bad):
    viewer = staff_client(tenant, "viewer", fleet_admin=False)
    assert viewer.post(f"{LIST}{bad.pk}/roll-forward/", {"version": "1.0.1"}).status_code == 403
    assert not Rollout.objects.filter(supersedes=bad).exists()
