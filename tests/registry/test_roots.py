"""The root chain on the server (docs/signing.md#rotating-the-release-keys): registering roots over the API,
releases against the newest root only, the agents' endpoint, rootVersion, the audit trail, the system check."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from core.errors import DomainError
from fleet.models import AuditEntry
from fleet.services.audit import audit_verify
from fleet.services.nodes import node_create
from fleet.services.pools import pool_create
from rollout.models import Release, ReleaseRoot
from rollout.registry import roots
from rollout.registry.roots import root_register
from rollout.release.dsse import envelope_to_bytes
from rollout.release.root import Root, sign_root
from tests.concurrency import run_together
from tests.factories import manifest, pin, release_key, rollout_settings, signed

ROOTS = "/api/compute/release-roots/"
AGENT_ROOTS = "/api/compute/agent/release-roots"


def root_envelope(version: int, pins: list[int], signers: list[int], threshold: int = 1, **extra) -> bytes:
    root = Root(version=version, pins=tuple(pin(i) for i in pins), threshold=threshold, **extra)
    return envelope_to_bytes(sign_root(root, [release_key(i) for i in signers]))


def post_root(api: APIClient, envelope: bytes):
    return api.post(ROOTS, data=envelope, content_type="application/json")


def post_release(api: APIClient, envelope: bytes):
    return api.post("/api/compute/releases/", data=envelope, content_type="application/json")


@pytest.fixture(autouse=True)
def two_keys(release_settings):
    """Root 1 as configured: keys 0 and 1, threshold 2."""
    release_settings.ROLLOUT = rollout_settings(pins=[pin(0), pin(1)], threshold=2)


@pytest.mark.django_db
def test_root_one_is_the_configuration_recorded_when_first_needed(api, settings):
    assert not ReleaseRoot.objects.exists()
    listed = api.get(ROOTS)
    assert listed.status_code == 200
    [one] = listed.json()["results"]
    assert (one["version"], one["pins"], one["threshold"], one["envelope"]) == (1, [pin(0), pin(1)], 2, None)
    # A later configuration changes nothing, and says so (rollout.W004).
    settings.ROLLOUT = rollout_settings(pins=[pin(5)], threshold=1)
    assert api.get(ROOTS).json()["results"][0]["pins"] == [pin(0), pin(1)]
    assert post_release(api, signed(manifest("1.0.0", 1), 5)).json()["code"] == "threshold_not_met"
    assert post_release(api, signed(manifest("1.0.0", 1), 0, 1)).status_code == 201
    messages = [message for message in run_checks(tags=["rollout"]) if message.id == "rollout.W004"]
    assert len(messages) == 1
    assert "changes nothing" in messages[0].msg
    settings.ROLLOUT = rollout_settings(pins=[pin(1), pin(0)], threshold=2)  # the same keys, another order
    assert not [message for message in run_checks(tags=["rollout"]) if message.id == "rollout.W004"]


@pytest.mark.django_db
def test_without_keys_the_chain_is_empty_and_posting_a_root_is_503(api, settings):
    settings.ROLLOUT = rollout_settings(pins=[], threshold=1)
    assert api.get(ROOTS).json()["results"] == []
    response = post_root(api, root_envelope(2, [2], [0, 1, 2]))
    assert (response.status_code, response.json()["code"]) == (503, "no_release_keys")


@pytest.mark.django_db
def test_a_rotation_replaces_two_keys_by_two_and_releases_register_against_the_newest_root_only(
    api, tenant, other_tenant
):
    old = post_release(api, signed(manifest("1.0.0", 1), 0, 1))
    assert old.status_code == 201
    rotation = root_envelope(2, [2, 3], [0, 1, 2, 3], threshold=2)
    created = post_root(api, rotation)
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["version"], body["pins"], body["threshold"]) == (2, [pin(2), pin(3)], 2)
    assert body["envelope"] == json.loads(rotation)
    assert set(body["signerPins"]) == {pin(0), pin(1), pin(2), pin(3)}
    again = post_root(api, rotation)
    assert (again.status_code, again.json()["version"]) == (200, 2)
    assert [root["version"] for root in api.get(ROOTS).json()["results"]] == [1, 2]

    # The old keys no longer sign a release; the new ones do; what was registered stays.
    refused = post_release(api, signed(manifest("1.1.0", 2), 0, 1))
    assert (refused.status_code, refused.json()["code"]) == (400, "threshold_not_met")
    assert post_release(api, signed(manifest("1.1.0", 2), 2, 3)).status_code == 201
    assert set(Release.objects.values_list("version", flat=True)) == {"1.0.0", "1.1.0"}
    assert Release.objects.get(version="1.1.0").signer_pins == [pin(2), pin(3)]

    # Audited in every tenant's trail and in the system chain, each chain intact.
    entries = AuditEntry.objects.filter(action="release_root.rotate")
    assert sorted(str(entry.tenant_id) for entry in entries) == sorted([str(tenant.pk), str(other_tenant.pk), "None"])
    entry = entries.get(tenant=tenant)
    assert entry.after["pins"] == [pin(2), pin(3)]
    assert entry.before["pins"] == [pin(0), pin(1)]
    assert entry.actor_user == "ops"
    assert audit_verify() is None
    assert api.get("/api/compute/audit/?action=release_root.rotate").json()["results"][0]["objectId"] == "2"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("envelope", "status", "code"),
    [
        (lambda: root_envelope(2, [2, 3], [2, 3], threshold=2), 400, "threshold_not_met"),  # only the new keys
        (lambda: root_envelope(2, [2, 3], [0, 1, 2], threshold=2), 400, "threshold_not_met"),  # one new key of two
        (lambda: root_envelope(2, [2], [0, 2]), 400, "threshold_not_met"),  # one old key of two
        (lambda: root_envelope(3, [2], [0, 1, 2]), 409, "root_version"),  # a skipped version
        (lambda: root_envelope(1, [2], [0, 1, 2]), 409, "root_version"),
        (lambda: signed(manifest("1.0.0", 1), 0, 1), 400, "invalid_root"),  # a release, not a root
        (lambda: b'{"payloadType": 1}', 400, "invalid_root"),
        (lambda: b"[]", 400, "invalid_root"),
        (lambda: root_envelope(2, [2], [0, 1, 2], expires=_past()), 400, "invalid_root"),  # already expired
    ],
    ids=["new-only", "one-new", "one-old", "skipped", "version-1", "release", "malformed", "array", "expired"],
)
def test_refused_roots_change_nothing(api, envelope, status, code):
    before = AuditEntry.objects.count()
    response = post_root(api, envelope())
    assert (response.status_code, response.json()["code"]) == (status, code), response.json()
    assert not ReleaseRoot.objects.filter(version__gt=1).exists()
    assert AuditEntry.objects.count() == before


def _past() -> datetime:
    return datetime(2020, 1, 1, tzinfo=UTC)


@pytest.mark.django_db
def test_a_fork_is_refused_once_its_version_is_taken(api):
    assert post_root(api, root_envelope(2, [2], [0, 1, 2])).status_code == 201
    fork = post_root(api, root_envelope(2, [3], [0, 1, 3]))
    assert (fork.status_code, fork.json()["code"], fork.json()["currentVersion"]) == (409, "root_version", 2)
    # The next one must be signed by root 2's key (2), not root 1's.
    assert post_root(api, root_envelope(3, [4], [0, 1, 4])).json()["code"] == "threshold_not_met"
    assert post_root(api, root_envelope(3, [4], [2, 4])).status_code == 201


@pytest.mark.django_db(transaction=True)
def test_two_next_roots_posted_at_once_cannot_both_become_version_two(tenant):
    roots.root_first()
    outcomes: list[str] = []

    def register(envelope: bytes) -> None:
        try:
            root_register(envelope=envelope)
            outcomes.append("created")
        except DomainError as exc:
            outcomes.append(f"{exc.status}:{exc.code}")

    forks = [root_envelope(2, [2], [0, 1, 2]), root_envelope(2, [3], [0, 1, 3])]
    assert run_together(*(lambda e=envelope: register(e) for envelope in forks)) == []
    assert sorted(outcomes) == ["409:root_version", "created"]
    assert ReleaseRoot.objects.filter(version=2).count() == 1


@pytest.mark.django_db
def test_agents_read_the_roots_after_theirs_with_their_token_and_see_root_version_in_every_answer(
    api, tenant, django_capture_on_commit_callbacks
):
    _, token = node_create(tenant=tenant, name="n1", pool_id=pool_create(tenant=tenant, name="p").id, arch="amd64")
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    body = {"daemonVersion": "1.0.0", "protocolVersion": 3}
    assert agent.post("/api/compute/agent/session", body, format="json").json()["rootVersion"] == 1
    two, three = root_envelope(2, [2], [0, 1, 2]), root_envelope(3, [3], [2, 3])
    for envelope in (two, three):
        with django_capture_on_commit_callbacks(execute=True):
            assert post_root(api, envelope).status_code == 201
    # Rotations in this process are seen at once (other processes: within roots.ROOT_VERSION_CACHE_SECONDS).
    for _ in range(2):  # the join (full path), then a plain heartbeat (the one-statement path)
        assert agent.post("/api/compute/agent/session", body, format="json").json()["rootVersion"] == 3

    page = agent.get(AGENT_ROOTS, {"after": 1})
    assert page.status_code == 200
    assert page.json() == {"results": [json.loads(two), json.loads(three)], "next": None}
    assert agent.get(AGENT_ROOTS, {"after": 2}).json()["results"] == [json.loads(three)]
    assert agent.get(AGENT_ROOTS, {"after": 3}).json()["results"] == []
    first = agent.get(AGENT_ROOTS, {"after": 0, "limit": 1}).json()
    assert first["results"] == [json.loads(two)]
    assert agent.get(first["next"]).json()["results"] == [json.loads(three)]
    for bad in ("-1", "x", "1.5", "\uff11"):
        response = agent.get(AGENT_ROOTS, {"after": bad})
        assert (response.status_code, response.json()["code"]) == (400, "invalid_input")
    assert api.get(AGENT_ROOTS).status_code == 401  # an API key is not an agent token
    assert APIClient().get(AGENT_ROOTS).status_code == 401


@pytest.mark.django_db
def test_roots_need_the_fleet_admin_grant(ungranted_api, anonymous_api):
    assert ungranted_api.get(ROOTS).status_code == 403
    assert post_root(ungranted_api, root_envelope(2, [2], [0, 1, 2])).status_code == 403
    assert anonymous_api.get(ROOTS).status_code == 401
    assert not ReleaseRoot.objects.filter(version=2).exists()


@pytest.mark.django_db
def test_the_system_check_reads_nothing_without_a_recorded_root(settings):
    """Pins that differ from nothing recorded: no rollout.W004 (and the check's query ran: it reads the table)."""
    settings.ROLLOUT = rollout_settings(pins=[pin(7)], threshold=1)
    assert not ReleaseRoot.objects.exists()
    with CaptureQueriesContext(connection) as read:
        found = run_checks(tags=["rollout"], databases=["default"])
    assert [message.id for message in found] == []  # no warning, no error
    assert any("rollout_releaseroot" in query["sql"] for query in read.captured_queries)
    call_command("check", "--tag", "rollout")  # the command neither fails nor raises
    # The same configuration once a root 1 is recorded under other pins: the warning the check exists for.
    ReleaseRoot.objects.create(version=1, pins=[pin(0)], threshold=1, recorded_at=datetime.now(UTC))
    assert [message.id for message in run_checks(tags=["rollout"], databases=["default"])] == ["rollout.W004"]
