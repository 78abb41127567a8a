"""Who may call the fleet (host) endpoints: an API key of the tenant with the grant, on every endpoint; another
tenant's objects are 404 and invisible; malformed and unknown ids, and methods an endpoint lacks, answer JSON."""

import uuid

import pytest

from fleet.models import Node, Pool, Workflow
from tests.fleet.conftest import make_node, make_pool

pytestmark = pytest.mark.django_db

POOLS = "/api/compute/pools/"
NODES = "/api/compute/nodes/"
WORKFLOWS = "/api/compute/workflows/"


def _endpoints(pool, node, workflow):
    return [
        ("get", POOLS, None),
        ("post", POOLS, {"name": "new"}),
        ("get", f"{POOLS}{pool.id}/", None),
        ("get", NODES, None),
        ("post", NODES, {"name": "new", "poolId": str(pool.id), "arch": "amd64"}),
        ("get", f"{NODES}{node.id}/", None),
        ("get", WORKFLOWS, None),
        ("post", WORKFLOWS, {"nodeId": str(node.id), "kind": "maintenance"}),
        ("get", f"{WORKFLOWS}{workflow.id}/", None),
        ("post", f"{WORKFLOWS}{workflow.id}/finish/", None),
    ]


@pytest.fixture
def fleet(tenant):
    pool = make_pool(tenant, budget="1")
    node, _ = make_node(pool, "n1")
    workflow = Workflow.objects.create(
        tenant=tenant, node=node, pool=pool, kind="remediation", started_at="2026-01-01T00:00:00Z"
    )
    return pool, node, workflow


def _counts():
    return (
        Pool.objects.count(),
        Node.objects.count(),
        Workflow.objects.count(),
        Workflow.objects.filter(state="active").count(),
    )


def test_no_key_is_401_and_a_bad_key_is_401(fleet, anonymous_api):
    before = _counts()
    for method, url, body in _endpoints(*fleet):
        response = getattr(anonymous_api, method)(url, body, format="json")
        assert response.status_code == 401, (method, url)
        assert response.json()["code"] == "not_authenticated"
    anonymous_api.credentials(HTTP_AUTHORIZATION="Bearer rk_nope")
    for method, url, body in _endpoints(*fleet):
        response = getattr(anonymous_api, method)(url, body, format="json")
        assert response.status_code == 401
        assert response.json()["code"] == "authentication_failed"
    assert _counts() == before


def test_an_agent_token_is_not_an_api_key(fleet, anonymous_api):
    _, token = make_node(fleet[0], "agent")
    anonymous_api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert anonymous_api.get(POOLS).status_code == 401


def test_no_grant_is_403(fleet, ungranted_api):
    before = _counts()
    for method, url, body in _endpoints(*fleet):
        response = getattr(ungranted_api, method)(url, body, format="json")
        assert response.status_code == 403, (method, url)
        assert response.json()["code"] == "permission_denied"
    assert _counts() == before


def test_another_tenants_objects_are_404_and_invisible(fleet, other_api):
    pool, node, workflow = fleet
    before = _counts()
    for url in (f"{POOLS}{pool.id}/", f"{NODES}{node.id}/", f"{WORKFLOWS}{workflow.id}/"):
        response = other_api.get(url)
        assert response.status_code == 404
        assert response.json()["code"] == "not_found"
    assert other_api.post(f"{WORKFLOWS}{workflow.id}/finish/").status_code == 404
    assert other_api.get(POOLS).json()["results"] == []
    assert other_api.get(NODES).json()["results"] == []
    assert other_api.get(WORKFLOWS).json()["results"] == []
    assert other_api.get(NODES, {"poolId": str(pool.id)}).json()["results"] == []
    response = other_api.post(WORKFLOWS, {"nodeId": str(node.id), "kind": "maintenance"}, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "unknown_node")
    assert _counts() == before
    assert Workflow.objects.get().state == "active"


@pytest.mark.parametrize("bad", ["not-a-uuid", "123", "%20", "00000000-0000-0000-0000-00000000000g"])
def test_malformed_ids_in_urls_are_json_404(api, bad):
    for url in (f"{POOLS}{bad}/", f"{NODES}{bad}/", f"{WORKFLOWS}{bad}/"):
        response = api.get(url)
        assert response.status_code == 404, url
        assert response.json()["code"] == "not_found"
    response = api.post(f"{WORKFLOWS}{bad}/finish/")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_unknown_ids_are_404(api):
    for url in (f"{POOLS}{uuid.uuid4()}/", f"{NODES}{uuid.uuid4()}/", f"{WORKFLOWS}{uuid.uuid4()}/"):
        assert api.get(url).status_code == 404
    assert api.post(f"{WORKFLOWS}{uuid.uuid4()}/finish/").status_code == 404


def test_unsupported_methods_are_405_json(api, fleet):
    pool, _, _ = fleet
    response = api.delete(f"{POOLS}{pool.id}/")
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"
