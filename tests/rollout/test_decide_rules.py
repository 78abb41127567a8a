"""The decision function alone (rollout/controller/decide.py), over generated facts, against the written rules of
docs/controller.md#the-tick. No database: the facts are unsaved instances, and any query would fail the test
(no ``django_db`` mark)."""

from __future__ import annotations

from copy import copy
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from uuid import UUID

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollout.controller.decide import FailedGate, TickDecision, TickFacts, decide
from rollout.controller.settle_rules import InFlight, Settle
from rollout.models import NodeUpgrade, Rollout, RolloutGate, RolloutWave

S = NodeUpgrade.State
NOW = datetime(2031, 3, 5, 12, 0, tzinfo=UTC)
POOLS = [UUID(int=k + 1) for k in range(3)]
FINAL = (Settle.SUCCEED, Settle.READY, Settle.TIMEOUT, Settle.NOT_READY)


@st.composite
def facts(draw) -> TickFacts:
    waves = draw(st.integers(1, 3))
    current = draw(st.integers(0, waves - 1))
    state = draw(st.sampled_from([Rollout.State.ACTIVE] * 3 + [Rollout.State.PAUSED, Rollout.State.SCHEDULED,
                                  Rollout.State.AWAITING_APPROVAL]))  # fmt: skip
    min_ready = draw(st.sampled_from([0, 0, 30]))
    rollout = Rollout(
        state=state,
        current_wave=current,
        min_ready_seconds=min_ready,
        max_failure_ratio=Decimal(draw(st.sampled_from(["0", "0.2", "0.5", "1"]))),
        acknowledged_failures=draw(st.integers(0, 1)),
        failure_ratio_min_settled=draw(st.integers(1, 4)),
        soak_seconds=300,
        next_wave_at=draw(st.sampled_from([None, NOW - timedelta(minutes=1), NOW + timedelta(minutes=1)])),
        start_at=NOW + timedelta(hours=draw(st.sampled_from([-1, 1]))) if state == Rollout.State.SCHEDULED else None,
        end_by=draw(st.sampled_from([None, None, NOW - timedelta(minutes=1), NOW + timedelta(hours=1)])),
        end_behavior=draw(st.sampled_from([None, "pause", "abort"])),
        paused_reason=Rollout.PausedReason.OPERATOR if state == Rollout.State.PAUSED else None,
        waves=[100] * waves,
    )
    rollout.release_is_blocked = draw(st.booleans()) and draw(st.booleans())
    rollout.release_is_expired = draw(st.booleans()) and draw(st.booleans())
    gate_failed = "g" if draw(st.booleans()) and draw(st.booleans()) else None
    rollout.gate_failed = gate_failed
    settled = draw(st.booleans())
    wave_rows = {
        k: RolloutWave(index=k, percent=100, total=4, settled_at=NOW - timedelta(minutes=5) if k < current else None)
        for k in range(waves)
    }
    if settled:
        wave_rows[current].settled_at = NOW - timedelta(minutes=5)
    rows = draw(
        st.lists(
            st.builds(
                InFlight,
                id=st.integers(1, 10_000),
                wave=st.just(current),
                on_target=st.booleans(),
                overdue=st.booleans(),
                # Only a rollout with minReadySeconds records arrivals.
                arrived_at=st.sampled_from(
                    [None, None, NOW - timedelta(seconds=40), NOW - timedelta(seconds=5)] if min_ready else [None]
                ),
                still=st.booleans(),
                online=st.booleans(),
                joined_at=st.sampled_from([None, NOW - timedelta(seconds=40), NOW - timedelta(seconds=5)]),
            ),
            max_size=4,
            unique_by=lambda row: row.id,
        )
    )
    pending = {
        (wave, pool): n
        for wave in (current, current + 1)
        for pool in POOLS
        if wave < waves and (n := draw(st.integers(0, 2)))
    }
    counts = dict.fromkeys(S.values, 0)
    counts[S.IN_FLIGHT] = len(rows)
    counts[S.PENDING] = sum(n for (wave, _), n in pending.items() if wave == current)
    counts[S.SUCCEEDED] = draw(st.integers(0, 4))
    counts[S.FAILED] = draw(st.integers(0, 2))
    windows = {pool: draw(st.sampled_from([None, None, NOW + timedelta(hours=1)])) for pool in POOLS}
    on_failure = draw(st.sampled_from(RolloutGate.OnFailure.values))
    return TickFacts(
        rollout=rollout,
        now=NOW,
        waves=wave_rows,
        counts=counts,
        in_flight=tuple(rows),
        last_settled=NOW - timedelta(minutes=6) if counts[S.SUCCEEDED] or counts[S.FAILED] else None,
        pending=pending,
        windows=windows,
        gate_holding=draw(st.booleans()) and draw(st.booleans()),
        offline_is_down=draw(st.booleans()),
        every=60.0,
        failed_gate=None if gate_failed is None else FailedGate(name="g", value=3.0, on_failure=on_failure),
    )


def deadline_due(rollout: Rollout) -> bool:
    """docs/controller.md#schedules: at endBy, a rollout not finished; a paused one unless its pause is already the
    deadline's."""
    return rollout.end_by is not None and rollout.end_by <= NOW and rollout.state != Rollout.State.AWAITING_APPROVAL


def runs(rollout: Rollout) -> bool:
    """It runs at this tick: active, or scheduled with its startAt come."""
    due = rollout.state == Rollout.State.SCHEDULED and rollout.start_at is not None and rollout.start_at <= NOW
    return rollout.state == Rollout.State.ACTIVE or due


def stops(rollout: Rollout) -> bool:
    """docs/controller.md#the-tick: a blocked or expired release, a gate failed gateFailureLimit times in a row."""
    return bool(rollout.release_is_blocked or rollout.release_is_expired or rollout.gate_failed)


def settled(decision: TickDecision) -> dict[int, Settle]:
    final: dict[int, Settle] = {}
    for verdict in FINAL:
        for pk in decision.settles.get(verdict, ()):
            assert pk not in final, "a row settles once"
            final[pk] = verdict
    return final


def after_settle(f: TickFacts, decision: TickDecision) -> dict[str, int]:
    counts = dict(f.counts)
    for verdict in settled(decision).values():
        counts[S.IN_FLIGHT] -= 1
        counts[S.SUCCEEDED if verdict in (Settle.SUCCEED, Settle.READY) else S.FAILED] += 1
    return counts


def exceeded(rollout: Rollout, counts: dict[str, int]) -> bool:
    """docs/controller.md#the-tick, Judge: failed / (succeeded + failed) exceeds maxFailureRatio, new failures
    only, once failureRatioMinSettled settled or the wave is over."""
    failed, succeeded = counts[S.FAILED], counts[S.SUCCEEDED]
    if failed <= rollout.acknowledged_failures or failed + succeeded == 0:
        return False
    over = not counts[S.PENDING] and not counts[S.IN_FLIGHT]
    if failed + succeeded < rollout.failure_ratio_min_settled and not over:
        return False
    return Decimal(failed) > rollout.max_failure_ratio * (failed + succeeded)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(f=facts())
def test_the_decision_follows_the_written_rules(f: TickFacts):
    before = copy(f.rollout.__dict__)
    decision = decide(f)
    assert decide(f) == decision  # a function of the facts alone
    assert f.rollout.__dict__ == before  # and it changes none of them
    rollout = f.rollout

    # Settle: each in-flight row at most once; the rules of docs/controller.md#the-tick and #readiness.
    final = settled(decision)
    for row in f.in_flight:
        verdict = final.get(row.id)
        if row.arrived_at is None and row.on_target and not rollout.min_ready_seconds:
            assert verdict == Settle.SUCCEED
        if row.arrived_at is None and not row.on_target:
            assert verdict == (Settle.TIMEOUT if row.overdue and f.offline_is_down else None)
        if verdict == Settle.TIMEOUT:
            assert f.offline_is_down  # never judged while the server was not hearing its fleet
        if verdict == Settle.READY:
            assert row.online
            assert row.arrived_at is None or row.arrived_at + timedelta(seconds=rollout.min_ready_seconds) <= NOW
        if row.arrived_at is not None and not row.still:
            assert verdict == Settle.NOT_READY
    # The stops, first: the deadline, then the others; a stopped rollout's nodes settle, nothing else moves.
    if deadline_due(rollout) and (rollout.state != Rollout.State.PAUSED or rollout.end_behavior in ("abort",)):
        assert decision.deadline
    if decision.deadline or decision.stop is not None or not runs(rollout):
        assert decision.advance is None
        assert decision.start is None
        return
    assert not stops(rollout)  # a blocked or expired release, a failed gate: a stop
    counts = after_settle(f, decision)
    # Judge: on the counts after the settle; a pause moves nothing.
    if exceeded(rollout, counts):
        assert decision.advance is not None
        assert decision.advance.pause is not None
        assert decision.start is None
        return
    advance = decision.advance
    if counts[S.PENDING] or counts[S.IN_FLIGHT]:
        assert advance is None  # a wave whose nodes move does not advance
    else:
        assert advance is not None
        assert advance.pause is None
        last = rollout.current_wave == max(f.waves)
        assert advance.complete == last
        assert advance.record == (f.waves[rollout.current_wave].settled_at is None)
        if advance.next_wave is not None:
            assert advance.next_wave == rollout.current_wave + 1
    # Start: the wave it stands on after the advance, only its pools with pending rows, never a closed one, never
    # while a gate holds, soaking, or completing.
    start = decision.start
    if start is None:
        return
    assert not f.gate_holding
    assert advance is None or advance.moves
    assert advance is None or not advance.complete
    wave = rollout.current_wave + (1 if advance is not None and advance.next_wave is not None else 0)
    assert start.wave == wave
    waiting = {pool for (w, pool), n in f.pending.items() if w == wave and n}
    assert set(start.open) | set(start.closed) == waiting
    assert all(f.windows[pool] is None for pool in start.open)
    assert all(f.windows[pool] is not None for pool in start.closed)


def test_a_gates_on_failure_is_the_stops_action():
    """docs/controller.md#gates: a gate's onFailure says what its stop does; the other stops pause."""
    rollout = Rollout(state=Rollout.State.ACTIVE, current_wave=0, min_ready_seconds=0, waves=[100])
    rollout.release_is_blocked = rollout.release_is_expired = False
    rollout.gate_failed = "errors"
    gate = FailedGate(name="errors", value=7.0, on_failure=RolloutGate.OnFailure.ABORT_ROLLBACK)
    base = TickFacts(rollout=rollout, now=NOW, waves={0: RolloutWave(index=0)}, counts={}, failed_gate=gate)
    stop = decide(base).stop
    assert stop is not None
    assert (stop.reason, stop.action, stop.gate, stop.value) == ("gate_failed:errors", "abort_rollback", "errors", 7.0)
    rollout.gate_failed, rollout.release_is_expired = None, True
    stop = decide(base).stop
    assert stop is not None
    assert (stop.reason, stop.action) == ("release_expired", "pause")
