"""Each controller step and each transition (docs/controller.md#the-tick)."""

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from core.errors import InvalidState
from fleet.models import Command, Node, NodeSession, Pool
from fleet.services.nodes import node_create
from fleet.services.workflows import workflow_start
from rollout.controller.daemons import registered_daemon_section
from rollout.models import NodeUpgrade, RolloutEvent
from rollout.rollouts.actions import rollout_abort, rollout_pause, rollout_resume
from tests.factories import fleet
from tests.rollout.helpers import create, events, heartbeat_all, in_flight, rejoin, states, tick

pytestmark = pytest.mark.django_db


def test_start_respects_the_pool_budget_and_sets_spec_daemon(tenant, releases):
    nodes = fleet(tenant, {"a": (100, "0.05")})["a"]
    rollout = create(tenant)
    result = tick(rollout)
    assert result.started == 5
    started = in_flight(rollout)
    assert [u.position for u in started] == [0, 1, 2, 3, 4]
    for upgrade in started:
        node = Node.objects.get(pk=upgrade.node_id)
        assert node.spec["daemon"] == registered_daemon_section(version="1.0.0", arch="amd64")
        assert node.spec["daemon"]["url"].endswith("/bcd/1.0.0/linux-amd64")
        assert upgrade.previous_version == "0.9.0"
        assert upgrade.deadline == upgrade.started_at + timedelta(seconds=600)
    untouched = Node.objects.exclude(pk__in=[u.node_id for u in started])
    assert all(node.spec["daemon"] is None for node in untouched)
    assert tick(rollout).started == 0  # budget full: a repeated tick starts nothing
    assert len(nodes) == 100


def test_budget_is_shared_with_workflows(tenant, releases):
    nodes = fleet(tenant, {"a": (40, "0.1")})["a"]  # allowed 4
    rollout = create(tenant)
    order = list(NodeUpgrade.objects.filter(rollout=rollout).order_by("position").values_list("node_id", flat=True))
    workflow_start(tenant=tenant, node_id=order[-1], kind="remediation")
    workflow_start(tenant=tenant, node_id=order[-2], kind="remediation")
    assert tick(rollout).started == 2
    assert len(nodes) == 40


def test_offline_and_no_binary_nodes_are_skipped_without_using_budget(tenant, releases):
    online = fleet(tenant, {"a": (6, "0.3")})["a"]  # 10 nodes once the others join: allowed 3
    pool = online[0].pool
    offline = fleet(tenant, {"b": (2, "0.5")})["b"]
    Node.objects.filter(pk__in=[n.id for n in offline]).update(pool=pool)
    arm = fleet(tenant, {"c": (2, "0.5")}, arch="arm64")["c"]
    Node.objects.filter(pk__in=[n.id for n in arm]).update(pool=pool)
    NodeSession.objects.filter(node__in=offline).update(left_at=timezone.now())
    rollout = create(tenant, pool_ids=[str(pool.id)])
    result = tick(rollout)
    skipped = NodeUpgrade.objects.filter(rollout=rollout, state="skipped")
    assert result.started == 3
    # Skipped nodes are those met before the budget ran out, each with its reason.
    for upgrade in skipped:
        expected = "offline" if upgrade.node_id in {n.id for n in offline} else "no_binary"
        assert upgrade.reason == expected
    while NodeUpgrade.objects.filter(rollout=rollout, state__in=["pending", "in_flight"]).exists():
        for upgrade in in_flight(rollout):
            rejoin(upgrade.node_id, "1.0.0")
        tick(rollout)
    assert states(rollout) == {"succeeded": 6, "skipped": 4}
    reasons = dict(NodeUpgrade.objects.filter(rollout=rollout, state="skipped").values_list("node_id", "reason"))
    assert {reasons[n.id] for n in offline} == {"offline"}
    assert {reasons[n.id] for n in arm} == {"no_binary"}
    assert rollout.state == "completed"


def test_a_stale_heartbeat_is_offline(tenant, releases):
    nodes = fleet(tenant, {"a": (1, "1")})["a"]
    NodeSession.objects.filter(node__in=nodes).update(last_seen_at=timezone.now() - timedelta(seconds=31))
    rollout = create(tenant)
    tick(rollout)
    assert NodeUpgrade.objects.get(rollout=rollout).reason == "offline"


def test_a_node_that_rejoins_on_the_target_version_succeeds_at_once_and_frees_budget(tenant, releases):
    fleet(tenant, {"a": (20, "0.05")})  # allowed 1
    rollout = create(tenant)
    tick(rollout)
    (first,) = in_flight(rollout)
    rejoin(first.node_id, "1.0.0")  # the join hook settles it, no tick needed
    first.refresh_from_db()
    assert first.state == "succeeded"
    assert first.settled_at is not None
    assert tick(rollout).started == 1


def test_rejoining_on_the_old_version_does_not_succeed(tenant, releases):
    fleet(tenant, {"a": (1, "1")})
    rollout = create(tenant)
    tick(rollout)
    (upgrade,) = in_flight(rollout)
    rejoin(upgrade.node_id, "0.9.0")
    tick(rollout)
    upgrade.refresh_from_db()
    assert upgrade.state == "in_flight"


def test_the_tick_settles_a_success_the_join_hook_missed(tenant, releases):
    fleet(tenant, {"a": (1, "1")})
    rollout = create(tenant)
    tick(rollout)
    (upgrade,) = in_flight(rollout)
    NodeSession.objects.filter(node_id=upgrade.node_id).update(daemon_version="1.0.0")  # no signal
    assert tick(rollout).succeeded == 1


def test_timeout_fails_and_returns_spec_daemon_to_the_previous_section(tenant, releases):
    nodes = fleet(tenant, {"a": (3, "1")})["a"]
    previous = registered_daemon_section(version="0.9.0", arch="amd64")
    Node.objects.filter(pk=nodes[0].pk).update(spec={"daemon": previous})
    NodeSession.objects.filter(node=nodes[2]).update(daemon_version="0.1.0")  # never registered
    rollout = create(tenant, upgrade_timeout_seconds=60, max_failure_ratio=1)
    tick(rollout)
    with time_machine.travel(timezone.now() + timedelta(seconds=59), tick=False):
        assert tick(rollout).failed == 0
    with time_machine.travel(timezone.now() + timedelta(seconds=61), tick=False):
        assert tick(rollout).failed == 3
    assert states(rollout) == {"failed": 3}
    assert set(NodeUpgrade.objects.filter(rollout=rollout).values_list("reason", flat=True)) == {"timeout"}
    assert Node.objects.get(pk=nodes[0].pk).spec["daemon"] == previous
    # No desired daemon before, but its agent ran a registered release: that one, as a rollback would.
    assert Node.objects.get(pk=nodes[1].pk).spec["daemon"] == previous
    # Nothing registered to go back to: exactly the previous section (none).
    assert Node.objects.get(pk=nodes[2].pk).spec["daemon"] is None


def test_the_timeout_task_fails_one_node_on_time_and_is_idempotent(tenant, releases):
    from rollout.tasks import node_upgrade_timeout

    fleet(tenant, {"a": (1, "1")})
    rollout = create(tenant, upgrade_timeout_seconds=60)
    tick(rollout)
    (upgrade,) = in_flight(rollout)
    node_upgrade_timeout(upgrade.id)  # early (e.g. redelivered): nothing happens
    upgrade.refresh_from_db()
    assert upgrade.state == "in_flight"
    with time_machine.travel(upgrade.deadline + timedelta(seconds=1), tick=False):
        node_upgrade_timeout(upgrade.id)
        node_upgrade_timeout(upgrade.id)  # delivered twice
    upgrade.refresh_from_db()
    assert (upgrade.state, upgrade.reason) == ("failed", "timeout")


def test_soak_between_waves(tenant, releases):
    fleet(tenant, {"a": (4, "1")})
    rollout = create(tenant, waves=[50, 100], soak_seconds=60)
    start = timezone.now()
    tick(rollout)
    for upgrade in in_flight(rollout):
        rejoin(upgrade.node_id, "1.0.0")
    tick(rollout)
    assert rollout.current_wave == 0
    settled_at = rollout.wave_rows.get(index=0).settled_at
    assert settled_at is not None
    with time_machine.travel(settled_at + timedelta(seconds=59), tick=False):
        tick(rollout)
        assert rollout.current_wave == 0
    with time_machine.travel(settled_at + timedelta(seconds=60), tick=False):
        heartbeat_all()
        result = tick(rollout)
        assert rollout.current_wave == 1
        assert result.started == 2  # the next wave starts in the same tick
    wave = RolloutEvent.objects.get(rollout=rollout, kind="rollout.wave")
    assert wave.data["wave"] == 1
    assert wave.at >= start + timedelta(seconds=60)


def test_completion_sets_pool_defaults_and_later_nodes_run_the_version(tenant, releases):
    nodes = fleet(tenant, {"a": (3, "1"), "b": (2, "1")})
    rollout = create(tenant)
    tick(rollout)
    for upgrade in in_flight(rollout):
        rejoin(upgrade.node_id, "1.0.0")
    tick(rollout)
    assert rollout.state == "completed"
    assert rollout.completed_at is not None
    assert events(rollout) == ["rollout.created", "rollout.completed"]
    assert set(Pool.objects.values_list("default_daemon_version", flat=True)) == {"1.0.0"}
    assert not NodeUpgrade.objects.filter(claims_node=True).exists()
    late, _ = node_create(tenant=tenant, name="late", pool_id=nodes["a"][0].pool_id, arch="amd64")
    assert late.spec["daemon"] == registered_daemon_section(version="1.0.0", arch="amd64")


def test_abort_cancels_pending_and_leaves_in_flight_and_succeeded_alone(tenant, releases):
    fleet(tenant, {"a": (10, "0.2")})  # allowed 2
    rollout = create(tenant)
    tick(rollout)
    done, flying = in_flight(rollout)
    rejoin(done.node_id, "1.0.0")
    rollout_abort(rollout_id=rollout.id, rollback=False)
    rollout.refresh_from_db()
    assert rollout.state == "aborted"
    assert states(rollout) == {"succeeded": 1, "in_flight": 1, "cancelled": 8}
    assert Node.objects.get(pk=done.node_id).spec["daemon"]["version"] == "1.0.0"
    # The in-flight node still settles after the abort, and then frees its node.
    rejoin(flying.node_id, "1.0.0")
    flying.refresh_from_db()
    assert flying.state == "succeeded"
    assert not flying.claims_node
    assert events(rollout)[-1] == "rollout.aborted"


def test_abort_with_rollback_returns_in_flight_nodes_only_to_a_registered_release(tenant, releases):
    nodes = fleet(tenant, {"a": (3, "1")})["a"]
    previous = registered_daemon_section(version="0.9.0", arch="amd64")
    Node.objects.filter(pk=nodes[0].pk).update(spec={"daemon": previous})
    NodeSession.objects.filter(node=nodes[2]).update(daemon_version="0.1.0")  # never registered
    rollout = create(tenant)
    tick(rollout)
    rollout_abort(rollout_id=rollout.id, rollback=True)
    by_node = {u.node_id: u for u in NodeUpgrade.objects.filter(rollout=rollout)}
    assert (by_node[nodes[0].id].state, by_node[nodes[0].id].reason) == ("rolled_back", "rolled_back")
    assert Node.objects.get(pk=nodes[0].pk).spec["daemon"] == previous
    # No previous section, but the agent ran a registered release: back to it.
    assert by_node[nodes[1].id].state == "rolled_back"
    assert Node.objects.get(pk=nodes[1].pk).spec["daemon"] == previous
    # The previous release is not registered: it stays, and the reason says why.
    assert (by_node[nodes[2].id].state, by_node[nodes[2].id].reason) == ("in_flight", "previous_not_registered")
    assert Node.objects.get(pk=nodes[2].pk).spec["daemon"]["version"] == "1.0.0"
    event = RolloutEvent.objects.get(rollout=rollout, kind="rollout.aborted")
    assert (event.data["rolledBack"], event.data["notRolledBack"], event.data["rollback"]) == (2, 1, True)


def test_an_old_agent_also_gets_a_daemon_upgrade_command(tenant, releases):
    nodes = fleet(tenant, {"a": (2, "1")}, protocol=1)["a"]
    rollout = create(tenant)
    tick(rollout)
    commands = list(Command.objects.filter(kind="daemon.upgrade"))
    assert {c.node_id for c in commands} == {n.id for n in nodes}
    assert all(c.payload == registered_daemon_section(version="1.0.0", arch="amd64") for c in commands)
    rejoin(nodes[0].id, "1.0.0", protocol=1)
    assert Command.objects.get(node=nodes[0]).state == "done"
    assert NodeUpgrade.objects.get(rollout=rollout, node=nodes[0]).state == "succeeded"


def test_a_current_agent_gets_no_command(tenant, releases):
    fleet(tenant, {"a": (2, "1")}, protocol=2)
    tick(create(tenant))
    assert not Command.objects.exists()


def test_invalid_transitions_raise_invalid_state(tenant, releases):
    fleet(tenant, {"a": (2, "1")})
    rollout = create(tenant)
    with pytest.raises(InvalidState):
        rollout_resume(rollout_id=rollout.id)
    rollout_pause(rollout_id=rollout.id)
    with pytest.raises(InvalidState):
        rollout_pause(rollout_id=rollout.id)
    rollout_resume(rollout_id=rollout.id)
    rollout_abort(rollout_id=rollout.id)
    for action in (rollout_pause, rollout_resume, rollout_abort):
        with pytest.raises(InvalidState):
            action(rollout_id=rollout.id)
    assert events(rollout) == [
        "rollout.created", "rollout.paused", "rollout.resumed", "rollout.aborted",
    ]  # fmt: skip


def test_pause_resume_abort_over_the_api(api, tenant, releases):
    fleet(tenant, {"a": (4, "0.25")})
    rollout_id = api.post("/api/compute/rollouts/", {"version": "1.0.0"}, format="json").json()["id"]
    url = f"/api/compute/rollouts/{rollout_id}"
    body = api.post(f"{url}/pause/", {}, format="json").json()
    assert (body["state"], body["pausedReason"]) == ("paused", "operator")
    second = api.post(f"{url}/pause/", {}, format="json")
    assert (second.status_code, second.json()["code"]) == (409, "invalid_state")
    assert api.post(f"{url}/resume/", {}, format="json").json()["state"] == "active"
    assert api.post(f"{url}/abort/", {"rollback": "yes"}, format="json").status_code == 400
    body = api.post(f"{url}/abort/", {"rollback": True}, format="json").json()
    assert body["state"] == "aborted"
    assert sum(wave["cancelled"] for wave in body["waves"]) == 4
    finished = api.post(f"{url}/resume/", {}, format="json")
    assert (finished.status_code, finished.json()["code"]) == (409, "invalid_state")


def test_a_node_already_on_the_target_version_is_not_failed_at_its_deadline(tenant, releases):
    from rollout.tasks import node_upgrade_timeout

    nodes = fleet(tenant, {"a": (1, "1")})["a"]
    rollout = create(tenant, upgrade_timeout_seconds=60)
    tick(rollout)
    (upgrade,) = in_flight(rollout)
    NodeSession.objects.filter(node=nodes[0]).update(daemon_version="1.0.0")  # its notice was lost
    with time_machine.travel(upgrade.deadline + timedelta(seconds=1), tick=False):
        node_upgrade_timeout(upgrade.id)
    upgrade.refresh_from_db()
    assert upgrade.state == "succeeded"
    assert Node.objects.get(pk=nodes[0].pk).spec["daemon"]["version"] == "1.0.0"


def test_an_old_agent_sent_back_gets_a_command_with_its_previous_section(tenant, releases):
    nodes = fleet(tenant, {"a": (1, "1")}, protocol=1)["a"]
    rollout = create(tenant, upgrade_timeout_seconds=60)
    tick(rollout)
    with time_machine.travel(timezone.now() + timedelta(seconds=61), tick=False):
        tick(rollout)
    commands = {c.payload["version"]: c.state for c in Command.objects.filter(node=nodes[0])}
    assert commands == {"1.0.0": "cancelled", "0.9.0": "pending"}


def test_completion_sets_the_default_only_of_pools_it_covered_nodes_in(tenant, releases):
    nodes = fleet(tenant, {"a": (2, "1")})["a"]
    empty = Pool.objects.create(tenant=tenant, name="empty")
    rollout = create(tenant, pool_ids=[str(nodes[0].pool_id), str(empty.id)])
    tick(rollout)
    for upgrade in in_flight(rollout):
        rejoin(upgrade.node_id, "1.0.0")
    tick(rollout)
    assert rollout.state == "completed"
    assert Pool.objects.get(pk=nodes[0].pool_id).default_daemon_version == "1.0.0"
    assert Pool.objects.get(pk=empty.pk).default_daemon_version is None


def test_the_start_step_never_starts_a_wave_the_advance_has_not_started(tenant, releases):
    """A wave left empty (its nodes deleted) is moved past by a tick's advance, never skipped by the start step."""
    fleet(tenant, {"a": (6, "1")})
    rollout = create(tenant, waves=[34, 67, 100])
    tick(rollout)
    Node.objects.filter(id__in=NodeUpgrade.objects.filter(rollout=rollout, wave=1).values("node_id")).delete()
    for upgrade in in_flight(rollout):
        rejoin(upgrade.node_id, "1.0.0")
    tick(rollout)  # wave 0 settled: the rollout moves to wave 1, which has no node left
    assert rollout.current_wave == 1
    assert states(rollout, wave=2) == {"pending": 1}
    tick(rollout)  # the next tick records wave 1 settled and starts wave 2
    assert rollout.current_wave == 2
    assert states(rollout, wave=2) == {"in_flight": 1}
