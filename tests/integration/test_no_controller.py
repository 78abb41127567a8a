"""A controller that is not running is visible (docs/controller.md#no-controller), on a real stack.

No worker, no beat: the rollout's blocker and its pending rows' say ``no_controller`` once
max(3 x the stored interval of rollout/all, 10 s) passed since its creation, and ``GET /api/compute/health``
says the controller is not healthy (503). A worker and beat started as the README starts them clear both.
An interval changed after ``migrate`` (in the beat's environment, or in the admin) never makes a running
controller look missing: the web judges by the stored schedule the beat runs, not by its own ROLLOUT_EVERY.
"""

from __future__ import annotations

import time

import httpx
import pytest
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from demo.processes import wait_until
from rollout.dispatch import TICK_ALL_TASK
from rollout.schedules import tick_every_stored

pytestmark = pytest.mark.django_db(transaction=True)


def health(stack) -> dict:
    """The health's body; its status is 200 exactly when everything in it is well (503 otherwise)."""
    response = httpx.get(f"{stack.url}/api/compute/health", timeout=10)  # no credentials
    body = response.json()
    well = body["database"] == "ok" and body["broker"] == "ok" and body["controller"]["healthy"]
    assert response.status_code == (200 if well else 503), response.text
    return body


def test_no_controller_shows_then_clears_once_a_worker_and_beat_start(bare_stack):
    stack = bare_stack
    stack.register("1.0.0", 1)
    stack.enroll({"gpu": (3, 1.0)})
    assert health(stack) == {"database": "ok", "broker": "ok", "controller": {"lastTickAt": None, "healthy": False}}
    created = stack.client.post("/api/compute/rollouts/", json={"version": "1.0.0", "waves": [100]})
    assert created.status_code == 201, created.text
    rollout_id = created.json()["id"]
    assert created.json()["lastTickAt"] is None

    def rollout() -> dict:
        return stack.client.get(f"/api/compute/rollouts/{rollout_id}/").json()

    # ROLLOUT_EVERY is 1 s here: the controller counts as missing after 10 s without a tick.
    wait_until(lambda: (rollout()["blocker"] or {}).get("code") == "no_controller", timeout=30, what="no_controller")
    assert rollout()["blocker"]["lastTickAt"] is None
    assert "celery -A project worker" in rollout()["blocker"]["detail"]
    rows = stack.client.get(f"/api/compute/rollouts/{rollout_id}/nodes/").json()["results"]
    assert {row["blocker"]["code"] for row in rows} == {"no_controller"}

    stack.start_controller()
    wait_until(lambda: rollout()["lastTickAt"] is not None, timeout=90, what="the first tick")
    wait_until(lambda: health(stack)["controller"]["healthy"], timeout=30, what="a healthy controller")
    assert (rollout()["blocker"] or {}).get("code") != "no_controller"
    rows = stack.client.get(f"/api/compute/rollouts/{rollout_id}/nodes/").json()["results"]
    assert "no_controller" not in {(row["blocker"] or {}).get("code") for row in rows}
    assert health(stack)["controller"]["lastTickAt"] is not None


#: Longer than the web's own judgement (ROLLOUT_EVERY=1 in its settings: missing after 10 s without a tick).
SLOW_EVERY = 12


def watch_never_missing(stack, rollout_id: str, *, seconds: float) -> int:
    """Poll the health and the rollout for ``seconds``: never unhealthy, never ``no_controller``. The ticks seen."""
    wait_until(lambda: health(stack)["controller"]["healthy"], timeout=60, what="a healthy controller")
    ticks: set[str] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        body = health(stack)
        assert body["controller"]["healthy"], body
        shown = stack.client.get(f"/api/compute/rollouts/{rollout_id}/").json()
        assert (shown["blocker"] or {}).get("code") != "no_controller", shown["blocker"]
        ticks.add(body["controller"]["lastTickAt"])
        time.sleep(0.5)  # a sampling period, not a wait for a condition
    return len(ticks)


def slow_rollout(stack) -> str:
    stack.register("1.0.0", 1)
    stack.enroll({"gpu": (2, 1.0)})  # no agents: both nodes stay in flight, the rollout stays active
    created = stack.client.post("/api/compute/rollouts/", json={"version": "1.0.0", "waves": [100]})
    assert created.status_code == 201, created.text
    return created.json()["id"]


def test_an_interval_changed_in_the_environment_after_migrate_never_shows_no_controller(bare_stack):
    stack = bare_stack  # migrated with every 1 s (the fixture's periodic_tick_ensure)
    rollout_id = slow_rollout(stack)
    stack.env["ROLLOUT_EVERY"] = str(SLOW_EVERY)  # worker and beat started with another interval
    stack.start_controller()
    wait_until(lambda: tick_every_stored() == SLOW_EVERY, timeout=60, what="the starting beat to write its interval")
    assert watch_never_missing(stack, rollout_id, seconds=3 * SLOW_EVERY + 4) >= 3


def test_an_interval_changed_in_the_admin_never_shows_no_controller(bare_stack):
    stack = bare_stack
    rollout_id = slow_rollout(stack)
    task = PeriodicTask.objects.get(name=TICK_ALL_TASK)  # what the admin's form writes
    task.interval = IntervalSchedule.objects.create(every=SLOW_EVERY, period=IntervalSchedule.SECONDS)
    task.save()
    stack.start_controller()  # ROLLOUT_EVERY=1 in its environment: the person's interval wins
    assert watch_never_missing(stack, rollout_id, seconds=3 * SLOW_EVERY + 4) >= 3
    assert tick_every_stored() == SLOW_EVERY
