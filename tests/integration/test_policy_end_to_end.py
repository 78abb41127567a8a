"""Readiness and convergence end to end: real HTTP, Redis, a Celery worker and beat
(every 1 s), simulated agents. One agent flaps right after upgrading (fails readiness and goes back); one
is offline during the rollout and converges after the rollout completed, when it comes back."""

from __future__ import annotations

import dataclasses

import pytest

from demo.processes import wait_until
from fleet.models import Node
from rollout.models import NodeUpgrade, Rollout
from simulator import Fleet, build_agent_configs
from tests.factories import pin

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def row_of(stack, rollout_id: str, node_id: str) -> dict:
    """The node's row as GET /rollouts/{id}/nodes/ shows it."""
    body = stack.client.get(f"/api/compute/rollouts/{rollout_id}/nodes/", params={"limit": 1000}).json()
    rows = body["results"] if isinstance(body, dict) else body
    return next(row for row in rows if row["nodeId"] == node_id)


def test_a_flapping_agent_fails_readiness_and_an_offline_node_converges_after_completion(stack):
    stack.register("0.9.0", 1)
    stack.register("1.0.0", 2)
    enrolled = stack.enroll({"p": (6, 0.5)})  # budget 3
    (flapper_name, _), (late_name, _) = enrolled["p"][0], enrolled["p"][1]
    agents = build_agent_configs(enrolled["p"], daemon_version="0.9.0")
    # Leaves 0.5 s after rejoining on 1.0.0 (well inside minReadySeconds), back 1 s later.
    agents[0] = dataclasses.replace(agents[0], flap_after=0.5, flap_down=1.0)
    # Offline from the start; joins (on 0.9.0) 25 s later, after the rollout completed.
    agents[1] = dataclasses.replace(agents[1], down_after=0.0, down_for=25.0)
    fleet = Fleet(stack.url, agents, release_pins=[pin(0)], heartbeat_seconds=0.5, restart_delay=0.2, seed=3)
    with fleet.start_thread(timeout=300) as running:
        assert running.wait_for(lambda f: f.online_count() == 5, timeout=30)
        response = stack.client.post(
            "/api/compute/rollouts/",
            json={
                "version": "1.0.0",
                "waves": [100],
                "soakSeconds": 0,
                "upgradeTimeoutSeconds": 30,
                "minReadySeconds": 3,
                "maxFailureRatio": 1,
            },
        )
        assert response.status_code == 201, response.text
        assert response.json()["minReadySeconds"] == 3
        rollout_id = response.json()["id"]
        wait_until(
            lambda: Rollout.objects.get(pk=rollout_id).state == "completed", timeout=60, what="the rollout to complete"
        )
        flapper = Node.objects.get(name=flapper_name)
        late = Node.objects.get(name=late_name)
        flapped = NodeUpgrade.objects.get(rollout_id=rollout_id, node=flapper)
        assert (flapped.state, flapped.reason) == ("failed", "not_ready")
        assert flapper.spec["daemon"]["version"] == "0.9.0"  # sent back, as on a timeout
        assert row_of(stack, rollout_id, str(late.pk))["state"] == "skipped"
        assert row_of(stack, rollout_id, str(late.pk))["reason"] == "offline"
        assert NodeUpgrade.objects.filter(rollout_id=rollout_id, state="succeeded").count() == 4

        # The offline node comes back on 0.9.0: the periodic tick converges it, within the budget.
        wait_until(
            lambda: row_of(stack, rollout_id, str(late.pk))["state"] == "in_flight",
            timeout=60,
            poll=0.05,
            what="the returning node to start converging",
        )
        wait_until(
            lambda: row_of(stack, rollout_id, str(late.pk))["state"] == "succeeded",
            timeout=60,
            what="the returning node to succeed after its readiness",
        )
        assert running.wait_for(lambda f: f.agent(late_name).version == "1.0.0", timeout=10)
    shown = row_of(stack, rollout_id, str(late.pk))
    assert shown["previousVersion"] == "0.9.0"
    assert shown["reason"] is None
    assert Rollout.objects.get(pk=rollout_id).state == "completed"
