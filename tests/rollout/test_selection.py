"""Rollouts to a selection (docs/api.md#rollouts-to-a-selection): the snapshot, conflicts, budgets, the default."""

from __future__ import annotations

import pytest

from fleet.models import Node, Pool
from fleet.services.workflows import workflow_start
from rollout.models import NodeUpgrade, Rollout, RolloutEvent
from tests.factories import fleet
from tests.rollout.helpers import in_flight, rejoin, states, tick

pytestmark = pytest.mark.django_db

URL = "/api/compute/rollouts/"


def label(nodes, **labels) -> None:
    Node.objects.filter(pk__in=[node.pk for node in nodes]).update(labels=labels)


def snapshot(rollout_id) -> set:
    return set(NodeUpgrade.objects.filter(rollout_id=rollout_id).values_list("node_id", flat=True))


def test_the_snapshot_is_the_matching_nodes_and_does_not_follow_later_label_changes(api, tenant, releases):
    nodes = fleet(tenant, {"a": (10, "0.5"), "b": (6, "0.5")})
    label(nodes["a"][:3] + nodes["b"][:2], ring="canary")
    response = api.post(URL, {"version": "1.0.0", "selector": "ring = canary", "waves": [100]}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["selector"] == "ring = canary"
    assert sum(wave["total"] for wave in body["waves"]) == 5
    chosen = {node.pk for node in nodes["a"][:3] + nodes["b"][:2]}
    assert snapshot(body["id"]) == chosen

    label(nodes["a"], ring="canary")  # later: every node of a is in the ring
    label(nodes["a"][:1], ring="main")
    tick(Rollout.objects.get(pk=body["id"]))
    assert snapshot(body["id"]) == chosen
    assert api.get(f"{URL}{body['id']}/").json()["selector"] == "ring = canary"
    assert RolloutEvent.objects.get(kind="rollout.created").data["nodes"] == 5


def test_without_a_selector_the_representation_says_null(api, tenant, releases):
    fleet(tenant, {"a": (2, "0.5")})
    assert api.post(URL, {"version": "1.0.0"}, format="json").json()["selector"] is None


def test_no_matching_node_is_no_nodes_and_a_bad_selector_is_invalid_selector(api, tenant, releases):
    fleet(tenant, {"a": (4, "0.5")})
    for body, code in (
        ({"version": "1.0.0", "selector": "ring=canary"}, "no_nodes"),
        ({"version": "1.0.0", "selector": "ring in (canary"}, "invalid_selector"),
        ({"version": "1.0.0", "selector": ["ring"]}, "invalid_selector"),
        ({"version": "1.0.0", "selector": "x" * 4097}, "invalid_selector"),
    ):
        for query in ("", "?dryRun=true"):
            response = api.post(URL + query, body, format="json")
            assert response.status_code == 400, response.json()
            assert response.json()["code"] == code
    assert not Rollout.objects.exists()
    assert not NodeUpgrade.objects.exists()


def test_the_dry_run_counts_the_selection_and_writes_nothing(api, tenant, releases):
    nodes = fleet(tenant, {"a": (10, "0.5")})
    label(nodes["a"][:4], zone="a")
    response = api.post(URL + "?dryRun=true", {"version": "1.0.0", "selector": "zone=a", "waves": [100]}, format="json")
    assert response.status_code == 200, response.json()
    plan = response.json()
    assert (plan["nodes"], plan["selector"]) == (4, "zone=a")
    assert plan["waves"][0]["total"] == 4
    assert plan["budgets"][str(nodes["a"][0].pool_id)]["allowed"] == 5  # ceil(0.5 x all 10 nodes of the pool)
    assert not Rollout.objects.exists()


def test_disjoint_selections_of_one_pool_do_not_conflict_and_overlapping_ones_do(api, tenant, releases):
    nodes = fleet(tenant, {"a": (10, "0.5")})
    label(nodes["a"][:3], ring="canary")
    first = api.post(URL, {"version": "1.0.0", "selector": "ring=canary"}, format="json")
    assert first.status_code == 201
    rest = api.post(URL, {"version": "1.0.0", "selector": "!ring"}, format="json")
    assert rest.status_code == 201, rest.json()
    assert snapshot(first.json()["id"]).isdisjoint(snapshot(rest.json()["id"]))
    clash = api.post(URL, {"version": "1.0.0", "selector": "ring in (canary)"}, format="json")
    assert clash.status_code == 409
    assert sorted(clash.json()["nodeIds"]) == sorted(str(node.pk) for node in nodes["a"][:3])
    assert Rollout.objects.count() == 2


def test_the_budget_counts_unselected_nodes_that_are_disrupted(api, tenant, releases):
    nodes = fleet(tenant, {"a": (10, "0.2")})  # allowed: ceil(0.2 x 10) = 2
    label(nodes["a"][:5], ring="canary")
    for node in nodes["a"][8:]:  # two unselected nodes under a workflow: the pool's whole budget
        workflow_start(tenant=tenant, node_id=node.pk, kind="remediation")
    rollout_id = api.post(URL, {"version": "1.0.0", "selector": "ring=canary", "waves": [100]}, format="json").json()[
        "id"
    ]
    rollout = Rollout.objects.get(pk=rollout_id)
    tick(rollout)
    assert states(rollout) == {"pending": 5}
    rows = api.get(f"{URL}{rollout_id}/nodes/").json()["results"]
    assert {row["blocker"]["code"] for row in rows} == {"budget_full"}
    assert {(row["blocker"]["disrupted"], row["blocker"]["allowed"]) for row in rows} == {(2, 2)}


def _complete(rollout: Rollout) -> None:
    tick(rollout)
    while in_flight(rollout):
        for upgrade in in_flight(rollout):
            rejoin(upgrade.node_id, "1.0.0")
        tick(rollout)
    assert rollout.state == Rollout.State.COMPLETED, states(rollout)


def test_the_default_version_moves_only_for_wholly_covered_pools(api, tenant, releases):
    nodes = fleet(tenant, {"whole": (3, "1"), "part": (4, "1")})
    label(nodes["whole"] + nodes["part"][:2], ring="canary")
    body = {"version": "1.0.0", "selector": "ring=canary", "waves": [100], "soakSeconds": 0}
    rollout = Rollout.objects.get(pk=api.post(URL, body, format="json").json()["id"])
    _complete(rollout)
    defaults = dict(Pool.objects.values_list("name", "default_daemon_version"))
    assert defaults == {"whole": "1.0.0", "part": None}

    # The rest of the partly covered pool, later: now every node of it has the version.
    rest = {"version": "1.0.0", "selector": "!ring", "poolIds": [str(nodes["part"][0].pool_id)], "waves": [100]}
    rollout = Rollout.objects.get(pk=api.post(URL, rest, format="json").json()["id"])
    _complete(rollout)
    assert Pool.objects.get(name="part").default_daemon_version is None  # this one covered it in part too


def test_a_selector_matching_a_whole_pool_moves_its_default(api, tenant, releases):
    nodes = fleet(tenant, {"a": (3, "1")})
    label(nodes["a"], zone="x")
    body = {"version": "1.0.0", "selector": "zone", "waves": [100], "soakSeconds": 0}
    rollout = Rollout.objects.get(pk=api.post(URL, body, format="json").json()["id"])
    _complete(rollout)
    assert Pool.objects.get().default_daemon_version == "1.0.0"
