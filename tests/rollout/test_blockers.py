"""Why not yet (docs/controller.md#why-not-yet): every node row and every rollout says what it waits for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet.models import Node, NodeSession, Pool
from fleet.services.sessions import agent_session_leave
from fleet.services.workflows import workflow_start
from rollout.models import NodeUpgrade, Rollout
from rollout.rollouts.actions import rollout_pause
from tests.factories import fleet
from tests.rollout import helpers
from tests.rollout.helpers import heartbeat_all, in_flight, rejoin, tick

pytestmark = pytest.mark.django_db

NODES = "/api/compute/rollouts/{}/nodes/"
NODE = "/api/compute/rollouts/{}/nodes/{}/"
ROLLOUT = "/api/compute/rollouts/{}/"


def create(tenant, **kwargs) -> Rollout:
    """``helpers.create``, failures never pausing it unless ``kwargs`` say otherwise."""
    kwargs.setdefault("max_failure_ratio", 1)
    return helpers.create(tenant, **kwargs)


def node_rows(api, rollout, **params) -> list[dict]:
    response = api.get(NODES.format(rollout.id), {"limit": 1000, **params})
    assert response.status_code == 200, response.content
    return response.json()["results"]


def by_node(api, rollout) -> dict[str, dict]:
    return {row["nodeId"]: row for row in node_rows(api, rollout)}


def codes(rows) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        code = row["blocker"]["code"] if row["blocker"] else None
        counts[code] = counts.get(code, 0) + 1
    return counts


def rollout_blocker(api, rollout):
    response = api.get(ROLLOUT.format(rollout.id))
    assert response.status_code == 200
    return response.json()["blocker"]


def iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def test_next_tick_then_budget_full_behind_then_awaiting_rejoin(api, tenant, releases):
    fleet(tenant, {"a": (10, "0.1")})  # budget: 1 node
    rollout = create(tenant)
    rows = node_rows(api, rollout)
    # Before any tick: the first node in position order takes the one free slot, the others wait behind it.
    assert rows[0]["blocker"] == {"code": "next_tick", "detail": "It starts at the next tick."}
    for row in rows[1:]:
        blocker = row["blocker"]
        assert blocker["code"] == "budget_full"
        assert (blocker["poolId"], blocker["disrupted"], blocker["allowed"]) == (row["poolId"], 0, 1)
        assert blocker["detail"]
    assert rollout_blocker(api, rollout) is None  # nodes are moving
    tick(rollout)
    (flying,) = in_flight(rollout)
    rows = by_node(api, rollout)
    blocker = rows[str(flying.node_id)]["blocker"]
    assert blocker["code"] == "awaiting_rejoin"
    assert blocker["deadline"] == iso(flying.deadline) == rows[str(flying.node_id)]["deadline"]
    assert "1.0.0" in blocker["detail"]
    others = [row["blocker"] for node_id, row in rows.items() if node_id != str(flying.node_id)]
    assert {(b["code"], b["disrupted"], b["allowed"]) for b in others} == {("budget_full", 1, 1)}
    # Its own upgrade fills the budget: the rollout waits for its node, not for the budget.
    assert rollout_blocker(api, rollout) == {
        "code": "awaiting_nodes",
        "detail": "Waiting for 1 node(s) in flight to settle; no other node can start now.",
        "inFlight": 1,
    }
    rejoin(flying.node_id, "1.0.0")
    assert by_node(api, rollout)[str(flying.node_id)]["blocker"] is None  # settled


def test_wave_not_started_then_soaking_then_next_tick(api, tenant, releases):
    fleet(tenant, {"a": (4, "1")})
    rollout = create(tenant, waves=[50, 100], soak_seconds=300)
    rows = node_rows(api, rollout)
    later = [row for row in rows if row["wave"] == 1]
    assert later
    assert {(row["blocker"]["code"], row["blocker"]["wave"]) for row in later} == {("wave_not_started", 0)}
    tick(rollout)
    for upgrade in in_flight(rollout):
        rejoin(upgrade.node_id, "1.0.0")
    tick(rollout)  # wave 0 settled: the soak begins
    assert rollout.current_wave == 0
    assert rollout.next_wave_at is not None
    until = iso(rollout.next_wave_at)
    rows = node_rows(api, rollout, wave=1)
    assert {(row["blocker"]["code"], row["blocker"]["until"]) for row in rows} == {("soaking", until)}
    assert rollout_blocker(api, rollout) == {
        "code": "soaking",
        "detail": rollout_blocker(api, rollout)["detail"],
        "until": until,
    }
    with time_machine.travel(rollout.next_wave_at - timedelta(seconds=1), tick=False):
        tick(rollout)  # the periodic tick of a running controller, a moment before the soak ends
    with time_machine.travel(rollout.next_wave_at + timedelta(seconds=1), tick=False):
        heartbeat_all()
        # The soak is over; the next tick starts wave 1.
        assert codes(node_rows(api, rollout, wave=1)) == {"next_tick": 2}
        assert rollout_blocker(api, rollout) is None


def test_a_wave_no_tick_has_recorded_yet_soaks_from_its_last_settle(api, tenant, releases):
    fleet(tenant, {"a": (4, "1")})
    rollout = create(tenant, waves=[50, 100], soak_seconds=300)
    tick(rollout)
    for upgrade in in_flight(rollout):
        rejoin(upgrade.node_id, "1.0.0")  # the join path settles wave 0; no tick has recorded it yet
    assert not in_flight(rollout)
    last = max(NodeUpgrade.objects.filter(rollout=rollout, wave=0).values_list("settled_at", flat=True))
    until = iso(last + timedelta(seconds=300))
    rows = node_rows(api, rollout, wave=1)
    assert {(row["blocker"]["code"], row["blocker"]["until"]) for row in rows} == {("soaking", until)}
    assert rollout_blocker(api, rollout)["until"] == until
    tick(rollout)  # records the settle: the soak the blockers said
    assert iso(rollout.next_wave_at) == until


def test_paused_rollout(api, tenant, releases):
    fleet(tenant, {"a": (4, "0.25")})
    rollout = create(tenant)
    tick(rollout)
    rollout_pause(rollout_id=rollout.id, tenant=tenant)
    rows = node_rows(api, rollout)
    pending = [row["blocker"] for row in rows if row["state"] == "pending"]
    assert len(pending) == 3
    assert {(b["code"], b["pausedReason"]) for b in pending} == {("rollout_paused", "operator")}
    # Nodes already in flight still settle: they wait for their agent, not for the resume.
    assert [row["blocker"]["code"] for row in rows if row["state"] == "in_flight"] == ["awaiting_rejoin"]
    blocker = rollout_blocker(api, rollout)
    assert (blocker["code"], blocker["pausedReason"]) == ("paused", "operator")
    assert "paused" in blocker["detail"]


def test_offline_node_will_be_skipped_at_its_turn(api, tenant, releases):
    nodes = fleet(tenant, {"a": (3, "1")})["a"]
    gone = Node.objects.select_related("session").get(pk=nodes[0].pk)
    agent_session_leave(node=gone)
    rollout = create(tenant)
    rows = by_node(api, rollout)
    blocker = rows[str(gone.pk)]["blocker"]
    last_seen = NodeSession.objects.get(node=gone).last_seen_at
    assert blocker["code"] == "offline"
    assert blocker["lastSeenAt"] == iso(last_seen)
    assert "skipped" in blocker["detail"]
    assert codes(rows.values()) == {"offline": 1, "next_tick": 2}
    tick(rollout)
    assert NodeUpgrade.objects.get(rollout=rollout, node=gone).state == "skipped"
    assert by_node(api, rollout)[str(gone.pk)]["blocker"] is None


def test_budget_full_held_by_workflows(api, tenant, releases):
    nodes = fleet(tenant, {"a": (10, "0.2")})["a"]  # budget: 2 nodes
    pool = Pool.objects.get(name="a")
    for node in nodes[:2]:
        workflow_start(tenant=tenant, node_id=node.pk, kind="remediation")
    rollout = create(tenant)
    tick(rollout)
    assert not in_flight(rollout)
    rows = node_rows(api, rollout)
    assert {
        (r["blocker"]["code"], r["blocker"]["poolId"], r["blocker"]["disrupted"], r["blocker"]["allowed"]) for r in rows
    } == {("budget_full", str(pool.pk), 2, 2)}
    assert "2 of 2" in rows[0]["blocker"]["detail"]
    assert rollout_blocker(api, rollout) == {
        "code": "budget_full",
        "detail": "Budget full in a (2 of 2 disrupted).",
        "poolIds": [str(pool.pk)],
    }


def test_proving_ready_until_min_ready_seconds_after_arrival(api, tenant, releases):
    fleet(tenant, {"a": (10, "0.1")})
    rollout = create(tenant, min_ready_seconds=60)
    tick(rollout)
    (upgrade,) = in_flight(rollout)
    rejoin(upgrade.node_id, "1.0.0")
    upgrade.refresh_from_db()
    blocker = by_node(api, rollout)[str(upgrade.node_id)]["blocker"]
    assert blocker["code"] == "proving_ready"
    assert blocker["until"] == iso(upgrade.arrived_at + timedelta(seconds=60))
    assert "readiness" in blocker["detail"]


def _closed_window_pool(pool: Pool) -> None:
    """Pool ``pool`` gets a single daily 22:00 Europe/Berlin window of an hour."""
    days = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    window = {"days": days, "start": "22:00", "durationMinutes": 60, "timezone": "Europe/Berlin"}
    Pool.objects.filter(pk=pool.pk).update(maintenance_windows=[window])


def test_outside_window_names_the_next_opening(api, tenant, releases):
    noon = datetime(2026, 6, 10, 12, 0, tzinfo=UTC)  # 14:00 in Berlin (CEST): closed
    with time_machine.travel(noon, tick=False):
        fleet(tenant, {"a": (4, "1"), "b": (4, "0")})  # b: a budget of 0 is always full
        a, b = Pool.objects.get(name="a"), Pool.objects.get(name="b")
        _closed_window_pool(a)
        rollout = create(tenant)
        opens = iso(datetime(2026, 6, 10, 20, 0, tzinfo=UTC))  # 22:00 CEST
        rows = node_rows(api, rollout)
        in_a = [row["blocker"] for row in rows if row["poolId"] == str(a.pk)]
        assert {(blocker["code"], blocker["nextWindowAt"]) for blocker in in_a} == {("outside_window", opens)}
        assert "22:00 Europe/Berlin" in in_a[0]["detail"]
        in_b = [row["blocker"]["code"] for row in rows if row["poolId"] == str(b.pk)]
        assert set(in_b) == {"budget_full"}
        # Closed before full: the rollout waits for the window (the table's order).
        blocker = rollout_blocker(api, rollout)
        assert (blocker["code"], blocker["nextWindowAt"], blocker["poolIds"]) == (
            "outside_window",
            opens,
            [str(a.pk)],
        )


def test_single_node_endpoint(api, other_api, tenant, releases):
    nodes = fleet(tenant, {"a": (4, "0.25")})["a"]
    rollout = create(tenant)
    tick(rollout)
    listed = by_node(api, rollout)
    for node in nodes:
        response = api.get(NODE.format(rollout.id, node.pk))
        assert response.status_code == 200
        assert response.json() == listed[str(node.pk)]
    stranger = fleet(tenant, {"z": (1, "1")})["z"][0]  # a node of the tenant, not in this rollout
    for path in (
        NODE.format(rollout.id, stranger.pk),
        NODE.format(rollout.id, "not-a-uuid"),
        NODE.format("00000000-0000-0000-0000-000000000000", nodes[0].pk),
    ):
        response = api.get(path)
        assert response.status_code == 404, path
        assert response.json()["code"] == "not_found"
    # Another tenant's rollout is a 404 too.
    response = other_api.get(NODE.format(rollout.id, nodes[0].pk))
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def _queries(api, path, **params) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = api.get(path, params)
    assert response.status_code == 200
    return len(captured.captured_queries)


def test_query_count_per_page_is_flat(api, tenant, releases):
    nodes = fleet(tenant, {"a": (300, "0.02"), "b": (300, "0.5")})
    for node in nodes["a"][:100]:
        NodeSession.objects.filter(node=node).update(left_at=timezone.now())  # a third of a is offline
    rollout = create(tenant, waves=[50, 100])
    # Before a tick (ranks among free slots are computed) and after it (nodes in flight, budgets full).
    for ticked in (False, True):
        if ticked:
            tick(rollout)
        path = NODES.format(rollout.id)
        # Pages alike but for their size cost the same queries (some are needed only for pending rows).
        for state in ("pending", "in_flight") if ticked else ("pending",):
            few = _queries(api, path, limit=10, state=state)
            many = _queries(api, path, limit=200, state=state)
            assert few == many, (ticked, state, few, many)
        assert _queries(api, path, limit=200) == _queries(api, path, limit=600)
        rows = node_rows(api, rollout, limit=200)
        assert len({row["blocker"]["code"] for row in rows if row["blocker"]}) >= 3


def test_rollout_list_query_count_is_flat(api, tenant, releases):
    pools = fleet(tenant, {f"p{i}": (2, "0.5") for i in range(4)})
    for name in pools:
        rollout = create(tenant, pool_ids=[str(Pool.objects.get(name=name).pk)])
        if name in ("p0", "p1"):
            tick(rollout)
    listed = api.get("/api/compute/rollouts/").json()["results"]
    assert len(listed) == 4
    assert {row["blocker"]["code"] if row["blocker"] else None for row in listed} == {None, "awaiting_nodes"}
    assert _queries(api, "/api/compute/rollouts/", limit=1) == _queries(api, "/api/compute/rollouts/", limit=100)


def _blocked_samples(client) -> dict[tuple[str, str], float]:
    from prometheus_client.parser import text_string_to_metric_families

    response = client.get("/metrics")
    assert response.status_code == 200
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            if sample.name == "rollout_blocked":
                samples[sample.labels["rollout"], sample.labels["code"]] = sample.value
    return samples


def test_prometheus_gauge_of_the_rollout_blocker(client, tenant, releases, monkeypatch):
    from rollout.controller.decisions import ROLLOUT_CODES

    monkeypatch.setenv("METRICS_PUBLIC", "1")
    monkeypatch.delenv("METRICS_TOKEN", raising=False)
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    nodes = fleet(tenant, {f"p{i}": (4, "0.25") for i in range(3)})
    held = create(tenant, pool_ids=[str(nodes["p0"][0].pool_id)])
    workflow_start(tenant=tenant, node_id=nodes["p0"][0].pk, kind="remediation")
    tick(held)
    samples = _blocked_samples(client)
    assert samples[str(held.id), "budget_full"] == 1
    assert sum(value for (rollout, _), value in samples.items() if rollout == str(held.id)) == 1
    with CaptureQueriesContext(connection) as one:
        _blocked_samples(client)
    moving = create(tenant, pool_ids=[str(nodes["p1"][0].pool_id)])  # not ticked: moving
    paused = create(tenant, pool_ids=[str(nodes["p2"][0].pool_id)])
    rollout_pause(rollout_id=paused.id, tenant=tenant)
    with CaptureQueriesContext(connection) as three:
        samples = _blocked_samples(client)
    assert len(three) == len(one)  # a constant number of queries whatever the rollouts
    assert {code for (rollout, code), value in samples.items() if rollout == str(moving.id) and value} == set()
    assert samples[str(paused.id), "paused"] == 1
    assert len(samples) == 3 * len(ROLLOUT_CODES)
