"""API keys' life (docs/api.md#api-keys): made by their owner no wider than the calling key, expiring, listed,
revoked; createapikey's --scope and --expires-in; audit entries naming the key."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.core.checks import run_checks
from django.core.management import CommandError, call_command
from django.test import Client, override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from fleet.models import ApiKey, AuditEntry, Permission, Scope
from fleet.services.audit import Actor, audit_record, audit_verify, chain_hash
from fleet.services.iam import api_key_create

pytestmark = pytest.mark.django_db

KEYS = "/api/compute/apikeys/"


def keyed(plain: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    return client


def make_key(tenant, username="ops", *, scopes=None, expires_at=None, name=""):
    return api_key_create(
        tenant=tenant,
        username=username,
        grants=[Permission.FLEET_ADMIN],
        scopes=scopes,
        expires_at=expires_at,
        name=name,
    )


def later(**delta) -> str:
    return (timezone.now() + timedelta(**delta)).isoformat()


# --- createapikey ----------------------------------------------------------------------------------------------


def _created(capsys) -> ApiKey:
    plain = capsys.readouterr().out.strip().splitlines()[-1]
    return ApiKey.objects.get(prefix=plain[:10])


def test_createapikey_gives_every_scope_and_no_expiry_unless_told(tenant, capsys):
    call_command("createapikey", "--tenant", "acme", "--user", "ops")
    key = _created(capsys)
    assert key.scopes == list(Scope.values)
    assert key.expires_at is None
    call_command(
        "createapikey", "--tenant", "acme", "--user", "ci", "--scope", "rollouts", "--scope", "read",
        "--expires-in", "12h", "--name", "pipeline",
    )  # fmt: skip
    key = _created(capsys)
    assert key.scopes == ["read", "rollouts"]
    assert key.name == "pipeline"
    assert abs(key.expires_at - (timezone.now() + timedelta(hours=12))) < timedelta(minutes=1)
    for text, delta in (("30d", timedelta(days=30)), ("90m", timedelta(minutes=90))):
        call_command("createapikey", "--tenant", "acme", "--user", "ci", "--expires-in", text)
        assert abs(_created(capsys).expires_at - (timezone.now() + delta)) < timedelta(minutes=1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--expires-in", "30x"], "--expires-in"),
        (["--expires-in", "0d"], "--expires-in"),
        (["--expires-in", "-1d"], "--expires-in"),
        (["--expires-in", "1.5d"], "--expires-in"),
        (["--scope", "everything"], "Unknown scope 'everything'"),
        (["--name", "x" * 101], "--name"),
    ],
)
def test_createapikey_refuses_bad_values_and_makes_nothing(tenant, args, message):
    with pytest.raises(CommandError, match=message):
        call_command("createapikey", "--tenant", "acme", "--user", "ops", *args)
    assert not ApiKey.objects.exists()
    assert not AuditEntry.objects.exists()


# --- authentication: expiry, revocation, last use ------------------------------------------------------------


def test_an_expired_key_is_refused_key_expired_once_the_clock_passes_it(tenant):
    now = timezone.now()
    _, plain = make_key(tenant, expires_at=now + timedelta(hours=1))
    with time_machine.travel(now + timedelta(minutes=59), tick=False):
        assert keyed(plain).get("/api/compute/tenant/").status_code == 200
    with time_machine.travel(now + timedelta(hours=1, seconds=1), tick=False):
        response = keyed(plain).get("/api/compute/tenant/")
    assert response.status_code == 401
    assert response.json()["code"] == "key_expired"
    assert response["WWW-Authenticate"] == "Bearer"


def test_revoked_and_unknown_keys_are_refused_as_before(tenant):
    api_key, plain = make_key(tenant)
    ApiKey.objects.filter(pk=api_key.pk).update(revoked_at=timezone.now())
    for token in (plain, "rk_unknown"):
        response = keyed(token).get("/api/compute/tenant/")
        assert response.status_code == 401
        assert response.json()["code"] == "authentication_failed"


@override_settings(API_KEY_LAST_USED=True)
def test_last_used_at_is_written_at_most_once_a_minute(tenant):
    api_key, plain = make_key(tenant)
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        keyed(plain).get("/api/compute/tenant/")
    api_key.refresh_from_db()
    assert api_key.last_used_at == start
    with time_machine.travel(start + timedelta(seconds=59), tick=False):
        keyed(plain).get("/api/compute/tenant/")
    api_key.refresh_from_db()
    assert api_key.last_used_at == start
    with time_machine.travel(start + timedelta(seconds=61), tick=False):
        keyed(plain).get("/api/compute/tenant/")
    api_key.refresh_from_db()
    assert api_key.last_used_at == start + timedelta(seconds=61)


def test_the_approve_scope_still_needs_the_approve_grant(tenant):
    _, plain = make_key(tenant, scopes=[Scope.APPROVE])  # compute:fleet:admin only
    response = keyed(plain).post("/api/compute/rollouts/00000000-0000-4000-8000-000000000001/approve/", {})
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"


# --- POST /apikeys/ --------------------------------------------------------------------------------------------


def test_a_key_makes_a_narrower_key_for_its_own_user_shown_once(tenant):
    caller, plain = make_key(tenant, name="root")
    response = keyed(plain).post(KEYS, {"name": "wait", "scopes": ["read"], "expiresAt": later(days=7)}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert set(body) == {"id", "name", "prefix", "scopes", "expiresAt", "createdAt", "key"}
    assert body["scopes"] == ["read"]
    assert body["name"] == "wait"
    made = ApiKey.objects.get(pk=body["id"])
    assert made.user == caller.user
    assert made.tenant == caller.tenant
    assert body["key"].startswith(body["prefix"])
    assert made.key_hash != body["key"]
    # The new key reads, and is refused outside its scope.
    assert keyed(body["key"]).get("/api/compute/pools/").status_code == 200
    refused = keyed(body["key"]).post("/api/compute/pools/", {"name": "p"}, format="json")
    assert refused.status_code == 403
    assert refused.json()["required"] == "nodes"
    # Audited in the tenant's trail, naming the key that made it.
    entry = AuditEntry.objects.get(action="apikey.create", object_id=str(made.pk))
    assert entry.actor_api_key_id == caller.pk
    assert entry.after["scopes"] == ["read"]


@override_settings(API_KEY_MAX_LIFETIME="none")
def test_without_a_cap_a_key_without_expiry_makes_one_without(tenant):
    _, plain = make_key(tenant)
    response = keyed(plain).post(KEYS, {"name": "forever", "scopes": ["read", "nodes"]}, format="json")
    assert response.status_code == 201
    assert response.json()["expiresAt"] is None
    assert response.json()["scopes"] == ["read", "nodes"]


@pytest.mark.parametrize(
    ("caller_scopes", "caller_expires", "body", "code", "field"),
    [
        ([Scope.READ, Scope.NODES], None, {"scopes": ["admin"], "expiresAt": "+1d"}, "unknown_scope", "scopes"),
        ([Scope.READ, Scope.NODES], None, {"scopes": [], "expiresAt": "+1d"}, "invalid_input", "scopes"),
        ([Scope.READ, Scope.NODES], None, {"scopes": ["read", "rollouts"], "expiresAt": "+1d"}, "scope_too_wide",
         "scopes"),
        (None, None, {"scopes": ["read"], "expiresAt": "-1d"}, "expiry_in_past", "expiresAt"),
        (None, "+2d", {"scopes": ["read"], "expiresAt": "+3d"}, "expiry_too_late", "expiresAt"),
        (None, "+2d", {"scopes": ["read"], "expiresAt": None}, "expiry_too_late", "expiresAt"),  # null: never
        (None, None, {"scopes": "read", "expiresAt": "+1d"}, "invalid_input", "scopes"),
        (None, None, {"scopes": ["read"], "expiresAt": "tomorrow"}, "invalid_input", "expiresAt"),
        (None, None, {"name": "", "scopes": ["read"], "expiresAt": "+1d"}, "invalid_input", "name"),
        (None, None, {"scopes": ["read"], "extra": 1}, "invalid_input", "extra"),  # an unknown field
    ],
)  # fmt: skip
def test_a_key_is_never_wider_nor_longer_lived_than_its_maker_and_nothing_is_made(
    tenant, caller_scopes, caller_expires, body, code, field
):
    def when(text):
        return later(days=int(text[:-1])) if isinstance(text, str) and text[:1] in ("+", "-") else text

    caller_expiry = timezone.now() + timedelta(days=int(caller_expires[:-1])) if caller_expires else None
    _, plain = make_key(tenant, scopes=caller_scopes, expires_at=caller_expiry)
    keys, entries = ApiKey.objects.count(), AuditEntry.objects.count()
    payload = {"name": "new", **{key: when(value) for key, value in body.items()}}
    response = keyed(plain).post(KEYS, payload, format="json")
    assert response.status_code == 400, response.json()
    answer = response.json()
    assert answer["code"] == code
    assert answer.get("field", field) == field
    assert answer["detail"].startswith(f"{field}:")
    assert ApiKey.objects.count() == keys
    assert AuditEntry.objects.count() == entries


def test_without_expires_at_a_key_lives_as_long_as_its_bounds_allow(tenant):
    """The calling key's expiry, or the cap from now, whichever is first; neither: no expiry."""
    _, forever = make_key(tenant)
    made = keyed(forever).post(KEYS, {"name": "a", "scopes": ["read"]}, format="json")
    assert (made.status_code, made.json()["expiresAt"]) == (201, None)
    caller_expiry = timezone.now() + timedelta(days=2)
    _, bounded = make_key(tenant, expires_at=caller_expiry)
    made = keyed(bounded).post(KEYS, {"name": "b", "scopes": ["read"]}, format="json")
    assert made.status_code == 201, made.json()
    assert ApiKey.objects.get(pk=made.json()["id"]).expires_at == caller_expiry
    with override_settings(API_KEY_MAX_LIFETIME="12h"):
        made = keyed(bounded).post(KEYS, {"name": "c", "scopes": ["read"]}, format="json")
        assert made.status_code == 201, made.json()
        lifetime = ApiKey.objects.get(pk=made.json()["id"]).expires_at - timezone.now()
        assert timedelta(hours=11) < lifetime <= timedelta(hours=12)


def test_a_key_with_any_scope_rotates_itself_no_wider(tenant):
    """Making and revoking one's own keys needs no particular scope; the new key is never wider."""
    _, plain = make_key(tenant, scopes=[Scope.ROLLOUTS])
    made = keyed(plain).post(KEYS, {"name": "next", "scopes": ["rollouts"]}, format="json")
    assert made.status_code == 201, made.json()
    wider = keyed(plain).post(KEYS, {"name": "wider", "scopes": ["rollouts", "read"]}, format="json")
    assert (wider.status_code, wider.json()["code"]) == (400, "scope_too_wide")
    assert keyed(made.json()["key"]).delete(f"{KEYS}{made.json()['id']}/").status_code == 204


def test_the_cap_is_api_key_max_lifetime(tenant):
    _, plain = make_key(tenant)
    with override_settings(API_KEY_MAX_LIFETIME="12h"):
        too_late = keyed(plain).post(
            KEYS, {"name": "a", "scopes": ["read"], "expiresAt": later(hours=13)}, format="json"
        )
        assert too_late.status_code == 400
        assert "API_KEY_MAX_LIFETIME (12h)" in too_late.json()["detail"]
        within = keyed(plain).post(KEYS, {"name": "a", "scopes": ["read"], "expiresAt": later(hours=11)}, format="json")
        assert within.status_code == 201


@pytest.mark.parametrize("value", ["90", "1w", "-3d", "forever", "1.5h"])
def test_a_bad_api_key_max_lifetime_is_a_system_check_error(value):
    with override_settings(API_KEY_MAX_LIFETIME=value):
        assert "fleet.E010" in {message.id for message in run_checks()}
    with override_settings(API_KEY_MAX_LIFETIME="none"):
        assert "fleet.E010" not in {message.id for message in run_checks()}


# --- GET and DELETE /apikeys/ ----------------------------------------------------------------------------------


@override_settings(API_KEY_LAST_USED=True)
def test_the_list_holds_the_callers_keys_only_without_secrets(tenant, other_tenant):
    mine, plain = make_key(tenant, name="mine")
    second, _ = make_key(tenant, scopes=[Scope.READ], name="second")
    make_key(tenant, username="alice")  # another user of the same tenant
    make_key(other_tenant, username="intruder")
    keyed(plain).get("/api/compute/tenant/")
    response = keyed(plain).get(KEYS)
    assert response.status_code == 200
    page = response.json()
    assert page["next"] is None
    assert [row["id"] for row in page["results"]] == [second.pk, mine.pk]  # newest first
    row = page["results"][1]
    assert set(row) == {"id", "name", "prefix", "scopes", "expiresAt", "createdAt", "lastUsedAt", "revokedAt"}
    assert row["lastUsedAt"] is not None
    assert row["revokedAt"] is None
    assert mine.key_hash not in response.content.decode()
    paged = keyed(plain).get(KEYS, {"limit": 1}).json()
    assert len(paged["results"]) == 1
    assert paged["next"] is not None


def test_delete_revokes_the_callers_key_and_another_users_is_404(tenant):
    caller, plain = make_key(tenant)
    victim, victim_plain = make_key(tenant)
    alice_key, alice_plain = make_key(tenant, username="alice")
    assert keyed(plain).delete(f"{KEYS}{alice_key.pk}/").status_code == 404
    for bad in ("999999", "x", "1" * 30):
        assert keyed(plain).delete(f"{KEYS}{bad}/").status_code == 404
    assert keyed(alice_plain).get("/api/compute/tenant/").status_code == 200
    assert keyed(plain).delete(f"{KEYS}{victim.pk}/").status_code == 204
    assert keyed(victim_plain).get("/api/compute/tenant/").status_code == 401
    assert keyed(plain).delete(f"{KEYS}{victim.pk}/").status_code == 204  # again: nothing changes
    entries = AuditEntry.objects.filter(action="apikey.revoke")
    assert entries.count() == 1
    assert entries.get().actor_api_key_id == caller.pk
    listed = keyed(plain).get(KEYS).json()["results"]
    assert next(row for row in listed if row["id"] == victim.pk)["revokedAt"] is not None


def test_a_read_only_key_lists_makes_a_read_only_key_and_revokes_its_users_keys(tenant):
    caller, _ = make_key(tenant)
    _, plain = make_key(tenant, scopes=[Scope.READ])
    assert keyed(plain).get(KEYS).status_code == 200
    made = keyed(plain).post(KEYS, {"name": "a", "scopes": ["read"], "expiresAt": later(days=1)}, format="json")
    assert (made.status_code, made.json()["scopes"]) == (201, ["read"])
    assert keyed(plain).delete(f"{KEYS}{caller.pk}/").status_code == 204
    caller.refresh_from_db()
    assert caller.revoked_at is not None


def test_request_limits_stay_per_key_a_key_made_by_another_has_its_own(tenant, settings):
    settings.API_KEY_RATE = "3/min"
    _, plain = make_key(tenant)
    parent = keyed(plain)
    made = parent.post(KEYS, {"name": "child", "scopes": ["read"], "expiresAt": later(days=1)}, format="json")
    assert made.status_code == 201
    assert [parent.get("/api/compute/tenant/").status_code for _ in range(3)] == [200, 200, 429]
    child = keyed(made.json()["key"])
    assert [child.get("/api/compute/tenant/").status_code for _ in range(4)] == [200, 200, 200, 429]


# --- the audit trail -------------------------------------------------------------------------------------------


def test_entries_name_the_key_and_entries_without_one_hash_as_before(tenant):
    api_key, plain = make_key(tenant, name="deploy")
    assert keyed(plain).post("/api/compute/pools/", {"name": "gpu"}, format="json").status_code == 201
    entry = AuditEntry.objects.get(action="pool.create")
    shown = keyed(plain).get("/api/compute/audit/", {"action": "pool.create"}).json()["results"][0]
    assert shown["actor"] == {"user": "ops", "via": "api", "apiKeyId": api_key.pk, "apiKeyName": "deploy"}
    assert entry.hash == chain_hash(entry.prev_hash, {k: v for k, v in shown.items() if k != "hash"})
    # An entry made without a key (as every entry before keys were named): the body the hash covered then.
    old = audit_record(tenant=tenant, actor=Actor.command("root"), action="tenant.update", object_type="t", object_id=1)
    old_shown = keyed(plain).get("/api/compute/audit/", {"action": "tenant.update"}).json()["results"][0]
    assert old_shown["actor"] == {"user": "root", "via": "command"}
    assert old.hash == chain_hash(old.prev_hash, {k: v for k, v in old_shown.items() if k != "hash"})
    assert audit_verify() is None
    call_command("audit", "verify")


# --- the admin -------------------------------------------------------------------------------------------------


def test_the_admin_lists_keys_with_scopes_expiry_and_last_use_and_revokes(tenant):
    api_key, plain = make_key(tenant, scopes=[Scope.READ, Scope.ROLLOUTS], name="ci-deploy")
    root = get_user_model().objects.create_superuser("root", password="x")
    client = Client()
    client.force_login(root)
    page = client.get("/admin/fleet/apikey/")
    assert page.status_code == 200
    text = page.content.decode()
    for column in ("ci-deploy", "Scopes", "read, rollouts", "Expires at", "Last used at"):
        assert column in text
    answer = client.post("/admin/fleet/apikey/", {"action": "revoke", "_selected_action": [api_key.pk]})
    assert answer.status_code == 302
    api_key.refresh_from_db()
    assert api_key.revoked_at is not None
    entry = AuditEntry.objects.get(action="apikey.revoke")
    assert (entry.actor_via, entry.actor_user, entry.actor_api_key_id) == ("admin", "root", None)
    assert keyed(plain).get("/api/compute/tenant/").status_code == 401


# --- migration 0012 --------------------------------------------------------------------------------------------


def test_migration_0012_gives_the_keys_made_before_every_scope_and_no_expiry(tenant):
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("fleet", "0011_session_watched_by")], [("fleet", "0012_api_key_scopes_expiry")]
    api_key, _ = make_key(tenant)

    def settled() -> None:  # the deferred foreign-key checks of the rows written so far: ALTER TABLE needs none pending
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")

    settled()
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO fleet_apikey (tenant_id, user_id, prefix, key_hash, created_at)"
            " VALUES (%s, %s, 'rk_old', %s, now())",
            [tenant.pk, api_key.user_id, "f" * 64],
        )
    settled()
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    old = ApiKey.objects.get(prefix="rk_old")
    assert old.scopes == list(Scope.values)
    assert (old.expires_at, old.last_used_at, old.name) == (None, None, "")
