"""rollouts.create over the API: snapshot, checks, codes, dry run (docs/api.md#rollouts, docs/controller.md#create)."""

from decimal import Decimal

import pytest

from fleet.models import Pool
from rollout.models import NodeUpgrade, Rollout, RolloutEvent, RolloutWave
from tests.factories import fleet, rollout_settings

pytestmark = pytest.mark.django_db

URL = "/api/compute/rollouts/"


def nothing_written() -> bool:
    return not (Rollout.objects.exists() or NodeUpgrade.objects.exists() or RolloutEvent.objects.exists())


def test_create_snapshots_every_node_of_the_tenants_pools(api, tenant, releases):
    nodes = fleet(tenant, {"a": (40, "0.1"), "b": (20, "0.1")})
    response = api.post(URL, {"version": "1.0.0", "soakSeconds": 0, "waves": [10, 50, 100]}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["state"] == "active"
    assert body["version"] == "1.0.0"
    assert sorted(body["poolIds"]) == sorted(str(p.id) for p in Pool.objects.filter(tenant=tenant))
    assert [(w["index"], w["percent"], w["total"]) for w in body["waves"]] == [(0, 10, 6), (1, 50, 24), (2, 100, 30)]
    assert body["waves"][0]["pending"] == 6
    assert body["currentWave"] == 0
    assert (body["maxFailureRatio"], body["soakSeconds"], body["upgradeTimeoutSeconds"]) == (0.1, 0, 600)
    assert body["pausedReason"] is None
    assert body["completedAt"] is None
    assert body["createdAt"]
    rollout = Rollout.objects.get()
    upgrades = list(NodeUpgrade.objects.filter(rollout=rollout).order_by("position"))
    assert {u.node_id for u in upgrades} == {n.id for ns in nodes.values() for n in ns}
    assert [u.position for u in upgrades] == list(range(60))
    assert RolloutEvent.objects.get().kind == "rollout.created"


def test_defaults_apply(api, tenant, releases):
    fleet(tenant, {"a": (3, "0.5")})
    body = api.post(URL, {"version": "1.0.0"}, format="json").json()
    assert [w["percent"] for w in body["waves"]] == [1, 50, 100]  # 3 nodes: the 10% wave is empty
    assert (body["maxFailureRatio"], body["soakSeconds"], body["upgradeTimeoutSeconds"]) == (0.1, 300, 600)


def test_the_order_is_the_shuffle_seeded_by_the_rollout_id(api, tenant, releases):
    from rollout.rollouts.spec import shuffle

    fleet(tenant, {"a": (30, "0.1")})
    rollout_id = api.post(URL, {"version": "1.0.0"}, format="json").json()["id"]
    rollout = Rollout.objects.get(pk=rollout_id)
    order = list(NodeUpgrade.objects.filter(rollout=rollout).order_by("position").values_list("node_id", flat=True))
    assert order == shuffle(order, seed=rollout.id)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"version": "7.7.7"}, 400, "unknown_version"),
        ({"version": "1.0.0", "poolIds": ["not-a-uuid"]}, 400, "unknown_pool"),
        ({"version": "1.0.0", "poolIds": ["00000000-0000-0000-0000-000000000001"]}, 400, "unknown_pool"),
        ({"version": "1.0.0", "waves": [50, 10, 100]}, 400, "invalid_waves"),
        ({"version": "1.0.0", "waves": [10, 50]}, 400, "invalid_waves"),
        ({"version": "1.0.0", "waves": [10**400]}, 400, "invalid_waves"),
        # More decimals than stored (5) would round to 0 or merge two waves: refused.
        ({"version": "1.0.0", "waves": [1e-300, 100]}, 400, "invalid_waves"),
        ({"version": "1.0.0", "waves": [0.000001, 100]}, 400, "invalid_waves"),
        ({"version": "1.0.0", "waves": [33.333331, 33.333332, 100]}, 400, "invalid_waves"),
        # Strings are strings: no coercion of numbers or booleans.
        ({"version": 1}, 400, "invalid_input"),
        ({"version": True}, 400, "invalid_input"),
        ({"version": "1.0.0", "poolIds": [1]}, 400, "invalid_input"),
        ({"version": "1.0.0", "maxFailureRatio": 2}, 400, "invalid_input"),
        ({"version": "1.0.0", "soakSeconds": -1}, 400, "invalid_input"),
        ({"version": "1.0.0", "upgradeTimeoutSeconds": 0}, 400, "invalid_input"),
        ({"version": "1.0.0", "soakSeconds": "300"}, 400, "invalid_input"),
        ({"version": "1.0.0", "extra": 1}, 400, "invalid_input"),
        ({}, 400, "invalid_input"),
    ],
)
def test_bad_input_is_400_and_writes_nothing(api, tenant, releases, body, status, code):
    fleet(tenant, {"a": (5, "0.1")})
    response = api.post(URL, body, format="json")
    assert response.status_code == status, response.content
    assert response.json()["code"] == code
    assert response.json()["detail"]
    assert nothing_written()


def test_waves_with_five_decimals_are_kept_exactly(api, tenant, releases):
    fleet(tenant, {"a": (5, "1")})
    response = api.post(URL, {"version": "1.0.0", "waves": [0.00001, 33.33333, 100]}, format="json")
    assert response.status_code == 201, response.content
    stored = list(RolloutWave.objects.order_by("index").values_list("percent", flat=True))
    assert stored == [Decimal("0.00001"), Decimal("33.33333"), Decimal("100")]


def test_pool_ids_are_capped_and_unknown_ids_are_not_all_echoed(api, tenant, releases):
    import uuid

    fleet(tenant, {"a": (5, "0.1")})
    too_many = [str(uuid.uuid4()) for _ in range(1001)]
    response = api.post(URL, {"version": "1.0.0", "poolIds": too_many}, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "invalid_input")
    assert "poolIds" in response.json()["detail"]
    assert len(response.content) < 2000  # nothing echoed
    unknown = too_many[:1000]
    response = api.post(URL, {"version": "1.0.0", "poolIds": unknown}, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "unknown_pool")
    assert len(response.json()["poolIds"]) == 10
    assert set(response.json()["poolIds"]) <= set(unknown)
    assert "and 990 more" in response.json()["detail"]
    assert len(response.content) < 2000
    assert nothing_written()


def test_a_pool_of_another_tenant_is_unknown(api, tenant, other_tenant, releases):
    fleet(tenant, {"a": (5, "0.1")})
    theirs = fleet(other_tenant, {"x": (5, "0.1")})["x"][0].pool
    response = api.post(URL, {"version": "1.0.0", "poolIds": [str(theirs.id)]}, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "unknown_pool")
    assert response.json()["poolIds"] == [str(theirs.id)]
    assert nothing_written()


def test_no_nodes_is_400(api, tenant, releases):
    Pool.objects.create(tenant=tenant, name="empty")
    response = api.post(URL, {"version": "1.0.0"}, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "no_nodes")
    assert nothing_written()


def test_no_downloads_url_is_503(api, tenant, releases, settings):
    settings.ROLLOUT = rollout_settings(downloads_url=None)
    fleet(tenant, {"a": (5, "0.1")})
    response = api.post(URL, {"version": "1.0.0"}, format="json")
    assert (response.status_code, response.json()["code"]) == (503, "no_downloads_url")
    assert nothing_written()


def test_a_node_in_an_active_rollout_makes_create_409_with_its_id(api, tenant, releases):
    nodes = fleet(tenant, {"a": (5, "0.1"), "b": (5, "0.1")})
    pool_a = nodes["a"][0].pool
    assert api.post(URL, {"version": "1.0.0", "poolIds": [str(pool_a.id)]}, format="json").status_code == 201
    response = api.post(URL, {"version": "1.0.0"}, format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "conflict"
    assert sorted(response.json()["nodeIds"]) == sorted(str(n.id) for n in nodes["a"])
    assert Rollout.objects.count() == 1
    assert NodeUpgrade.objects.count() == 5
    # Another pool is free.
    pool_b = nodes["b"][0].pool
    assert api.post(URL, {"version": "1.0.0", "poolIds": [str(pool_b.id)]}, format="json").status_code == 201


def test_one_writer_is_a_database_constraint(tenant, releases):
    from django.db import IntegrityError, transaction

    nodes = fleet(tenant, {"a": (2, "0.1")})
    from rollout.rollouts.create import rollout_create
    from rollout.rollouts.spec import rollout_spec

    first = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0"))
    second = Rollout.objects.create(
        tenant=tenant,
        release=first.release,
        waves=[100],
        max_failure_ratio=0,
        soak_seconds=0,
        upgrade_timeout_seconds=1,
        created_at=first.created_at,
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        NodeUpgrade.objects.create(
            rollout=second, node=nodes["a"][0], pool=nodes["a"][0].pool, wave=0, position=0, target_version="1.0.0"
        )


def test_a_finished_rollout_frees_its_nodes(api, tenant, releases):
    fleet(tenant, {"a": (5, "0.1")})
    first = api.post(URL, {"version": "1.0.0"}, format="json").json()["id"]
    assert api.post(f"{URL}{first}/abort/", {}, format="json").status_code == 200
    assert api.post(URL, {"version": "1.0.0"}, format="json").status_code == 201


def test_dry_run_checks_and_plans_but_writes_nothing(api, tenant, releases):
    nodes = fleet(tenant, {"a": (100, "0.05"), "b": (100, "0.1")})
    body = {"version": "1.0.0", "waves": [1, 10, 100], "soakSeconds": 60, "upgradeTimeoutSeconds": 100}
    response = api.post(f"{URL}?dryRun=true", body, format="json")
    assert response.status_code == 200, response.content
    plan = response.json()
    assert plan["nodes"] == 200
    assert [w["total"] for w in plan["waves"]] == [2, 18, 180]
    for wave in plan["waves"]:
        assert sum(wave["pools"].values()) == wave["total"]
    assert plan["budgets"][str(nodes["a"][0].pool_id)]["allowed"] == 5
    # Wave 2 puts up to 180 nodes in one pool: ceil(x / 5) rounds of at most 100 s, plus 2 soaks.
    assert plan["estimatedSeconds"] >= 100 + 60 + 100 + 60 + 18 * 100
    assert nothing_written()
    assert not RolloutWave.objects.exists()


def test_dry_run_has_no_estimate_when_a_pool_can_never_start_a_node(api, tenant, releases):
    fleet(tenant, {"a": (10, "0.1"), "frozen": (10, "0")})
    plan = api.post(f"{URL}?dryRun=true", {"version": "1.0.0"}, format="json").json()
    assert plan["estimatedSeconds"] is None
    assert nothing_written()


def test_dry_run_reports_refusals_like_create(api, tenant, releases):
    fleet(tenant, {"a": (5, "0.1")})
    response = api.post(f"{URL}?dryRun=true", {"version": "nope"}, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "unknown_version")


def test_rollouts_are_tenant_scoped_and_need_the_grant(api, other_api, ungranted_api, anonymous_api, tenant, releases):
    fleet(tenant, {"a": (5, "0.1")})
    rollout_id = api.post(URL, {"version": "1.0.0"}, format="json").json()["id"]
    assert other_api.get(f"{URL}{rollout_id}/").status_code == 404
    assert other_api.get(URL).json()["results"] == []
    for action in ("pause", "resume", "abort"):
        assert other_api.post(f"{URL}{rollout_id}/{action}/", {}, format="json").status_code == 404
    for path in ("nodes", "events"):
        assert other_api.get(f"{URL}{rollout_id}/{path}/").status_code == 404
    assert ungranted_api.get(URL).status_code == 403
    assert anonymous_api.get(URL).status_code == 401
    assert api.get(f"{URL}not-a-uuid/").status_code == 404
    assert Rollout.objects.get().state == "active"


def test_list_filter_detail_nodes_and_events(api, tenant, releases):
    fleet(tenant, {"a": (10, "0.1")})
    rollout_id = api.post(URL, {"version": "1.0.0", "waves": [20, 100]}, format="json").json()["id"]
    assert [r["id"] for r in api.get(f"{URL}?state=active").json()["results"]] == [rollout_id]
    assert api.get(f"{URL}?state=completed").json()["results"] == []
    assert api.get(f"{URL}?state=bogus").status_code == 400
    assert api.get(f"{URL}{rollout_id}/").json()["id"] == rollout_id
    rows = api.get(f"{URL}{rollout_id}/nodes/").json()["results"]
    assert len(rows) == 10
    assert set(rows[0]) == {
        "nodeId", "poolId", "wave", "position", "state", "previousVersion", "startedAt", "deadline", "settledAt",
        "reason", "blocker",
    }  # fmt: skip
    assert len(api.get(f"{URL}{rollout_id}/nodes/?wave=0").json()["results"]) == 2
    assert len(api.get(f"{URL}{rollout_id}/nodes/?state=pending&wave=1").json()["results"]) == 8
    for bad in ("x", "1.5", "-1"):
        refused = api.get(f"{URL}{rollout_id}/nodes/?wave={bad}")
        assert (refused.status_code, refused.json()["code"]) == (400, "invalid_input"), bad
    events = api.get(f"{URL}{rollout_id}/events/").json()["results"]
    assert [e["kind"] for e in events] == ["rollout.created"]
    assert set(events[0]) == {"kind", "at", "data"}
