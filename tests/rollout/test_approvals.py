"""Four eyes over the API: rollouts awaiting approval, approve, deny (docs/controller.md#approvals)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from fleet.models import ApiKey, AuditEntry, Permission, Tenant
from fleet.services.iam import api_key_create, tenant_set_rollout_approvals
from rollout.controller.health import rollouts_without_controller
from rollout.models import NodeUpgrade, Rollout, RolloutApproval, RolloutEvent, RolloutWave, Webhook, WebhookDelivery
from tests.factories import fleet
from tests.rollout.helpers import states, tick

pytestmark = pytest.mark.django_db

URL = "/api/compute/rollouts/"
ADMIN = Permission.FLEET_ADMIN
APPROVE = Permission.ROLLOUT_APPROVE


def key(tenant: Tenant, username: str, *grants: str) -> APIClient:
    _, plain = api_key_create(tenant=tenant, username=username, grants=list(grants))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    return client


@pytest.fixture
def two_required(tenant) -> Tenant:
    return tenant_set_rollout_approvals(tenant=tenant, approvals=2)


@pytest.fixture
def creator(tenant) -> APIClient:
    """Creates the rollouts; holds both grants (still never approves its own)."""
    return key(tenant, "carol", ADMIN, APPROVE)


@pytest.fixture
def alice(tenant) -> APIClient:
    return key(tenant, "alice", APPROVE)


@pytest.fixture
def bob(tenant) -> APIClient:
    return key(tenant, "bob", APPROVE)


@pytest.fixture
def awaiting(tenant, two_required, releases, creator) -> dict:
    """A rollout over 10 nodes that needs two approvals."""
    assert two_required.rollout_approvals == 2
    fleet(tenant, {"a": (10, "0.2")})
    response = creator.post(URL, {"version": "1.0.0", "soakSeconds": 0}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def act(client: APIClient, rollout: dict, action: str, body: dict | None = None):
    return client.post(f"{URL}{rollout['id']}/{action}/", body or {}, format="json")


def audit_actions() -> list[str]:
    return list(AuditEntry.objects.order_by("seq").values_list("action", flat=True))


def kinds(rollout: dict) -> list[str]:
    events = RolloutEvent.objects.filter(rollout_id=rollout["id"]).order_by("at", "id")
    return list(events.values_list("kind", flat=True))


def test_without_required_approvals_a_rollout_starts_at_once(api, tenant, releases):
    fleet(tenant, {"a": (3, "1")})
    body = api.post(URL, {"version": "1.0.0"}, format="json").json()
    assert body["state"] == "active"
    assert (body["approvalsRequired"], body["approvals"], body["createdBy"]) == (0, [], "ops")


def test_a_rollout_of_a_tenant_that_requires_approvals_awaits_them_and_starts_nothing(awaiting, creator):
    assert awaiting["state"] == "awaiting_approval"
    assert (awaiting["approvalsRequired"], awaiting["approvals"], awaiting["createdBy"]) == (2, [], "carol")
    assert awaiting["blocker"] == {
        "code": "awaiting_approval",
        "detail": awaiting["blocker"]["detail"],
        "approvals": 0,
        "required": 2,
    }
    assert all(wave["startedAt"] is None for wave in awaiting["waves"])
    rollout = Rollout.objects.get(pk=awaiting["id"])
    tick(rollout)
    assert states(rollout) == {"pending": 10}
    rows = creator.get(f"{URL}{awaiting['id']}/nodes/").json()["results"]
    assert {(row["blocker"]["code"], row["blocker"]["approvals"], row["blocker"]["required"]) for row in rows} == {
        ("awaiting_approval", 0, 2)
    }
    created = RolloutEvent.objects.get(rollout=rollout)
    assert (created.kind, created.data["approvalsRequired"]) == ("rollout.created", 2)
    assert creator.get(URL, {"state": "awaiting_approval"}).json()["results"][0]["id"] == awaiting["id"]
    assert creator.get(URL, {"state": "active"}).json()["results"] == []


def test_its_nodes_are_held_a_conflicting_create_is_a_conflict_and_writes_nothing(awaiting, creator):
    response = creator.post(URL, {"version": "1.0.0"}, format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "conflict"
    assert len(response.json()["nodeIds"]) == 10
    assert Rollout.objects.count() == 1
    assert NodeUpgrade.objects.count() == 10


def test_two_approvals_of_users_other_than_the_creator_start_it(awaiting, alice, bob):
    first = act(alice, awaiting, "approve", {"comment": "looks good"})
    assert first.status_code == 200, first.content
    body = first.json()
    assert body["state"] == "awaiting_approval"
    assert [(a["user"], a["comment"]) for a in body["approvals"]] == [("alice", "looks good")]
    assert body["approvals"][0]["at"].endswith("Z")
    assert (body["blocker"]["approvals"], body["blocker"]["required"]) == (1, 2)
    assert "rollout.approved" not in kinds(awaiting)

    second = act(bob, awaiting, "approve")
    assert second.status_code == 200, second.content
    body = second.json()
    assert body["state"] == "active"
    assert [(a["user"], a["comment"]) for a in body["approvals"]] == [("alice", "looks good"), ("bob", "")]
    assert body["waves"][0]["startedAt"] is not None
    approved = RolloutEvent.objects.get(rollout_id=awaiting["id"], kind="rollout.approved")
    bob_key = {"apiKeyId": ApiKey.objects.get(user__username="bob").pk, "apiKeyName": ""}  # the key that acted
    assert approved.data == {"actor": "api:bob", **bob_key, "approvals": ["alice", "bob"]}
    rollout = Rollout.objects.get(pk=awaiting["id"])
    tick(rollout)
    assert states(rollout)["in_flight"] == 1  # wave 0: 1% of 10 nodes
    assert audit_actions()[-2:] == ["rollout.approve", "rollout.approve"]
    entry = AuditEntry.objects.filter(action="rollout.approve").order_by("seq").last()
    assert (entry.actor_user, entry.actor_via) == ("bob", "api")
    assert entry.after == {"state": "active", "approvals": 2, "comment": ""}


def test_the_creator_cannot_approve_their_own_rollout(awaiting, creator):
    response = act(creator, awaiting, "approve", {"comment": "mine"})
    assert (response.status_code, response.json()["code"]) == (403, "self_approval")
    assert not RolloutApproval.objects.exists()
    assert "rollout.approve" not in audit_actions()


def test_the_same_user_approves_once(awaiting, alice):
    assert act(alice, awaiting, "approve").status_code == 200
    response = act(alice, awaiting, "approve", {"comment": "again"})
    assert (response.status_code, response.json()["code"]) == (409, "already_approved")
    assert RolloutApproval.objects.count() == 1
    assert Rollout.objects.get().state == "awaiting_approval"


def test_a_rollout_needing_one_approval_answers_already_approved_to_its_approver_after_it_started(
    tenant, releases, creator, alice
):
    tenant_set_rollout_approvals(tenant=tenant, approvals=1)
    fleet(tenant, {"a": (2, "1")})
    rollout = creator.post(URL, {"version": "1.0.0"}, format="json").json()
    assert act(alice, rollout, "approve").json()["state"] == "active"
    assert act(alice, rollout, "approve").json()["code"] == "already_approved"


def test_fleet_admin_alone_neither_approves_nor_denies(awaiting, api, ungranted_api):
    for client in (api, ungranted_api):
        for action, body in (("approve", {}), ("deny", {"comment": "no"})):
            response = act(client, awaiting, action, body)
            assert (response.status_code, response.json()["code"]) == (403, "permission_denied")
    assert Rollout.objects.get().state == "awaiting_approval"
    assert not RolloutApproval.objects.exists()


def test_an_approver_reads_rollouts_but_does_not_operate_them(awaiting, alice):
    assert alice.get(f"{URL}{awaiting['id']}/").json()["state"] == "awaiting_approval"
    assert alice.get(URL).status_code == 200
    assert alice.get(f"{URL}{awaiting['id']}/events/").status_code == 200
    assert alice.get(f"{URL}{awaiting['id']}/nodes/").status_code == 200
    for action in ("pause", "resume", "abort"):
        assert act(alice, awaiting, action).status_code == 403
    assert alice.post(URL, {"version": "1.0.0"}, format="json").status_code == 403


def test_approving_what_does_not_await_approval_is_invalid_state(api, tenant, releases, creator, alice):
    fleet(tenant, {"a": (2, "1")})
    rollout = creator.post(URL, {"version": "1.0.0"}, format="json").json()
    assert rollout["state"] == "active"
    for client in (alice, creator):  # the creator too: the state answers first
        response = act(client, rollout, "approve")
        assert (response.status_code, response.json()["code"]) == (409, "invalid_state")
        assert response.json()["state"] == "active"
    response = act(alice, rollout, "deny", {"comment": "too late"})
    assert (response.status_code, response.json()["code"]) == (409, "invalid_state")
    assert not RolloutApproval.objects.exists()


def test_another_tenants_rollout_is_not_found(awaiting, other_tenant):
    intruder = key(other_tenant, "mallory", ADMIN, APPROVE)
    for action, body in (("approve", {}), ("deny", {"comment": "no"})):
        assert act(intruder, awaiting, action, body).status_code == 404
    assert act(intruder, {"id": "not-a-uuid"}, "approve").status_code == 404


def test_deny_ends_it_and_frees_its_nodes(awaiting, alice, bob, creator):
    assert act(alice, awaiting, "approve").status_code == 200
    response = act(bob, awaiting, "deny", {"comment": "not during the freeze"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["state"] == "denied"
    assert body["blocker"] is None
    rollout = Rollout.objects.get(pk=awaiting["id"])
    assert states(rollout) == {"cancelled": 10}
    assert set(NodeUpgrade.objects.values_list("reason", "claims_node")) == {("denied", False)}
    denied = RolloutEvent.objects.get(rollout=rollout, kind="rollout.denied")
    bob_key = {"apiKeyId": ApiKey.objects.get(user__username="bob").pk, "apiKeyName": ""}
    assert denied.data == {"actor": "api:bob", **bob_key, "comment": "not during the freeze", "cancelled": 10}
    entry = AuditEntry.objects.get(action="rollout.deny")
    assert (entry.actor_user, entry.before, entry.after) == (
        "bob",
        {"state": "awaiting_approval"},
        {"state": "denied", "comment": "not during the freeze"},
    )
    # Terminal: nothing more happens to it; its nodes go to the next rollout.
    assert act(alice, awaiting, "deny", {"comment": "again"}).json()["code"] == "invalid_state"
    assert act(bob, awaiting, "approve").json()["code"] == "invalid_state"
    assert act(creator, awaiting, "resume").json()["code"] == "invalid_state"
    assert act(creator, awaiting, "abort").json()["code"] == "invalid_state"
    assert creator.post(URL, {"version": "1.0.0"}, format="json").status_code == 201


def test_a_deny_comment_is_any_1_to_500_characters(awaiting, alice):
    assert act(alice, awaiting, "deny", {"comment": " "}).json()["state"] == "denied"


def test_the_creator_may_deny_their_own_rollout(awaiting, creator):
    assert act(creator, awaiting, "deny", {"comment": "wrong version"}).json()["state"] == "denied"


@pytest.mark.parametrize(
    "body",
    [{}, {"comment": ""}, {"comment": "x" * 501}, {"comment": 5}, {"comment": None}, {"why": "x"}],
)
def test_deny_needs_a_comment_of_1_to_500_characters_and_a_bad_one_writes_nothing(awaiting, alice, body):
    before = (audit_actions(), RolloutEvent.objects.count())
    response = act(alice, awaiting, "deny", body)
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_input"
    assert Rollout.objects.get().state == "awaiting_approval"
    assert states(Rollout.objects.get()) == {"pending": 10}
    assert (audit_actions(), RolloutEvent.objects.count()) == before


@pytest.mark.parametrize("body", [{"comment": "x" * 501}, {"comment": 5}, {"comment": ["a"]}, {"note": "x"}])
def test_a_bad_approval_comment_is_refused_and_writes_nothing(awaiting, alice, body):
    response = act(alice, awaiting, "approve", body)
    assert (response.status_code, response.json()["code"]) == (400, "invalid_input")
    assert not RolloutApproval.objects.exists()
    assert "rollout.approve" not in audit_actions()


def test_a_comment_of_500_characters_is_accepted(awaiting, alice, bob):
    assert act(alice, awaiting, "approve", {"comment": "y" * 500}).json()["approvals"][0]["comment"] == "y" * 500
    assert act(bob, awaiting, "deny", {"comment": "z" * 500}).json()["state"] == "denied"


def test_abort_works_while_awaiting_approval(awaiting, creator):
    body = act(creator, awaiting, "abort").json()
    assert body["state"] == "aborted"
    assert states(Rollout.objects.get()) == {"cancelled": 10}
    assert not NodeUpgrade.objects.filter(claims_node=True).exists()
    assert act(creator, awaiting, "pause").json()["code"] == "invalid_state"


def test_pause_resume_promote_refuse_a_rollout_awaiting_approval(awaiting, creator):
    for action in ("pause", "resume", "promote"):
        response = act(creator, awaiting, action)
        assert (response.status_code, response.json()["code"]) == (409, "invalid_state"), action


def test_the_number_is_the_tenants_when_the_rollout_was_created(awaiting, tenant, alice, bob):
    tenant_set_rollout_approvals(tenant=tenant, approvals=5)
    assert act(alice, awaiting, "approve").json()["approvalsRequired"] == 2
    assert act(bob, awaiting, "approve").json()["state"] == "active"


def test_approvals_reach_webhooks_with_the_rollout_as_the_api_shows_it(awaiting, creator, alice, bob, settings):
    settings.ROLLOUT_WEBHOOKS_ALLOW_HTTP = True
    response = creator.post(
        "/api/compute/webhooks/",
        {"url": "http://127.0.0.1:9/hook", "events": ["rollout.approved", "rollout.denied"]},
        format="json",
    )
    assert response.status_code == 201, response.content
    act(alice, awaiting, "approve")
    act(bob, awaiting, "approve")
    delivery = WebhookDelivery.objects.get()
    assert (delivery.event, delivery.webhook_id) == ("rollout.approved", Webhook.objects.get().id)


def test_an_approved_rollout_starts_its_first_wave_now(awaiting, alice, bob):
    act(alice, awaiting, "approve")
    act(bob, awaiting, "approve")
    first = RolloutWave.objects.get(rollout_id=awaiting["id"], index=0)
    assert first.started_at == RolloutEvent.objects.get(kind="rollout.approved").at


def test_the_controller_is_judged_missing_from_the_approval_not_from_the_creation(awaiting, alice, bob):
    # Created an hour ago, approved now: no tick yet, but no controller is missing either.
    Rollout.objects.filter(pk=awaiting["id"]).update(created_at=timezone.now() - timedelta(hours=1))
    act(alice, awaiting, "approve")
    body = act(bob, awaiting, "approve").json()
    assert body["state"] == "active"
    assert body["lastTickAt"] is None
    assert (body["blocker"] or {}).get("code") != "no_controller"
    rollouts = Rollout.objects.filter(pk=awaiting["id"])
    assert rollouts_without_controller(rollouts, now=timezone.now()) == 0  # the admin's banner counts alike
    # Later, still no tick: then it is.
    rollouts.update(approved_at=timezone.now() - timedelta(minutes=10))
    stale = alice.get(f"{URL}{awaiting['id']}/").json()["blocker"]
    assert stale["code"] == "no_controller"
    assert "approved" in stale["detail"]
    assert rollouts_without_controller(rollouts, now=timezone.now()) == 1


def test_approved_before_its_start_at_it_is_scheduled_after_it_active(tenant, releases, creator, alice):
    tenant_set_rollout_approvals(tenant=tenant, approvals=1)
    fleet(tenant, {"a": (4, "1"), "b": (4, "1")})
    start_at = (timezone.now() + timedelta(hours=1)).isoformat()
    ids = [p["id"] for p in creator.get("/api/compute/pools/").json()["results"]]
    later = creator.post(URL, {"version": "1.0.0", "poolIds": [ids[0]], "startAt": start_at}, format="json").json()
    assert later["state"] == "awaiting_approval"  # approvals first, then the schedule
    assert later["blocker"]["code"] == "awaiting_approval"
    body = act(alice, later, "approve").json()
    assert body["state"] == "scheduled"
    assert body["blocker"]["code"] == "scheduled"
    assert body["waves"][0]["startedAt"] is None
    # Approved once its startAt has passed: active at once.
    missed = creator.post(URL, {"version": "1.0.0", "poolIds": [ids[1]], "startAt": start_at}, format="json").json()
    Rollout.objects.filter(pk=missed["id"]).update(start_at=timezone.now() - timedelta(minutes=5))
    assert act(alice, missed, "approve").json()["state"] == "active"
