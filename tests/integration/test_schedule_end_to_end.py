"""A scheduled rollout starts within one tick of its startAt, on a real stack (a Celery worker and beat)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from demo.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_scheduled_rollout_starts_within_one_tick_of_start_at(stack):
    stack.register("1.0.0", 1)
    stack.enroll({"gpu": (3, 1.0)})
    # The worker's first tick can take a few seconds to come: startAt well after it.
    start = timezone.now() + timedelta(seconds=12)
    created = stack.client.post(
        "/api/compute/rollouts/",
        json={"version": "1.0.0", "waves": [100], "startAt": start.isoformat().replace("+00:00", "Z")},
    )
    assert created.status_code == 201, created.text
    rollout_id = created.json()["id"]
    assert created.json()["state"] == "scheduled"

    def state() -> str:
        return stack.client.get(f"/api/compute/rollouts/{rollout_id}/").json()["state"]

    # No agent runs here: once started, the offline nodes are skipped and it completes at once.
    wait_until(lambda: state() != "scheduled", timeout=60, what="the scheduled start")
    events = stack.client.get(f"/api/compute/rollouts/{rollout_id}/events/").json()["results"]
    started = [event for event in events if event["kind"] == "rollout.started"]
    assert len(started) == 1
    assert started[0]["data"]["actor"] == "schedule"
    at = datetime.fromisoformat(started[0]["at"].replace("Z", "+00:00"))
    # ROLLOUT_EVERY is 1 s: the periodic tick starts it within one tick of startAt (and a second of slack).
    assert start <= at <= start + timedelta(seconds=2), (start, at)
