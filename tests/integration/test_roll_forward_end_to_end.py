"""Undoing a bad release end to end (docs/controller.md#undoing-a-bad-release): real HTTP, a Celery worker and
beat, simulated agents. Wave 1 confirms the bad release, a gate fails and pauses the rollout, a rollout of the
fix supersedes it: the nodes in flight to the bad release are taken over (no timeout), every node ends on the
fix."""

from __future__ import annotations

import pytest

from demo.processes import wait_until
from fleet.models import Node
from rollout.models import NodeUpgrade, Rollout, RolloutEvent
from simulator import Fleet, build_agent_configs
from tests.factories import pin
from tests.gates.conftest import serve  # noqa: F401  (the gate's HTTP server)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TIMEOUT = 120  # upgradeTimeoutSeconds: far above how long an upgrade takes here


def test_a_bad_release_is_rolled_forward_after_its_gate_fails(bare_stack, settings, serve):  # noqa: F811
    health = serve(status=200)
    settings.ROLLOUT_GATE_URL_ALLOW = ["http://127.0.0.1:"]
    settings.ROLLOUT_WEBHOOKS_ALLOW_HTTP = True
    bare_stack.env.update({"ROLLOUT_GATE_URL_ALLOW": "http://127.0.0.1:", "ROLLOUT_WEBHOOKS_ALLOW_HTTP": "1"})
    bare_stack.start_controller()
    stack = bare_stack
    stack.register("0.9.0", 1)
    stack.register("1.0.0", 2)  # the bad one
    stack.register("1.0.1", 3)  # the fix
    enrolled = stack.enroll({"p": (10, 0.3)})  # three nodes at a time
    agents = build_agent_configs(enrolled["p"], daemon_version="0.9.0")
    # Restarting into a new binary takes 8 s: the second wave's nodes are still in flight when the gate fails.
    fleet = Fleet(stack.url, agents, release_pins=[pin(0)], heartbeat_seconds=0.5, restart_delay=8.0, seed=5)
    with fleet.start_thread(timeout=400) as running:
        assert running.wait_for(lambda f: f.online_count() == 10, timeout=30)
        created = stack.client.post(
            "/api/compute/rollouts/",
            json={
                "version": "1.0.0",
                "waves": [10, 100],
                "soakSeconds": 0,
                "upgradeTimeoutSeconds": TIMEOUT,
                "maxFailureRatio": 1,
                "gates": [{"name": "health", "http": {"url": health.url + "/health"}}],
                "gateIntervalSeconds": 5,
                "gateFailureLimit": 1,
            },
        )
        assert created.status_code == 201, created.text
        bad_id = created.json()["id"]

        # Wave 1 confirms 1.0.0; wave 2 starts; then the health check fails and the gate pauses the rollout.
        wait_until(
            lambda: NodeUpgrade.objects.filter(rollout_id=bad_id, wave=1, state="in_flight").exists(),
            timeout=60,
            poll=0.1,
            what="the second wave to start",
        )
        assert NodeUpgrade.objects.filter(rollout_id=bad_id, wave=0, state="succeeded").count() == 1
        health.status = 500
        wait_until(
            lambda: Rollout.objects.get(pk=bad_id).state == "paused", timeout=30, poll=0.1, what="the gate to pause"
        )
        assert Rollout.objects.get(pk=bad_id).paused_reason == "gate_failed:health"
        in_flight = set(
            NodeUpgrade.objects.filter(rollout_id=bad_id, state="in_flight").values_list("node_id", flat=True)
        )
        assert in_flight, "the second wave's nodes should still be in flight"

        # The fix supersedes the bad rollout (the health check is fine again once the fix spreads).
        health.status = 200
        superseding = stack.client.post(
            "/api/compute/rollouts/",
            json={
                "version": "1.0.1",
                "supersedes": bad_id,
                "waves": [10, 100],
                "soakSeconds": 0,
                "upgradeTimeoutSeconds": TIMEOUT,
                "maxFailureRatio": 1,
            },
        )
        assert superseding.status_code == 201, superseding.text
        fix_id = superseding.json()["id"]
        assert Rollout.objects.get(pk=bad_id).state == "superseded"
        taken = RolloutEvent.objects.get(rollout_id=bad_id, kind="rollout.superseded").data["takenOver"]
        assert taken >= 1

        wait_until(
            lambda: Rollout.objects.get(pk=fix_id).state == "completed",
            timeout=240,
            what="the fix's rollout to complete",
        )
        assert running.wait_for(lambda f: all(agent.version == "1.0.1" for agent in f.agents), timeout=30)
    assert set(Node.objects.values_list("spec__daemon__version", flat=True)) == {"1.0.1"}
    fix_rows = NodeUpgrade.objects.filter(rollout_id=fix_id)
    assert set(fix_rows.values_list("state", flat=True)) == {"succeeded"}
    # Every taken-over node settled on the fix well before any timeout; the bad rollout's rows of those
    # nodes were handed over, none failed.
    for row in fix_rows.filter(node_id__in=in_flight).exclude(started_at=None):
        assert (row.settled_at - row.started_at).total_seconds() < TIMEOUT
    assert not NodeUpgrade.objects.filter(rollout_id=bad_id, state="failed").exists()
    assert NodeUpgrade.objects.filter(rollout_id=bad_id, reason="superseded").count() >= taken
