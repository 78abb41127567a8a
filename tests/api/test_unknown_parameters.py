"""A list refuses a query parameter it does not declare (docs/api.md#lists, core/query.py): 400
``unknown_parameter`` naming it. A typo (``?selecter=``) never lists, nor selects, the whole fleet.

The lists are found in the URL conf, not written down here: every GET route under /api/compute/ is
asked (with a real object for each path argument) and whatever answers a list must refuse an unknown
parameter, so a list added later cannot escape the rule.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.test import APIClient

from fleet.models import AuditEntry, Node, Workflow
from rollout.models import Rollout
from tests.factories import manifest, release_stored, rollout_settings
from tests.fleet.conftest import agent_client, make_node, make_pool

pytestmark = pytest.mark.django_db

TYPO = "selecter"
#: The lists the docs name (docs/api.md): the walk must find at least these, or it found nothing.
DOCUMENTED_LISTS = {
    "fleet-pool-list",
    "fleet-node-list",
    "fleet-workflow-list",
    "fleet-audit-list",
    "release-list",
    "release-root-list",
    "rollout-list",
    "rollout-nodes",
    "rollout-events",
    "rollout-gates",
    "webhook-list",
    "webhook-deliveries",
    "agent-release-roots",
}


@pytest.fixture(autouse=True)
def _settings(settings, tmp_path):
    settings.ROLLOUT = rollout_settings()
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.ROLLOUT_WEBHOOKS_ALLOW_HTTP = True


def _get_routes() -> Iterator[tuple[str, URLPattern]]:
    """(URL name, pattern) of every named route under /api/compute/ that answers GET."""

    def walk(patterns: list[Any], prefix: str) -> Iterator[tuple[str, URLPattern]]:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                yield from walk(entry.url_patterns, prefix + str(entry.pattern))
            elif (
                isinstance(entry, URLPattern) and entry.name and (prefix + str(entry.pattern)).startswith("api/compute")
            ):
                callback = entry.callback
                actions = getattr(callback, "actions", None)
                view_class = getattr(callback, "cls", None)
                if actions is not None:
                    answers_get = "get" in actions
                elif view_class is not None:
                    answers_get = hasattr(view_class, "get")
                else:
                    answers_get = True  # a plain function view: ask it
                if answers_get:
                    yield entry.name, entry

    yield from walk(get_resolver().url_patterns, "")


@pytest.fixture
def world(tenant, api) -> dict[str, Any]:
    """One object of each kind, for the routes' path arguments; the agent's client."""
    pool = make_pool(tenant)
    node, token = make_node(pool, "n-1")
    make_node(pool, "n-2")
    release_stored(manifest("1.0.0"))
    rollout = api.post("/api/compute/rollouts/", {"version": "1.0.0", "poolIds": [str(pool.id)]}, format="json")
    assert rollout.status_code == 201, rollout.content
    webhook = api.post(
        "/api/compute/webhooks/", {"url": "http://127.0.0.1:9/hook", "events": ["rollout.created"]}, format="json"
    )
    assert webhook.status_code == 201, webhook.content
    workflow = api.post("/api/compute/workflows/", {"nodeId": str(node.id), "kind": "maintenance"}, format="json")
    assert workflow.status_code == 201, workflow.content
    return {
        "ids": {
            "fleet-pool": pool.id,
            "fleet-node": node.id,
            "fleet-workflow": workflow.json()["id"],
            "release": "1.0.0",
            "release-root": 1,
            "rollout": rollout.json()["id"],
            "webhook": webhook.json()["id"],
        },
        "node": node,
        "agent": agent_client(token),
    }


def _kwargs(name: str, pattern: URLPattern, world: dict[str, Any]) -> dict[str, Any] | None:
    kwargs: dict[str, Any] = {}
    for argument in pattern.pattern.regex.groupindex:
        if argument in {"pk", "version"} and name.rsplit("-", 1)[0] in world["ids"]:
            kwargs[argument] = world["ids"][name.rsplit("-", 1)[0]]
        elif argument == "node_id":
            kwargs[argument] = world["node"].id
        elif argument == "version":
            kwargs[argument] = "1.0.0"
        elif argument == "platform":
            kwargs[argument] = "linux-amd64"
        elif name.endswith("-detail"):
            return None  # one object of a kind this test does not make: not a list
        else:
            pytest.fail(f"{name}: no value for the path argument {argument!r}: add one to this test")
    return kwargs


def _answer(clients: list[APIClient], url: str):
    for client in clients:
        response = client.get(url)
        if response.status_code not in (401, 403):
            return response
    return response


def _is_list(response) -> bool:
    if response.status_code != 200 or response.get("Content-Type") != "application/json":
        return False
    body = response.json()
    return isinstance(body, list) or (isinstance(body, dict) and "results" in body)


def test_every_list_refuses_an_unknown_parameter_naming_it(api, world):
    clients = [api, world["agent"]]
    lists = set()
    for name, pattern in _get_routes():
        kwargs = _kwargs(name, pattern, world)
        if kwargs is None:
            continue
        url = reverse(name, kwargs=kwargs)
        plain = _answer(clients, url)
        assert plain.status_code not in (401, 403), f"{name}: neither client may read it: give this test one that may"
        if not _is_list(plain):
            continue
        lists.add(name)
        response = _answer(clients, f"{url}?{TYPO}=zone%3Deu-1")
        assert response.status_code == 400, (name, response.content)
        body = response.json()
        assert body["code"] == "unknown_parameter", (name, body)
        assert TYPO in body["detail"], (name, body)
        assert body["field"] == TYPO
    assert lists >= DOCUMENTED_LISTS, DOCUMENTED_LISTS - lists


def test_a_typo_in_the_node_selector_never_lists_the_fleet(api, world):
    response = api.get("/api/compute/nodes/?selecter=zone%3Deu-1")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("Unknown query parameter 'selecter'")
    assert "selector" in response.json()["detail"]  # the parameters it does take are named


def test_an_unknown_parameter_beside_known_ones_is_refused(api, world):
    response = api.get("/api/compute/rollouts/?state=active&limit=1&stat=paused")
    assert (response.status_code, response.json()["field"]) == (400, "stat")


@pytest.mark.parametrize(
    ("url", "count"),
    [
        ("/api/compute/nodes/?online=false&limit=1", 2),
        ("/api/compute/rollouts/?state=active&limit=1", 1),
        ("/api/compute/workflows/?state=active&limit=1", 1),
        ("/api/compute/audit/?action=rollout.create&limit=1", 1),
    ],
)
def test_known_filters_still_work_across_pages(api, world, url, count):
    seen = 0
    while url:
        response = api.get(url)
        assert response.status_code == 200, response.content
        seen += len(response.json()["results"])
        url = response.json()["next"]
    assert seen == count


def test_the_rollout_nodes_filters_state_and_wave_are_known(api, world):
    rollout_id = world["ids"]["rollout"]
    response = api.get(f"/api/compute/rollouts/{rollout_id}/nodes/?state=pending&limit=1")
    assert response.status_code == 200, response.content
    assert response.json()["next"] is not None  # two nodes, one a page: the cursor keeps the filter
    assert len(api.get(response.json()["next"]).json()["results"]) == 1
    one_wave = api.get(f"/api/compute/rollouts/{rollout_id}/nodes/?wave=0&state=pending")
    assert [row["wave"] for row in one_wave.json()["results"]] == [0]


def test_the_agents_roots_list_takes_after_and_nothing_else(world):
    assert world["agent"].get("/api/compute/agent/release-roots?after=0").status_code == 200
    response = world["agent"].get("/api/compute/agent/release-roots?afters=0")
    assert (response.status_code, response.json()["code"]) == (400, "unknown_parameter")


def _writes() -> tuple[int, int, int]:
    return Rollout.objects.count(), AuditEntry.objects.count(), Workflow.objects.count()


@pytest.mark.parametrize("query", ["dryrun=true", "dryRun=ture", "dry_run=1"])
def test_a_misspelt_dry_run_creates_nothing(api, world, query):
    """A create writes: a typo in ``dryRun`` is refused, never taken for a real create."""
    Rollout.objects.update(state=Rollout.State.ABORTED)  # the nodes free: a real create would succeed
    before = _writes()
    pool_id = str(Node.objects.get(pk=world["node"].id).pool_id)
    response = api.post(f"/api/compute/rollouts/?{query}", {"version": "1.0.0", "poolIds": [pool_id]}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] in {"unknown_parameter", "invalid_input"}
    assert _writes() == before


def test_dry_run_still_answers_the_plan(api, world):
    Rollout.objects.update(state=Rollout.State.ABORTED)
    before = _writes()
    pool_id = str(Node.objects.get(pk=world["node"].id).pool_id)
    response = api.post("/api/compute/rollouts/?dryRun=true", {"version": "1.0.0", "poolIds": [pool_id]}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["nodes"] == 2
    assert _writes() == before


def test_every_query_parameter_the_schema_documents_is_taken(api, world):
    """The OpenAPI description and the refusal read one declaration: nothing documented is refused."""
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    ids = {"rollouts": world["ids"]["rollout"], "webhooks": world["ids"]["webhook"], "nodes": world["node"].id}
    asked = 0
    for path, operations in schema["paths"].items():
        get = operations.get("get")
        if get is None or not path.startswith("/api/compute/"):
            continue
        segment = path.removeprefix("/api/compute/").split("/")[0]
        url = path.replace("{id}", str(ids.get(segment, ""))).replace("{node_id}", str(world["node"].id))
        if "{" in url:
            continue  # a detail of a kind this test does not make: not a list
        client = world["agent"] if segment == "agent" else api
        for parameter in get.get("parameters", []):
            if parameter["in"] != "query":
                continue
            response = client.get(url, {parameter["name"]: "1"})
            assert response.status_code != 400 or response.json()["code"] != "unknown_parameter", (path, parameter)
            asked += 1
    assert asked >= 20  # limit and cursor of every list, and the filters
