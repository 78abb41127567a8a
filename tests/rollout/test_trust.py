"""Trust on the node, server side (docs/signing.md): the signed release in spec.daemon, refusals reported on
the session call, release expiry. Agents here are the fleet's real session service; the simulated agents
against a live server are tests/integration/test_trust_end_to_end.py."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine
from django.db import OperationalError, connection
from django.test import TestCase
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from core.errors import DomainError
from fleet.models import Command, Node, NodeSession, Pool
from fleet.services.budget import pool_budget
from fleet.services.nodes import node_create
from fleet.services.pools import pool_create
from rollout.controller.start import convergence_candidates
from rollout.models import NodeUpgrade, Release, RolloutEvent
from rollout.rollouts.actions import rollout_pause, rollout_resume
from rollout.rollouts.blockers import node_blockers
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.factories import fleet, manifest, release_stored, signed
from tests.rollout.helpers import heartbeat_all, in_flight, rejoin, states, tick

pytestmark = pytest.mark.django_db

SESSION = "/api/compute/agent/session"


@pytest.fixture
def pool(tenant) -> Pool:
    return pool_create(tenant=tenant, name="trust")


def agent_client(tenant, pool) -> tuple[Node, APIClient]:
    node, token = node_create(tenant=tenant, name=f"n-{Node.objects.count()}", pool_id=pool.id, arch="amd64")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return node, client


# --- spec.daemon carries the signed release ----------------------------------------------------


def test_a_start_sends_the_envelope_exactly_as_registered_and_old_agents_get_it_in_their_command(tenant, releases):
    _, new = releases
    nodes = fleet(tenant, {"a": (2, "1")})["a"]
    old_agent = nodes[1]
    old_agent.session.protocol_version = 1
    old_agent.session.save()
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100]))
    tick(rollout)
    section = Node.objects.get(pk=nodes[0].pk).spec["daemon"]
    assert section["release"] == json.loads(new.envelope)
    assert section["version"] == "1.0.0"
    assert set(section) == {"version", "url", "sha256", "release"}
    command = Command.objects.get(node=old_agent, kind=Command.Kind.DAEMON_UPGRADE)
    assert command.payload == section
    # What it ran before is kept without the envelope (the registry holds it): no 2 KB copy per row.
    assert all(
        upgrade.previous_daemon is None or "release" not in upgrade.previous_daemon for upgrade in in_flight(rollout)
    )


# --- refusals ------------------------------------------------------------------------------------


def test_a_refusal_fails_the_upgrade_at_once_and_the_same_answer_carries_the_spec_sent_back(tenant, releases, pool):
    node, client = agent_client(tenant, pool)
    assert client.post(SESSION, {"daemonVersion": "0.9.0", "protocolVersion": 3}, format="json").status_code == 200
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100], max_failure_ratio=0.0))
    tick(rollout)
    assert Node.objects.get(pk=node.pk).spec["daemon"]["version"] == "1.0.0"
    # A plain heartbeat (one statement) passes the stored spec, signed release included, through as is.
    client.post(SESSION, {"daemonVersion": "0.9.0", "protocolVersion": 3}, format="json")  # warms rootVersion
    with CaptureQueriesContext(connection) as queries:
        plain = client.post(SESSION, {"daemonVersion": "0.9.0", "protocolVersion": 3}, format="json")
    assert len(queries) == 1
    assert plain.json()["spec"] == Node.objects.get(pk=node.pk).spec
    assert plain.json()["spec"]["daemon"]["release"] == json.loads(releases[1].envelope)
    refused = {"version": "1.0.0", "code": "digest_mismatch", "detail": "the bytes are not the signed ones"}
    with TestCase.captureOnCommitCallbacks(execute=False) as hooks:
        answer = client.post(
            SESSION, {"daemonVersion": "0.9.0", "protocolVersion": 3, "refused": refused}, format="json"
        )
    assert answer.status_code == 200
    # Sent back in this very answer: to the registered release its agent reported when the upgrade started.
    back = answer.json()["spec"]["daemon"]
    assert back["version"] == "0.9.0"
    assert back["release"] == json.loads(releases[0].envelope)
    upgrade = NodeUpgrade.objects.get(rollout=rollout)
    assert (upgrade.state, upgrade.reason) == ("failed", "refused:digest_mismatch")
    assert upgrade.get_reason_display() == "the node refused it: the bytes are not the signed ones"
    event = RolloutEvent.objects.get(rollout=rollout, kind="node_upgrade.refused")
    assert event.data == {
        "node": str(node.pk),
        "code": "digest_mismatch",
        "detail": "the bytes are not the signed ones",
    }
    assert hooks  # a tick is asked for at once
    assert node_blockers([upgrade], now=timezone.now())[upgrade.pk] is None
    # The wave's failure ratio counts it: the rollout pauses at the tick.
    tick(rollout)
    assert (rollout.state, rollout.paused_reason) == ("paused", "failure_ratio")


def test_a_refused_node_that_keeps_heartbeating_frees_its_budget_slot_at_once(tenant, releases, pool):
    """Its agent is running (it just said so): the failure leaves it online, so it does not hold the pool's slot
    (docs/controller.md#budget), even when its last heartbeat write was coalesced away."""
    _, client = agent_client(tenant, pool)
    body = {"daemonVersion": "0.9.0", "protocolVersion": 3}
    assert client.post(SESSION, body, format="json").status_code == 200
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100], max_failure_ratio=1.0))
    tick(rollout)
    assert pool_budget(pool_id=pool.id).disrupted == 1  # in flight
    client.post(SESSION, body, format="json")  # within the interval: last_seen_at is not written again
    refused = {"version": "1.0.0", "code": "expired", "detail": "the manifest expired"}
    assert client.post(SESSION, {**body, "refused": refused}, format="json").status_code == 200
    assert NodeUpgrade.objects.get(rollout=rollout).state == "failed"
    assert pool_budget(pool_id=pool.id).disrupted == 0


def test_a_refusal_that_could_not_be_recorded_is_503_and_the_agent_reports_it_again(
    tenant, releases, pool, monkeypatch
):
    from rollout.controller import refusals

    node, client = agent_client(tenant, pool)
    body = {"daemonVersion": "0.9.0", "protocolVersion": 3}
    client.post(SESSION, body, format="json")
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100]))
    tick(rollout)
    seen_before = NodeSession.objects.get(node=node).last_seen_at

    def deadlocked(**kwargs):
        raise OperationalError("deadlock detected")

    monkeypatch.setattr(refusals, "fail_and_send_back", lambda **kwargs: deadlocked())
    refused = {"version": "1.0.0", "code": "bad_signature", "detail": ""}
    answer = client.post(SESSION, {**body, "refused": refused}, format="json")
    assert answer.status_code == 503
    assert answer.json()["code"] == "refusal_not_recorded"
    assert states(rollout) == {"in_flight": 1}
    assert NodeSession.objects.get(node=node).last_seen_at == seen_before  # nothing written
    monkeypatch.undo()
    assert client.post(SESSION, {**body, "refused": refused}, format="json").status_code == 200
    assert NodeUpgrade.objects.get(rollout=rollout).reason == "refused:bad_signature"


def test_a_refusal_of_a_version_the_node_is_not_upgraded_to_changes_nothing(tenant, releases, pool):
    _, client = agent_client(tenant, pool)
    client.post(SESSION, {"daemonVersion": "0.9.0", "protocolVersion": 3}, format="json")
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100]))
    tick(rollout)
    refused = {"version": "0.9.0", "code": "bad_signature", "detail": ""}
    answer = client.post(SESSION, {"daemonVersion": "0.9.0", "protocolVersion": 3, "refused": refused}, format="json")
    assert answer.status_code == 200
    assert answer.json()["spec"]["daemon"]["version"] == "1.0.0"
    assert states(rollout) == {"in_flight": 1}
    assert not RolloutEvent.objects.filter(kind="node_upgrade.refused").exists()


@pytest.mark.parametrize(
    "refused",
    [
        None,
        "bad_signature",
        {"version": "1.0.0", "code": "made_up", "detail": ""},
        {"version": "1.0.0", "code": "bad_signature"},
        {"version": "1.0.0", "code": "bad_signature", "detail": "", "extra": 1},
        {"version": "not a version", "code": "bad_signature", "detail": ""},
        {"version": "1.0.0", "code": 5, "detail": ""},
        {"version": "1.0.0", "code": "bad_signature", "detail": "x" * 1001},
        {"version": "1.0.0", "code": "bad_signature", "detail": "a\x00b"},
    ],
)
def test_a_malformed_refusal_is_400_and_nothing_is_written(tenant, releases, pool, refused):
    node, client = agent_client(tenant, pool)
    client.post(SESSION, {"daemonVersion": "0.9.0", "protocolVersion": 3}, format="json")
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100]))
    tick(rollout)
    before = Node.objects.get(pk=node.pk).session.last_seen_at
    answer = client.post(SESSION, {"daemonVersion": "0.9.0", "protocolVersion": 3, "refused": refused}, format="json")
    assert (answer.status_code, answer.json()["code"]) == (400, "invalid_input")
    assert states(rollout) == {"in_flight": 1}
    assert Node.objects.get(pk=node.pk).session.last_seen_at == before


# --- expiry --------------------------------------------------------------------------------------


def test_an_expired_manifest_is_never_registered_and_expires_at_is_shown(api, releases):
    past = (timezone.now() - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    response = api.post(
        "/api/compute/releases/", signed(manifest("2.0.0", 3, expires=past)), content_type="application/json"
    )
    assert (response.status_code, response.json()["code"]) == (400, "release_expired")
    assert not Release.objects.filter(version="2.0.0").exists()
    future = (timezone.now() + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    created = api.post(
        "/api/compute/releases/", signed(manifest("2.0.0", 3, expires=future)), content_type="application/json"
    )
    assert created.status_code == 201
    assert created.json()["expiresAt"] == future
    listed = {row["version"]: row["expiresAt"] for row in api.get("/api/compute/releases/").json()["results"]}
    assert listed == {"2.0.0": future, "1.0.0": None, "0.9.0": None}


@pytest.fixture
def expiring(releases):
    """2.0.0 (sequence 3), expiring in one hour."""
    expires = (timezone.now() + timedelta(hours=1)).replace(microsecond=0)
    body = manifest("2.0.0", 3, archs=("amd64",), expires=expires.strftime("%Y-%m-%dT%H:%M:%SZ"))
    release_stored(body)
    return expires


def test_an_active_rollout_pauses_when_its_release_expires_and_resume_and_create_refuse(tenant, expiring, api):
    fleet(tenant, {"a": (4, "0.25")})
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="2.0.0", waves=[100]))
    tick(rollout)
    assert states(rollout) == {"in_flight": 1, "pending": 3}
    rejoin(in_flight(rollout)[0].node_id, "2.0.0")
    with time_machine.travel(expiring + timedelta(seconds=1)):
        heartbeat_all()
        # The periodic tick: nothing settles, the release expired: the rollout pauses, nothing starts.
        tick(rollout)
        assert (rollout.state, rollout.paused_reason) == ("paused", "release_expired")
        assert states(rollout) == {"succeeded": 1, "pending": 3}
        event = RolloutEvent.objects.filter(rollout=rollout, kind="rollout.paused").get()
        assert event.data["pausedReason"] == "release_expired"
        with pytest.raises(DomainError) as info:
            rollout_resume(rollout_id=rollout.id, tenant=tenant)
        assert (info.value.status, info.value.code) == (409, "release_expired")
        response = api.post(f"/api/compute/rollouts/{rollout.id}/resume/", format="json")
        assert (response.status_code, response.json()["code"]) == (409, "release_expired")
        created = api.post("/api/compute/rollouts/", {"version": "2.0.0"}, format="json")
        assert (created.status_code, created.json()["code"]) == (400, "release_expired")
        dry = api.post("/api/compute/rollouts/?dryRun=true", {"version": "2.0.0"}, format="json")
        assert (dry.status_code, dry.json()["code"]) == (400, "release_expired")
        # The node already on it is left alone.
        succeeded = NodeUpgrade.objects.get(rollout=rollout, state="succeeded")
        assert Node.objects.get(pk=succeeded.node_id).spec["daemon"]["version"] == "2.0.0"


def test_an_operator_paused_rollout_whose_release_expired_cannot_resume(tenant, expiring):
    fleet(tenant, {"a": (2, "1")})
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="2.0.0", waves=[100]))
    rollout_pause(rollout_id=rollout.id, tenant=tenant)
    with time_machine.travel(expiring):
        with pytest.raises(DomainError) as info:
            rollout_resume(rollout_id=rollout.id, tenant=tenant)
        assert info.value.code == "release_expired"
        rollout.refresh_from_db()
        assert rollout.paused_reason == "operator"


def test_convergence_and_pool_defaults_never_send_an_expired_release(tenant, expiring):
    [node, other] = fleet(tenant, {"a": (2, "1")})["a"]
    other.session.left_at = timezone.now()
    other.session.save()
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="2.0.0", waves=[100]))
    tick(rollout)
    rejoin(node.pk, "2.0.0")
    tick(rollout)
    assert rollout.state == "completed"
    rejoin(other.pk, "0.9.0")  # back, on an older version
    assert convergence_candidates(now=timezone.now()).count() == 1
    with time_machine.travel(expiring):
        heartbeat_all()
        assert convergence_candidates(now=timezone.now()).count() == 0

    # Nor does a pool's default: a node created in the covered pool after the release expired is told nothing.
    with time_machine.travel(expiring):
        late, _ = node_create(tenant=tenant, name="late", pool_id=node.pool_id, arch="amd64")
    assert late.spec["daemon"] is None
    early, _ = node_create(tenant=tenant, name="early", pool_id=node.pool_id, arch="amd64")
    assert early.spec["daemon"]["version"] == "2.0.0"  # before it expired


def test_a_failed_download_fails_the_upgrade_at_once(tenant, releases, pool, api):
    """``download_failed`` (docs/signing.md#what-an-agent-checks): reported as any refusal, settled the same way."""
    _, client = agent_client(tenant, pool)
    client.post(SESSION, {"daemonVersion": "0.9.0", "protocolVersion": 3}, format="json")
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100]))
    tick(rollout)
    refused = {"version": "1.0.0", "code": "download_failed", "detail": "HTTP 404"}
    answer = client.post(SESSION, {"daemonVersion": "0.9.0", "protocolVersion": 3, "refused": refused}, format="json")
    assert answer.status_code == 200
    assert answer.json()["spec"]["daemon"]["version"] == "0.9.0"
    row = api.get(f"/api/compute/rollouts/{rollout.id}/nodes/").json()["results"][0]
    assert (row["state"], row["reason"]) == ("failed", "refused:download_failed")
