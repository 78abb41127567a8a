"""The controller's decision (docs/controller.md#the-tick): one pure function, one rollout's facts -> its tick.

``decide(facts)`` reads no database, no clock and no setting: everything it needs is in ``TickFacts``
(loaded once under the rollout's row lock by rollout/controller/load.py), and it returns one ``TickDecision``
that the tick (rollout/controller/tick.py) applies and nothing else. The seed's step order lives here, once:

0. stop: the deadline (``endBy``), a blocked or expired release, a failed gate (``stops.tick_stop``); else a
   scheduled rollout whose ``startAt`` has come starts;
1. settle: each in-flight row's verdict (``settle_verdict``): it succeeds, arrives (readiness), times out,
   proves ready, or fails its readiness;
2. judge: the current wave's failure ratio, on its counts after the settle, pauses it;
3. advance: a wave with nothing pending or in flight is recorded settled, then after its soak the next wave
   starts, or the rollout completes after its last one;
4. start: the current wave's pending rows in its open pools, each pool's turn (``pool_turns``) within the
   free slots, which the tick re-reads under the pools' row locks (the one fact another rollout can change);
   a wave whose only pending rows are all skipped advances again (``TickDecision.after_start``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from copy import copy
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

from rollout.controller.decisions import Decision, Move
from rollout.controller.events import Paused
from rollout.controller.judge import failure_ratio_exceeded
from rollout.controller.scheduled import start_due
from rollout.controller.settle_rules import InFlight, Settle, readiness_end, settle_verdict
from rollout.controller.stops import tick_stop
from rollout.controller.turns import Candidate, turn_decision
from rollout.models import NodeUpgrade, Rollout, RolloutGate, RolloutWave

State = NodeUpgrade.State


# --- the facts ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FailedGate:
    """The gate whose failures in a row reached ``gateFailureLimit`` (``stops.tick_stop``'s ``gate_failed``)."""

    name: str
    value: float | None
    #: What reaching the limit does (``RolloutGate.OnFailure``): pause, abort, abort with rollback.
    on_failure: str


@dataclass(frozen=True)
class TickFacts:
    """One rollout at one moment: what ``decide`` reads, and nothing else.

    ``rollout`` comes from a ``stops.with_stop_facts`` query (its release blocked or expired, its failed gate);
    ``waves`` its waves by index; ``counts`` its current wave's rows per state; ``last_settled`` when the
    current wave's last settled row settled; ``pending`` its pending rows per (wave, pool) of the current and
    next waves; ``windows``: pool id -> None when open now, else when it opens; ``gate_holding``: a gate whose
    latest result is not a fresh pass (no node starts); ``offline_is_down``: the fleet's offline verdicts hold;
    ``every``: the periodic tick's period in seconds; ``failed_gate``: the gate that stops it, if one does.
    """

    rollout: Rollout
    now: datetime
    waves: Mapping[int, RolloutWave]
    counts: Mapping[str, int]
    in_flight: tuple[InFlight, ...] = ()
    last_settled: datetime | None = None
    pending: Mapping[tuple[int, UUID], int] = field(default_factory=dict)
    windows: Mapping[UUID, datetime | None] = field(default_factory=dict)
    gate_holding: bool = False
    offline_is_down: bool = True
    every: float = 60.0
    failed_gate: FailedGate | None = None

    @property
    def last_wave(self) -> int:
        return max(self.waves, default=0)


# --- the decision -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Advance:
    """A wave with nothing pending or in flight: pause on its failures, else record it settled, then complete,
    start ``next_wave``, or soak (neither)."""

    pause: Paused | None = None
    record: bool = False
    complete: bool = False
    next_wave: int | None = None

    @property
    def moves(self) -> bool:
        return self.complete or self.next_wave is not None


@dataclass(frozen=True)
class StartStep:
    """The start step: ``wave``'s pending rows in its ``open`` pools, each pool's turn within its free slots;
    ``closed``: its pools outside their windows (pool id -> when one opens)."""

    wave: int
    open: tuple[UUID, ...]
    closed: Mapping[UUID, datetime]
    offline_is_down: bool
    #: Its wave is over when every pending row of its open pools is skipped: the advance that follows then.
    then: Advance | None = None


@dataclass(frozen=True)
class Stop:
    """A stop other than the deadline: its ``reason`` (a PausedReason, or ``gate_failed:<name>``) and what it does
    (``RolloutGate.OnFailure``: a gate's ``onFailure``; any other stop pauses), with the gate and its latest value."""

    reason: str
    action: str = RolloutGate.OnFailure.PAUSE
    gate: str | None = None
    value: float | None = None


@dataclass
class TickDecision:
    """What one tick does to one rollout, in this order (``rollout/controller/tick.py`` applies it)."""

    deadline: bool = False
    start_scheduled: bool = False
    stop: Stop | None = None
    settles: dict[Settle, list[int]] = field(default_factory=dict)
    #: A readiness end before the next period: one tick then.
    tick_at: datetime | None = None
    advance: Advance | None = None
    start: StartStep | None = None

    def after_start(self, *, started: int, skipped: int, exhausted: bool) -> Advance | None:
        """The advance that follows the start step: its wave is over when nothing started, something was
        skipped, and every pool's pending rows were reached (``exhausted``)."""
        if self.start is None or started or not skipped or not exhausted:
            return None
        return self.start.then


def pool_turns(
    rows: Iterable[Candidate], *, room: int, offline_is_down: bool
) -> tuple[list[tuple[Candidate, Decision]], bool]:
    """A pool's turn: its pending ``rows`` in position order, each decided (``turns.turn_decision``), until no
    slot is left; and whether every row was reached. ``rows`` may be read lazily: no row past the last slot."""
    turns: list[tuple[Candidate, Decision]] = []
    started = 0
    for row in rows:
        if started >= room:
            return turns, False
        decision = turn_decision(row, reached=True, offline_is_down=offline_is_down)
        turns.append((row, decision))
        if decision.move == Move.START:
            started += 1
    return turns, True


def _advance(facts: TickFacts, rollout: Rollout, counts: Mapping[str, int], last_settled: datetime | None) -> Advance:
    """The advance of ``rollout``'s current wave (nothing pending or in flight in ``counts``), on a copy."""
    if failure_ratio_exceeded(rollout=rollout, counts=dict(counts)):
        return Advance(pause=_failure_pause(rollout, counts))
    wave = facts.waves[rollout.current_wave]
    record = not wave.settled
    if record:
        wave = copy(wave)
        rollout.wave_settles(wave, at=last_settled or facts.now)
    if rollout.on_last_wave(last_index=facts.last_wave):
        return Advance(record=record, complete=True)
    if rollout.soaking(wave=wave, last_index=facts.last_wave, at=facts.now):
        return Advance(record=record)
    return Advance(record=record, next_wave=rollout.current_wave + 1)


def _stop(reason: str, gate: FailedGate | None) -> Stop:
    """A gate's stop does what its ``onFailure`` says (docs/controller.md#gates); the others pause."""
    if not reason.startswith(Rollout.GATE_FAILED_PREFIX):
        return Stop(reason)
    name = reason.removeprefix(Rollout.GATE_FAILED_PREFIX)
    if gate is None or gate.name != name:
        return Stop(reason, gate=name)
    return Stop(reason, action=gate.on_failure, gate=name, value=gate.value)


def _failure_pause(rollout: Rollout, counts: Mapping[str, int]) -> Paused:
    return Paused(
        paused_reason=Rollout.PausedReason.FAILURE_RATIO,
        wave=rollout.current_wave,
        failed=counts[State.FAILED],
        succeeded=counts[State.SUCCEEDED],
        max_failure_ratio=float(rollout.max_failure_ratio),
    )


def decide(facts: TickFacts) -> TickDecision:
    """What the tick does to ``facts.rollout`` now (this module's docstring: the steps, in order)."""
    now, decision = facts.now, TickDecision()
    rollout = copy(facts.rollout)  # the decision's own view of it, step after step; the facts stay as loaded
    stop = tick_stop(rollout, now=now)
    if stop == Rollout.PausedReason.DEADLINE:
        decision.deadline = True
    else:
        decision.start_scheduled = start_due(rollout, now=now)
        decision.stop = None if stop is None else _stop(stop, facts.failed_gate)
    if decision.start_scheduled:
        rollout.state = Rollout.State.ACTIVE
    running = stop is None and rollout.state == Rollout.State.ACTIVE
    # 1. settle
    counts = dict.fromkeys(State.values, 0) | dict(facts.counts)
    last_settled = facts.last_settled
    trusted = facts.offline_is_down
    still_arrived: list[datetime] = []
    for row in facts.in_flight:
        verdicts = settle_verdict(row, min_ready_seconds=rollout.min_ready_seconds, now=now, trusted=trusted)
        for verdict in verdicts:
            decision.settles.setdefault(verdict, []).append(row.id)
        final = verdicts[-1] if verdicts else None
        if final in (Settle.SUCCEED, Settle.READY, Settle.TIMEOUT, Settle.NOT_READY):
            if row.wave == rollout.current_wave:
                counts[State.IN_FLIGHT] -= 1
                counts[State.SUCCEEDED if final in (Settle.SUCCEED, Settle.READY) else State.FAILED] += 1
                last_settled = now if last_settled is None else max(last_settled, now)
        elif rollout.min_ready_seconds and (row.arrived_at is not None or final == Settle.ARRIVE):
            still_arrived.append(row.arrival(now=now))
    if still_arrived:
        end = readiness_end(min(still_arrived), min_ready_seconds=rollout.min_ready_seconds)
        if now < end <= now + timedelta(seconds=facts.every):
            decision.tick_at = end
    if not running:
        return decision
    # 2. judge, 3. advance
    if failure_ratio_exceeded(rollout=rollout, counts=counts):
        decision.advance = Advance(pause=_failure_pause(rollout, counts))
        return decision
    if not counts[State.PENDING] and not counts[State.IN_FLIGHT]:
        decision.advance = _advance(facts, rollout, counts, last_settled)
        if decision.advance.complete:
            return decision
        if decision.advance.next_wave is not None:
            rollout.current_wave, rollout.acknowledged_failures, rollout.next_wave_at = (
                decision.advance.next_wave,
                0,
                None,
            )
            counts = dict.fromkeys(State.values, 0)
            counts[State.PENDING] = sum(n for (w, _), n in facts.pending.items() if w == rollout.current_wave)
    # 4. start
    wave = rollout.current_wave
    waiting = sorted(pool for (w, pool), n in facts.pending.items() if w == wave and n)
    if facts.gate_holding or not waiting or (decision.advance is not None and not decision.advance.moves):
        return decision
    closed = {pool: opens for pool in waiting if (opens := facts.windows.get(pool)) is not None}
    open_pools = tuple(pool for pool in waiting if pool not in closed)
    then = None
    if not closed and not counts[State.IN_FLIGHT]:
        over = dict(counts)
        over[State.SKIPPED] += over[State.PENDING]
        over[State.PENDING] = 0
        then = _advance(facts, rollout, over, now)  # the skips settle now
    decision.start = StartStep(
        wave=wave, open=open_pools, closed=closed, offline_is_down=facts.offline_is_down, then=then
    )
    return decision
