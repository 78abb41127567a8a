"""The heartbeat is the hot path: one SQL statement whatever the fleet size, never a stale answer,
and coalesced ``last_seen_at`` writes that keep online/offline exact to within one heartbeat interval."""

from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet.models import Node, NodeSession
from fleet.services.commands import command_enqueue
from fleet.services.nodes import heartbeat_seconds, node_is_online, nodes_set_daemon, online_node_q
from fleet.services.revision import spec_revision
from fleet.services.sessions import agent_session_report
from tests.fleet.conftest import agent_client, make_node, make_nodes, make_pool

pytestmark = pytest.mark.django_db

SESSION = "/api/compute/agent/session"
BODY = {"daemonVersion": "1.4.0", "protocolVersion": 3}
# docs/architecture.md#scale-targets: a plain heartbeat costs at most this many SQL statements.
HEARTBEAT_MAX_QUERIES = 2


def heartbeat(client) -> tuple[dict, list[str]]:
    with CaptureQueriesContext(connection) as queries:
        response = client.post(SESSION, BODY, format="json")
    assert response.status_code == 200, response.content
    return response.json(), [query["sql"] for query in queries]


def last_seen(node) -> object:
    return NodeSession.objects.get(node=node).last_seen_at


@pytest.mark.parametrize("fleet_size", [10, 1000])
def test_a_heartbeat_is_one_statement_whatever_the_fleet_size(tenant, fleet_size):
    pool = make_pool(tenant, budget="0.1")
    make_nodes(pool, fleet_size - 1)
    node, token = make_node(pool, "me")
    client = agent_client(token)
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        client.post(SESSION, BODY, format="json")  # join
    command_enqueue(node_id=node.id, kind="daemon.upgrade", payload={"version": "2"})

    # Within one interval of the last write: nothing to write.
    with time_machine.travel(start + timedelta(seconds=1), tick=False):
        _, queries = heartbeat(client)
    assert len(queries) == 1 <= HEARTBEAT_MAX_QUERIES, queries
    assert last_seen(node) == start
    # One interval later the same statement also moves last_seen_at.
    later = start + timedelta(seconds=heartbeat_seconds())
    with time_machine.travel(later, tick=False):
        answer, queries = heartbeat(client)
    assert len(queries) == 1, queries
    for table in ("fleet_node", "fleet_nodesession", "fleet_command"):
        assert table in queries[0]
    assert last_seen(node) == later
    assert [command["kind"] for command in answer["commands"]] == ["daemon.upgrade"]


def test_a_spec_or_command_set_before_a_heartbeat_is_in_its_answer(tenant):
    node, token = make_node(make_pool(tenant), "me")
    client = agent_client(token)
    client.post(SESSION, BODY, format="json")  # join
    answer, _ = heartbeat(client)
    # rootVersion: the rollout plug-in's field (fleet.plugins.register_session_fields), on every answer.
    assert answer == {
        "spec": {"daemon": None},
        "commands": [],
        "heartbeatSeconds": heartbeat_seconds(),
        "rootVersion": 1,
        "specRevision": spec_revision(spec={"daemon": None}, commands=[]),
    }

    daemon = {"version": "1.5.0", "url": "https://dl.example/bcd/1.5.0/linux-amd64", "sha256": "c" * 64}
    nodes_set_daemon(node_ids=[node.id], daemon=daemon)
    first = command_enqueue(node_id=node.id, kind="daemon.upgrade", payload={"version": "1.5.0"})
    answer, queries = heartbeat(client)  # right after: no last_seen_at write is due, the answer is still fresh
    assert len(queries) == 1
    assert answer["spec"] == {"daemon": daemon}
    assert answer["commands"] == [{"id": str(first.id), "kind": "daemon.upgrade", "payload": {"version": "1.5.0"}}]

    second = command_enqueue(node_id=node.id, kind="daemon.upgrade", payload={"version": "1.6.0"})  # supersedes
    nodes_set_daemon(node_ids=[node.id], daemon=None)
    answer, _ = heartbeat(client)
    assert answer["spec"] == {"daemon": None}
    assert [command["id"] for command in answer["commands"]] == [str(second.id)]


def test_online_stays_exact_to_one_interval_with_coalesced_writes(tenant):
    node, token = make_node(make_pool(tenant), "me")
    client = agent_client(token)
    interval = heartbeat_seconds()
    start = timezone.now()
    # The agent beats a little faster than the interval, so about every other beat is not written.
    beats = [start + timedelta(seconds=0.9 * interval * i) for i in range(8)]
    for at in beats:
        with time_machine.travel(at, tick=False):
            assert client.post(SESSION, BODY, format="json").status_code == 200
    stored = last_seen(node)
    last = beats[-1]
    assert stored < last  # coalesced: the last beat was not written ...
    assert last - stored < timedelta(seconds=interval)  # ... and the stored one lags by less than one interval

    def online(at) -> bool:
        loaded = Node.objects.select_related("session").get(pk=node.pk)
        by_row = node_is_online(node=loaded, now=at)
        assert Node.objects.filter(online_node_q(now=at), pk=node.pk).exists() is by_row  # the two rules agree
        return by_row

    # While it beats it is online; after its last beat, offline at most one interval early, never late.
    assert all(online(at) for at in beats)
    assert online(last + timedelta(seconds=2 * interval))
    assert not online(last + timedelta(seconds=3 * interval, microseconds=1))
    # A beat after silence writes at once: online again.
    back = last + timedelta(seconds=4 * interval)
    with time_machine.travel(back, tick=False):
        client.post(SESSION, BODY, format="json")
    assert last_seen(node) == back
    assert online(back + timedelta(seconds=3 * interval))


def test_a_new_protocol_version_is_written_at_once(tenant):
    node, token = make_node(make_pool(tenant), "me")
    client = agent_client(token)
    client.post(SESSION, BODY, format="json")
    response = client.post(SESSION, {**BODY, "protocolVersion": 4}, format="json")
    assert response.status_code == 200
    assert NodeSession.objects.get(node=node).protocol_version == 4


def test_the_view_s_join_path_is_one_statement_and_coalesces_too(tenant):
    """agent_session_report (the DRF view's join, refusals included): the join's one statement, whose heartbeat
    writes last_seen_at only when it is due."""
    node, _ = make_node(make_pool(tenant), "me")
    start = timezone.now()
    agent_session_report(node=node, daemon_version="1.4.0", protocol_version=3, now=start)

    def report(at) -> int:
        loaded = Node.objects.select_related("session").get(pk=node.pk)
        with CaptureQueriesContext(connection) as queries:
            result = agent_session_report(node=loaded, daemon_version="1.4.0", protocol_version=3, now=at)
        assert result.joined is False
        return len(queries)

    assert report(start + timedelta(seconds=1)) == 1
    assert last_seen(node) == start
    due = start + timedelta(seconds=heartbeat_seconds())
    assert report(due) == 1
    assert last_seen(node) == due


def test_leave_is_two_queries(tenant):
    _, token = make_node(make_pool(tenant))
    client = agent_client(token)
    client.post(SESSION, BODY, format="json")
    with CaptureQueriesContext(connection) as queries:
        assert client.delete(SESSION).status_code == 204
    assert len(queries) == 2


def test_a_heartbeat_after_leaving_is_a_join(tenant):
    node, token = make_node(make_pool(tenant))
    client = agent_client(token)
    client.post(SESSION, BODY, format="json")
    client.delete(SESSION)
    assert NodeSession.objects.get(node=node).left_at is not None
    assert client.post(SESSION, BODY, format="json").status_code == 200
    assert NodeSession.objects.get(node=node).left_at is None
