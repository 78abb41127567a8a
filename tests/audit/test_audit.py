"""The audit trail (docs/api.md#the-audit-trail): what is recorded, through the API, the admin and commands; the
hash chain recomputed from the API alone; tampering found by `audit verify`; PostgreSQL refusals."""

from __future__ import annotations

import hashlib
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.test import Client

from fleet.models import ApiKey, AuditEntry, Membership, Node, Pool, Workflow
from fleet.services.audit import Actor, audit_record, audit_verify
from fleet.services.iam import tenant_create
from fleet.services.workflows import workflow_start
from tests.concurrency import run_together
from tests.factories import manifest, signed

KEYS = {"id", "at", "actor", "action", "objectType", "objectId", "before", "after", "prevHash", "hash"}


def _audit(api, **params) -> list[dict]:
    response = api.get("/api/compute/audit/", params)
    assert response.status_code == 200, response.content
    body = response.json()
    return body["results"]


def _recompute(entries_newest_first: list[dict]) -> None:
    """The chain, checked from the API output alone, as an outside auditor would."""
    prev = "0" * 64
    for entry in reversed(entries_newest_first):
        assert set(entry) == KEYS
        assert entry["prevHash"] == prev
        body = {key: value for key, value in entry.items() if key != "hash"}
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert hashlib.sha256(f"{prev}\n{text}".encode()).hexdigest() == entry["hash"]
        prev = entry["hash"]


def _api_changes(api, releases) -> dict:
    pool = api.post("/api/compute/pools/", {"name": "gpu-é", "policy": {"disruptionBudget": 0.5}}, format="json")
    assert pool.status_code == 201
    pool_id = pool.json()["id"]
    node = api.post("/api/compute/nodes/", {"name": "n1", "poolId": pool_id, "arch": "amd64"}, format="json")
    assert node.status_code == 201
    node_id = node.json()["id"]
    workflow = api.post("/api/compute/workflows/", {"nodeId": node_id, "kind": "remediation"}, format="json")
    assert workflow.status_code == 201
    workflow_id = workflow.json()["id"]
    assert api.post(f"/api/compute/workflows/{workflow_id}/finish/").status_code == 200
    rollout = api.post("/api/compute/rollouts/", {"version": "1.0.0", "soakSeconds": 0}, format="json")
    assert rollout.status_code == 201, rollout.content
    rollout_id = rollout.json()["id"]
    for verb in ("pause", "resume"):
        assert api.post(f"/api/compute/rollouts/{rollout_id}/{verb}/").status_code == 200
    assert api.post(f"/api/compute/rollouts/{rollout_id}/abort/", {"rollback": True}, format="json").status_code == 200
    release = api.post("/api/compute/releases/", signed(manifest("1.1.0", 3)), content_type="application/json")
    assert release.status_code == 201
    return {"pool": pool_id, "node": node_id, "workflow": workflow_id, "rollout": rollout_id}


def test_api_changes_are_recorded_and_the_chain_recomputes_from_the_api(api, other_api, releases):
    ids = _api_changes(api, releases)
    entries = _audit(api)
    actions = [entry["action"] for entry in reversed(entries)]
    # The fixture's key creation (a direct service call) comes first, unattributed.
    assert actions == [
        "apikey.create",
        "pool.create",
        "node.create",
        "workflow.start",
        "workflow.finish",
        "rollout.create",
        "rollout.pause",
        "rollout.resume",
        "rollout.abort",
        "release.register",
    ]
    # Each change made through the key names it (docs/api.md#the-audit-trail): the fixture's key is its only one.
    key = ApiKey.objects.get(user__username="ops")
    through_key = {"user": "ops", "via": "api", "apiKeyId": key.pk, "apiKeyName": ""}
    assert all(entry["actor"] == through_key for entry in entries[:-1])
    _recompute(entries)

    by_action = {entry["action"]: entry for entry in entries}
    assert by_action["pool.create"]["objectType"] == "pool"
    assert by_action["pool.create"]["objectId"] == ids["pool"]
    assert by_action["pool.create"]["before"] is None
    assert by_action["pool.create"]["after"]["policy"] == {"disruptionBudget": 0.5, "maintenanceWindows": []}
    assert by_action["rollout.pause"]["before"] == {"state": "active", "pausedReason": None}
    assert by_action["rollout.pause"]["after"] == {"state": "paused", "pausedReason": "operator"}
    assert by_action["rollout.abort"]["after"] == {"state": "aborted", "pausedReason": None, "rollback": True}
    assert by_action["workflow.finish"]["before"] == {"state": "active"}
    assert by_action["release.register"]["objectId"] == "1.1.0"

    # Filters; another tenant sees none of it.
    assert [e["action"] for e in _audit(api, action="rollout.pause")] == ["rollout.pause"]
    assert {e["action"] for e in _audit(api, objectId=ids["rollout"])} == {
        "rollout.create",
        "rollout.pause",
        "rollout.resume",
        "rollout.abort",
    }
    assert [e["action"] for e in _audit(other_api)] == ["apikey.create"]
    assert audit_verify() is None
    call_command("audit", "verify")


def test_a_refused_change_writes_no_entry(api):
    before = AuditEntry.objects.count()
    response = api.post("/api/compute/pools/", {"name": "p", "policy": {"disruptionBudget": 2}}, format="json")
    assert response.status_code == 400
    assert api.post("/api/compute/workflows/x/finish/").status_code == 404
    assert AuditEntry.objects.count() == before


@pytest.mark.parametrize("param", ["objectId", "action"])
def test_a_nul_character_in_a_filter_is_a_400_not_a_500(api, param):
    response = api.get("/api/compute/audit/", {param: "a\x00b"})
    assert response.status_code == 400, response.content
    assert (response.json()["code"], response.json()["field"]) == ("invalid_input", param)


def test_postgres_refuses_update_and_delete(tenant):
    audit_record(tenant=tenant, actor=Actor.api("ops"), action="pool.create", object_type="pool", object_id="p")
    for sql in ("UPDATE fleet_auditentry SET action = 'x'", "DELETE FROM fleet_auditentry"):
        with (
            pytest.raises(DatabaseError, match="cannot be changed or deleted"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(sql)
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEntry.objects.all().delete()
    assert AuditEntry.objects.filter(action="pool.create").exists()


def test_audit_verify_names_the_first_tampered_entry(tenant, other_tenant):
    for n in range(4):
        audit_record(tenant=tenant, actor=Actor.api("ops"), action="pool.create", object_type="pool", object_id=n)
    audit_record(tenant=other_tenant, actor=None, action="pool.create", object_type="pool", object_id="x")
    call_command("audit", "verify")
    victim = AuditEntry.objects.get(tenant=tenant, seq=2)
    with connection.cursor() as cursor:  # the test database's owner may switch the trigger off
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no deferred FK checks pending, or ALTER refuses
        cursor.execute("ALTER TABLE fleet_auditentry DISABLE TRIGGER fleet_auditentry_append_only")
        cursor.execute("UPDATE fleet_auditentry SET actor_user = 'mallory' WHERE id = %s", [victim.id])
        cursor.execute("ALTER TABLE fleet_auditentry ENABLE TRIGGER fleet_auditentry_append_only")
    with pytest.raises(CommandError) as failed:
        call_command("audit", "verify")
    assert failed.value.returncode == 1
    assert str(victim.id) in str(failed.value)
    with pytest.raises(CommandError, match=str(victim.id)):
        call_command("audit", "verify", "--tenant", "acme")
    call_command("audit", "verify", "--tenant", "globex")  # the other chain is intact

    # A deleted entry in the middle is found too (the chain skips a place).
    third = AuditEntry.objects.get(tenant=tenant, seq=3)
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE fleet_auditentry DISABLE TRIGGER fleet_auditentry_append_only")
        cursor.execute("DELETE FROM fleet_auditentry WHERE id IN (%s, %s)", [victim.id, third.id])
        cursor.execute("ALTER TABLE fleet_auditentry ENABLE TRIGGER fleet_auditentry_append_only")
    found = audit_verify(tenant=tenant)
    assert found is not None
    assert found.seq == 4


@pytest.mark.django_db(transaction=True)
def test_concurrent_changes_never_fork_the_chain():
    tenant = tenant_create(slug="race")
    per_thread = 5

    def append(name: str):
        def run() -> None:
            with transaction.atomic():
                audit_record(
                    tenant=tenant, actor=Actor.api(name), action="pool.create", object_type="pool", object_id=name
                )

        return run

    errors = run_together(*(append(f"t{i}") for i in range(4)), rounds=per_thread)
    assert errors == []
    entries = list(AuditEntry.objects.filter(tenant=tenant).order_by("seq"))
    assert [entry.seq for entry in entries] == list(range(1, 4 * per_thread + 1))
    assert len({entry.prev_hash for entry in entries}) == len(entries)
    assert audit_verify(tenant=tenant) is None


def test_createapikey_is_recorded_as_a_command(tenant):
    call_command("createapikey", "--tenant", "acme", "--user", "robot", "--grant", "compute:fleet:admin")
    entry = AuditEntry.objects.get(tenant=tenant, action="apikey.create")
    assert entry.actor_via == "command"
    assert entry.after["user"] == "robot"
    assert entry.after["grants"] == ["compute:fleet:admin"]
    assert "key_hash" not in json.dumps(entry.after)


@pytest.fixture
def staff(tenant) -> Client:
    user = get_user_model().objects.create_superuser("boss", "boss@example.com", None)
    Membership.objects.create(user=user, tenant=tenant)
    client = Client()
    client.force_login(user)
    return client


def test_admin_changes_are_recorded_and_the_trail_is_read_only(staff, tenant, releases):
    response = staff.post("/admin/fleet/pool/add/", {"tenant": tenant.pk, "name": "web", "disruption_budget": "0.1"})
    assert response.status_code == 302, response.content
    pool = Pool.objects.get(name="web")
    response = staff.post(
        f"/admin/fleet/pool/{pool.pk}/change/",
        {"name": "web", "disruption_budget": "0.25", "default_daemon_version": ""},
    )
    assert response.status_code == 302, response.content
    node_form = {"tenant": tenant.pk, "pool": pool.pk, "name": "n", "arch": "amd64"}
    response = staff.post("/admin/fleet/node/add/", node_form)
    assert response.status_code == 302, response.content
    node = Node.objects.get(name="n")
    workflow = workflow_start(tenant=tenant, node_id=node.id, kind=Workflow.Kind.REMEDIATION)
    response = staff.post("/admin/fleet/workflow/", {"action": "finish", "_selected_action": [workflow.pk]})
    assert response.status_code == 302

    entries = {e.action: e for e in AuditEntry.objects.filter(tenant=tenant, actor_via="admin")}
    assert set(entries) == {"pool.create", "pool.update", "node.create", "workflow.finish"}
    assert all(e.actor_user == "boss" for e in entries.values())
    assert entries["pool.update"].before == {"policy": {"disruptionBudget": 0.1}}
    assert entries["pool.update"].after == {"policy": {"disruptionBudget": 0.25}}

    entry = AuditEntry.objects.filter(tenant=tenant).first()
    assert staff.get("/admin/fleet/auditentry/").status_code == 200
    assert staff.get(f"/admin/fleet/auditentry/{entry.pk}/change/").status_code == 200  # a read-only view
    assert staff.post(f"/admin/fleet/auditentry/{entry.pk}/change/", {"action": "x"}).status_code == 403
    assert staff.get("/admin/fleet/auditentry/add/").status_code == 403
    assert staff.post(f"/admin/fleet/auditentry/{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    assert AuditEntry.objects.filter(pk=entry.pk, action=entry.action).exists()
    assert audit_verify() is None


def test_an_actions_comment_is_kept_in_its_audit_entry_and_a_bad_one_writes_nothing(api, tenant, releases):
    """pause, resume, start and promote take an optional comment (docs/api.md#rollouts): in the audit entry."""
    from rollout.models import Rollout
    from tests.factories import fleet

    fleet(tenant, {"a": (2, "1")})
    rollout_id = api.post("/api/compute/rollouts/", {"version": "1.0.0"}, format="json").json()["id"]
    url = f"/api/compute/rollouts/{rollout_id}/"
    for bad in ({"comment": "x" * 501}, {"comment": 5}, {"why": "x"}):
        response = api.post(url + "pause/", bad, format="json")
        assert (response.status_code, response.json()["code"]) == (400, "invalid_input"), response.content
    assert Rollout.objects.get().state == "active"
    assert _audit(api, action="rollout.pause") == []

    assert api.post(url + "pause/", {"comment": "change 42 is out"}, format="json").status_code == 200
    assert api.post(url + "resume/", {"comment": ""}, format="json").status_code == 200
    paused, resumed = _audit(api, action="rollout.pause")[0], _audit(api, action="rollout.resume")[0]
    assert paused["after"] == {"state": "paused", "pausedReason": "operator", "comment": "change 42 is out"}
    assert resumed["after"] == {"state": "active", "pausedReason": None}  # an empty comment is none
