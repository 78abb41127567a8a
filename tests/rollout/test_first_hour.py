"""What cannot work is refused at create (docs/controller.md#create), through the API.

- a platform of a snapshotted node without stored bytes: 400 ``binary_missing`` (create and dry run);
- nodes on a release of a higher sequence: left out and counted (``excluded.newer``), or 400
  ``sequence_rollback`` when that is every node;
- a 409 ``conflict`` names the rollouts holding the nodes (``rolloutIds``), and only the snapshot's nodes conflict;
- a pool with nodes left out as newer keeps its default version.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings

from fleet.models import Node, NodeSession, Pool
from rollout.models import NodeUpgrade, Release, Rollout, binary_storage_name
from tests.factories import fleet, manifest, release_stored
from tests.rollout.helpers import in_flight, rejoin, tick

pytestmark = pytest.mark.django_db

URL = "/api/compute/rollouts/"
DRY = URL + "?dryRun=true"


def body(**overrides):
    return {"version": "1.0.0", "waves": [100], "soakSeconds": 0, **overrides}


def nothing_written():
    assert not Rollout.objects.exists()
    assert not NodeUpgrade.objects.exists()


# --- binary_missing ----------------------------------------------------------------------------


@pytest.mark.parametrize("url", [URL, DRY])
def test_a_listed_platform_never_uploaded_is_refused_with_its_platforms(api, tenant, releases, url):
    from rollout.registry.releases import release_register
    from tests.factories import signed

    release_register(envelope=signed(manifest("2.0.0", 3, archs=("amd64", "arm64"))))  # registered, no upload
    fleet(tenant, {"a": (2, "1")}, arch="amd64")
    fleet(tenant, {"b": (2, "1")}, arch="arm64")
    response = api.post(url, body(version="2.0.0"), format="json")
    assert response.status_code == 400, response.content
    error = response.json()
    assert error["code"] == "binary_missing"
    assert error["platforms"] == ["linux-amd64", "linux-arm64"]
    assert "upload" in error["detail"]
    nothing_written()


def test_only_the_snapshotted_nodes_platforms_count(api, tenant, releases):
    """1.0.0 lists amd64 only: arm64 nodes are skipped at their turn (no_binary), never a refusal."""
    nodes = fleet(tenant, {"a": (1, "1")}, arch="arm64")
    response = api.post(URL, body(), format="json")
    assert response.status_code == 201, response.content
    rollout = Rollout.objects.get()
    tick(rollout)
    upgrade = NodeUpgrade.objects.get(node=nodes["a"][0])
    assert (upgrade.state, upgrade.reason) == ("skipped", "no_binary")


def test_bytes_gone_from_the_store_count_as_missing(api, tenant, releases):
    fleet(tenant, {"a": (2, "1")})
    Path(settings.MEDIA_ROOT, binary_storage_name("1.0.0", "linux-amd64")).unlink()
    for url in (DRY, URL):
        response = api.post(url, body(), format="json")
        assert response.status_code == 400, response.content
        assert (response.json()["code"], response.json()["platforms"]) == ("binary_missing", ["linux-amd64"])
    nothing_written()


# --- excluded.newer and sequence_rollback ---------------------------------------------------------


def test_nodes_on_a_newer_release_are_left_out_and_counted(api, tenant, releases):
    release_stored(manifest("2.0.0", 3, archs=("amd64",)))
    pools = fleet(tenant, {"a": (5, "1")})
    newer = [node.id for node in pools["a"][:2]]
    NodeSession.objects.filter(node_id__in=newer).update(daemon_version="2.0.0")

    plan = api.post(DRY, body(), format="json")
    assert plan.status_code == 200, plan.content
    assert plan.json()["excluded"] == {"newer": 2}
    assert plan.json()["nodes"] == 3

    response = api.post(URL, body(), format="json")
    assert response.status_code == 201, response.content
    assert response.json()["excluded"] == {"newer": 2}
    rollout_id = response.json()["id"]
    assert api.get(f"{URL}{rollout_id}/").json()["excluded"] == {"newer": 2}
    taken = set(NodeUpgrade.objects.filter(rollout_id=rollout_id).values_list("node_id", flat=True))
    assert taken == {node.id for node in pools["a"]} - set(newer)
    assert sum(wave["total"] for wave in response.json()["waves"]) == 3


def test_no_node_left_out_is_zero(api, tenant, releases):
    fleet(tenant, {"a": (2, "1")})
    assert api.post(DRY, body(), format="json").json()["excluded"] == {"newer": 0}
    assert api.post(URL, body(), format="json").json()["excluded"] == {"newer": 0}


@pytest.mark.parametrize("url", [URL, DRY])
def test_every_node_on_a_newer_release_is_a_sequence_rollback(api, tenant, releases, url):
    """The fleet runs 1.0.0 (sequence 2): a rollout to 0.9.0 (sequence 1) cannot work on any node."""
    fleet(tenant, {"a": (3, "1")}, version="1.0.0")
    response = api.post(url, body(version="0.9.0"), format="json")
    assert response.status_code == 400, response.content
    error = response.json()
    assert error["code"] == "sequence_rollback"
    assert "refuse older releases" in error["detail"]
    assert "higher sequence" in error["detail"]
    nothing_written()


def test_a_node_on_the_same_or_an_unknown_version_is_not_left_out(api, tenant, releases):
    pools = fleet(tenant, {"a": (2, "1")}, version="1.0.0")
    NodeSession.objects.filter(node=pools["a"][0]).update(daemon_version="0.1.0-dev")  # no such release
    response = api.post(URL, body(), format="json")
    assert response.status_code == 201, response.content
    assert response.json()["excluded"] == {"newer": 0}
    assert Release.objects.count() == 2


# --- conflict names the rollouts -----------------------------------------------------------------


def test_a_conflict_names_the_rollouts_that_hold_the_nodes(api, tenant, releases):
    pools = fleet(tenant, {"a": (2, "1"), "b": (2, "1")})
    first = api.post(URL, body(poolIds=[str(pools["a"][0].pool_id)]), format="json").json()["id"]
    second = api.post(URL, body(poolIds=[str(pools["b"][0].pool_id)]), format="json").json()["id"]
    for url in (URL, DRY):
        response = api.post(url, body(), format="json")
        assert response.status_code == 409, response.content
        error = response.json()
        assert error["code"] == "conflict"
        assert error["rolloutIds"] == sorted([first, second])
        assert error["nodeIds"] == sorted(str(node.id) for pool in pools.values() for node in pool)
    assert Rollout.objects.count() == 2


def test_a_node_left_out_as_newer_is_no_conflict_when_another_rollout_holds_it(api, tenant, releases):
    """Only the snapshot's nodes can conflict: one left out (it runs a newer release) may be held elsewhere."""
    release_stored(manifest("2.0.0", 3, archs=("amd64",)))
    pools = fleet(tenant, {"a": (3, "1")})
    held = pools["a"][0]
    Node.objects.filter(pk=held.pk).update(labels={"ring": "canary"})
    first = api.post(URL, body(version="2.0.0", selector="ring=canary"), format="json")
    assert first.status_code == 201, first.content
    NodeSession.objects.filter(node=held).update(daemon_version="2.0.0")  # upgraded; its rollout still active

    for url in (DRY, URL):
        response = api.post(url, body(), format="json")
        assert response.status_code in (200, 201), response.content
        assert response.json()["excluded"] == {"newer": 1}
    taken = set(NodeUpgrade.objects.exclude(rollout_id=first.json()["id"]).values_list("node_id", flat=True))
    assert taken == {node.id for node in pools["a"][1:]}


def test_a_pool_with_nodes_left_out_as_newer_keeps_its_default(api, tenant, releases):
    release_stored(manifest("2.0.0", 3, archs=("amd64",)))
    pools = fleet(tenant, {"a": (3, "1")})
    NodeSession.objects.filter(node=pools["a"][0]).update(daemon_version="2.0.0")
    response = api.post(URL, body(), format="json")
    assert response.json()["excluded"] == {"newer": 1}
    rollout = Rollout.objects.get(pk=response.json()["id"])
    tick(rollout)
    while in_flight(rollout):
        for upgrade in in_flight(rollout):
            rejoin(upgrade.node_id, "1.0.0")
        tick(rollout)
    assert rollout.state == Rollout.State.COMPLETED
    assert Pool.objects.get().default_daemon_version is None  # the node on 2.0.0 was not in the snapshot
