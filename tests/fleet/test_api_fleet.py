"""The fleet (host) endpoints: shapes and bad inputs (who may call them: test_api_fleet_access.py)."""

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet import plugins
from fleet.models import Node, Pool, Workflow
from fleet.tokens import token_hash
from tests.fleet.conftest import make_node, make_nodes, make_pool

pytestmark = pytest.mark.django_db

POOLS = "/api/compute/pools/"
NODES = "/api/compute/nodes/"
WORKFLOWS = "/api/compute/workflows/"


# --- pools -----------------------------------------------------------------------------------
def test_create_list_and_get_a_pool(api):
    response = api.post(POOLS, {"name": "gpu-a", "policy": {"disruptionBudget": 0.07}}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body == {
        "id": body["id"],
        "name": "gpu-a",
        "policy": {"disruptionBudget": 0.07, "maintenanceWindows": []},
        "defaultDaemonVersion": None,
    }
    assert uuid.UUID(body["id"])
    assert str(Pool.objects.get().disruption_budget) == "0.07000"

    assert api.get(POOLS).json() == {"results": [body], "next": None}
    assert api.get(f"{POOLS}{body['id']}/").json() == body


def test_pool_budget_defaults_to_five_percent(api):
    response = api.post(POOLS, {"name": "cpu"}, format="json")
    assert response.status_code == 201
    assert response.json()["policy"] == {"disruptionBudget": 0.05, "maintenanceWindows": []}
    policy = api.post(POOLS, {"name": "cpu2", "policy": {}}, format="json").json()["policy"]
    assert policy == {"disruptionBudget": 0.05, "maintenanceWindows": []}


@pytest.mark.parametrize("budget", [0, 1, 0.5, 0.00001])
def test_pool_budget_bounds_are_inclusive(api, budget):
    response = api.post(POOLS, {"name": "p", "policy": {"disruptionBudget": budget}}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["policy"]["disruptionBudget"] == budget


@pytest.mark.parametrize(
    "body",
    [
        {"name": "p", "policy": {"disruptionBudget": 1.01}},
        {"name": "p", "policy": {"disruptionBudget": -0.1}},
        {"name": "p", "policy": {"disruptionBudget": "0.1"}},
        {"name": "p", "policy": {"disruptionBudget": True}},
        {"name": "p", "policy": {"disruptionBudget": None}},
        {"name": "p", "policy": {"disruptionBudget": 0.123456}},
        {"name": "p", "policy": {"disruptionbudget": 0.1}},
        {"name": "p", "policy": 0.1},
        {"name": "p", "policy": None},
        {"name": 7},
        {"name": ""},
        {"name": "x" * 101},
        {"name": "nul\x00byte"},
        {},
        {"name": "p", "extra": 1},
        [],
        "gpu",
    ],
)
def test_bad_pool_bodies_are_400_and_write_nothing(api, body):
    response = api.post(POOLS, body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_input"
    assert response.json()["detail"]
    assert not Pool.objects.exists()


@pytest.mark.parametrize("raw", [b"{", b"", b"{'name': 'x'}", b'{"name": NaN}', b"\xff\xfe"])
def test_bad_json_is_400(api, raw):
    response = api.generic("POST", POOLS, raw, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] in {"invalid_json", "invalid_input"}
    assert not Pool.objects.exists()


def test_non_json_content_type_is_415(api):
    response = api.generic("POST", POOLS, "name=x", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert set(response.json()) == {"code", "detail"}


def test_duplicate_pool_name_is_409_in_a_tenant_but_fine_across_tenants(api, other_api):
    assert api.post(POOLS, {"name": "gpu-a"}, format="json").status_code == 201
    response = api.post(POOLS, {"name": "gpu-a"}, format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "pool_exists"
    assert other_api.post(POOLS, {"name": "gpu-a"}, format="json").status_code == 201
    assert Pool.objects.count() == 2


# --- nodes -----------------------------------------------------------------------------------
def test_create_a_node_shows_its_token_once_and_stores_only_the_hash(api, pool):
    response = api.post(NODES, {"name": "n1", "poolId": str(pool.id), "arch": "amd64"}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    token = body.pop("agentToken")
    assert token.startswith("at_")
    assert body == {
        "id": body["id"],
        "name": "n1",
        "poolId": str(pool.id),
        "arch": "amd64",
        "spec": {"daemon": None},
        "labels": {},
        "online": False,
        "daemonVersion": None,
        "protocolVersion": None,
        "lastSeenAt": None,
    }
    node = Node.objects.get()
    assert node.agent_token_hash == token_hash(token)
    assert "agentToken" not in api.get(f"{NODES}{node.id}/").json()
    assert api.get(f"{NODES}{node.id}/").json() == body
    assert api.get(NODES).json() == {"results": [body], "next": None}


def test_a_node_of_a_pool_with_a_default_version_has_that_daemon_as_desired_state(api, pool):
    def resolver(version, arch):
        return {"version": version, "url": f"https://dl.example/bcd/{version}/linux-{arch}", "sha256": "a" * 64}

    Pool.objects.filter(pk=pool.pk).update(default_daemon_version="1.4.0")
    plugins.register_daemon_resolver(resolver)
    try:
        response = api.post(NODES, {"name": "n1", "poolId": str(pool.id), "arch": "arm64"}, format="json")
    finally:
        plugins._daemon_resolvers.remove(resolver)
    assert response.status_code == 201
    assert response.json()["spec"] == {
        "daemon": {"version": "1.4.0", "url": "https://dl.example/bcd/1.4.0/linux-arm64", "sha256": "a" * 64}
    }
    assert api.get(POOLS).json()["results"][0]["defaultDaemonVersion"] == "1.4.0"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"name": "n", "poolId": "not-a-uuid", "arch": "amd64"}, 400, "invalid_input"),
        ({"name": "n", "poolId": 12, "arch": "amd64"}, 400, "invalid_input"),
        ({"name": "n", "poolId": str(uuid.uuid4()), "arch": "amd64"}, 400, "unknown_pool"),
        ({"name": "n", "poolId": "POOL", "arch": "AMD64"}, 400, "invalid_input"),
        ({"name": "n", "poolId": "POOL", "arch": "amd-64"}, 400, "invalid_input"),
        ({"name": "n", "poolId": "POOL", "arch": "amd64\n"}, 400, "invalid_input"),
        ({"name": "n", "poolId": "POOL", "arch": ""}, 400, "invalid_input"),
        ({"name": "n", "poolId": "POOL", "arch": "a" * 33}, 400, "invalid_input"),
        ({"name": "n", "poolId": "POOL"}, 400, "invalid_input"),
        ({"name": ["n"], "poolId": "POOL", "arch": "amd64"}, 400, "invalid_input"),
        ({"name": "n", "poolId": "POOL", "arch": "amd64", "spec": {}}, 400, "invalid_input"),
    ],
)
def test_bad_node_bodies(api, pool, body, status, code):
    if body.get("poolId") == "POOL":
        body = {**body, "poolId": str(pool.id)}
    response = api.post(NODES, body, format="json")
    assert response.status_code == status, response.json()
    assert response.json()["code"] == code
    assert not Node.objects.exists()


def test_a_pool_of_another_tenant_is_unknown_pool(api, other_tenant):
    foreign = make_pool(other_tenant)
    response = api.post(NODES, {"name": "n", "poolId": str(foreign.id), "arch": "amd64"}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "unknown_pool"
    assert not Node.objects.exists()


def test_duplicate_node_name_is_409(api, pool):
    make_node(pool, "n1")
    response = api.post(NODES, {"name": "n1", "poolId": str(pool.id), "arch": "amd64"}, format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "node_exists"
    assert Node.objects.count() == 1


def test_node_list_filters_by_pool_and_is_a_constant_number_of_queries(api, tenant, pool):
    other = make_pool(tenant, name="other")
    make_nodes(pool, 3)
    make_nodes(other, 2)
    listed = api.get(NODES, {"poolId": str(other.id)}).json()["results"]
    assert [n["poolId"] for n in listed] == [str(other.id)] * 2
    assert api.get(NODES, {"poolId": str(uuid.uuid4())}).json()["results"] == []
    assert api.get(NODES, {"poolId": "nope"}).status_code == 400

    with CaptureQueriesContext(connection) as few:
        assert len(api.get(NODES).json()["results"]) == 5
    make_nodes(pool, 200, prefix="more")
    with CaptureQueriesContext(connection) as many:
        assert len(api.get(NODES, {"limit": 1000}).json()["results"]) == 205
    assert len(few) == len(many) == 2  # the API key, the page of nodes with their sessions


# --- workflows -------------------------------------------------------------------------------
def test_workflow_start_list_get_finish(api, tenant):
    pool = make_pool(tenant, budget="0.5")
    nodes = make_nodes(pool, 2)
    response = api.post(WORKFLOWS, {"nodeId": str(nodes[0].id), "kind": "remediation"}, format="json")
    assert response.status_code == 201, response.json()
    workflow = response.json()
    assert workflow["nodeId"] == str(nodes[0].id)
    assert workflow["poolId"] == str(pool.id)
    assert (workflow["kind"], workflow["state"], workflow["finishedAt"]) == ("remediation", "active", None)
    assert api.get(WORKFLOWS).json()["results"] == [workflow]
    assert api.get(WORKFLOWS, {"state": "active", "nodeId": str(nodes[0].id)}).json()["results"] == [workflow]
    assert api.get(WORKFLOWS, {"state": "finished"}).json()["results"] == []
    assert api.get(WORKFLOWS, {"state": "bogus"}).status_code == 400
    assert api.get(f"{WORKFLOWS}{workflow['id']}/").json() == workflow

    # allowed = ceil(0.5 * 2) = 1: the other node cannot start one now
    response = api.post(WORKFLOWS, {"nodeId": str(nodes[1].id), "kind": "remediation"}, format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "budget_exhausted"

    finished = api.post(f"{WORKFLOWS}{workflow['id']}/finish/")
    assert finished.status_code == 200
    assert finished.json()["state"] == "finished"
    assert finished.json()["finishedAt"]
    again = api.post(f"{WORKFLOWS}{workflow['id']}/finish/")
    assert again.status_code == 409
    assert again.json()["code"] == "invalid_state"

    response = api.post(WORKFLOWS, {"nodeId": str(nodes[1].id), "kind": "remediation"}, format="json")
    assert response.status_code == 201


def test_a_second_active_workflow_of_a_kind_is_409_workflow_active(api, tenant):
    pool = make_pool(tenant, budget="1")
    (node,) = make_nodes(pool, 1)
    body = {"nodeId": str(node.id), "kind": "remediation"}
    assert api.post(WORKFLOWS, body, format="json").status_code == 201
    response = api.post(WORKFLOWS, body, format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "workflow_active"
    # Another kind on an already disrupted node takes no more budget.
    assert api.post(WORKFLOWS, {**body, "kind": "maintenance"}, format="json").status_code == 201
    assert Workflow.objects.count() == 2


def test_an_empty_disruption_source_is_harmless(api, tenant, disruption_source):
    pool = make_pool(tenant, budget="1")
    (node,) = make_nodes(pool, 1)
    assert api.post(WORKFLOWS, {"nodeId": str(node.id), "kind": "remediation"}, format="json").status_code == 201


def test_a_node_disrupted_by_a_plug_in_counts_against_the_budget(api, tenant, disruption_source):
    pool = make_pool(tenant, budget="0.05")  # 20 nodes: allowed 1
    nodes = make_nodes(pool, 20)
    disruption_source.nodes.add(nodes[0].id)
    response = api.post(WORKFLOWS, {"nodeId": str(nodes[1].id), "kind": "remediation"}, format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "budget_exhausted"
    # The plug-in's node itself may get a workflow: it is disrupted already.
    assert api.post(WORKFLOWS, {"nodeId": str(nodes[0].id), "kind": "remediation"}, format="json").status_code == 201


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"nodeId": "x", "kind": "remediation"}, "invalid_input"),
        ({"nodeId": "NODE", "kind": "reboot"}, "invalid_input"),
        ({"nodeId": "NODE", "kind": None}, "invalid_input"),
        ({"nodeId": "NODE", "kind": ["remediation"]}, "invalid_input"),
        ({"nodeId": "NODE", "kind": 1}, "invalid_input"),
        ({"nodeId": "NODE"}, "invalid_input"),
        ({"nodeId": str(uuid.uuid4()), "kind": "remediation"}, "unknown_node"),
        ({"nodeId": "FOREIGN", "kind": "remediation"}, "unknown_node"),
    ],
)
def test_bad_workflow_bodies(api, tenant, other_tenant, body, code):
    (node,) = make_nodes(make_pool(tenant, budget="1"), 1)
    (foreign,) = make_nodes(make_pool(other_tenant, budget="1"), 1)
    body = {
        **body,
        "nodeId": {"NODE": str(node.id), "FOREIGN": str(foreign.id)}.get(body.get("nodeId"), body.get("nodeId")),
    }
    response = api.post(WORKFLOWS, {k: v for k, v in body.items() if v is not None or k != "nodeId"}, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["code"] == code
    assert not Workflow.objects.exists()
