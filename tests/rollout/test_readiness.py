"""Readiness before success: minReadySeconds (docs/controller.md#readiness-before-success-minreadyseconds)."""

from datetime import timedelta

import pytest
import time_machine
from django.test import TestCase
from django.utils import timezone

from fleet.models import Node, NodeSession
from fleet.services.sessions import agent_session_leave, agent_session_report
from rollout.controller.daemons import registered_daemon_section
from rollout.models import NodeUpgrade, Rollout
from tests.factories import fleet
from tests.rollout import helpers
from tests.rollout.helpers import heartbeat_all, in_flight, rejoin, tick

pytestmark = pytest.mark.django_db


def create(tenant, **kwargs) -> Rollout:
    """``helpers.create``, failures never pausing it unless ``kwargs`` say otherwise."""
    kwargs.setdefault("max_failure_ratio", 1)
    return helpers.create(tenant, **kwargs)


def report(node_id, version: str) -> None:
    """A join or heartbeat through the real path, its on-commit hook run as a commit would."""
    node = Node.objects.select_related("session").get(pk=node_id)
    with TestCase.captureOnCommitCallbacks() as hooks:
        agent_session_report(node=node, daemon_version=version, protocol_version=3, now=timezone.now())
    with TestCase.captureOnCommitCallbacks():
        for hook in hooks:
            hook()


def row(upgrade) -> NodeUpgrade:
    return NodeUpgrade.objects.get(pk=upgrade.pk)


def test_a_node_that_stays_joined_for_min_ready_seconds_succeeds(tenant, releases):
    fleet(tenant, {"a": (10, "0.1")})  # budget: 1 node
    rollout = create(tenant, min_ready_seconds=60)
    assert rollout.min_ready_seconds == 60
    tick(rollout)
    (upgrade,) = in_flight(rollout)
    rejoin(upgrade.node_id, "1.0.0")
    arrived = row(upgrade)
    assert arrived.state == "in_flight"
    assert arrived.arrived_at == NodeSession.objects.get(node_id=upgrade.node_id).joined_at
    start = timezone.now()
    with time_machine.travel(start + timedelta(seconds=30), tick=False):
        heartbeat_all()
        result = tick(rollout)
        assert (result.succeeded, result.started) == (0, 0)  # proving itself, and holding the budget slot
    with time_machine.travel(start + timedelta(seconds=61), tick=False):
        heartbeat_all()
        result = tick(rollout)
        assert result.succeeded == 1
        assert result.started == 1  # its slot is free: the next node starts
    assert row(upgrade).state == "succeeded"
    assert row(upgrade).reason is None


def test_a_flapping_agent_fails_not_ready_and_goes_back_holding_its_slot_meanwhile(tenant, releases):
    nodes = fleet(tenant, {"a": (10, "0.1")})["a"]
    rollout = create(tenant, min_ready_seconds=300)
    tick(rollout)
    (upgrade,) = in_flight(rollout)
    rejoin(upgrade.node_id, "1.0.0")  # rejoined on the target: proving itself
    assert Node.objects.get(pk=upgrade.node_id).spec["daemon"]["version"] == "1.0.0"
    assert tick(rollout).started == 0  # the slot is held while it proves itself
    # It flaps: leaves shortly after rejoining, then comes back on the target.
    agent_session_leave(node=Node.objects.select_related("session").get(pk=upgrade.node_id))
    report(upgrade.node_id, "1.0.0")  # the join hook sees a later joined_at: it left meanwhile
    failed = row(upgrade)
    assert (failed.state, failed.reason) == ("failed", "not_ready")
    # Back to its previous section, exactly as on a timeout.
    assert Node.objects.get(pk=upgrade.node_id).spec["daemon"] == registered_daemon_section(
        version="0.9.0", arch="amd64"
    )
    assert len(nodes) == 10


def test_a_leave_noticed_by_the_tick_fails_the_node(tenant, releases):
    fleet(tenant, {"a": (1, "1")})
    rollout = create(tenant, min_ready_seconds=300)
    tick(rollout)
    (upgrade,) = in_flight(rollout)
    rejoin(upgrade.node_id, "1.0.0")
    agent_session_leave(node=Node.objects.select_related("session").get(pk=upgrade.node_id))
    assert tick(rollout).failed == 1
    assert (row(upgrade).state, row(upgrade).reason) == ("failed", "not_ready")


def test_reporting_another_version_fails_at_once(tenant, releases):
    fleet(tenant, {"a": (1, "1")})
    rollout = create(tenant, min_ready_seconds=300)
    tick(rollout)
    (upgrade,) = in_flight(rollout)
    rejoin(upgrade.node_id, "1.0.0")
    report(upgrade.node_id, "0.9.0")  # a version change on an open session: the join path
    assert (row(upgrade).state, row(upgrade).reason) == ("failed", "not_ready")


def test_going_offline_while_proving_fails(tenant, other_tenant, releases):
    fleet(tenant, {"a": (1, "1")})
    fleet(other_tenant, {"b": (1, "1")})  # the rest of the fleet, heard while this node is not
    rollout = create(tenant, min_ready_seconds=300)
    tick(rollout)
    (upgrade,) = in_flight(rollout)
    rejoin(upgrade.node_id, "1.0.0")
    with time_machine.travel(timezone.now() + timedelta(seconds=31), tick=False):  # no heartbeat for 3 x 10 s
        heartbeat_all(but=[upgrade.node_id])
        assert tick(rollout).failed == 1
    assert (row(upgrade).state, row(upgrade).reason) == ("failed", "not_ready")


def test_a_node_that_arrived_is_judged_by_readiness_not_by_its_deadline(tenant, releases):
    fleet(tenant, {"a": (1, "1")})
    rollout = create(tenant, min_ready_seconds=120, upgrade_timeout_seconds=60)
    tick(rollout)
    (upgrade,) = in_flight(rollout)
    with time_machine.travel(timezone.now() + timedelta(seconds=30), tick=False):
        rejoin(upgrade.node_id, "1.0.0")
    with time_machine.travel(timezone.now() + timedelta(seconds=90), tick=False):  # past the deadline
        heartbeat_all()
        assert tick(rollout).failed == 0
        assert row(upgrade).state == "in_flight"
    with time_machine.travel(timezone.now() + timedelta(seconds=151), tick=False):
        heartbeat_all()
        assert tick(rollout).succeeded == 1


def test_a_node_on_target_at_its_deadline_proves_readiness_instead_of_succeeding(tenant, releases):
    fleet(tenant, {"a": (1, "1")})
    rollout = create(tenant, min_ready_seconds=120, upgrade_timeout_seconds=60)
    tick(rollout)
    (upgrade,) = in_flight(rollout)
    NodeSession.objects.filter(node_id=upgrade.node_id).update(daemon_version="1.0.0")  # join notice lost
    with time_machine.travel(timezone.now() + timedelta(seconds=61), tick=False):
        heartbeat_all()
        from rollout.controller.settle import node_upgrades_settle_overdue

        assert node_upgrades_settle_overdue(now=timezone.now()) == (0, 0)
    assert row(upgrade).state == "in_flight"
    assert row(upgrade).arrived_at is not None


def test_without_min_ready_seconds_a_rejoin_succeeds_at_once(tenant, releases):
    fleet(tenant, {"a": (1, "1")})
    rollout = create(tenant)
    assert rollout.min_ready_seconds == 0
    tick(rollout)
    (upgrade,) = in_flight(rollout)
    rejoin(upgrade.node_id, "1.0.0")
    assert row(upgrade).state == "succeeded"
    assert row(upgrade).arrived_at is None


@pytest.mark.parametrize("value", [-1, 86401, 1.5, "60", True])
def test_min_ready_seconds_is_validated_over_the_api_and_nothing_is_written(api, tenant, releases, value):
    from rollout.models import Rollout

    fleet(tenant, {"a": (2, "1")})
    response = api.post("/api/compute/rollouts/", {"version": "1.0.0", "minReadySeconds": value}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_input"
    assert "minReadySeconds" in response.json()["detail"] or response.json().get("field") == "minReadySeconds"
    assert not Rollout.objects.exists()


def test_min_ready_seconds_in_the_representation_and_the_dry_run(api, tenant, releases):
    fleet(tenant, {"a": (2, "1")})
    body = {"version": "1.0.0", "waves": [100], "minReadySeconds": 86400, "upgradeTimeoutSeconds": 60}
    plan = api.post("/api/compute/rollouts/?dryRun=true", body, format="json")
    assert plan.status_code == 200
    assert plan.json()["minReadySeconds"] == 86400
    assert plan.json()["estimatedSeconds"] == 60 + 86400
    created = api.post("/api/compute/rollouts/", body, format="json")
    assert created.status_code == 201
    assert created.json()["minReadySeconds"] == 86400
    default = api.get("/api/compute/rollouts/").json()
    rows = default["results"] if isinstance(default, dict) else default
    assert rows[0]["minReadySeconds"] == 86400
