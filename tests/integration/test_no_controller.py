"""A controller that is not running is visible (docs/controller.md#no-controller), on a real stack.

No worker, no beat: the rollout's blocker and its pending rows' say ``no_controller`` once
max(3 x ROLLOUT_EVERY, 10 s) passed since its creation, and ``GET /api/compute/health`` says the
controller is not healthy. A worker and beat started as the README starts them clear both.
"""

from __future__ import annotations

import httpx
import pytest

from demo.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def health(stack) -> dict:
    response = httpx.get(f"{stack.url}/api/compute/health", timeout=10)  # no credentials
    assert response.status_code == 200, response.text
    return response.json()


def test_no_controller_shows_then_clears_once_a_worker_and_beat_start(bare_stack):
    stack = bare_stack
    stack.register("1.0.0", 1)
    stack.enroll({"gpu": (3, 1.0)})
    assert health(stack) == {"database": "ok", "controller": {"lastTickAt": None, "healthy": False}}
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
