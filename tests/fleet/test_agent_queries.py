"""The heartbeat is the hot path: its query count does not grow with the fleet."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.services.commands import command_enqueue
from tests.fleet.conftest import agent_client, make_node, make_nodes, make_pool

pytestmark = pytest.mark.django_db

SESSION = "/api/compute/agent/session"
BODY = {"daemonVersion": "1.4.0", "protocolVersion": 3}


def heartbeat_queries(client) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        response = client.post(SESSION, BODY, format="json")
    assert response.status_code == 200
    return [query["sql"] for query in queries]


@pytest.mark.parametrize("fleet_size", [10, 1000])
def test_a_heartbeat_is_three_queries_whatever_the_fleet_size(tenant, fleet_size):
    pool = make_pool(tenant, budget="0.1")
    make_nodes(pool, fleet_size - 1)
    node, token = make_node(pool, "me")
    client = agent_client(token)
    client.post(SESSION, BODY, format="json")  # join
    command_enqueue(node_id=node.id, kind="daemon.upgrade", payload={"version": "2"})

    queries = heartbeat_queries(client)

    assert len(queries) == 3, queries  # the token (with the session), the conditional UPDATE, the pending commands
    assert [sql.split()[0] for sql in queries] == ["SELECT", "UPDATE", "SELECT"]
    assert "fleet_nodesession" in queries[0]  # the session comes with the node
    assert "fleet_nodesession" in queries[1]
    assert "fleet_command" in queries[2]


def test_leave_is_two_queries(tenant):
    _, token = make_node(make_pool(tenant))
    client = agent_client(token)
    client.post(SESSION, BODY, format="json")
    with CaptureQueriesContext(connection) as queries:
        assert client.delete(SESSION).status_code == 204
    assert len(queries) == 2
