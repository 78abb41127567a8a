"""A wave's failures judged against ``maxFailureRatio`` (docs/controller.md#the-tick): the rollout pauses with
``failure_ratio`` only when they exceed it, whenever they were committed (after the judge step, during an operator's
pause), and a resume accepts the failures seen."""

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from fleet.models import Pool
from rollout.models import NodeUpgrade, Rollout, RolloutEvent
from rollout.rollouts.actions import rollout_pause, rollout_resume
from tests.factories import fleet
from tests.rollout.helpers import create, events, heartbeat_all, in_flight, rejoin, states, tick

pytestmark = pytest.mark.django_db


def _settle_wave(rollout, *, succeed: int, fail: int):
    """Start all nodes of the wave (budget 1.0), make ``succeed`` rejoin, let the others time out."""
    tick(rollout)
    upgrades = in_flight(rollout)
    assert len(upgrades) == succeed + fail
    for upgrade in upgrades[:succeed]:
        rejoin(upgrade.node_id, "1.0.0")
    with time_machine.travel(timezone.now() + timedelta(seconds=rollout.upgrade_timeout_seconds + 1), tick=False):
        heartbeat_all(but=[upgrade.node_id for upgrade in upgrades[succeed:]])  # the others' agents are down
        tick(rollout)


def test_no_pause_at_exactly_the_failure_ratio(tenant, releases):
    fleet(tenant, {"a": (10, "1")})
    rollout = create(tenant, waves=[10, 100] and [100], max_failure_ratio=0.1, upgrade_timeout_seconds=60)
    _settle_wave(rollout, succeed=9, fail=1)
    assert rollout.state == "completed"


def test_pause_when_the_failure_ratio_is_exceeded(tenant, releases):
    fleet(tenant, {"a": (10, "1")})
    rollout = create(tenant, waves=[100], max_failure_ratio=0.1, upgrade_timeout_seconds=60)
    _settle_wave(rollout, succeed=8, fail=2)
    assert (rollout.state, rollout.paused_reason) == ("paused", "failure_ratio")
    paused = RolloutEvent.objects.get(rollout=rollout, kind="rollout.paused")
    assert paused.data["pausedReason"] == "failure_ratio"
    assert (paused.data["failed"], paused.data["succeeded"]) == (2, 8)


def test_a_canary_failure_pauses_before_the_next_wave(tenant, releases):
    fleet(tenant, {"a": (20, "1")})
    rollout = create(tenant, waves=[5, 100], max_failure_ratio=0.1, upgrade_timeout_seconds=60)
    _settle_wave(rollout, succeed=0, fail=1)
    assert rollout.state == "paused"
    assert states(rollout, wave=1) == {"pending": 19}
    assert tick(rollout).started == 0  # paused: nothing starts


def test_resume_accepts_the_failures_seen_and_new_ones_pause_again(tenant, releases):
    fleet(tenant, {"a": (4, "0.25")})  # one at a time
    rollout = create(tenant, waves=[100], max_failure_ratio=0, upgrade_timeout_seconds=60)
    tick(rollout)
    with time_machine.travel(timezone.now() + timedelta(seconds=61), tick=False):
        heartbeat_all()
        tick(rollout)
        assert rollout.state == "paused"
        rollout_resume(rollout_id=rollout.id)
        tick(rollout)
        assert rollout.state == "active"
        assert len(in_flight(rollout)) == 1
    with time_machine.travel(timezone.now() + timedelta(seconds=200), tick=False):
        heartbeat_all()
        tick(rollout)
        assert (rollout.state, rollout.paused_reason) == ("paused", "failure_ratio")
    assert events(rollout).count("rollout.paused") == 2


def test_the_judge_and_the_advance_read_the_same_counts(tenant, releases):
    """One decision judges and advances on one read of the wave's counts: a failure that says the wave is over
    pauses it instead of completing it (the tick has no second reading to disagree with)."""
    from rollout.controller.decide import decide
    from rollout.controller.load import tick_facts
    from rollout.controller.stops import with_stop_facts

    fleet(tenant, {"a": (3, "1")})
    rollout = create(tenant, waves=[100], max_failure_ratio=0.2, upgrade_timeout_seconds=60)
    tick(rollout)
    first, second, third = in_flight(rollout)
    rejoin(first.node_id, "1.0.0")
    rejoin(second.node_id, "1.0.0")
    # A timeout task fails the third node: the wave is over, with one failure in three.
    NodeUpgrade.objects.filter(pk=third.pk).update(state="failed", reason="timeout", settled_at=timezone.now())
    now = timezone.now()
    loaded = with_stop_facts(Rollout.objects.select_related("release"), now=now).get(pk=rollout.pk)
    decision = decide(tick_facts(loaded, now=now))
    assert decision.advance is not None
    assert decision.advance.pause is not None
    assert not decision.advance.moves
    assert decision.start is None
    tick(rollout)
    rollout.refresh_from_db()
    assert (rollout.state, rollout.paused_reason) == ("paused", "failure_ratio")
    assert Pool.objects.get().default_daemon_version is None


def test_failures_during_an_operators_pause_are_judged_after_resume(tenant, releases):
    fleet(tenant, {"a": (4, "1")})
    rollout = create(tenant, waves=[50, 100], max_failure_ratio=0.1, upgrade_timeout_seconds=60)
    tick(rollout)
    rollout_pause(rollout_id=rollout.id)
    with time_machine.travel(timezone.now() + timedelta(seconds=61), tick=False):
        heartbeat_all()
        tick(rollout)  # the two in-flight nodes time out while paused
        assert states(rollout, wave=0) == {"failed": 2}
        rollout_resume(rollout_id=rollout.id)
        tick(rollout)
    assert (rollout.state, rollout.paused_reason) == ("paused", "failure_ratio")
    assert states(rollout, wave=1) == {"pending": 2}
