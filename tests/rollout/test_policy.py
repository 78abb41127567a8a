"""Rollout policy: maintenance windows, the failure gate's minimum sample, promote.

See docs/controller.md#maintenance-windows, docs/controller.md#the-tick (Judge) and
docs/controller.md#pause-resume-promote-abort.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.utils import timezone

from core.errors import InvalidInput, InvalidState
from fleet.models import AuditEntry, Pool
from fleet.services.pools import pool_update
from rollout.controller.judge import failure_ratio_exceeded
from rollout.controller.timeouts import timeouts_due_settle
from rollout.models import NodeUpgrade, Rollout, RolloutEvent, RolloutWave
from rollout.rollouts.actions import rollout_pause, rollout_promote
from rollout.rollouts.create import rollout_plan
from rollout.rollouts.spec import rollout_spec
from tests.factories import fleet
from tests.rollout.helpers import create, heartbeat_all, in_flight, rejoin, states, tick

pytestmark = pytest.mark.django_db

ALL_DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
#: Open every day 10:00-11:00 UTC.
DAILY_HOUR = [{"days": ALL_DAYS, "start": "10:00", "durationMinutes": 60}]
MONDAY = datetime(2026, 6, 1, tzinfo=UTC)  # a Monday


def at(hour: int, minute: int = 0, *, day: int = 0) -> datetime:
    return MONDAY + timedelta(days=day, hours=hour, minutes=minute)


def set_windows(tenant, pool_id, windows) -> None:
    pool_update(tenant=tenant, pool_id=pool_id, policy={"maintenanceWindows": windows})


def kinds(rollout) -> list[str]:
    return list(RolloutEvent.objects.filter(rollout=rollout).order_by("at", "id").values_list("kind", flat=True))


# --- maintenance windows -------------------------------------------------------------------------


def test_a_rollout_waits_outside_the_window_and_proceeds_when_it_opens(tenant, releases):
    with time_machine.travel(at(9, 30), tick=False) as clock:
        nodes = fleet(tenant, {"a": (4, "0.5")})["a"]  # 2 at a time
        set_windows(tenant, nodes[0].pool_id, DAILY_HOUR)
        rollout = create(tenant, max_failure_ratio=1, upgrade_timeout_seconds=600)
        result = tick(rollout)
        assert (result.started, result.skipped) == (0, 0)
        assert states(rollout) == {"pending": 4}  # waiting, not skipped

        clock.move_to(at(10, 55))  # open: two start, due at 11:05
        heartbeat_all()
        assert tick(rollout).started == 2
        first, second = in_flight(rollout)

        # Closed again: in-flight nodes settle (one rejoins) and time out (the other) as usual,
        # and nothing new starts.
        clock.move_to(at(11, 6))
        heartbeat_all()
        rejoin(first.node_id, "1.0.0")
        result = tick(rollout)
        assert (result.failed, result.started) == (1, 0)
        assert states(rollout) == {"succeeded": 1, "failed": 1, "pending": 2}
        assert NodeUpgrade.objects.get(pk=second.pk).reason == "timeout"

        clock.move_to(at(9, 59, day=1))  # still closed the next morning
        heartbeat_all()
        assert tick(rollout).started == 0

        clock.move_to(at(10, 0, day=1))  # the window opens: the periodic tick starts the rest
        heartbeat_all()
        assert tick(rollout).started == 2
        for upgrade in in_flight(rollout):
            rejoin(upgrade.node_id, "1.0.0")
        tick(rollout)
    assert rollout.state == "completed"
    assert states(rollout) == {"succeeded": 3, "failed": 1}


def test_only_the_pools_whose_window_is_open_start(tenant, releases):
    with time_machine.travel(at(12), tick=False):
        made = fleet(tenant, {"closed": (2, "1"), "open": (2, "1"), "always": (2, "1")})
        set_windows(tenant, made["closed"][0].pool_id, DAILY_HOUR)
        set_windows(tenant, made["open"][0].pool_id, [{"days": ["mon"], "start": "11:30", "durationMinutes": 60}])
        rollout = create(tenant)
        assert tick(rollout).started == 4
        started_pools = {u.pool_id for u in in_flight(rollout)}
    assert started_pools == {made["open"][0].pool_id, made["always"][0].pool_id}
    assert states(rollout, pool_id=made["closed"][0].pool_id) == {"pending": 2}


def test_the_dry_run_estimate_counts_the_closed_hours(tenant, releases, api):
    with time_machine.travel(at(9), tick=False):
        nodes = fleet(tenant, {"a": (10, "0.1")})["a"]  # one node at a time: 10 rounds of 600 s
        spec = rollout_spec(version="1.0.0", waves=[100], soak_seconds=0, upgrade_timeout_seconds=600)
        always = rollout_plan(tenant=tenant, spec=spec).estimated_seconds
        assert always == 6000
        set_windows(tenant, nodes[0].pool_id, DAILY_HOUR)
        # 1 h closed, the first hour open (3600 s), closed until the next day's 10:00, then 2400 s.
        windowed = rollout_plan(tenant=tenant, spec=spec).estimated_seconds
        assert windowed == (timedelta(days=1, hours=1, minutes=40)).total_seconds()
        body = {"version": "1.0.0", "waves": [100], "soakSeconds": 0, "upgradeTimeoutSeconds": 600}
        response = api.post("/api/compute/rollouts/?dryRun=true", body, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["estimatedSeconds"] == windowed > 10 * always
    assert not Rollout.objects.exists()


def test_the_dry_run_estimate_adds_the_soak_in_real_time(tenant, releases):
    with time_machine.travel(at(10), tick=False):
        nodes = fleet(tenant, {"a": (2, "0.5")})["a"]  # 2 waves of 1 node
        set_windows(tenant, nodes[0].pool_id, DAILY_HOUR)
        spec = rollout_spec(version="1.0.0", waves=[50, 100], soak_seconds=1800, upgrade_timeout_seconds=600)
        # Wave 0: 10:00-10:10; soak to 10:40; wave 1 needs 600 s open: 10:40-10:50.
        assert rollout_plan(tenant=tenant, spec=spec).estimated_seconds == 50 * 60
        spec = rollout_spec(version="1.0.0", waves=[50, 100], soak_seconds=3000, upgrade_timeout_seconds=600)
        # The soak ends at 11:00, when the window closes: wave 1 waits for the next day's 10:00.
        assert rollout_plan(tenant=tenant, spec=spec).estimated_seconds == (24 * 60 + 10) * 60


# --- failure gate with a minimum sample ----------------------------------------------------------


def counts(**given: int) -> dict[str, int]:
    return {state: given.get(state, 0) for state in NodeUpgrade.State.values}


@pytest.mark.parametrize(
    ("min_settled", "wave", "exceeded"),
    [
        (0, counts(failed=1, in_flight=9), True),  # default: every settled failure is judged
        (5, counts(failed=2, succeeded=2, in_flight=6), False),  # 4 settled < 5
        (5, counts(failed=2, succeeded=3, in_flight=5), True),  # the sample is in
        (50, counts(failed=2, succeeded=3, in_flight=5), False),
        (50, counts(failed=2, succeeded=3, skipped=5), True),  # every node settled: judged anyway
        (50, counts(failed=1, succeeded=9), False),  # judged, not exceeded (exactly 0.1)
    ],
)
def test_the_ratio_is_judged_only_after_the_minimum_sample(min_settled, wave, exceeded):
    rollout = Rollout(max_failure_ratio=Decimal("0.1"), acknowledged_failures=0, failure_ratio_min_settled=min_settled)
    assert failure_ratio_exceeded(rollout=rollout, counts=wave) is exceeded


def test_the_gate_pauses_only_after_the_sample(tenant, releases):
    fleet(tenant, {"a": (6, "0.5")})  # 3 at a time
    rollout = create(tenant, max_failure_ratio=0.1, failure_ratio_min_settled=5, upgrade_timeout_seconds=60)
    start = timezone.now()
    assert rollout.failure_ratio_min_settled == 5
    tick(rollout)
    a, b, _c = in_flight(rollout)
    rejoin(a.node_id, "1.0.0")
    tick(rollout)  # starts d, due with c
    with time_machine.travel(start + timedelta(seconds=30), tick=False):
        heartbeat_all()
        rejoin(b.node_id, "1.0.0")
        assert tick(rollout).started == 1  # e, due at +90
    with time_machine.travel(start + timedelta(seconds=61), tick=False):
        heartbeat_all()
        tick(rollout)  # c and d time out: 2 of 4 settled failed, above 0.1, but 4 < 5 settled
        assert rollout.state == "active"
        assert states(rollout)["failed"] == 2
    with time_machine.travel(start + timedelta(seconds=95), tick=False):
        heartbeat_all()
        tick(rollout)  # e times out too: the sample of 5 is in
    assert (rollout.state, rollout.paused_reason) == ("paused", "failure_ratio")
    paused = RolloutEvent.objects.get(rollout=rollout, kind="rollout.paused")
    assert (paused.data["failed"], paused.data["succeeded"]) == (3, 2)


def test_the_gate_judges_at_the_waves_end_when_the_sample_is_never_reached(tenant, releases):
    fleet(tenant, {"a": (4, "1")})
    rollout = create(
        tenant, waves=[50, 100], max_failure_ratio=0.1, failure_ratio_min_settled=50, upgrade_timeout_seconds=60
    )
    tick(rollout)
    first, _second = in_flight(rollout)
    rejoin(first.node_id, "1.0.0")
    with time_machine.travel(timezone.now() + timedelta(seconds=61), tick=False):
        heartbeat_all()
        tick(rollout)
    assert (rollout.state, rollout.paused_reason, rollout.current_wave) == ("paused", "failure_ratio", 0)
    assert states(rollout, wave=1) == {"pending": 2}


@pytest.mark.parametrize("value", [-1, 1.0, "3", True, [1], 2**31])
def test_bad_min_settled_is_refused_naming_the_field(tenant, releases, api, value):
    fleet(tenant, {"a": (2, "1")})
    body = {"version": "1.0.0", "failureRatioMinSettled": value}
    for url in ("/api/compute/rollouts/", "/api/compute/rollouts/?dryRun=true"):
        response = api.post(url, body, format="json")
        assert response.status_code == 400, response.json()
        assert response.json()["code"] == "invalid_input"
        assert "failureRatioMinSettled" in response.json()["detail"]
    with pytest.raises(InvalidInput):
        rollout_spec(version="1.0.0", failure_ratio_min_settled=body["failureRatioMinSettled"])
    assert not Rollout.objects.exists()


def test_min_settled_is_shown_and_defaults_to_zero(tenant, releases, api):
    fleet(tenant, {"a": (2, "1")})
    plan = api.post("/api/compute/rollouts/?dryRun=true", {"version": "1.0.0"}, format="json").json()
    assert plan["failureRatioMinSettled"] == 0
    body = {"version": "1.0.0", "failureRatioMinSettled": 7}
    assert api.post("/api/compute/rollouts/?dryRun=true", body, format="json").json()["failureRatioMinSettled"] == 7
    created = api.post("/api/compute/rollouts/", body, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["failureRatioMinSettled"] == 7
    assert Rollout.objects.get().failure_ratio_min_settled == 7
    assert AuditEntry.objects.get(action="rollout.create").after["failureRatioMinSettled"] == 7


# --- promote -------------------------------------------------------------------------------------


@pytest.fixture
def soaking(tenant, releases) -> Rollout:
    """4 nodes, waves 50/100, an hour's soak: wave 0 has settled and soaks."""
    fleet(tenant, {"a": (4, "1")})
    rollout = create(tenant, waves=[50, 100], soak_seconds=3600)
    tick(rollout)
    for upgrade in in_flight(rollout):
        rejoin(upgrade.node_id, "1.0.0")
    tick(rollout)
    assert (rollout.current_wave, states(rollout, wave=1)) == (0, {"pending": 2})
    assert rollout.next_wave_at > timezone.now()
    return rollout


def promote_url(rollout: Rollout) -> str:
    return f"/api/compute/rollouts/{rollout.pk}/promote/"


def test_promote_ends_the_soak_and_the_next_tick_starts_the_next_wave(api, soaking):
    response = api.post(promote_url(soaking))
    assert response.status_code == 200, response.json()
    assert (response.json()["state"], response.json()["currentWave"]) == ("active", 0)
    assert kinds(soaking) == ["rollout.created", "rollout.promoted"]
    promoted = RolloutEvent.objects.get(rollout=soaking, kind="rollout.promoted")
    assert promoted.data["wave"] == 0
    assert promoted.data["actor"] == "api:ops"
    entry = AuditEntry.objects.get(action="rollout.promote")
    assert entry.object_id == str(soaking.pk)
    result = tick(soaking)
    assert (soaking.current_wave, result.started) == (1, 2)
    assert kinds(soaking) == ["rollout.created", "rollout.promoted", "rollout.wave"]
    # Promoted twice: the soak is over already.
    second = api.post(promote_url(soaking))
    assert (second.status_code, second.json()["code"]) == (409, "invalid_state")


def test_promote_is_refused_unless_soaking(api, other_api, tenant, soaking):
    # Another tenant's rollout is not found.
    assert other_api.post(promote_url(soaking)).status_code == 404
    rollout_pause(rollout_id=soaking.pk)
    response = api.post(promote_url(soaking))
    assert (response.status_code, response.json()["code"], response.json()["state"]) == (409, "invalid_state", "paused")
    assert "rollout.promoted" not in kinds(soaking)


def test_promote_is_refused_while_the_wave_runs_and_after_completion(tenant, releases):
    fleet(tenant, {"a": (4, "1")})
    rollout = create(tenant, waves=[50, 100], soak_seconds=0)
    with pytest.raises(InvalidState):
        rollout_promote(rollout_id=rollout.pk)  # wave 0 has not started
    tick(rollout)
    with pytest.raises(InvalidState):
        rollout_promote(rollout_id=rollout.pk)  # wave 0 in flight
    for _ in range(2):
        for upgrade in in_flight(rollout):
            rejoin(upgrade.node_id, "1.0.0")
        tick(rollout)
    assert rollout.state == "completed"
    with pytest.raises(InvalidState):
        rollout_promote(rollout_id=rollout.pk)
    assert not RolloutEvent.objects.filter(rollout=rollout, kind="rollout.promoted").exists()
    assert not AuditEntry.objects.filter(action="rollout.promote").exists()


def test_promote_ends_the_soak_the_blocker_shows_before_a_tick_has_recorded_it(api, tenant, releases):
    """The join settles the wave's last node and asks for a tick; until that tick runs, the rollout already says
    it soaks (from the last node's settle), and promote ends that soak rather than answering 409."""
    fleet(tenant, {"a": (4, "1")})
    rollout = create(tenant, waves=[50, 100], soak_seconds=3600)
    tick(rollout)
    for upgrade in in_flight(rollout):
        rejoin(upgrade.node_id, "1.0.0")
    rollout.refresh_from_db()
    assert rollout.next_wave_at is None  # no tick has recorded the settle
    assert api.get(f"/api/compute/rollouts/{rollout.pk}/").json()["blocker"]["code"] == "soaking"
    response = api.post(promote_url(rollout))
    assert response.status_code == 200, response.json()
    last = max(NodeUpgrade.objects.filter(rollout=rollout, wave=0).values_list("settled_at", flat=True))
    assert RolloutWave.objects.get(rollout=rollout, index=0).settled_at == last
    promoted = RolloutEvent.objects.get(rollout=rollout, kind="rollout.promoted")
    assert datetime.fromisoformat(promoted.data["soakEndsAt"]) == last + timedelta(seconds=3600)
    result = tick(rollout)
    assert (rollout.current_wave, result.started) == (1, 2)
    assert kinds(rollout) == ["rollout.created", "rollout.promoted", "rollout.wave"]


def test_promote_before_a_tick_is_refused_when_the_wave_s_failures_will_pause_it(tenant, releases):
    fleet(tenant, {"a": (4, "1")})
    rollout = create(
        tenant,
        waves=[50, 100],
        soak_seconds=3600,
        max_failure_ratio=0,
        failure_ratio_min_settled=1,
        upgrade_timeout_seconds=60,
    )
    tick(rollout)
    first, second = in_flight(rollout)
    rejoin(first.node_id, "1.0.0")
    later = timezone.now() + timedelta(seconds=61)
    with time_machine.travel(later, tick=False):
        heartbeat_all()  # the server hears its fleet: it may judge a timeout
        assert timeouts_due_settle(rollout_id=rollout.pk, now=later) == 1  # the second fails; no tick yet
        assert NodeUpgrade.objects.get(pk=second.pk).state == "failed"
        with pytest.raises(InvalidState):
            rollout_promote(rollout_id=rollout.pk)
        assert RolloutWave.objects.get(rollout=rollout, index=0).settled_at is None  # nothing written
        assert "rollout.promoted" not in kinds(rollout)
        tick(rollout)
    assert (rollout.state, rollout.paused_reason) == ("paused", "failure_ratio")


def test_promote_before_a_tick_is_refused_once_the_soak_from_the_last_settle_is_over(tenant, releases):
    fleet(tenant, {"a": (4, "1")})
    rollout = create(tenant, waves=[50, 100], soak_seconds=60)
    tick(rollout)
    for upgrade in in_flight(rollout):
        rejoin(upgrade.node_id, "1.0.0")
    with time_machine.travel(timezone.now() + timedelta(seconds=61), tick=False):
        with pytest.raises(InvalidState):
            rollout_promote(rollout_id=rollout.pk)  # nothing left to end: the next tick starts wave 1
        assert RolloutWave.objects.get(rollout=rollout, index=0).settled_at is None
        heartbeat_all()
        assert tick(rollout).started == 2
    assert "rollout.promoted" not in kinds(rollout)


def test_promoted_is_a_webhook_event(api):
    response = api.post(
        "/api/compute/webhooks/",
        {"url": "https://hooks.example.com/x", "events": ["rollout.promoted"]},
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert Pool.objects.count() == 0
