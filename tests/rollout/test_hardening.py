"""Defects a review and a fault run found in the controller (issue 9), each pinned by a test."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.core.management import call_command
from django.utils import timezone

from core.errors import Conflict, InvalidInput
from fleet.models import FleetPulse, Node, NodeSession
from fleet.services import liveness
from fleet.services.budget import pool_budget
from fleet.services.liveness import pulse_heard
from fleet.services.workflows import workflow_start
from rollout import dispatch
from rollout.controller import tick as controller
from rollout.models import NodeUpgrade, Rollout
from rollout.rollouts.actions import rollout_abort
from rollout.rollouts.spec import rollout_spec
from rollout.schedules import periodic_tick_ensure
from tests.factories import fleet
from tests.rollout.helpers import create, heartbeat_all, in_flight, rejoin, states, tick

pytestmark = pytest.mark.django_db


# --- 5 / 17: abort with rollback never sends back a node that already runs the new version ---------


def test_abort_with_rollback_lets_a_node_already_on_the_target_succeed(tenant, releases):
    fleet(tenant, {"a": (4, "1")})
    rollout = create(tenant)
    tick(rollout)
    arrived, *others = in_flight(rollout)
    # Its agent rejoined on 1.0.0 but the join notice was lost (or is behind abort's lock).
    NodeSession.objects.filter(node_id=arrived.node_id).update(daemon_version="1.0.0")

    rollout_abort(rollout_id=rollout.id, rollback=True)

    arrived.refresh_from_db()
    assert arrived.state == "succeeded"
    assert Node.objects.get(pk=arrived.node_id).spec["daemon"]["version"] == "1.0.0"
    for upgrade in others:
        upgrade.refresh_from_db()
        assert upgrade.state == "rolled_back"
        assert Node.objects.get(pk=upgrade.node_id).spec["daemon"]["version"] == "0.9.0"


# --- 6: the soak's end is scheduled once, and nothing is scheduled past the visibility timeout -------


def test_the_soak_end_is_scheduled_once_not_at_every_tick(tenant, releases, published):
    fleet(tenant, {"a": (4, "1")})
    rollout = create(tenant, waves=[50, 100], soak_seconds=600)
    tick(rollout)
    for upgrade in in_flight(rollout):
        rejoin(upgrade.node_id, "1.0.0")
    for _ in range(5):  # ticks during the soak
        tick(rollout)
    soak_ends = [(name, eta) for name, _, eta in published if name == dispatch.TICK_TASK and eta is not None]
    assert soak_ends == [(dispatch.TICK_TASK, rollout.next_wave_at)]


def test_no_message_waits_past_the_visibility_timeout(tenant, releases, published, settings):
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
    fleet(tenant, {"a": (4, "1")})
    rollout = create(tenant, waves=[50, 100], soak_seconds=7200, upgrade_timeout_seconds=7200)
    tick(rollout)
    for upgrade in in_flight(rollout):
        rejoin(upgrade.node_id, "1.0.0")
    tick(rollout)
    horizon = timezone.now() + dispatch.max_delay()
    assert dispatch.max_delay() < timedelta(seconds=3600)
    assert all(eta is None or eta <= horizon for _, _, eta in published)
    assert not [name for name, _, _ in published if name == dispatch.TIMEOUTS_DUE_TASK]  # 2 h: the sweep's job
    # The periodic tick still ends the soak and times nodes out when no message was scheduled.
    with time_machine.travel(timezone.now() + timedelta(seconds=7201), tick=False):
        heartbeat_all()
        controller.rollouts_tick_all()
        rollout.refresh_from_db()
        assert rollout.current_wave == 1
        assert states(rollout, wave=1) == {"in_flight": 2}
    with time_machine.travel(timezone.now() + timedelta(seconds=14500), tick=False):
        heartbeat_all()
        controller.rollouts_tick_all()
        assert states(rollout, wave=1) == {"failed": 2}


def test_a_tick_publishes_the_same_messages_whatever_it_starts(tenant, other_tenant, releases, published):
    def messages_of_first_tick(owner, nodes: int) -> int:
        fleet(owner, {"p": (nodes, "1")})
        rollout = create(owner)
        published.clear()
        assert tick(rollout).started == nodes
        return len(published)

    assert messages_of_first_tick(tenant, 2) == messages_of_first_tick(other_tenant, 200) == 1


def test_a_tick_publishes_one_timeout_sweep_whatever_its_pools(tenant, releases, published):
    fleet(tenant, {f"p{i}": (20, "0.1") for i in range(5)})
    rollout = create(tenant)
    published.clear()
    assert tick(rollout).started == 10  # 2 in each of the 5 pools
    sweeps = [eta for name, _, eta in published if name == dispatch.TIMEOUTS_DUE_TASK]
    deadlines = set(rollout.node_upgrades.filter(state="in_flight").values_list("deadline", flat=True))
    assert len(published) == 1
    assert sweeps == list(deadlines)  # one start time for the tick: every started node is due at the sweep


# --- 7: a broker that is down never fails a request whose rows are committed -----------------------


# A publish to a broker that is down returns False and logs, within about a second:
# tests/test_broker_recovery.py, in subprocesses (the Celery app's connection pool is process-wide).


def test_create_and_resume_answer_when_publishing_fails(
    api, tenant, releases, monkeypatch, django_capture_on_commit_callbacks
):
    from celery import current_app

    fleet(tenant, {"a": (4, "1")})

    class BrokerDown:
        def apply_async(self, *args, **kwargs):
            raise ConnectionRefusedError("Connection refused")

    monkeypatch.setitem(current_app.tasks, dispatch.TICK_TASK, BrokerDown())
    with django_capture_on_commit_callbacks(execute=True):
        created = api.post("/api/compute/rollouts/", {"version": "1.0.0"}, format="json")
    assert created.status_code == 201, created.content
    rollout_id = created.json()["id"]
    assert api.post(f"/api/compute/rollouts/{rollout_id}/pause/", {}, format="json").status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        resumed = api.post(f"/api/compute/rollouts/{rollout_id}/resume/", {}, format="json")
    assert resumed.status_code == 200
    assert resumed.json()["state"] == "active"


# --- 8: a duplicate beat interval does not break migrate --------------------------------------------


def test_a_duplicate_interval_in_the_admin_does_not_break_the_schedule_or_migrate(settings):
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    IntervalSchedule.objects.create(every=30, period=IntervalSchedule.SECONDS)
    IntervalSchedule.objects.create(every=30, period=IntervalSchedule.SECONDS)
    task = periodic_tick_ensure(every=30, reset=True)
    assert task.interval.every == 30
    call_command("migrate", verbosity=0)  # post_migrate ensures the schedule again
    assert PeriodicTask.objects.filter(name=dispatch.TICK_ALL_TASK).count() == 1


# --- 10: an aborted rollout does not block a fix-forward -------------------------------------------


def test_a_new_rollout_takes_the_in_flight_nodes_of_an_aborted_one(tenant, releases):
    fleet(tenant, {"a": (4, "1")})
    first = create(tenant)
    tick(first)
    rollout_abort(rollout_id=first.id, rollback=False)
    assert states(first) == {"in_flight": 4}

    second = create(tenant, version="0.9.0")

    assert states(first) == {"cancelled": 4}
    assert set(NodeUpgrade.objects.filter(rollout=first).values_list("reason", flat=True)) == {"superseded"}
    assert states(second) == {"pending": 4}
    assert NodeUpgrade.objects.filter(claims_node=True).count() == 4  # one writer each, the new rollout's


def test_a_fix_forward_over_one_pool_leaves_the_other_pools_in_flight_nodes_alone(tenant, releases):
    pools = fleet(tenant, {"a": (3, "1"), "b": (2, "1")})
    first = create(tenant)
    tick(first)
    rollout_abort(rollout_id=first.id, rollback=False)
    pool_a = pools["a"][0].pool_id

    second = create(tenant, version="0.9.0", pool_ids=[str(pool_a)])

    rows = NodeUpgrade.objects.filter(rollout=first)
    assert sorted(rows.filter(node__pool_id=pool_a).values_list("state", "reason")) == [("cancelled", "superseded")] * 3
    assert set(rows.exclude(node__pool_id=pool_a).values_list("state", flat=True)) == {"in_flight"}
    assert states(second) == {"pending": 3}


def test_superseding_sends_no_node_ids_to_the_database(tenant, releases):
    """The fix-forward check of a create over 100,000 nodes must not send 100,000 parameters."""
    import uuid

    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from rollout.controller.upgrade_transitions import supersede_upgrades

    def sql_sent(count: int) -> int:
        node_ids = {uuid.uuid4() for _ in range(count)}
        with CaptureQueriesContext(connection) as queries:
            assert supersede_upgrades(tenant_id=tenant.id, node_ids=node_ids, at=timezone.now()) == 0
        return sum(len(query["sql"]) for query in queries.captured_queries)

    assert sql_sent(5) == sql_sent(5000)


def test_an_active_rollout_still_conflicts(tenant, releases):
    fleet(tenant, {"a": (4, "1")})
    first = create(tenant)
    tick(first)
    with pytest.raises(Conflict) as refused:
        create(tenant, version="0.9.0")
    assert refused.value.code == "conflict"


# --- 11: the periodic tick isolates each rollout --------------------------------------------------


def test_one_rollout_whose_tick_raises_does_not_stop_the_others(tenant, other_tenant, releases):
    fleet(tenant, {"a": (2, "1")})
    fleet(other_tenant, {"b": (2, "1")})
    broken = create(tenant)
    healthy = create(other_tenant)
    Rollout.objects.filter(pk=broken.pk).update(current_wave=7)  # no such wave: its tick raises
    for _ in range(3):  # whatever the (shuffled) order
        controller.rollouts_tick_all()
    assert states(healthy) == {"in_flight": 2}


# --- 15: liveness is judged against the fleet, not the clock alone ---------------------------------

HEARTBEAT = 10  # FLEET_HEARTBEAT_SECONDS in these tests


@pytest.fixture
def pulse(monkeypatch):
    """The fleet heard at given instants, as web processes note it (this process's throttle reset)."""
    monkeypatch.setattr(liveness, "_last_written_at", None)

    def hear(at):
        monkeypatch.setattr(liveness, "_last_written_at", None)
        pulse_heard(now=at)

    return hear


def test_after_an_outage_no_running_agent_is_skipped_or_failed_before_it_can_be_heard(tenant, releases, pulse):
    fleet(tenant, {"a": (4, "1")})
    start = timezone.now()
    rollout = create(tenant, upgrade_timeout_seconds=30)
    pulse(start)
    tick(rollout)
    started = in_flight(rollout)
    assert len(started) == 4
    # The database is down for 60 s (6 heartbeats): nothing is heard, every last_seen_at ages, deadlines pass.
    back = start + timedelta(seconds=60)
    with time_machine.travel(back, tick=False):
        tick(rollout)  # the database is back, no heartbeat heard yet: the silence is the server's
        assert states(rollout) == {"in_flight": 4}
        pulse(back)  # the first heartbeat heard after the gap
        assert FleetPulse.objects.get().listening_since == back
        tick(rollout)
        assert states(rollout) == {"in_flight": 4}  # overdue, but their agents may have rejoined unheard
    # The fleet is heard again; three agents had rejoined on 1.0.0 during the outage, one never came back.
    for second in range(HEARTBEAT, 3 * HEARTBEAT, HEARTBEAT):
        with time_machine.travel(back + timedelta(seconds=second), tick=False):
            pulse(timezone.now())
    for upgrade in started[:3]:
        NodeSession.objects.filter(node_id=upgrade.node_id).update(daemon_version="1.0.0", last_seen_at=back)
    with time_machine.travel(back + timedelta(seconds=3 * HEARTBEAT), tick=False):
        pulse(timezone.now())
        tick(rollout)
        assert states(rollout) == {"succeeded": 3, "failed": 1}


def test_after_an_outage_an_offline_looking_node_waits_then_is_skipped(tenant, releases, pulse):
    nodes = fleet(tenant, {"a": (2, "1")})["a"]
    start = timezone.now()
    pulse(start)
    back = start + timedelta(seconds=60)
    with time_machine.travel(back, tick=False):
        rollout = create(tenant)
        tick(rollout)
        assert states(rollout) == {"pending": 2}  # nothing heard for 60 s: both may be running, neither skipped
        pulse(back)  # heard again after a 60 s gap
        NodeSession.objects.filter(node=nodes[0]).update(last_seen_at=back)
        tick(rollout)
        assert states(rollout) == {"in_flight": 1, "pending": 1}  # not skipped: maybe running, not heard yet
    for second in range(HEARTBEAT, 4 * HEARTBEAT, HEARTBEAT):
        with time_machine.travel(back + timedelta(seconds=second), tick=False):
            NodeSession.objects.filter(node=nodes[0]).update(last_seen_at=timezone.now())
            pulse(timezone.now())
    with time_machine.travel(back + timedelta(seconds=3 * HEARTBEAT), tick=False):
        tick(rollout)
        assert states(rollout) == {"in_flight": 1, "skipped": 1}  # a whole window heard: it is down


def test_a_silence_shorter_than_the_online_window_skips_no_node_heard_just_before_it(tenant, releases, pulse):
    """A running agent was heard at most an interval before the server went deaf: it looks offline once the
    silence passes 2 intervals, under the online window (3). Trust ends with the gap (1.5), not the window."""
    nodes = fleet(tenant, {"a": (2, "1")})["a"]
    start = timezone.now()
    NodeSession.objects.filter(node=nodes[0]).update(last_seen_at=start - timedelta(seconds=HEARTBEAT - 1))
    pulse(start)  # the last heartbeat heard (nodes[1]'s) before the database goes down
    with time_machine.travel(start + timedelta(seconds=2.5 * HEARTBEAT), tick=False):
        rollout = create(tenant)
        tick(rollout)
        assert states(rollout) == {"in_flight": 1, "pending": 1}  # nodes[0], unheard for 34 s, is waited for


# --- 16: a failed upgrade whose node never came back still uses the budget -------------------------


def test_a_failed_node_that_never_came_back_counts_as_disrupted(tenant, releases):
    nodes = fleet(tenant, {"a": (4, "0.25")})["a"]  # allowed 1
    rollout = create(tenant, upgrade_timeout_seconds=30, max_failure_ratio=1)
    tick(rollout)
    (upgrade,) = in_flight(rollout)
    NodeSession.objects.filter(node_id=upgrade.node_id).update(left_at=timezone.now())  # restarting, never back
    with time_machine.travel(timezone.now() + timedelta(seconds=31), tick=False):
        heartbeat_all()
        tick(rollout)
        assert states(rollout) == {"failed": 1, "pending": 3}  # its slot is still taken
        assert pool_budget(pool_id=nodes[0].pool_id).disrupted == 1
        other = next(n for n in nodes if n.id != upgrade.node_id)
        with pytest.raises(Conflict) as refused:
            workflow_start(tenant=tenant, node_id=other.id, kind="remediation")
        assert refused.value.code == "budget_exhausted"
        # The agent comes back (on the old version): the node no longer counts; the rollout goes on.
        rejoin(upgrade.node_id, "0.9.0")
        assert pool_budget(pool_id=nodes[0].pool_id).disrupted == 0
        assert tick(rollout).started == 1


def test_rollout_spec_refuses_a_non_list_of_pools():
    with pytest.raises(InvalidInput):
        rollout_spec(version="1.0.0", pool_ids="not-a-list")


def test_a_fleet_silent_while_the_server_answers_is_silent_itself(api, tenant, releases, pulse, monkeypatch, settings):
    """Every agent gone (one node that never rejoins) while the API is answered: the server is not deaf, so the
    overdue node fails at its deadline and goes back, and an offline node is skipped."""
    settings.FLEET_HEARD_BY_API = True
    nodes = fleet(tenant, {"a": (2, "1")})["a"]
    start = timezone.now()
    pulse(start)
    rollout = create(tenant, upgrade_timeout_seconds=30, waves=[50, 100], soak_seconds=0, max_failure_ratio=1)
    tick(rollout)
    (upgrade,) = in_flight(rollout)
    NodeSession.objects.filter(node_id=upgrade.node_id).update(left_at=start)  # restarting, never back
    # No agent is heard again; an operator (or a monitor) reads the rollout every 10 s.
    for second in range(10, 70, 10):
        with time_machine.travel(start + timedelta(seconds=second), tick=False):
            monkeypatch.setattr(liveness, "_last_written_at", None)  # another process's request each time
            assert api.get(f"/api/compute/rollouts/{rollout.id}/").status_code == 200
            tick(rollout)
    rollout.refresh_from_db()
    assert states(rollout) == {"failed": 1, "skipped": 1}, states(rollout)
    assert NodeUpgrade.objects.get(node_id=upgrade.node_id).reason == "timeout"
    assert {n.id for n in nodes} == set(NodeUpgrade.objects.filter(rollout=rollout).values_list("node_id", flat=True))
