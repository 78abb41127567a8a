"""What a create refuses and what its dry run shows (docs/api.md#rollouts): ``endBehavior`` without ``endBy`` is
400 ``invalid``; the dry run carries the schedule and the gates as the create would store them; a 409
``conflict`` names the holders' actual states."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.models import AuditEntry
from rollout.models import NodeUpgrade, Rollout, RolloutEvent, RolloutGate
from tests.factories import fleet

pytestmark = pytest.mark.django_db

URL = "/api/compute/rollouts/"


def z(at) -> str:
    return at.isoformat().replace("+00:00", "Z")


@pytest.fixture
def nodes(tenant, releases):
    return fleet(tenant, {"a": (4, "0.5")})


def _written() -> tuple[int, ...]:
    return tuple(model.objects.count() for model in (Rollout, NodeUpgrade, RolloutEvent, RolloutGate, AuditEntry))


@pytest.mark.parametrize("behavior", ["pause", "abort", "abort_rollback", "explode"])
def test_end_behavior_without_end_by_is_400_invalid_and_writes_nothing(api, nodes, behavior):
    before = _written()
    for query in ("", "?dryRun=true"):
        response = api.post(URL + query, {"version": "1.0.0", "endBehavior": behavior}, format="json")
        assert response.status_code == 400, response.content
        body = response.json()
        assert (body["code"], body["field"]) == ("invalid", "endBehavior")
        assert "endBehavior" in body["detail"]
    assert _written() == before


def test_the_dry_run_shows_the_schedule_and_gates_as_the_create_stores_them(api, nodes, settings):
    settings.ROLLOUT_GATE_URL_ALLOW = ["http://127.0.0.1:"]
    settings.ROLLOUT_WEBHOOKS_ALLOW_HTTP = True
    start, end = timezone.now() + timedelta(hours=1), timezone.now() + timedelta(hours=5)
    gates = [{"name": "h", "http": {"url": "http://127.0.0.1:9/ok"}}]
    body = {"version": "1.0.0", "startAt": z(start), "endBy": z(end), "gates": gates, "gateIntervalSeconds": 10}
    before = _written()
    plan = api.post(f"{URL}?dryRun=true", body, format="json")
    assert plan.status_code == 200, plan.content
    assert _written() == before
    planned = plan.json()
    created = api.post(URL, body, format="json").json()
    assert (planned["startAt"], planned["endBy"], planned["endBehavior"]) == (
        created["startAt"],
        created["endBy"],
        "pause",  # endBy alone: pause, as the create stores it
    )
    assert created["endBehavior"] == "pause"
    assert [{key: gate[key] for key in ("name", "http")} for gate in planned["gates"]] == gates
    assert (planned["gateIntervalSeconds"], planned["gateFailureLimit"]) == (10, created["gateFailureLimit"])


def test_the_dry_run_without_a_schedule_says_null(api, nodes):
    plan = api.post(f"{URL}?dryRun=true", {"version": "1.0.0"}, format="json").json()
    assert (plan["startAt"], plan["endBy"], plan["endBehavior"], plan["gates"]) == (None, None, None, [])


def _as(state: str) -> dict:
    """The columns a rollout in ``state`` has (the table's check constraints)."""
    extra = {"paused": {"paused_reason": "operator"}, "awaiting_approval": {"approvals_required": 1}}
    return {"state": state, **extra.get(state, {})}


@pytest.mark.parametrize(
    ("holder_state", "words"),
    [
        ("active", "already held by an active rollout"),
        ("paused", "already held by a paused rollout"),
        ("scheduled", "already held by a scheduled rollout"),
        ("awaiting_approval", "already held by a rollout awaiting approval"),
    ],
)
def test_a_conflict_names_the_holders_actual_state(api, nodes, holder_state, words):
    first = api.post(URL, {"version": "1.0.0"}, format="json").json()
    Rollout.objects.filter(pk=first["id"]).update(**_as(holder_state))
    before = _written()
    for query in ("", "?dryRun=true"):
        clash = api.post(URL + query, {"version": "1.0.0"}, format="json")
        assert clash.status_code == 409
        body = clash.json()
        assert body["code"] == "conflict"
        assert body["detail"] == f"4 nodes are {words}: {first['id']}."
        assert body["rolloutIds"] == [first["id"]]
        assert len(body["nodeIds"]) == 4
    assert _written() == before


def test_a_conflict_with_several_holders_counts_their_states(api, tenant, releases):
    pools = fleet(tenant, {"a": (2, "0.5"), "b": (2, "0.5")})
    ids = []
    for name in ("a", "b"):
        pool_id = str(pools[name][0].pool_id)
        ids.append(api.post(URL, {"version": "1.0.0", "poolIds": [pool_id]}, format="json").json()["id"])
    Rollout.objects.filter(pk=ids[1]).update(**_as("awaiting_approval"))
    clash = api.post(URL, {"version": "1.0.0"}, format="json").json()
    assert clash["detail"].startswith("4 nodes are already held by 2 rollouts (1 active, 1 awaiting approval): ")
    assert clash["rolloutIds"] == sorted(ids)
