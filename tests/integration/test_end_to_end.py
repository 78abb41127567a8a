"""The whole system end to end (issue 4): real HTTP, a real broker (Redis, and RabbitMQ for the tests
parametrized with both), a real Celery worker and beat (every 1 s), and simulated bcd agents. Time moves by
configuration (short soak and timeout)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from demo.processes import wait_until
from fleet.models import Node, NodeSession, Pool
from rollout.models import NodeUpgrade, Rollout, RolloutEvent
from simulator import Fleet, build_agent_configs
from tests.brokers import BROKERS
from tests.factories import pin

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def state_of(rollout_id: str) -> str:
    return Rollout.objects.get(pk=rollout_id).state


def counts(rollout_id: str) -> dict[str, int]:
    result: dict[str, int] = {}
    for state in NodeUpgrade.objects.filter(rollout_id=rollout_id).values_list("state", flat=True):
        result[state] = result.get(state, 0) + 1
    return result


def create(stack, **body) -> str:
    response = stack.client.post("/api/compute/rollouts/", json=body)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_a_three_wave_rollout_of_30_nodes_in_3_pools_completes(stack):
    stack.register("0.9.0", 1)
    stack.register("1.0.0", 2)
    # Budget 2 in each pool (20 %), as many nodes as it takes for the last wave to need several rounds of 2 in each.
    enrolled = stack.enroll({"a": (10, 0.2), "b": (10, 0.2), "c": (10, 0.2)})
    agents = build_agent_configs([agent for pool in enrolled.values() for agent in pool], daemon_version="0.9.0")
    fleet = Fleet(stack.url, agents, release_pins=[pin(0)], heartbeat_seconds=0.5, restart_delay=0.2, seed=1)
    with fleet.start_thread(timeout=300) as running:
        assert running.wait_for(lambda f: f.online_count() == 30, timeout=30)
        rollout_id = create(
            stack, version="1.0.0", waves=[10, 50, 100], soakSeconds=1, upgradeTimeoutSeconds=30, maxFailureRatio=0.1
        )
        wait_until(lambda: state_of(rollout_id) == "completed", timeout=150, what="the rollout to complete")
        assert running.wait_for(lambda f: f.versions().get("1.0.0") == 30, timeout=30)
    assert counts(rollout_id) == {"succeeded": 30}
    body = stack.client.get(f"/api/compute/rollouts/{rollout_id}/").json()
    assert [(w["total"], w["succeeded"]) for w in body["waves"]] == [(3, 3), (12, 12), (15, 15)]
    kinds = list(RolloutEvent.objects.filter(rollout_id=rollout_id).values_list("kind", flat=True))
    assert kinds == ["rollout.created", "rollout.wave", "rollout.wave", "rollout.completed"]
    assert set(Pool.objects.values_list("default_daemon_version", flat=True)) == {"1.0.0"}
    assert set(NodeSession.objects.values_list("daemon_version", flat=True)) == {"1.0.0"}
    # Every pool stayed within its budget of 2: no more than 2 of a pool's nodes ever overlapped in flight.
    for pool in Pool.objects.all():
        spans = sorted(
            NodeUpgrade.objects.filter(rollout_id=rollout_id, pool=pool).values_list("started_at", "settled_at")
        )
        for started, _ in spans:
            overlapping = sum(1 for s, e in spans if s <= started < e)
            assert overlapping <= 2, (pool.name, started)


# On both brokers: the widest use of the broker of the end-to-end tests (ticks, ETA timeouts, pause, resume,
# abort with rollback, roll forward); the fault tests run on both too.
@pytest.mark.parametrize("broker", BROKERS, indirect=True)
def test_a_failing_release_pauses_at_the_canary_then_rollback_and_roll_forward(stack):
    stack.register("1.0.0", 2)
    stack.register("1.1.0", 3)
    enrolled = stack.enroll({"p": (20, 0.1)})
    # Every agent fails on 1.1.0: it leaves to restart and never comes back.
    agents = build_agent_configs(enrolled["p"], daemon_version="1.0.0", fail_version="1.1.0", fail_mode="never_rejoin")
    fleet = Fleet(stack.url, agents, release_pins=[pin(0)], heartbeat_seconds=0.5, restart_delay=0.2, seed=2)
    with fleet.start_thread(timeout=300) as running:
        assert running.wait_for(lambda f: f.online_count() == 20, timeout=30)
        # The canary (1 node) fails at its 6 s timeout: 1/1 > 0.1, the rollout pauses before wave 1.
        bad = create(stack, version="1.1.0", waves=[5, 100], soakSeconds=0, upgradeTimeoutSeconds=6)
        wait_until(lambda: state_of(bad) == "paused", timeout=60, what="the canary to pause the rollout")
        rollout = Rollout.objects.get(pk=bad)
        assert rollout.paused_reason == "failure_ratio"
        assert counts(bad) == {"failed": 1, "pending": 19}
        canary = NodeUpgrade.objects.get(rollout=rollout, state="failed")
        assert Node.objects.get(pk=canary.node_id).spec["daemon"]["version"] == "1.0.0"  # back to what it ran

        # Resume: wave 1 starts 1 node: the budget is 2 and the failed canary, which never came back,
        # still holds a slot (docs/controller.md#budget). It never rejoins either; abort with rollback returns it.
        assert stack.client.post(f"/api/compute/rollouts/{bad}/resume/").status_code == 200
        wait_until(lambda: counts(bad).get("in_flight") == 1, timeout=30, what="wave 1 to start")
        # Its agent takes the new spec and goes down (well before the 6 s deadline).
        assert running.wait_for(lambda f: f.states().get("down") == 2, timeout=5)
        aborted = stack.client.post(f"/api/compute/rollouts/{bad}/abort/", json={"rollback": True})
        assert aborted.status_code == 200, aborted.text
        assert aborted.json()["state"] == "aborted"
        assert counts(bad) == {"failed": 1, "rolled_back": 1, "cancelled": 18}
        for upgrade in NodeUpgrade.objects.filter(rollout=rollout, state="rolled_back"):
            assert Node.objects.get(pk=upgrade.node_id).spec["daemon"]["version"] == "1.0.0"

        # Roll forward to a higher sequence: the 18 healthy agents upgrade, the 2 that went down are skipped.
        stack.register("1.2.0", 4)
        forward = create(stack, version="1.2.0", waves=[10, 100], soakSeconds=0, upgradeTimeoutSeconds=30)
        wait_until(lambda: state_of(forward) == "completed", timeout=120, what="the roll-forward to complete")
    assert counts(forward) == {"succeeded": 18, "skipped": 2}
    assert set(NodeUpgrade.objects.filter(rollout_id=forward, state="skipped").values_list("reason", flat=True)) == {
        "offline"
    }


def test_a_window_opens_after_create_and_a_promote_ends_a_long_soak(stack):
    """Maintenance windows and promote live: nothing starts before the pool's window opens (at the next minute
    boundary, computed from now); then a one-hour soak ends at once on promote."""
    stack.register("0.9.0", 1)
    stack.register("1.0.0", 2)
    enrolled = stack.enroll({"w": (10, 0.5)})
    pool_id = stack.client.get("/api/compute/pools/").json()["results"][0]["id"]
    now = timezone.now()
    opens = (now + timedelta(minutes=1)).replace(second=0, microsecond=0)
    if opens - now < timedelta(seconds=5):  # too close to see the wait: the minute after
        opens += timedelta(minutes=1)
    window = {
        "days": [opens.strftime("%a").lower()],
        "start": opens.strftime("%H:%M"),
        "durationMinutes": 30,
        "timezone": "UTC",
    }
    patched = stack.client.patch(f"/api/compute/pools/{pool_id}/", json={"policy": {"maintenanceWindows": [window]}})
    assert patched.status_code == 200, patched.text
    assert patched.json()["policy"]["maintenanceWindows"] == [window]

    agents = build_agent_configs(enrolled["w"], daemon_version="0.9.0")
    fleet = Fleet(stack.url, agents, release_pins=[pin(0)], heartbeat_seconds=0.5, restart_delay=0.2, seed=3)
    with fleet.start_thread(timeout=300) as running:
        assert running.wait_for(lambda f: f.online_count() == 10, timeout=30)
        rollout_id = create(stack, version="1.0.0", waves=[50, 100], soakSeconds=3600, upgradeTimeoutSeconds=30)
        # Closed: the ticks (every second) start nothing until the window opens. Polled: each look
        # before the opening must still see every node pending.
        seen_early: list[dict[str, int]] = []

        def window_reached() -> bool:
            if timezone.now() >= opens - timedelta(seconds=1):
                return True
            seen_early.append(counts(rollout_id))
            return False

        wait_until(window_reached, timeout=75, poll=0.5, what="the window's opening")
        assert seen_early
        assert all(seen == {"pending": 10} for seen in seen_early), seen_early[-3:]
        wait_until(
            lambda: counts(rollout_id).get("succeeded") == 5, timeout=90, what="wave 0 to finish once the window opened"
        )
        started = NodeUpgrade.objects.filter(rollout_id=rollout_id).exclude(started_at=None)
        assert min(started.values_list("started_at", flat=True)) >= opens
        # Wave 0 settled: a one-hour soak. Promote ends it; the next tick starts wave 1.
        wait_until(
            lambda: Rollout.objects.get(pk=rollout_id).next_wave_at is not None, timeout=30, what="the soak to begin"
        )
        promoted = stack.client.post(f"/api/compute/rollouts/{rollout_id}/promote/")
        assert promoted.status_code == 200, promoted.text
        assert promoted.json()["currentWave"] == 0
        wait_until(lambda: state_of(rollout_id) == "completed", timeout=90, what="the promoted rollout to complete")
    assert counts(rollout_id) == {"succeeded": 10}
    kinds = list(RolloutEvent.objects.filter(rollout_id=rollout_id).order_by("at", "id").values_list("kind", flat=True))
    assert kinds == ["rollout.created", "rollout.promoted", "rollout.wave", "rollout.completed"]
    again = stack.client.post(f"/api/compute/rollouts/{rollout_id}/promote/")
    assert (again.status_code, again.json()["code"]) == (409, "invalid_state")
