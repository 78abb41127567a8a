"""Evaluating gates and what the tick does with their stored results (docs/controller.md#gates)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet.models import Pool
from rollout.controller.gate_evaluation import gate_record, gates_claim, gates_evaluate_due
from rollout.gates.probe import Outcome
from rollout.models import Rollout, RolloutEvent, RolloutGate, Webhook, WebhookDelivery
from rollout.rollouts.actions import rollout_resume
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.factories import fleet
from tests.gates.conftest import Server, vector
from tests.rollout.helpers import states, tick

pytestmark = pytest.mark.django_db


def create(tenant, *gates: dict, interval: int = 30, limit: int = 3) -> Rollout:
    spec = rollout_spec(
        version="1.0.0",
        waves=[100],
        soak_seconds=0,
        gates=list(gates) or None,
        gate_interval_seconds=interval,
        gate_failure_limit=limit,
    )
    return rollout_create(tenant=tenant, spec=spec)


def prom(name: str = "errors", maximum: float = 1) -> dict:
    return {"name": name, "prometheus": {"query": "errors", "max": maximum}}


def http(server: Server, name: str = "health") -> dict:
    return {"name": name, "http": {"url": server.url + "/health"}}


def due_now(rollout: Rollout) -> None:
    RolloutGate.objects.filter(rollout=rollout).update(due_at=timezone.now())


def evaluate(rollout: Rollout) -> None:
    due_now(rollout)
    gates_evaluate_due(run_seconds=30)


@pytest.fixture
def prometheus(serve, module_settings) -> Server:
    server = serve(body=vector("0"))
    module_settings.ROLLOUT_PROMETHEUS_URL = server.url
    return server


def test_no_node_starts_while_a_gate_is_pending(tenant, releases, prometheus, api):
    fleet(tenant, {"a": (4, "1")})
    rollout = create(tenant, prom())
    tick(rollout)
    assert states(rollout) == {"pending": 4}
    shown = api.get(f"/api/compute/rollouts/{rollout.id}/").json()["blocker"]
    assert (shown["code"], shown["name"], shown["state"], shown["at"]) == ("gate", "errors", "pending", None)
    rows = api.get(f"/api/compute/rollouts/{rollout.id}/nodes/").json()["results"]
    assert {row["blocker"]["code"] for row in rows} == {"gate"}
    assert rows[0]["blocker"]["name"] == "errors"
    evaluate(rollout)
    assert api.get(f"/api/compute/rollouts/{rollout.id}/").json()["blocker"] is None  # the next tick starts
    tick(rollout)
    assert states(rollout) == {"in_flight": 4}


def test_a_pass_counts_for_two_intervals(tenant, releases, prometheus, time_machine):
    fleet(tenant, {"a": (4, "0.25")})
    rollout = create(tenant, prom(), interval=10)
    evaluate(rollout)
    gate = RolloutGate.objects.get()
    assert (gate.state, gate.fresh_until - gate.at) == ("pass", timedelta(seconds=20))
    time_machine.move_to(gate.at + timedelta(seconds=21))
    tick(rollout)
    assert states(rollout) == {"pending": 4}  # the pass is too old: held
    evaluate(rollout)
    tick(rollout)
    assert states(rollout) == {"in_flight": 1, "pending": 3}


def test_rows_of_a_later_wave_show_their_own_blocker(tenant, releases, prometheus, api):
    fleet(tenant, {"a": (10, "1")})
    spec = rollout_spec(version="1.0.0", waves=[50, 100], gates=[prom()])
    rollout = rollout_create(tenant=tenant, spec=spec)
    rows = api.get(f"/api/compute/rollouts/{rollout.id}/nodes/").json()["results"]
    codes = {(row["wave"], row["blocker"]["code"]) for row in rows}
    assert codes == {(0, "gate"), (1, "wave_not_started")}


def test_failures_in_a_row_pause_the_rollout_and_each_is_an_event(tenant, releases, prometheus, api):
    Webhook.objects.create(
        tenant=tenant,
        url="https://example.com/hook",
        events=["rollout.gate_failed"],
        secret="s" * 16,
        created_at=timezone.now(),
    )
    fleet(tenant, {"a": (4, "1")})
    rollout = create(tenant, prom(maximum=5), limit=3)
    prometheus.body = vector("7", "2")
    for failures in (1, 2):
        evaluate(rollout)
        tick(rollout)
        assert rollout.state == "active"
        assert RolloutGate.objects.get().consecutive_failures == failures
    evaluate(rollout)
    # The plan says what the next tick does: it pauses the rollout for the gate (controller/stops.py).
    shown = api.get(f"/api/compute/rollouts/{rollout.id}/").json()["blocker"]
    assert (shown["code"], shown["pausedReason"]) == ("paused", "gate_failed:errors")
    tick(rollout)
    assert (rollout.state, rollout.paused_reason) == ("paused", "gate_failed:errors")
    failed = RolloutEvent.objects.filter(rollout=rollout, kind="rollout.gate_failed").order_by("id")
    assert [e.data for e in failed][-1] == {
        "gate": "errors",
        "value": 7.0,
        "consecutiveFailures": 3,
        "failureLimit": 3,
        "detail": "2 sample(s), the largest 7 > 5",
        "action": "pause",
    }
    assert failed.count() == 3
    assert WebhookDelivery.objects.filter(event="rollout.gate_failed").count() == 3
    paused = RolloutEvent.objects.get(rollout=rollout, kind="rollout.paused").data
    assert paused == {"pausedReason": "gate_failed:errors", "gate": "errors", "value": 7.0}
    assert states(rollout) == {"pending": 4}
    shown = api.get(f"/api/compute/rollouts/{rollout.id}/gates/").json()
    assert (shown[0]["state"], shown[0]["value"], shown[0]["consecutiveFailures"]) == ("fail", 7.0, 3)
    assert api.get(f"/api/compute/rollouts/{rollout.id}/").json()["pausedReason"] == "gate_failed:errors"

    # Paused: nothing is asked. Resume clears the count; the gate holds until it passes again.
    due_now(rollout)
    assert gates_claim(now=timezone.now()) == []
    rollout_resume(rollout_id=rollout.id)
    assert RolloutGate.objects.get().consecutive_failures == 0
    tick(rollout)
    assert (rollout.state, states(rollout)) == ("active", {"pending": 4})
    prometheus.body = vector("1")
    evaluate(rollout)
    tick(rollout)
    assert states(rollout) == {"in_flight": 4}


def test_a_pass_between_failures_starts_the_count_again(tenant, releases, prometheus):
    fleet(tenant, {"a": (2, "1")})
    rollout = create(tenant, prom(maximum=5), limit=2)
    for body in (vector("9"), vector("1"), vector("9")):
        prometheus.body = body
        evaluate(rollout)
        tick(rollout)
    assert rollout.state == "active"
    assert RolloutGate.objects.get().consecutive_failures == 1


def test_inconclusive_holds_and_never_pauses(tenant, releases, prometheus, serve, api):
    fleet(tenant, {"a": (2, "1")})
    health = serve(status=200)
    rollout = create(tenant, prom(), http(health), limit=1)
    prometheus.body = b"<html>oops</html>"
    for _ in range(4):
        evaluate(rollout)
        tick(rollout)
    assert (rollout.state, states(rollout)) == ("active", {"pending": 2})
    errors, healthy = RolloutGate.objects.order_by("position")
    assert (errors.state, errors.consecutive_failures, healthy.state) == ("inconclusive", 0, "pass")
    blocker = api.get(f"/api/compute/rollouts/{rollout.id}/").json()["blocker"]
    assert (blocker["code"], blocker["name"], blocker["state"]) == ("gate", "errors", "inconclusive")
    assert not RolloutEvent.objects.filter(kind="rollout.gate_failed").exists()


def test_an_http_gate_failing_pauses(tenant, releases, serve):
    fleet(tenant, {"a": (2, "1")})
    health = serve(status=503)
    rollout = create(tenant, http(health), limit=1)
    evaluate(rollout)
    tick(rollout)
    assert (rollout.state, rollout.paused_reason) == ("paused", "gate_failed:health")
    assert RolloutEvent.objects.get(kind="rollout.paused").data["value"] == 503.0


def test_only_due_gates_of_active_rollouts_are_asked(tenant, releases, prometheus):
    fleet(tenant, {"a": (2, "1")})
    create(tenant, prom(), interval=60)
    assert len(prometheus.paths) == 1  # the create's first look (docs/controller.md#gates)
    gates_evaluate_due(run_seconds=30)
    assert len(prometheus.paths) == 2
    gates_evaluate_due(run_seconds=30)  # the next one is due in 60 s
    assert len(prometheus.paths) == 2
    assert RolloutGate.objects.get().due_at > timezone.now() + timedelta(seconds=55)


def test_the_tick_costs_no_query_more_with_eight_gates(tenant, releases, prometheus):
    """The tick reads the stored results with the rollout's own lock: 8 gates cost it nothing, and no network."""
    fleet(tenant, {"a": (20, "0.1"), "b": (20, "0.1")})
    plain = create_in(tenant, "a")
    gated = create_in(tenant, "b", *(prom(f"g{i}") for i in range(8)))
    evaluate(gated)
    asked = len(prometheus.paths)
    counts = []
    for rollout in (plain, gated):
        with CaptureQueriesContext(connection) as captured:
            result = tick(rollout)
        assert result is not None
        assert result.started == 2
        counts.append(len(captured))
    assert counts[0] == counts[1]
    assert len(prometheus.paths) == asked


def create_in(tenant, pool_name: str, *gates: dict) -> Rollout:
    pool = Pool.objects.get(tenant=tenant, name=pool_name)
    spec = rollout_spec(version="1.0.0", waves=[100], soak_seconds=0, pool_ids=[str(pool.id)], gates=list(gates))
    return rollout_create(tenant=tenant, spec=spec)


@pytest.mark.django_db(transaction=True)
def test_competing_workers_never_claim_the_same_gate(tenant, releases, prometheus):
    fleet(tenant, {"a": (2, "1")})
    create(tenant, *(prom(f"g{i}") for i in range(8)))
    held = threading.Event()
    done = threading.Event()
    first: list[int] = []

    def hold_a_claim() -> None:
        try:
            with transaction.atomic():
                rows = RolloutGate.objects.select_for_update().filter(name__in=["g0", "g1", "g2"])
                first.extend(rows.values_list("id", flat=True))
                held.set()
                done.wait(10)
        finally:
            connection.close()

    thread = threading.Thread(target=hold_a_claim)
    thread.start()
    assert held.wait(10)
    try:
        claimed = gates_claim(now=timezone.now())
    finally:
        done.set()
        thread.join()
    assert sorted(gate.name for gate in claimed) == [f"g{i}" for i in range(3, 8)]
    assert not set(first) & {gate.id for gate in claimed}
    assert gates_claim(now=timezone.now()) != []  # the locked three, free again and still due
    assert gates_claim(now=timezone.now()) == []  # claimed: pushed past their lease


def test_a_result_for_a_deleted_gate_is_dropped(tenant, releases, prometheus):
    fleet(tenant, {"a": (2, "1")})
    rollout = create(tenant, prom())
    (claimed,) = gates_claim(now=timezone.now())
    rollout.delete()
    assert gate_record(gate_id=claimed.id, outcome=Outcome("fail", 3.0, "x"), now=timezone.now()) is None


def test_an_http_gate_the_allowlist_no_longer_admits_is_not_called(tenant, releases, serve, module_settings):
    fleet(tenant, {"a": (2, "1")})
    health = serve(status=200)
    rollout = create(tenant, http(health))
    module_settings.ROLLOUT_GATE_URL_ALLOW = ["https://status.example.com/"]
    evaluate(rollout)
    gate = RolloutGate.objects.get()
    assert (gate.state, gate.detail) == ("inconclusive", "the URL is not in ROLLOUT_GATE_URL_ALLOW")
    assert health.paths == []
