"""Convergence after completion: skipped (offline) nodes are upgraded when they come back.

See docs/controller.md#convergence-after-completion.
"""

from datetime import timedelta

import pytest
import time_machine
from django.test import TestCase
from django.utils import timezone

from fleet.models import Node, NodeSession, Pool
from fleet.services.budget import pool_budget
from fleet.services.nodes import node_create
from fleet.services.sessions import agent_session_report
from rollout.controller.daemons import registered_daemon_section
from rollout.controller.start import rollouts_converge
from rollout.controller.tick import rollouts_tick_all
from rollout.models import NodeUpgrade, Rollout
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.concurrency import run_together
from tests.factories import fleet
from tests.rollout.helpers import heartbeat_all, in_flight, rejoin, tick


def report(node_id, version: str) -> None:
    """The agent joins (or heartbeats) through the real path, its on-commit hook run as a commit would."""
    node = Node.objects.select_related("session").get(pk=node_id)
    with TestCase.captureOnCommitCallbacks() as hooks:
        agent_session_report(node=node, daemon_version=version, protocol_version=3, now=timezone.now())
    with TestCase.captureOnCommitCallbacks():
        for hook in hooks:
            hook()


def completed_with_offline(tenant, *, nodes: int, offline: int, budget: str, **options):
    """A completed rollout of 1.0.0 over one pool where ``offline`` nodes were down (skipped)."""
    pool_nodes = fleet(tenant, {"a": (nodes, budget)})["a"]
    down = [node.pk for node in pool_nodes[:offline]]
    NodeSession.objects.filter(node_id__in=down).update(left_at=timezone.now())
    options.setdefault("soak_seconds", 0)
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100], **options))
    for _ in range(nodes + 2):
        tick(rollout)
        for upgrade in in_flight(rollout):
            rejoin(upgrade.node_id, "1.0.0")
        if rollout.state == "completed":
            break
    assert rollout.state == "completed"
    skipped = NodeUpgrade.objects.filter(rollout=rollout, state="skipped", reason="offline")
    assert sorted(skipped.values_list("node_id", flat=True)) == sorted(down)
    return rollout, down


def upgrade_of(rollout, node_id) -> NodeUpgrade:
    return NodeUpgrade.objects.get(rollout=rollout, node_id=node_id)


@pytest.mark.django_db
def test_a_skipped_node_converges_when_it_comes_back_within_the_budget(tenant, releases):
    rollout, down = completed_with_offline(tenant, nodes=4, offline=2, budget="0.25")  # allowed 1
    assert rollouts_converge(now=timezone.now()) == 0  # still offline: nothing to do
    for node_id in down:
        report(node_id, "0.9.0")  # both come back on the old version
    assert rollouts_converge(now=timezone.now()) == 1  # the budget allows one
    assert rollouts_converge(now=timezone.now()) == 0
    first = NodeUpgrade.objects.get(rollout=rollout, state="in_flight")
    assert first.claims_node
    assert first.previous_version == "0.9.0"
    assert first.reason is None
    assert first.deadline == first.started_at + timedelta(seconds=rollout.upgrade_timeout_seconds)
    assert Node.objects.get(pk=first.node_id).spec["daemon"] == registered_daemon_section(version="1.0.0", arch="amd64")
    assert pool_budget(pool_id=first.pool_id).disrupted == 1
    shown = {row.node_id: row.state for row in NodeUpgrade.objects.filter(rollout=rollout, node_id__in=down)}
    assert sorted(shown.values()) == ["in_flight", "skipped"]
    rejoin(first.node_id, "1.0.0")  # the join path settles it
    first.refresh_from_db()
    assert (first.state, first.claims_node) == ("succeeded", False)
    assert rollouts_converge(now=timezone.now()) == 1  # now the other one
    second = NodeUpgrade.objects.get(rollout=rollout, state="in_flight")
    with time_machine.travel(second.deadline + timedelta(seconds=1), tick=False):
        heartbeat_all()
        rollouts_tick_all()  # it never rejoins on 1.0.0: it times out and goes back, like any node
    second.refresh_from_db()
    assert (second.state, second.reason, second.claims_node) == ("failed", "timeout", False)
    assert Node.objects.get(pk=second.node_id).spec["daemon"] == registered_daemon_section(
        version="0.9.0", arch="amd64"
    )
    assert rollouts_converge(now=timezone.now()) == 0  # one attempt: a failed row does not start again
    assert Rollout.objects.get(pk=rollout.pk).state == "completed"


@pytest.mark.django_db
def test_convergence_uses_the_rollouts_readiness_rule(tenant, releases):
    rollout, (node_id,) = completed_with_offline(tenant, nodes=2, offline=1, budget="1")
    Rollout.objects.filter(pk=rollout.pk).update(min_ready_seconds=60)  # as if created with minReadySeconds 60
    report(node_id, "0.9.0")
    assert rollouts_converge(now=timezone.now()) == 1
    rejoin(node_id, "1.0.0")
    upgrade = upgrade_of(rollout, node_id)
    assert upgrade.state == "in_flight"
    assert upgrade.arrived_at is not None
    with time_machine.travel(timezone.now() + timedelta(seconds=61), tick=False):
        NodeSession.objects.update(last_seen_at=timezone.now())
        rollouts_tick_all()
    assert upgrade_of(rollout, node_id).state == "succeeded"


@pytest.mark.django_db
def test_a_node_back_on_the_target_or_a_newer_release_is_left_alone(tenant, releases):
    rollout, (node_id,) = completed_with_offline(tenant, nodes=2, offline=1, budget="1")
    report(node_id, "1.0.0")
    assert rollouts_converge(now=timezone.now()) == 0
    assert upgrade_of(rollout, node_id).state == "skipped"


@pytest.mark.django_db
def test_a_newer_rollout_that_takes_the_node_ends_convergence(tenant, releases):
    from tests.factories import manifest, release_stored

    release_stored(manifest("1.1.0", 3, archs=("amd64",)))
    rollout, down = completed_with_offline(tenant, nodes=4, offline=2, budget="1")
    report(down[0], "0.9.0")
    assert rollouts_converge(now=timezone.now()) == 1  # down[0] converging (in flight)
    newer = rollout_create(tenant=tenant, spec=rollout_spec(version="1.1.0", waves=[100], soak_seconds=0))
    converging = upgrade_of(rollout, down[0])
    assert (converging.state, converging.reason) == ("cancelled", "superseded")
    assert upgrade_of(newer, down[0]).claims_node
    report(down[1], "0.9.0")
    assert rollouts_converge(now=timezone.now()) == 0  # the newer rollout has it: the row stays skipped
    assert upgrade_of(rollout, down[1]).state == "skipped"
    tick(newer)
    assert upgrade_of(newer, down[1]).state == "in_flight"


@pytest.mark.django_db
def test_a_blocked_release_does_not_converge(tenant, releases):
    from rollout.rollouts.blocks import release_block

    rollout, (node_id,) = completed_with_offline(tenant, nodes=2, offline=1, budget="1")
    report(node_id, "0.9.0")
    release_block(tenant=tenant, version="1.0.0", reason="bad")
    assert rollouts_converge(now=timezone.now()) == 0
    assert upgrade_of(rollout, node_id).state == "skipped"


@pytest.mark.django_db
def test_a_node_created_after_completion_gets_the_pools_default(tenant, releases):
    rollout, _ = completed_with_offline(tenant, nodes=2, offline=1, budget="1")
    pool = Pool.objects.get(tenant=tenant, name="a")
    assert pool.default_daemon_version == "1.0.0"
    node, _ = node_create(tenant=tenant, name="late", pool_id=pool.pk, arch="amd64")
    assert node.spec["daemon"] == registered_daemon_section(version="1.0.0", arch="amd64")
    assert not NodeUpgrade.objects.filter(node=node).exists()
    assert rollout.state == "completed"


@pytest.mark.django_db(transaction=True)
def test_two_workers_converging_at_once_never_exceed_the_budget(tenant, releases):
    rollout, down = completed_with_offline(tenant, nodes=20, offline=12, budget="0.2")  # allowed 4
    NodeSession.objects.filter(node_id__in=down).update(left_at=None, last_seen_at=timezone.now())
    pool_id = upgrade_of(rollout, down[0]).pool_id

    def converge():
        rollouts_converge(now=timezone.now())

    errors = run_together(converge, converge, converge, rounds=3)
    assert errors == []
    converging = NodeUpgrade.objects.filter(rollout=rollout, state="in_flight").count()
    assert converging == 4
    assert pool_budget(pool_id=pool_id).disrupted == 4
