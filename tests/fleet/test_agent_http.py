"""The node-agent protocol over real HTTP (a live server, httpx), as the bcd agents speak it."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import httpx
import pytest
import time_machine
from django.utils import timezone

from fleet.models import Command, NodeSession, Permission
from fleet.plugins import node_session_reported
from fleet.services.commands import command_enqueue
from fleet.services.iam import api_key_create
from fleet.services.revision import spec_revision
from tests.fleet.conftest import make_node, make_pool

pytestmark = pytest.mark.django_db(transaction=True)

SESSION = "/api/compute/agent/session"


def ack_url(command_id) -> str:
    return f"/api/compute/agent/commands/{command_id}/ack"


@pytest.fixture
def reports():
    """Every node_session_reported the server sends, as the kwargs dict."""
    seen: list[dict] = []
    lock = threading.Lock()

    def receiver(sender, **kwargs):
        with lock:
            seen.append({"sender": sender, **{k: v for k, v in kwargs.items() if k != "signal"}})

    node_session_reported.connect(receiver, weak=False, dispatch_uid="test-fleet-reports")
    yield seen
    node_session_reported.disconnect(dispatch_uid="test-fleet-reports")


@pytest.fixture
def http(live_server):
    with httpx.Client(base_url=live_server.url, timeout=10) as client:
        yield client


def agent(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def fleet(tenant):
    pool = make_pool(tenant, budget="1")
    node_a, token_a = make_node(pool, "node-a")
    node_b, token_b = make_node(pool, "node-b")
    _, api_key = api_key_create(tenant=tenant, username="ops", grants=[Permission.FLEET_ADMIN])
    return {"pool": pool, "a": node_a, "b": node_b, "ta": token_a, "tb": token_b, "key": api_key}


def node_view(http, fleet, node) -> dict:
    response = http.get(f"/api/compute/nodes/{node.id}/", headers=agent(fleet["key"]))
    assert response.status_code == 200
    return response.json()


def test_join_heartbeat_commands_ack_leave_and_rejoin(http, fleet, reports):
    node_a, node_b = fleet["a"], fleet["b"]
    assert node_view(http, fleet, node_a)["online"] is False

    # join
    response = http.post(SESSION, json={"daemonVersion": "1.4.0", "protocolVersion": 3}, headers=agent(fleet["ta"]))
    assert response.status_code == 200, response.text
    # rootVersion: the rollout plug-in's field (fleet.plugins.register_session_fields).
    assert response.json() == {
        "spec": {"daemon": None},
        "commands": [],
        "heartbeatSeconds": 10,
        "specRevision": spec_revision(spec={"daemon": None}, commands=[]),
        "rootVersion": 1,
    }
    assert reports == [
        {
            "sender": NodeSession,
            "node_id": node_a.id,
            "daemon_version": "1.4.0",
            "protocol_version": 3,
            "previous_version": None,
        }
    ]
    view = node_view(http, fleet, node_a)
    assert (view["online"], view["daemonVersion"], view["protocolVersion"]) == (True, "1.4.0", 3)
    assert view["lastSeenAt"]
    assert node_view(http, fleet, node_b)["online"] is False

    # a plain heartbeat sends nothing; it moves last_seen_at once that is one interval old (coalesced writes)
    first_seen = NodeSession.objects.get(node=node_a).last_seen_at
    response = http.post(SESSION, json={"daemonVersion": "1.4.0", "protocolVersion": 3}, headers=agent(fleet["ta"]))
    assert response.status_code == 200
    assert len(reports) == 1
    assert NodeSession.objects.get(node=node_a).last_seen_at == first_seen
    with time_machine.travel(first_seen + timedelta(seconds=10), tick=False):
        response = http.post(SESSION, json={"daemonVersion": "1.4.0", "protocolVersion": 3}, headers=agent(fleet["ta"]))
    assert response.status_code == 200
    assert len(reports) == 1
    assert NodeSession.objects.get(node=node_a).last_seen_at == first_seen + timedelta(seconds=10)

    # commands are delivered with each heartbeat until acked; only the node's own
    upgrade = {"version": "1.5.0", "url": "https://dl.example/bcd/1.5.0/linux-amd64", "sha256": "b" * 64}
    command_a = command_enqueue(node_id=node_a.id, kind="daemon.upgrade", payload=upgrade)
    command_b = command_enqueue(node_id=node_b.id, kind="daemon.upgrade", payload=upgrade)
    for _ in range(2):
        response = http.post(SESSION, json={"daemonVersion": "1.4.0", "protocolVersion": 3}, headers=agent(fleet["ta"]))
        assert response.json()["commands"] == [{"id": str(command_a.id), "kind": "daemon.upgrade", "payload": upgrade}]

    response = http.post(ack_url(command_b.id), json={"ok": True}, headers=agent(fleet["ta"]))
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert Command.objects.get(pk=command_b.id).state == "pending"

    for _ in range(2):  # acking twice is harmless
        response = http.post(ack_url(command_a.id), json={"ok": True}, headers=agent(fleet["ta"]))
        assert response.status_code == 200, response.text
        assert response.json() == {
            "id": str(command_a.id),
            "kind": "daemon.upgrade",
            "state": "acked",
            "payload": upgrade,
        }
    response = http.post(SESSION, json={"daemonVersion": "1.4.0", "protocolVersion": 3}, headers=agent(fleet["ta"]))
    assert response.json()["commands"] == []

    # leave: offline until it joins again
    assert http.delete(SESSION, headers=agent(fleet["ta"])).status_code == 204
    assert http.delete(SESSION, headers=agent(fleet["ta"])).status_code == 204
    assert node_view(http, fleet, node_a)["online"] is False
    assert len(reports) == 1

    # rejoin on the upgrade's version: the signal fires and the command is done (self-terminating)
    response = http.post(SESSION, json={"daemonVersion": "1.5.0", "protocolVersion": 4}, headers=agent(fleet["ta"]))
    assert response.status_code == 200
    assert reports[-1] == {
        "sender": NodeSession,
        "node_id": node_a.id,
        "daemon_version": "1.5.0",
        "protocol_version": 4,
        "previous_version": "1.4.0",
    }
    assert Command.objects.get(pk=command_a.id).state == "done"
    assert Command.objects.get(pk=command_a.id).completed_at is not None
    assert Command.objects.get(pk=command_b.id).state == "pending"
    view = node_view(http, fleet, node_a)
    assert (view["online"], view["daemonVersion"], view["protocolVersion"]) == (True, "1.5.0", 4)

    # a rejoin on the same version after leaving is a join too
    http.delete(SESSION, headers=agent(fleet["ta"]))
    http.post(SESSION, json={"daemonVersion": "1.5.0", "protocolVersion": 4}, headers=agent(fleet["ta"]))
    assert len(reports) == 3
    assert reports[-1]["previous_version"] == "1.5.0"


def test_a_version_change_without_leaving_fires_the_signal_and_completes_pending_upgrades(http, fleet, reports):
    http.post(SESSION, json={"daemonVersion": "1.4.0", "protocolVersion": 1}, headers=agent(fleet["tb"]))
    command = command_enqueue(node_id=fleet["b"].id, kind="daemon.upgrade", payload={"version": "1.6.0"})
    response = http.post(SESSION, json={"daemonVersion": "1.6.0", "protocolVersion": 1}, headers=agent(fleet["tb"]))
    assert response.json()["commands"] == []  # done before delivery: the agent runs it already
    assert Command.objects.get(pk=command.id).state == "done"
    assert [r["previous_version"] for r in reports] == [None, "1.4.0"]
    assert [r["node_id"] for r in reports] == [fleet["b"].id] * 2


def test_the_session_answer_carries_the_desired_state(http, fleet):
    from fleet.services.nodes import nodes_set_daemon

    daemon = {"version": "1.5.0", "url": "https://dl.example/bcd/1.5.0/linux-amd64", "sha256": "c" * 64}
    nodes_set_daemon(node_ids=[fleet["a"].id], daemon=daemon)
    response = http.post(SESSION, json={"daemonVersion": "1.4.0", "protocolVersion": 2}, headers=agent(fleet["ta"]))
    assert response.json()["spec"] == {"daemon": daemon}
    response = http.post(SESSION, json={"daemonVersion": "1.4.0", "protocolVersion": 2}, headers=agent(fleet["tb"]))
    assert response.json()["spec"] == {"daemon": None}


def test_online_until_three_heartbeats_are_missed(http, fleet):
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        assert (
            http.post(
                SESSION, json={"daemonVersion": "1", "protocolVersion": 2}, headers=agent(fleet["ta"])
            ).status_code
            == 200
        )
    with time_machine.travel(start + timedelta(seconds=30), tick=False):
        assert node_view(http, fleet, fleet["a"])["online"] is True  # exactly 3 x 10 s: still online
    with time_machine.travel(start + timedelta(seconds=31), tick=False):
        assert node_view(http, fleet, fleet["a"])["online"] is False
        # a heartbeat brings it back
        http.post(SESSION, json={"daemonVersion": "1", "protocolVersion": 2}, headers=agent(fleet["ta"]))
        assert node_view(http, fleet, fleet["a"])["online"] is True


def test_a_token_reaches_only_its_own_node_and_bad_credentials_are_401(http, fleet):
    body = {"daemonVersion": "1.4.0", "protocolVersion": 3}
    http.post(SESSION, json=body, headers=agent(fleet["tb"]))
    for headers in ({}, agent("at_nope"), {"Authorization": "Basic Zm9vOmJhcg=="}, agent(fleet["key"])):
        response = http.post(SESSION, json=body, headers=headers)
        assert response.status_code == 401, headers
        assert set(response.json()) == {"code", "detail"}
        assert http.delete(SESSION, headers=headers).status_code == 401
    assert NodeSession.objects.count() == 1
    assert NodeSession.objects.get().node_id == fleet["b"].id
    # The agent API is not the fleet API: an agent token there is 401.
    assert http.get("/api/compute/nodes/", headers=agent(fleet["ta"])).status_code == 401


BAD_SESSION_BODIES = [
    b"{",
    b"",
    b"[]",
    b'"1.4.0"',
    b'{"daemonVersion": "1.4.0"}',
    b'{"daemonVersion": "1.4.0", "protocolVersion": "3"}',
    b'{"daemonVersion": "1.4.0", "protocolVersion": 3.0}',
    b'{"daemonVersion": "1.4.0", "protocolVersion": true}',
    b'{"daemonVersion": "1.4.0", "protocolVersion": 0}',
    b'{"daemonVersion": "1.4.0", "protocolVersion": 2147483648}',
    b'{"daemonVersion": "1.4.0", "protocolVersion": 1e400}',
    b'{"daemonVersion": "1.4.0", "protocolVersion": NaN}',
    b'{"daemonVersion": 140, "protocolVersion": 3}',
    b'{"daemonVersion": "", "protocolVersion": 3}',
    b'{"daemonVersion": "1.4.0 beta", "protocolVersion": 3}',
    b'{"daemonVersion": "1.4.0\\n", "protocolVersion": 3}',
    b'{"daemonVersion": "1.4.0\\u0000", "protocolVersion": 3}',
    b'{"daemonVersion": "' + b"1" * 65 + b'", "protocolVersion": 3}',
    b'{"daemonVersion": "1.4.0", "protocolVersion": 3, "extra": 1}',
]


def test_bad_session_bodies_are_400_and_write_nothing(http, fleet, reports):
    # One live-server test for all of them: each transactional test costs a database flush.
    for content in BAD_SESSION_BODIES:
        response = http.post(
            SESSION, content=content, headers={**agent(fleet["ta"]), "Content-Type": "application/json"}
        )
        assert response.status_code == 400, (content, response.text)
        assert response.json()["code"] in {"invalid_input", "invalid_json"}
        assert response.json()["detail"]
    assert not NodeSession.objects.exists()
    assert reports == []


def test_bad_acks_are_400_or_404_and_write_nothing(http, fleet):
    command = command_enqueue(node_id=fleet["a"].id, kind="daemon.upgrade", payload={"version": "2"})
    headers = {**agent(fleet["ta"]), "Content-Type": "application/json"}
    for content in (
        b"{",
        b"{}",
        b'{"ok": "true"}',
        b'{"ok": 1}',
        b'{"ok": false, "error": 5}',
        b'{"ok": true, "x": 1}',
    ):
        response = http.post(ack_url(command.id), content=content, headers=headers)
        assert response.status_code == 400, (content, response.text)
        assert response.json()["code"] in {"invalid_input", "invalid_json"}
    for bad in ("nope", "123", "00000000-0000-0000-0000-00000000000g", str(uuid.uuid4())):
        response = http.post(ack_url(bad), json={"ok": True}, headers=agent(fleet["ta"]))
        assert response.status_code == 404, bad
        assert response.json()["code"] == "not_found"
    assert Command.objects.get(pk=command.id).state == "pending"


def test_a_failed_ack_records_the_error(http, fleet):
    command = command_enqueue(node_id=fleet["a"].id, kind="daemon.upgrade", payload={"version": "2"})
    response = http.post(
        ack_url(command.id), json={"ok": False, "error": "sha256 mismatch"}, headers=agent(fleet["ta"])
    )
    assert response.status_code == 200
    assert response.json()["state"] == "failed"
    # a later ack does not rewrite it
    assert http.post(ack_url(command.id), json={"ok": True}, headers=agent(fleet["ta"])).json()["state"] == "failed"
    command.refresh_from_db()
    assert (command.state, command.error) == ("failed", "sha256 mismatch")


def test_an_ack_with_a_null_error_is_one_without(http, fleet):
    command = command_enqueue(node_id=fleet["a"].id, kind="daemon.upgrade", payload={"version": "2"})
    response = http.post(ack_url(command.id), json={"ok": True, "error": None}, headers=agent(fleet["ta"]))
    assert response.status_code == 200, response.text
    assert response.json()["state"] == "acked"
