"""The start step's plan: what the next tick does with each pending node, and why (docs/controller.md#the-plan).

One decision per pending row, taken by the functions here and nowhere else, in this order:

1. the rollout (``rollout_wait``): paused; a gate holds the current (or starting) wave; its wave is
   not the one that starts; the current wave soaks (``Rollout.soaking``, also the controller's and
   promote's rule);
2. its pool (``PoolState``): outside its maintenance windows;
3. its turn (``turn_decision``): the tick takes a pool's pending rows in position order
   while the pool has free slots: an offline row is skipped (or, right after an outage,
   waited for), a row without a binary for its arch is skipped, any other starts. Offline
   and binary-less rows take no slot. A row the tick does not reach waits for the budget.

The tick (``start.rollout_start_nodes``) builds each open pool's plan under the pool's lock by
reading its rows in position order (``pool_turns``), and executes it. The blockers
(``blockers.node_blockers``) take the same decisions for a page of rows: they learn which rows
the tick reaches from one query (``rows_reached``) instead of reading every pool. A decision
names the blocker code its row shows (``Decision.code``); the property test in
tests/rollout/test_start_plan.py checks that the two never disagree.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from uuid import UUID

from django.db.models import Case, Count, F, IntegerField, Q, Value, When, Window
from django.db.models.expressions import RowRange

from fleet.interface import Pool, PoolBudget, PoolWindows, offline_verdicts_trusted, pool_budgets, pool_windows_at
from rollout.gates.verdicts import gates_holding_for
from rollout.models import NodeUpgrade, Rollout, RolloutGate, RolloutWave
from rollout.models.querysets import NodeUpgradeQuerySet

State = NodeUpgrade.State
#: Rows read past the free slots per query, to find startable rows behind offline ones.
START_LOOKAHEAD = 100


class Move(StrEnum):
    START = "start"
    SKIP = "skip"
    WAIT = "wait"


@dataclass(frozen=True)
class Decision:
    """What the next tick does with a pending row, and the blocker code the row shows for it."""

    move: Move
    code: str
    #: Why it is skipped (a NodeUpgrade.Reason), for ``Move.SKIP``.
    reason: str | None = None


START = Decision(Move.START, "next_tick")
SKIP_NO_BINARY = Decision(Move.SKIP, "next_tick", NodeUpgrade.Reason.NO_BINARY)
SKIP_OFFLINE = Decision(Move.SKIP, "offline", NodeUpgrade.Reason.OFFLINE)
WAIT_OFFLINE = Decision(Move.WAIT, "offline")
WAIT_BUDGET = Decision(Move.WAIT, "budget_full")
WAIT_WINDOW = Decision(Move.WAIT, "outside_window")
WAIT_SOAK = Decision(Move.WAIT, "soaking")
WAIT_WAVE = Decision(Move.WAIT, "wave_not_started")
WAIT_PAUSED = Decision(Move.WAIT, "rollout_paused")
WAIT_GATE = Decision(Move.WAIT, "gate")


# --- the rollout -------------------------------------------------------------------------------


@dataclass
class RolloutFacts:
    """A rollout's moving parts now: pending and in-flight rows per (wave, pool), its waves' settled times."""

    rollout: Rollout
    now: datetime
    last_wave: int = 0
    settled_at: dict[int, datetime | None] = field(default_factory=dict)
    # (wave, pool) -> count, of pending rows and of in-flight rows
    pending: dict[tuple[int, UUID], int] = field(default_factory=lambda: defaultdict(int))
    in_flight: dict[tuple[int, UUID], int] = field(default_factory=lambda: defaultdict(int))
    #: Its first gate whose latest result is not a fresh pass (docs/controller.md#gates): no node starts.
    gate: RolloutGate | None = None

    @property
    def wave_moving(self) -> bool:
        """The current wave still has pending or in-flight rows."""
        wave = self.rollout.current_wave
        return any(w == wave for w, _ in self.pending) or any(w == wave for w, _ in self.in_flight)

    @property
    def wave_settled(self) -> bool:
        """The current wave settled, and a tick recorded it."""
        return not self.wave_moving and self.settled_at.get(self.rollout.current_wave) is not None

    @property
    def soaking(self) -> bool:
        return self.rollout.soaking(wave_settled=self.wave_settled, last_index=self.last_wave, at=self.now)

    @property
    def startable_wave(self) -> int | None:
        """The wave the next tick starts nodes of: the current one while it moves, the next once its soak is over.

        None between the last node settling and the tick recording it (the next tick does), and
        during the soak.
        """
        current = self.rollout.current_wave
        if self.wave_moving:
            return current
        if self.wave_settled and not self.rollout.on_last_wave(last_index=self.last_wave) and not self.soaking:
            return current + 1
        return None

    def pending_pools(self) -> list[UUID]:
        wave = self.startable_wave
        return sorted({pool for (w, pool), n in self.pending.items() if w == wave and n}) if wave is not None else []

    def in_flight_total(self) -> int:
        return sum(self.in_flight.values())

    def in_flight_pools(self) -> set[UUID]:
        return {pool for (_, pool), n in self.in_flight.items() if n}


def rollout_facts(rollouts: Iterable[Rollout], *, now: datetime) -> dict[UUID, RolloutFacts]:
    """Facts of many rollouts in three queries."""
    facts = {rollout.id: RolloutFacts(rollout=rollout, now=now) for rollout in rollouts}
    if not facts:
        return facts
    for rollout_id, index, settled_at in RolloutWave.objects.filter(rollout_id__in=list(facts)).values_list(
        "rollout_id", "index", "settled_at"
    ):
        facts[rollout_id].settled_at[index] = settled_at
        facts[rollout_id].last_wave = max(facts[rollout_id].last_wave, index)
    rows = (
        NodeUpgrade.objects.filter(rollout_id__in=list(facts), state__in=[State.PENDING, State.IN_FLIGHT])
        .values_list("rollout_id", "wave", "pool_id", "state")
        .annotate(n=Count("id"))
        .order_by()
    )
    for rollout_id, wave, pool_id, state, n in rows:
        target = facts[rollout_id].pending if state == State.PENDING else facts[rollout_id].in_flight
        target[wave, pool_id] += n
    for rollout_id, gate in gates_holding_for(facts, now=now).items():
        facts[rollout_id].gate = gate
    return facts


def rollout_wait(*, wave: int, facts: RolloutFacts) -> Decision | None:
    """Why a pending row of ``wave`` waits for the rollout itself; None when its wave is the one that starts."""
    rollout = facts.rollout
    if rollout.state == Rollout.State.PAUSED:
        return WAIT_PAUSED
    if facts.gate is not None and wave in (rollout.current_wave, facts.startable_wave):
        return WAIT_GATE
    if facts.soaking:
        return WAIT_SOAK
    startable = facts.startable_wave
    if startable is None or wave != startable:
        return WAIT_WAVE
    return None


# --- the pool ----------------------------------------------------------------------------------


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


# --- the turn ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A pending row as the start step sees it (``NodeUpgrade.objects.with_start_facts``)."""

    id: int
    node_id: UUID
    position: int
    arch: str
    online: bool
    has_binary: bool
    #: Its agent ever joined (a node that never joined never ran: offline whatever the outage).
    joined: bool
    protocol_version: int | None
    last_seen_at: datetime | None


_CANDIDATE_VALUES = (
    "id",
    "node_id",
    "position",
    "node__arch",
    "online",
    "has_binary",
    "joined",
    "node__session__protocol_version",
)


def candidates(rows: NodeUpgradeQuerySet, *, now: datetime, last_seen: bool = False) -> list[Candidate]:
    """``rows`` (pending, in the order given) with their start facts: one query.

    ``last_seen``: also read when each agent was last seen (the blockers say it; the tick does not
    need it, and a tick may read thousands of offline rows).
    """
    fields = (*_CANDIDATE_VALUES, "node__session__last_seen_at") if last_seen else _CANDIDATE_VALUES
    values = rows.with_start_facts(now=now).values_list(*fields)
    found = []
    for pk, node_id, position, arch, online, has_binary, joined, protocol_version, *seen in values:
        found.append(
            Candidate(
                id=pk,
                node_id=node_id,
                position=position,
                arch=arch,
                online=online,
                has_binary=has_binary,
                joined=joined,
                protocol_version=protocol_version,
                last_seen_at=seen[0] if seen else None,
            )
        )
    return found


def turn_decision(row: Candidate, *, reached: bool, offline_is_down: bool) -> Decision:
    """What the tick does with a pending row of an open pool whose wave starts.

    ``reached``: fewer rows ahead of it (position order) start than its pool has free slots,
    so the tick comes to it. ``offline_is_down``: the fleet's offline verdicts hold (false
    right after the server could not hear its fleet: a silent agent may well be running).
    """
    if not row.online:
        if reached and (offline_is_down or not row.joined):
            return SKIP_OFFLINE
        return WAIT_OFFLINE
    if not reached:
        return WAIT_BUDGET
    return START if row.has_binary else SKIP_NO_BINARY


@dataclass
class PoolPlan:
    """The tick's plan for one open pool: the rows it reaches, each with its decision; the others wait."""

    pool_id: UUID
    budget: PoolBudget
    turns: list[tuple[Candidate, Decision]] = field(default_factory=list)

    def moves(self, move: Move) -> list[tuple[Candidate, Decision]]:
        return [(row, decision) for row, decision in self.turns if decision.move == move]


def pool_turns(
    rows: NodeUpgradeQuerySet, *, room: int, now: datetime, offline_is_down: bool
) -> list[tuple[Candidate, Decision]]:
    """The tick's reading of one pool: its pending ``rows`` in position order, each decided, until no slot is left.

    Reads ``room + START_LOOKAHEAD`` rows per query, so offline rows ahead cost a query per
    hundred, not one each.
    """
    turns: list[tuple[Candidate, Decision]] = []
    started = 0
    cursor = -1
    while started < room:
        limit = room - started + START_LOOKAHEAD
        chunk = candidates(rows.filter(position__gt=cursor).order_by("position")[:limit], now=now)
        for row in chunk:
            if started >= room:
                return turns
            decision = turn_decision(row, reached=True, offline_is_down=offline_is_down)
            turns.append((row, decision))
            cursor = row.position
            if decision.move == Move.START:
                started += 1
        if len(chunk) < limit:
            break
    return turns


def rows_reached(
    rows: Sequence[NodeUpgrade], *, facts: Mapping[UUID, RolloutFacts], pools: Mapping[UUID, PoolState], now: datetime
) -> set[int]:
    """Of these pending rows (open pools, their wave starting), the ids the next tick reaches: one query.

    The tick reaches a row while fewer rows ahead of it in its pool start than the pool has
    free slots; the rows that start are the online ones with a binary (``turn_decision``). So
    the database counts, for each row, the startable rows ahead of it (a window over the rows
    of its rollout, wave and pool up to the page's last position) and keeps those below the room.
    """
    rows = [row for row in rows if pools[row.pool_id].available > 0]
    if not rows:
        return set()
    by_rollout: dict[UUID, list[NodeUpgrade]] = defaultdict(list)
    for row in rows:
        by_rollout[row.rollout_id].append(row)
    condition = Q()
    for rollout_id, group in by_rollout.items():
        condition |= Q(
            rollout_id=rollout_id,
            wave=facts[rollout_id].startable_wave,
            pool_id__in={row.pool_id for row in group},
            position__lte=max(row.position for row in group),
        )
    room = Case(
        *(When(pool_id=pool_id, then=Value(pools[pool_id].available)) for pool_id in {row.pool_id for row in rows}),
        output_field=IntegerField(),
    )
    ahead = Window(
        Count("id", filter=Q(online=True, has_binary=True)),
        partition_by=[F("rollout_id"), F("pool_id")],
        order_by=F("position").asc(),
        frame=RowRange(start=None, end=-1),
    )
    reached = (
        NodeUpgrade.objects.filter(condition)
        .pending()
        .with_start_facts(now=now)
        .annotate(ahead=ahead)
        .filter(ahead__lt=room)
        .values_list("id", flat=True)
    )
    return set(reached)


# --- the decisions for a page of rows ------------------------------------------------------------


@dataclass
class RowDecisions:
    """The next tick's decision for each pending row of a page, with what it was taken on."""

    decisions: dict[int, Decision] = field(default_factory=dict)
    pools: dict[UUID, PoolState] = field(default_factory=dict)
    #: The rows of open pools in their starting wave, with their start facts.
    candidates: dict[int, Candidate] = field(default_factory=dict)


def rows_decisions(rows: Sequence[NodeUpgrade], *, facts: Mapping[UUID, RolloutFacts], now: datetime) -> RowDecisions:
    """The next tick's decision for each pending row of ``rows`` (loaded with ``rollout``): constant queries.

    ``facts``: ``rollout_facts`` of their rollouts. Rows of finished rollouts get none.
    """
    result = RowDecisions()
    starting: list[NodeUpgrade] = []
    for row in rows:
        rollout_facts_ = facts.get(row.rollout_id)
        if row.state != State.PENDING or rollout_facts_ is None or row.rollout.state not in Rollout.ACTIVE_STATES:
            continue
        wait = rollout_wait(wave=row.wave, facts=rollout_facts_)
        if wait is not None:
            result.decisions[row.id] = wait
        else:
            starting.append(row)
    if not starting:
        return result
    result.pools = pool_states({pool for f in facts.values() for pool in f.pending_pools()}, now=now)
    open_rows = []
    for row in starting:
        pool = result.pools.get(row.pool_id)
        if pool is not None and not pool.is_open:
            result.decisions[row.id] = WAIT_WINDOW
        elif pool is not None:
            open_rows.append(row)
    if not open_rows:
        return result
    found = candidates(NodeUpgrade.objects.filter(id__in=[row.id for row in open_rows]), now=now, last_seen=True)
    result.candidates = {candidate.id: candidate for candidate in found}
    reached = rows_reached(open_rows, facts=facts, pools=result.pools, now=now)
    offline_is_down = offline_verdicts_trusted(now=now)
    for row in open_rows:
        candidate = result.candidates.get(row.id)
        if candidate is not None:
            result.decisions[row.id] = turn_decision(
                candidate, reached=row.id in reached, offline_is_down=offline_is_down
            )
    return result
