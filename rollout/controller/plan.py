"""A rollout's plan at a given moment: what it waits for, and what the next tick does with each pending row.

One function, ``plan_at``, takes every decision from one read of the facts (docs/controller.md#the-plan):

- the facts (``rollout_facts``: per rollout, its pending and in-flight rows counted per (wave, pool), its
  waves' settled times, the gate that holds it; ``pool_states``: the windows, budget and name of each pool
  with pending rows in a starting wave), a constant number of queries for any number of rollouts;
- the rollout's decision (``RolloutDecision``): what the rollout as a whole waits for, or nothing while
  its nodes move;
- each pending row's decision (``Decision``), first that applies: the rollout's own wait
  (``rollout_wait``: approval, schedule, paused, gate, soak, a later wave), its pool's windows, then its
  turn in the pool (rollout/controller/turns.py: start, skip, or wait for the budget or an offline agent).

The tick takes its own decision from its own read of the facts (rollout/controller/decide.py, with the same
rules: ``tick_stop``, ``failure_ratio_exceeded``, ``Rollout.soaking``, ``turn_decision``). The blockers (API and admin,
rollout/rollouts/blockers.py) render this plan and decide nothing; the property test in
tests/rollout/test_start_plan.py checks that the rows whose blocker is ``next_tick`` are exactly those
the tick starts (or skips for want of a binary).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from copy import copy
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from django.db.models import Count, F, Max, Q

from fleet.interface import Pool, PoolBudget, PoolWindows, offline_verdicts_trusted, pool_budgets, pool_windows_at
from rollout.controller.decisions import (
    WAIT_APPROVAL,
    WAIT_GATE,
    WAIT_PAUSED,
    WAIT_SCHEDULE,
    WAIT_SOAK,
    WAIT_WAVE,
    WAIT_WINDOW,
    Code,
    Decision,
)
from rollout.controller.judge import failure_ratio_exceeded
from rollout.controller.scheduled import start_due
from rollout.controller.stops import tick_stops
from rollout.controller.turns import Candidate, candidates, rows_reached, turn_decision
from rollout.gates.verdicts import gates_holding_for
from rollout.models import NodeUpgrade, Rollout, RolloutGate, RolloutWave

State = NodeUpgrade.State


# --- the facts ----------------------------------------------------------------------------------


@dataclass
class RolloutFacts:
    """A rollout's moving parts now: pending and in-flight rows per (wave, pool), its waves' settled times."""

    rollout: Rollout
    now: datetime
    last_wave: int = 0
    waves: dict[int, RolloutWave] = field(default_factory=dict)
    # (wave, pool) -> count, of pending rows and of in-flight rows
    pending: dict[tuple[int, UUID], int] = field(default_factory=lambda: defaultdict(int))
    in_flight: dict[tuple[int, UUID], int] = field(default_factory=lambda: defaultdict(int))
    #: The current wave's rows per state (``judge.wave_counts``'s shape): what the tick's judge reads.
    current_counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(State.values, 0))
    #: When the current wave's last settled row settled (what the advance records once the wave is over).
    current_last_settled: datetime | None = None
    #: Its first gate whose latest result is not a fresh pass (docs/controller.md#gates): no node starts.
    gate: RolloutGate | None = None
    #: Why the next tick pauses it (or, past ``endBy``, aborts it) before it starts anything
    #: (rollout/controller/stops.py ``tick_stop``, then the judge's ``failure_ratio``).
    stop: str | None = None

    @property
    def starts_nodes(self) -> bool:
        """The next tick may start its nodes: it is active, or scheduled and its ``startAt`` has come, and
        the tick does not stop it first."""
        rollout = self.rollout
        running = rollout.state == Rollout.State.ACTIVE or start_due(rollout, now=self.now)
        return running and self.stop is None

    @property
    def wave_moving(self) -> bool:
        """The current wave still has pending or in-flight rows."""
        wave = self.rollout.current_wave
        return any(w == wave for w, _ in self.pending) or any(w == wave for w, _ in self.in_flight)

    @property
    def wave_settled(self) -> bool:
        """The current wave settled (``RolloutWave.settled``)."""
        wave = self.waves.get(self.rollout.current_wave)
        return wave is not None and wave.settled

    @property
    def soaking(self) -> bool:
        """The current wave soaks as the next tick's advance sees it: a scheduled rollout whose ``startAt`` has come
        is active by then (the tick starts it first), and a soak recorded before it was paused and resumed back to
        ``scheduled`` holds it."""
        rollout = self.rollout
        if start_due(rollout, now=self.now):
            rollout = copy(rollout)
            rollout.state = Rollout.State.ACTIVE
        return rollout.soaking(wave=self.waves.get(rollout.current_wave), last_index=self.last_wave, at=self.now)

    @property
    def startable_wave(self) -> int | None:
        """The wave the next tick starts nodes of: the current one while it moves, the next once its soak is over.

        None during the soak (a wave whose last node settled after the last tick soaks from then: the
        next tick records it first, ``_settles_unrecorded``), and on the last wave.
        """
        current = self.rollout.current_wave
        if self.wave_moving:
            return current
        if self.wave_settled and not self.rollout.on_last_wave(last_index=self.last_wave) and not self.soaking:
            return current + 1
        return None

    @property
    def gated_waves(self) -> tuple[int, ...]:
        """The waves whose pending rows a gate holds (blocker ``gate``, right after ``rollout_paused``): the current
        one, and the one that starts next: the startable one, or during a soak the one that starts when it ends (so
        the rows and the rollout, whose blocker is then ``gate`` too, say the same)."""
        current = self.rollout.current_wave
        startable = self.startable_wave
        if startable is None and self.soaking:
            startable = current + 1
        return (current,) if startable is None else (current, startable)

    def pending_pools(self) -> list[UUID]:
        wave = self.startable_wave
        return sorted({pool for (w, pool), n in self.pending.items() if w == wave and n}) if wave is not None else []

    def in_flight_total(self) -> int:
        return sum(self.in_flight.values())

    def in_flight_pools(self) -> set[UUID]:
        return {pool for (_, pool), n in self.in_flight.items() if n}


def rollout_facts(rollouts: Iterable[Rollout], *, now: datetime) -> dict[UUID, RolloutFacts]:
    """Facts of many rollouts in four queries."""
    facts = {rollout.id: RolloutFacts(rollout=rollout, now=now) for rollout in rollouts}
    if not facts:
        return facts
    for wave in RolloutWave.objects.filter(rollout_id__in=list(facts)).only("rollout_id", "index", "settled_at"):
        facts[wave.rollout_id].waves[wave.index] = wave
        facts[wave.rollout_id].last_wave = max(facts[wave.rollout_id].last_wave, wave.index)
    moving = Q(state__in=[State.PENDING, State.IN_FLIGHT]) | Q(wave=F("rollout__current_wave"))
    rows = (
        NodeUpgrade.objects.filter(moving, rollout_id__in=list(facts))
        .values_list("rollout_id", "wave", "pool_id", "state")
        .annotate(n=Count("id"), last=Max("settled_at"))
        .order_by()
    )
    for rollout_id, wave, pool_id, state, n, last in rows:
        one = facts[rollout_id]
        if wave == one.rollout.current_wave:
            one.current_counts[state] += n
            if last is not None and (one.current_last_settled is None or last > one.current_last_settled):
                one.current_last_settled = last
        if state in (State.PENDING, State.IN_FLIGHT):
            (one.pending if state == State.PENDING else one.in_flight)[wave, pool_id] += n
    for rollout_id, gate in gates_holding_for(facts, now=now).items():
        facts[rollout_id].gate = gate
    for rollout_id, stop in tick_stops((f.rollout for f in facts.values()), now=now).items():
        facts[rollout_id].stop = stop
    for f in facts.values():
        # The tick's judge, after its stops: the current wave's failures over the ratio pause it.
        if f.starts_nodes and failure_ratio_exceeded(rollout=f.rollout, counts=f.current_counts):
            f.stop = Rollout.PausedReason.FAILURE_RATIO
    _settles_unrecorded(facts, now=now)
    return facts


def _settles_unrecorded(facts: dict[UUID, RolloutFacts], *, now: datetime) -> None:
    """A current wave whose last node settled after the last tick: the next tick's advance records it first
    (``decide.decide``'s advance, ``Rollout.wave_settles``: settled at its last node's ``settled_at``, the soak
    from then), so the plan sees it as recorded, on copies. For the rollouts the next tick advances (it starts
    nodes); no query of its own."""
    for f in facts.values():
        wave = f.waves.get(f.rollout.current_wave)
        if not f.starts_nodes or f.wave_moving or wave is None or wave.settled:
            continue
        wave, f.rollout = copy(wave), copy(f.rollout)
        f.rollout.wave_settles(wave, at=f.current_last_settled or now)
        f.waves[wave.index] = wave


@dataclass(frozen=True)
class PoolState:
    """A pool as the start step sees it: its windows now and its budget."""

    pool_id: UUID
    name: str
    windows: PoolWindows
    budget: PoolBudget

    @property
    def is_open(self) -> bool:
        return self.windows.open

    @property
    def next_window_at(self) -> datetime | None:
        return None if self.windows.open else self.windows.opens_at

    @property
    def allowed(self) -> int:
        return self.budget.allowed

    @property
    def disrupted(self) -> int:
        return self.budget.disrupted

    @property
    def available(self) -> int:
        return self.budget.available


def pool_states(pool_ids: Iterable[UUID], *, now: datetime) -> dict[UUID, PoolState]:
    """Windows and budgets of these pools, without locks: four queries."""
    ids = sorted(set(pool_ids))
    if not ids:
        return {}
    windows = pool_windows_at(pool_ids=ids, now=now)
    budgets = pool_budgets(pool_ids=ids)
    names = dict(Pool.objects.filter(pk__in=ids).values_list("id", "name"))
    return {
        pool_id: PoolState(pool_id=pool_id, name=names[pool_id], windows=windows[pool_id], budget=budgets[pool_id])
        for pool_id in ids
        if pool_id in windows and pool_id in budgets and pool_id in names
    }


# --- the decisions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutDecision:
    """What a rollout as a whole waits for at the plan's moment (``code``), or None while its nodes move.

    ``code``: ``awaiting_approval``, ``scheduled``, ``paused`` (``paused_reason``: its own, or the one the
    next tick pauses it with), ``gate``, ``soaking``, ``outside_window`` (``pools``: the closed ones,
    ``opening``: the one that opens first), ``budget_full`` (``pools``: the full ones its own nodes in flight
    do not fill), ``awaiting_nodes`` (``in_flight`` nodes, nothing else can start), or None.
    """

    code: Code | None
    paused_reason: str | None = None
    gate: RolloutGate | None = None
    pools: tuple[PoolState, ...] = ()
    #: outside_window: the closed pool whose window opens first.
    opening: PoolState | None = None
    in_flight: int = 0
    #: soaking: when the soak ends (``nextWaveAt``, or as the next tick records it: ``_settles_unrecorded``).
    soak_until: datetime | None = None


MOVING = RolloutDecision(None)


def rollout_wait(*, wave: int, facts: RolloutFacts) -> Decision | None:
    """Why a pending row of ``wave`` waits for the rollout itself; None when its wave is the one that starts."""
    rollout = facts.rollout
    if rollout.state == Rollout.State.AWAITING_APPROVAL:
        return WAIT_APPROVAL
    if rollout.state == Rollout.State.PAUSED or facts.stop is not None:
        return WAIT_PAUSED
    if not facts.starts_nodes:
        return WAIT_SCHEDULE
    if facts.gate is not None and wave in facts.gated_waves:
        return WAIT_GATE
    if facts.soaking:
        return WAIT_SOAK
    startable = facts.startable_wave
    if startable is None or wave != startable:
        return WAIT_WAVE
    return None


def rollout_decision(facts: RolloutFacts, *, pools: dict[UUID, PoolState]) -> RolloutDecision:
    """What the rollout as a whole waits for (``RolloutDecision``), from its facts and its pools' states."""
    rollout = facts.rollout
    wait = rollout_wait(wave=facts.startable_wave if facts.startable_wave is not None else -1, facts=facts)
    if wait == WAIT_APPROVAL:
        return RolloutDecision(Code.AWAITING_APPROVAL)
    if wait == WAIT_PAUSED:
        own = rollout.state == Rollout.State.PAUSED
        return RolloutDecision(Code.PAUSED, paused_reason=rollout.paused_reason if own else facts.stop)
    if wait == WAIT_SCHEDULE:
        return RolloutDecision(Code.SCHEDULED) if rollout.state == Rollout.State.SCHEDULED else MOVING
    if facts.gate is not None:
        return RolloutDecision(Code.GATE, gate=facts.gate)
    if wait == WAIT_SOAK:
        return RolloutDecision(Code.SOAKING, soak_until=facts.rollout.next_wave_at)
    waiting = [pools[pool_id] for pool_id in facts.pending_pools() if pool_id in pools]
    if any(pool.is_open and pool.available > 0 for pool in waiting):
        return MOVING
    closed = tuple(pool for pool in waiting if not pool.is_open)
    if closed:
        first = min(closed, key=lambda pool: pool.next_window_at or facts.now)
        return RolloutDecision(Code.OUTSIDE_WINDOW, pools=closed, opening=first)
    mine = facts.in_flight_pools()
    full = tuple(pool for pool in waiting if pool.available == 0 and pool.pool_id not in mine)
    if full:
        return RolloutDecision(Code.BUDGET_FULL, pools=full)
    in_flight = facts.in_flight_total()
    return RolloutDecision(Code.AWAITING_NODES, in_flight=in_flight) if in_flight else MOVING


@dataclass
class Plan:
    """The plan at ``now`` of some rollouts and of a page of their rows."""

    now: datetime
    facts: dict[UUID, RolloutFacts] = field(default_factory=dict)
    pools: dict[UUID, PoolState] = field(default_factory=dict)
    #: Rollout id -> what it waits for as a whole.
    rollouts: dict[UUID, RolloutDecision] = field(default_factory=dict)
    #: Row id -> the next tick's decision, for each pending row of the page of a rollout that holds nodes.
    rows: dict[int, Decision] = field(default_factory=dict)
    #: The page's rows of open pools in their starting wave, with their start facts (``last_seen_at`` read).
    candidates: dict[int, Candidate] = field(default_factory=dict)


def plan_at(rollouts: Sequence[Rollout], *, now: datetime, rows: Sequence[NodeUpgrade] = ()) -> Plan:
    """The plan of ``rollouts`` at ``now``, and of ``rows`` (pending or not, loaded with ``rollout``: their
    rollouts must be among ``rollouts``): a constant number of queries whatever their numbers."""
    holding = [rollout for rollout in rollouts if rollout.state in Rollout.HOLDING_STATES]
    plan = Plan(now=now, facts=rollout_facts(holding, now=now))
    starting = {pool for f in plan.facts.values() if f.starts_nodes for pool in f.pending_pools()}
    plan.pools = pool_states(starting, now=now)
    plan.rollouts = {rollout_id: rollout_decision(f, pools=plan.pools) for rollout_id, f in plan.facts.items()}
    open_rows = []
    for row in rows:
        facts = plan.facts.get(row.rollout_id)
        if row.state != State.PENDING or facts is None:
            continue
        wait = rollout_wait(wave=row.wave, facts=facts)
        pool = plan.pools.get(row.pool_id)
        if wait is not None:
            plan.rows[row.id] = wait
        elif pool is not None and not pool.is_open:
            plan.rows[row.id] = WAIT_WINDOW
        elif pool is not None:
            open_rows.append(row)
    if not open_rows:
        return plan
    found = candidates(NodeUpgrade.objects.filter(id__in=[row.id for row in open_rows]), now=now, last_seen=True)
    plan.candidates = {candidate.id: candidate for candidate in found}
    waves = {rollout_id: f.startable_wave for rollout_id, f in plan.facts.items() if f.startable_wave is not None}
    room = {pool_id: pool.available for pool_id, pool in plan.pools.items()}
    reached = rows_reached(open_rows, waves=waves, room=room, now=now)
    offline_is_down = offline_verdicts_trusted(now=now)
    for row in open_rows:
        candidate = plan.candidates.get(row.id)
        if candidate is not None:
            plan.rows[row.id] = turn_decision(candidate, reached=row.id in reached, offline_is_down=offline_is_down)
    return plan
