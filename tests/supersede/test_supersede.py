"""A create that takes a bad rollout's place in one transaction (docs/controller.md#undoing-a-bad-release)."""

from __future__ import annotations

import pytest
from django.db.models import Count

from fleet.models import AuditEntry, Node
from fleet.services.iam import tenant_set_rollout_approvals
from rollout.models import NodeUpgrade, Rollout, RolloutEvent
from tests.factories import fleet
from tests.rollout.helpers import create, heartbeat_all, rejoin, tick

pytestmark = pytest.mark.django_db

URL = "/api/compute/rollouts/"


def bad_rollout_under_way(tenant) -> Rollout:
    """10 nodes on 0.9.0 (a budget of 3): a rollout of 1.0.0, one node confirmed on it, three in flight."""
    fleet(tenant, {"a": (10, "0.3")})
    bad = create(tenant, upgrade_timeout_seconds=600)
    heartbeat_all()
    tick(bad)
    rejoin(NodeUpgrade.objects.filter(rollout=bad, state="in_flight").order_by("position")[0].node_id, "1.0.0")
    heartbeat_all()
    tick(bad)
    assert NodeUpgrade.objects.filter(rollout=bad, state="in_flight").count() == 3
    return bad


def one_writer_per_node() -> bool:
    return not NodeUpgrade.objects.filter(claims_node=True).values("node").annotate(n=Count("id")).filter(n__gt=1)


def test_supersede_ends_the_old_rollout_and_takes_its_nodes_in_flight_over(api, tenant, releases):
    bad = bad_rollout_under_way(tenant)
    was_in_flight = set(NodeUpgrade.objects.filter(rollout=bad, state="in_flight").values_list("node_id", flat=True))
    confirmed = set(NodeUpgrade.objects.filter(rollout=bad, state="succeeded").values_list("node_id", flat=True))

    response = api.post(URL, {"version": "1.0.1", "supersedes": str(bad.id), "waves": [100]}, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["supersedes"] == str(bad.id)
    assert body["supersededBy"] is None
    old = api.get(f"{URL}{bad.id}/").json()
    assert (old["state"], old["supersededBy"], old["supersedes"]) == ("superseded", body["id"], None)
    new = Rollout.objects.get(pk=body["id"])
    # Every pending or in-flight row of the old rollout ended, none holds its node any more.
    assert not NodeUpgrade.objects.filter(rollout=bad, state__in=["pending", "in_flight"]).exists()
    assert not NodeUpgrade.objects.filter(rollout=bad, claims_node=True).exists()
    assert (
        set(
            NodeUpgrade.objects.filter(rollout=bad, state="cancelled", reason="superseded").values_list(
                "node", flat=True
            )
        )
        >= was_in_flight
    )
    # Taken over: in flight in the new rollout at once, to 1.0.1, remembering what they ran before the bad one.
    taken = list(NodeUpgrade.objects.filter(rollout=new, state="in_flight"))
    assert {row.node_id for row in taken} == was_in_flight
    assert {row.previous_version for row in taken} == {"0.9.0"}
    assert {row.previous_daemon["version"] for row in taken if row.previous_daemon} <= {"0.9.0"}
    for node in Node.objects.filter(pk__in=was_in_flight):
        assert node.spec["daemon"]["version"] == "1.0.1"
    # The order: in flight to the bad release first, then the node that runs it, then the rest.
    order = list(NodeUpgrade.objects.filter(rollout=new).order_by("position").values_list("node_id", flat=True))
    assert set(order[:3]) == was_in_flight
    assert set(order[3:4]) == confirmed
    assert one_writer_per_node()
    # The budget (3) holds: the taken-over nodes still count, nothing more starts.
    heartbeat_all()
    tick(new)
    assert NodeUpgrade.objects.filter(state="in_flight").count() == 3
    # Events and audit.
    superseded = RolloutEvent.objects.get(rollout=bad, kind="rollout.superseded")
    assert superseded.data["supersededBy"] == str(new.id)
    assert superseded.data["takenOver"] == 3
    created = RolloutEvent.objects.get(rollout=new, kind="rollout.created")
    assert created.data["supersedes"] == str(bad.id)
    entry = AuditEntry.objects.get(action="rollout.supersede")
    assert entry.object_id == str(bad.id)
    assert entry.after == {"state": "superseded", "supersededBy": str(new.id)}


def test_a_taken_over_node_succeeds_on_the_fix_without_waiting_for_a_timeout(api, tenant, releases):
    bad = bad_rollout_under_way(tenant)
    node_id = NodeUpgrade.objects.filter(rollout=bad, state="in_flight").values_list("node_id", flat=True)[0]
    new_id = api.post(URL, {"version": "1.0.1", "supersedes": str(bad.id)}, format="json").json()["id"]
    rejoin(node_id, "1.0.1")
    row = NodeUpgrade.objects.get(rollout_id=new_id, node_id=node_id)
    assert (row.state, row.reason) == ("succeeded", None)


def test_the_superseded_state_is_a_filter_and_finished(api, tenant, releases):
    bad = bad_rollout_under_way(tenant)
    api.post(URL, {"version": "1.0.1", "supersedes": str(bad.id)}, format="json")
    listed = api.get(URL, {"state": "superseded"}).json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [row["id"] for row in rows] == [str(bad.id)]
    assert api.post(f"{URL}{bad.id}/abort/", {}, format="json").status_code == 409
    assert api.post(f"{URL}{bad.id}/pause/", {}, format="json").status_code == 409


def test_a_webhook_may_subscribe_to_rollout_superseded(api, tenant, settings):
    settings.ROLLOUT_WEBHOOKS_ALLOW_HTTP = True
    response = api.post(
        "/api/compute/webhooks/", {"url": "http://127.0.0.1:9/hook", "events": ["rollout.superseded"]}, format="json"
    )
    assert response.status_code == 201, response.content


def test_a_dry_run_checks_and_orders_but_writes_nothing(api, tenant, releases):
    bad = bad_rollout_under_way(tenant)
    before = written()
    response = api.post(f"{URL}?dryRun=true", {"version": "1.0.1", "supersedes": str(bad.id)}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["nodes"] == 10  # the old rollout's nodes do not conflict
    assert written() == before
    assert Rollout.objects.get(pk=bad.pk).state == "active"


def test_without_supersedes_the_old_rollouts_nodes_conflict(api, tenant, releases):
    bad_rollout_under_way(tenant)
    response = api.post(URL, {"version": "1.0.1"}, format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "conflict"


def written() -> tuple:
    return (
        list(Rollout.objects.order_by("id").values_list("id", "state", "supersedes")),
        list(NodeUpgrade.objects.order_by("id").values_list("id", "state", "claims_node", "rollout")),
        RolloutEvent.objects.count(),
        AuditEntry.objects.count(),
        list(Node.objects.order_by("id").values_list("spec", flat=True)),
    )


@pytest.mark.parametrize("dry_run", [False, True])
def test_refusals_write_nothing(api, other_api, other_tenant, tenant, releases, dry_run):
    bad = bad_rollout_under_way(tenant)
    fleet(other_tenant, {"z": (2, "1")})
    theirs = create(other_tenant)
    url = f"{URL}?dryRun=true" if dry_run else URL
    cases = [
        ({"version": "1.0.0", "supersedes": str(bad.id)}, 400, "supersede_invalid", "not_newer"),
        ({"version": "0.9.0", "supersedes": str(bad.id)}, 400, "supersede_invalid", "not_newer"),
        ({"version": "1.0.1", "supersedes": str(theirs.id)}, 404, "not_found", None),
        ({"version": "1.0.1", "supersedes": "00000000-0000-0000-0000-000000000001"}, 404, "not_found", None),
        ({"version": "1.0.1", "supersedes": "nope"}, 404, "not_found", None),
        ({"version": "1.0.1", "supersedes": 7}, 400, "invalid_input", None),
    ]
    before = written()
    for body, status, code, reason in cases:
        response = api.post(url, {**body, "waves": [100]}, format="json")
        assert response.status_code == status, (body, response.content)
        assert response.json()["code"] == code
        assert response.json().get("reason") == reason
        assert response.json()["detail"]
        assert written() == before


def test_a_finished_rollout_cannot_be_superseded(api, tenant, releases):
    bad = bad_rollout_under_way(tenant)
    assert api.post(f"{URL}{bad.id}/abort/", {}, format="json").status_code == 200
    before = written()
    response = api.post(URL, {"version": "1.0.1", "supersedes": str(bad.id)}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert (body["code"], body["reason"]) == ("supersede_invalid", "finished")
    assert "aborted" in body["detail"]
    assert written() == before


def test_a_superseded_rollout_cannot_be_superseded_again(api, tenant, releases):
    from tests.factories import manifest, release_stored

    release_stored(manifest("1.0.2", 4, archs=("amd64",)))
    bad = bad_rollout_under_way(tenant)
    assert api.post(URL, {"version": "1.0.1", "supersedes": str(bad.id)}, format="json").status_code == 201
    response = api.post(URL, {"version": "1.0.2", "supersedes": str(bad.id)}, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "supersede_invalid")


def test_a_new_rollout_awaiting_approval_supersedes_at_create_and_starts_nothing(api, tenant, releases):
    bad = bad_rollout_under_way(tenant)
    in_flight = set(NodeUpgrade.objects.filter(rollout=bad, state="in_flight").values_list("node_id", flat=True))
    tenant_set_rollout_approvals(tenant=tenant, approvals=1)
    response = api.post(URL, {"version": "1.0.1", "supersedes": str(bad.id)}, format="json")
    assert response.status_code == 201, response.content
    new = Rollout.objects.get(pk=response.json()["id"])
    assert new.state == "awaiting_approval"
    assert Rollout.objects.get(pk=bad.pk).state == "superseded"
    # Nothing starts before the approvals: the nodes in flight to 1.0.0 are not sent back, and wait first in line.
    assert not NodeUpgrade.objects.filter(rollout=new, state="in_flight").exists()
    order = list(NodeUpgrade.objects.filter(rollout=new).order_by("position").values_list("node_id", flat=True))
    assert set(order[:3]) == in_flight
    for node in Node.objects.filter(pk__in=in_flight):
        assert node.spec["daemon"]["version"] == "1.0.0"
    assert one_writer_per_node()


@pytest.mark.parametrize("state", ["paused", "scheduled"])
def test_a_paused_or_scheduled_rollout_is_superseded(api, tenant, releases, state):
    from datetime import timedelta

    from django.utils import timezone

    from rollout.rollouts.actions import rollout_pause

    fleet(tenant, {"a": (4, "0.5")})
    if state == "scheduled":
        old = create(tenant, start_at=(timezone.now() + timedelta(hours=1)).isoformat())
    else:
        old = create(tenant)
        rollout_pause(rollout_id=old.id)
    assert Rollout.objects.get(pk=old.pk).state == state
    response = api.post(URL, {"version": "1.0.1", "supersedes": str(old.id)}, format="json")
    assert response.status_code == 201, response.content
    assert Rollout.objects.get(pk=old.pk).state == "superseded"
    assert not NodeUpgrade.objects.filter(rollout=old, claims_node=True).exists()
    assert NodeUpgrade.objects.filter(rollout_id=response.json()["id"]).count() == 4
    assert one_writer_per_node()


def test_nodes_outside_the_new_selection_settle_in_the_superseded_rollout(api, tenant, releases):
    made = fleet(tenant, {"a": (2, "1"), "b": (2, "1")})
    old = create(tenant)
    heartbeat_all()
    tick(old)
    assert NodeUpgrade.objects.filter(rollout=old, state="in_flight").count() == 4
    pool_a = str(made["a"][0].pool_id)
    response = api.post(URL, {"version": "1.0.1", "supersedes": str(old.id), "poolIds": [pool_a]}, format="json")
    assert response.status_code == 201, response.content
    new_id = response.json()["id"]
    # Pool a's nodes are taken over; pool b's stay in flight in the old rollout, holding their nodes.
    assert set(NodeUpgrade.objects.filter(rollout_id=new_id).values_list("state", flat=True)) == {"in_flight"}
    kept = NodeUpgrade.objects.filter(rollout=old, state="in_flight")
    assert {row.node_id for row in kept} == {node.id for node in made["b"]}
    assert all(row.claims_node for row in kept)
    assert RolloutEvent.objects.get(rollout=old, kind="rollout.superseded").data["stillInFlight"] == 2
    rejoin(made["b"][0].id, "1.0.0")  # and they settle there as usual
    assert NodeUpgrade.objects.get(rollout=old, node=made["b"][0]).state == "succeeded"
    assert one_writer_per_node()
