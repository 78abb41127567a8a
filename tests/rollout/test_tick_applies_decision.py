"""The tick decides nothing itself (issue 50): with ``decide`` replaced by a stub, it writes exactly the stub's
decision and nothing else (docs/controller.md#the-tick: load -> decide -> apply).

Each decision below is one the rules would never take on these facts (start with a stop pending, pause without a
cause, advance a wave whose nodes are still moving, complete a rollout with pending nodes, succeed a node that
never reported): a tick that re-evaluated any rule would refuse it, and the test would fail.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from rollout.controller import tick as tick_module
from rollout.controller.decide import Advance, StartStep, Stop, TickDecision, TickFacts
from rollout.controller.settle_rules import Settle
from rollout.models import NodeUpgrade, Rollout, RolloutWave
from tests.factories import fleet
from tests.rollout.helpers import create, in_flight, tick

pytestmark = pytest.mark.django_db

ROLLOUT_FIELDS = ("state", "paused_reason", "current_wave", "next_wave_at", "completed_at", "acknowledged_failures")


def world(rollout: Rollout) -> dict[str, Any]:
    """Everything a tick may write about ``rollout``, but its own health mark (``last_tick_at``)."""
    rollout.refresh_from_db()
    return {
        "rollout": {name: getattr(rollout, name) for name in ROLLOUT_FIELDS},
        "rows": dict(NodeUpgrade.objects.filter(rollout=rollout).values_list("id", "state")),
        "waves": dict(RolloutWave.objects.filter(rollout=rollout).values_list("index", "settled_at")),
        "events": rollout.events.count(),
    }


@pytest.fixture
def stub(monkeypatch):
    """Replace the decision function; record the facts it was given."""
    seen: list[TickFacts] = []

    def install(decision: TickDecision) -> list[TickFacts]:
        def decide(facts: TickFacts) -> TickDecision:
            seen.append(facts)
            return decision

        monkeypatch.setattr(tick_module, "decide", decide)
        return seen

    return install


@pytest.fixture
def moving(tenant, releases) -> Rollout:
    """Two waves over 10 nodes (budget 20 %): the first tick started two nodes of the first wave."""
    fleet(tenant, {"a": (10, "0.2")})
    rollout = create(tenant, waves=[50, 100])
    tick(rollout)
    assert len(in_flight(rollout)) == 2
    return rollout


def test_an_empty_decision_writes_nothing(moving, stub):
    """The nodes in flight are an hour overdue: the rules would time them out and start the next two in their
    slots. An empty decision moves nothing."""
    NodeUpgrade.objects.filter(rollout=moving, state="in_flight").update(deadline=timezone.now() - timedelta(hours=1))
    before = world(moving)
    seen = stub(TickDecision())
    tick(moving)
    assert len(seen) == 1  # decided once
    assert world(moving) == before


def test_a_start_step_starts_what_it_names_even_while_a_rule_would_hold_it(moving, stub):
    """A stop is due (the release is blocked) and the rules would start nothing; the stub's start step starts."""
    from rollout.models import ReleaseBlock

    ReleaseBlock.objects.create(tenant=moving.tenant, release=moving.release, reason="bad", at=timezone.now())
    pool = moving.pools.get()
    # the two in flight settle out of the budget (the stub says so): two slots free for the start
    ids = [row.id for row in in_flight(moving)]
    before = world(moving)
    stub(
        TickDecision(
            settles={Settle.SUCCEED: ids}, start=StartStep(wave=0, open=(pool.id,), closed={}, offline_is_down=True)
        )
    )
    result = tick(moving)
    after = world(moving)
    assert after["rollout"] == before["rollout"]  # not paused: the stop is the decision's, and it has none
    assert {pk: after["rows"][pk] for pk in ids} == dict.fromkeys(ids, "succeeded")  # never reported: succeeded
    assert result.started == 2
    assert sorted(after["rows"].values()).count("in_flight") == 2


def test_a_pause_with_a_reason_pauses_with_that_reason_and_nothing_else(moving, stub):
    before = world(moving)
    stub(TickDecision(stop=Stop(Rollout.PausedReason.RELEASE_EXPIRED)))
    result = tick(moving)
    after = world(moving)
    assert result.paused
    assert (after["rollout"]["state"], after["rollout"]["paused_reason"]) == ("paused", "release_expired")
    assert after["rows"] == before["rows"]  # nothing settled, nothing cancelled
    assert after["events"] == before["events"] + 1  # rollout.paused


def test_an_advance_moves_a_wave_whose_nodes_still_move(moving, stub):
    before = world(moving)
    stub(TickDecision(advance=Advance(next_wave=1)))
    result = tick(moving)
    after = world(moving)
    assert result.advanced
    assert after["rollout"]["current_wave"] == 1
    assert after["rows"] == before["rows"]
    assert after["waves"] == before["waves"]  # not recorded settled: the stub did not say so


def test_a_completion_completes_a_rollout_with_pending_nodes(moving, stub):
    before = world(moving)
    stub(TickDecision(advance=Advance(record=True, complete=True)))
    result = tick(moving)
    after = world(moving)
    assert result.completed
    assert after["rollout"]["state"] == "completed"
    assert after["rows"] == before["rows"]
    assert after["waves"][0] is not None  # recorded, as the stub said


def test_a_failure_pause_from_the_judge_is_written_with_its_counts(moving, stub):
    from rollout.controller.events import Paused

    pause = Paused(paused_reason="failure_ratio", wave=0, failed=7, succeeded=1, max_failure_ratio=0.1)
    before = world(moving)
    stub(TickDecision(advance=Advance(pause=pause)))
    result = tick(moving)
    after = world(moving)
    assert result.paused
    assert after["rollout"]["paused_reason"] == "failure_ratio"
    assert after["rows"] == before["rows"]
    paused = moving.events.filter(kind="rollout.paused").latest("id")
    assert paused.data["failed"] == 7  # the decision's counts, not a second reading
