"""Why not yet (CONTRACT 10.1): what each node of a rollout, and the rollout itself, waits for.

Reads only: nothing here writes. The answers follow the controller's rules
(rollout/services/controller.py) without running them, from facts read in a
constant number of queries for a page of rows or of rollouts, whatever its size:

- ``rollout_facts``: per rollout, its pending and in-flight rows counted per
  (wave, pool, state) (one grouped query for any number of rollouts) and its
  waves' ``settled_at`` (one query);
- ``pool_facts``: per pool that has pending rows in a rollout's startable wave,
  its windows (one query) and budget (``pool_budgets``, two queries);
- for a page of node rows, the online state of its pending nodes (one query)
  and, where a pool has free slots, each node's rank among the nodes the next
  tick would start in its pool (one query).

Node blockers, first that applies wins (the table of CONTRACT 10.1):

pending  ``rollout_paused``    the rollout is paused
         ``wave_not_started``  its wave is later than the startable wave, and no soak holds the rollout
         ``soaking``           the current wave settled and soaks (any later wave waits for the soak)
         ``outside_window``    its pool's maintenance windows are closed now
         ``offline``           its agent is offline (the tick skips it at its turn)
         ``budget_full``       no free slot of its pool's budget reaches it (free slots go in position order)
         ``next_tick``         the next tick starts it
in_flight ``awaiting_rejoin``  until its agent rejoins on the target, or its deadline
         ``proving_ready``     rejoined, proving readiness (minReadySeconds) until ``until``
settled  ``None``

The *startable wave* is the current wave while it still has pending or in-flight
rows; once it settled (recorded by a tick) and its soak is over, the next wave
(the next tick starts it); otherwise none.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.db import connection
from django.db.models import Count, Exists, F, OuterRef, Q, Window
from django.db.models.functions import RowNumber

from fleet.interface import Node, Pool, online_node_q, pool_budgets
from fleet.windows import MaintenanceWindow, next_opening, parse_windows
from rollout.models import NodeUpgrade, ReleaseBinary, Rollout, RolloutWave
from rollout.selectors import upgrades_disrupting_in

State = NodeUpgrade.State

#: Node blocker codes, in the order of precedence (CONTRACT 10.1).
NODE_CODES = (
    "rollout_paused",
    "wave_not_started",
    "soaking",
    "outside_window",
    "offline",
    "budget_full",
    "next_tick",
    "awaiting_rejoin",
    "proving_ready",
)
#: Rollout blocker codes (CONTRACT 10.1, the rollout representation); rollout.metrics repeats them.
ROLLOUT_CODES = ("paused", "soaking", "outside_window", "budget_full", "awaiting_nodes")


@dataclass(frozen=True)
class Blocker:
    """What a node or a rollout waits for: a code, a sentence, and the code's extra fields (API names)."""

    code: str
    detail: str
    extra: Mapping[str, Any] = field(default_factory=dict)


def _at(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value is not None else "never"


def _paused_why(rollout: Rollout) -> str:
    reason = rollout.paused_reason or ""
    return str(Rollout.PausedReason(reason).label) if reason in Rollout.PausedReason.values else reason


# --- windows -----------------------------------------------------------------------------------


def windows_of(pool: Pool) -> tuple[MaintenanceWindow, ...]:
    """A pool's maintenance windows (CONTRACT 9.1), parsed; ``()`` is always open.

    The one place that reads them: a pool without the field (or with none) is always open.
    """
    return parse_windows(getattr(pool, "maintenance_windows", None) or None)


def window_phrase(windows: Sequence[MaintenanceWindow], opens_at: datetime) -> str:
    """``the 22:00 Europe/Berlin window``: the window whose occurrence opens at ``opens_at``."""
    for window in windows:
        if next_opening([window], opens_at - timedelta(microseconds=1)) == opens_at:
            return f"the {window.start:%H:%M} {window.timezone} window"
    return "the next window"


# --- facts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolFacts:
    pool_id: UUID
    name: str
    windows: tuple[MaintenanceWindow, ...]
    is_open: bool
    next_window_at: datetime | None  # None while open
    allowed: int
    disrupted: int

    @property
    def available(self) -> int:
        return max(0, self.allowed - self.disrupted)


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

    @property
    def wave_moving(self) -> bool:
        """The current wave still has pending or in-flight rows."""
        wave = self.rollout.current_wave
        return any(w == wave for w, _ in self.pending) or any(w == wave for w, _ in self.in_flight)

    @property
    def soaking(self) -> bool:
        """The current wave settled (a tick recorded it), it is not the last, and its soak runs."""
        rollout = self.rollout
        return (
            not self.wave_moving
            and self.settled_at.get(rollout.current_wave) is not None
            and rollout.current_wave < self.last_wave
            and rollout.next_wave_at is not None
            and self.now < rollout.next_wave_at
        )

    @property
    def startable_wave(self) -> int | None:
        """The wave whose pending rows the next tick may start (see the module's docstring)."""
        rollout = self.rollout
        if self.wave_moving:
            return rollout.current_wave
        if (
            self.settled_at.get(rollout.current_wave) is not None
            and rollout.current_wave < self.last_wave
            and not self.soaking
        ):
            return rollout.current_wave + 1
        return None

    def pending_pools(self) -> list[UUID]:
        wave = self.startable_wave
        return sorted({pool for (w, pool), n in self.pending.items() if w == wave and n}) if wave is not None else []

    def in_flight_total(self) -> int:
        return sum(self.in_flight.values())

    def in_flight_pools(self) -> set[UUID]:
        return {pool for (_, pool), n in self.in_flight.items() if n}


def rollout_facts(rollouts: Iterable[Rollout], *, now: datetime) -> dict[UUID, RolloutFacts]:
    """Facts of many rollouts in two queries."""
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
    return facts


def pool_facts(pool_ids: Iterable[UUID], *, now: datetime) -> dict[UUID, PoolFacts]:
    """Windows and budgets of these pools: three queries."""
    ids = sorted(set(pool_ids))
    if not ids:
        return {}
    budgets = pool_budgets(pool_ids=ids)
    facts = {}
    for pool in Pool.objects.filter(pk__in=ids):
        windows = windows_of(pool)
        opens = next_opening(windows, now)
        budget = budgets.get(pool.id)
        facts[pool.id] = PoolFacts(
            pool_id=pool.id,
            name=pool.name,
            windows=windows,
            is_open=opens <= now,
            next_window_at=None if opens <= now else opens,
            allowed=budget.allowed if budget else 0,
            disrupted=budget.disrupted if budget else 0,
        )
    return facts


# --- node blockers -----------------------------------------------------------------------------


def node_blockers(
    rows: Sequence[NodeUpgrade], *, now: datetime, facts: Mapping[UUID, RolloutFacts] | None = None
) -> dict[int, Blocker | None]:
    """{row id: blocker} for a page of node rows (of one or more rollouts, loaded with ``rollout``).

    A constant number of queries whatever the number of rows (see the module's docstring).
    """
    rollouts = {row.rollout_id: row.rollout for row in rows}
    if facts is None:
        facts = rollout_facts(rollouts.values(), now=now) if any(r.state == State.PENDING for r in rows) else {}
    candidates = [row for row in rows if row.state == State.PENDING and _in_startable_wave(row, facts)]
    pools = pool_facts({pool for f in facts.values() for pool in f.pending_pools()}, now=now) if candidates else {}
    open_rows = [row for row in candidates if row.pool_id in pools and pools[row.pool_id].is_open]
    online = _online(open_rows, now=now)
    ranked = [row for row in open_rows if online.get(row.node_id, (False, None))[0]]
    ranks = _ranks(ranked, facts=facts, pools=pools, now=now)
    return {
        row.id: node_blocker(row, facts=facts.get(row.rollout_id), pools=pools, online=online, ranks=ranks)
        for row in rows
    }


def _in_startable_wave(row: NodeUpgrade, facts: Mapping[UUID, RolloutFacts]) -> bool:
    rollout_facts_ = facts.get(row.rollout_id)
    return (
        rollout_facts_ is not None
        and row.rollout.state == Rollout.State.ACTIVE
        and row.wave == rollout_facts_.startable_wave
    )


def _online(rows: Sequence[NodeUpgrade], *, now: datetime) -> dict[UUID, tuple[bool, datetime | None]]:
    """{node id: (online, last seen)} in one query."""
    if not rows:
        return {}
    online = Exists(Node.objects.filter(online_node_q(now=now), pk=OuterRef("pk")))
    values = (
        Node.objects.filter(pk__in=[row.node_id for row in rows])
        .annotate(online=online)
        .values_list("id", "online", "session__last_seen_at")
    )
    return {node_id: (is_online, last_seen) for node_id, is_online, last_seen in values}


def _ranks(
    rows: Sequence[NodeUpgrade], *, facts: Mapping[UUID, RolloutFacts], pools: Mapping[UUID, PoolFacts], now: datetime
) -> dict[int, int]:
    """{row id: 1-based rank among the rows the next tick would start in its pool}, in one query.

    The tick starts online pending rows with a binary for their arch, per pool, in position
    order, while the pool has free slots; offline and binary-less rows take no slot. Only rows of
    pools with free slots are ranked (for the others, the budget is full whatever the rank).
    """
    rows = [row for row in rows if pools[row.pool_id].available > 0]
    if not rows:
        return {}
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
    online = Exists(Node.objects.filter(online_node_q(now=now), pk=OuterRef("node_id")))
    binary = Exists(
        ReleaseBinary.objects.filter(release_id=OuterRef("rollout__release_id"), arch=OuterRef("node__arch"))
    )
    ranked = (
        NodeUpgrade.objects.filter(condition, state=State.PENDING)
        .filter(online, binary)
        .annotate(rank=Window(RowNumber(), partition_by=[F("rollout_id"), F("pool_id")], order_by=F("position").asc()))
        .values_list("id", "rank")
    )
    sql, params = ranked.query.sql_with_params()
    with connection.cursor() as cursor:
        # The window runs over every startable row up to the page's last position; only the page's rows come back.
        # ``sql`` is the ORM's own compiled query (its values are in ``params``): nothing here comes from input.
        query = f"SELECT id, rank FROM ({sql}) ranked WHERE id = ANY(%s)"  # noqa: S608
        cursor.execute(query, [*params, [row.id for row in rows]])
        return dict(cursor.fetchall())


def node_blocker(
    row: NodeUpgrade,
    *,
    facts: RolloutFacts | None,
    pools: Mapping[UUID, PoolFacts],
    online: Mapping[UUID, tuple[bool, datetime | None]],
    ranks: Mapping[int, int],
) -> Blocker | None:
    """The table of CONTRACT 10.1 for one row, from precomputed facts (no query)."""
    rollout = row.rollout
    if row.state == State.IN_FLIGHT:
        return _in_flight_blocker(row)
    if row.state != State.PENDING or facts is None:
        return None
    if rollout.state == Rollout.State.PAUSED:
        return Blocker(
            "rollout_paused",
            f"The rollout is paused ({_paused_why(rollout)}): no node starts until it is resumed.",
            {"pausedReason": rollout.paused_reason},
        )
    if rollout.state != Rollout.State.ACTIVE:
        return None  # pending rows of a finished rollout do not exist (abort cancels them)
    wave = facts.startable_wave
    if facts.soaking:
        until = rollout.next_wave_at
        return Blocker(
            "soaking",
            f"Wave {rollout.current_wave} settled and soaks until {_at(until)}; the next wave starts then.",
            {"until": until},
        )
    if wave is None or row.wave > wave:
        return Blocker(
            "wave_not_started",
            f"Its wave ({row.wave}) has not started: the rollout is at wave {rollout.current_wave}.",
            {"wave": rollout.current_wave},
        )
    pool = pools.get(row.pool_id)
    if pool is None:
        return Blocker("next_tick", "It is decided at the next tick.")
    if not pool.is_open:
        return Blocker(
            "outside_window",
            f"Pool {pool.name} is outside its maintenance windows: waiting for "
            f"{window_phrase(pool.windows, pool.next_window_at)} at {_at(pool.next_window_at)}."
            if pool.next_window_at
            else f"Pool {pool.name} is outside its maintenance windows.",
            {"nextWindowAt": pool.next_window_at},
        )
    is_online, last_seen = online.get(row.node_id, (False, None))
    if not is_online:
        return Blocker(
            "offline",
            f"Its agent is offline (last seen {_at(last_seen)}): it will be skipped at its turn unless it comes back.",
            {"lastSeenAt": last_seen},
        )
    rank = ranks.get(row.id)
    if pool.available == 0 or (rank is not None and rank > pool.available):
        if pool.available == 0:
            detail = f"Budget full in {pool.name}: {pool.disrupted} of {pool.allowed} nodes disrupted."
        else:
            detail = (
                f"Budget full in {pool.name} for this node: the {pool.available} free slot(s) "
                f"({pool.disrupted} of {pool.allowed} disrupted) go to nodes ahead of it."
            )
        return Blocker(
            "budget_full", detail, {"poolId": str(pool.pool_id), "disrupted": pool.disrupted, "allowed": pool.allowed}
        )
    return Blocker("next_tick", "It starts at the next tick.")


def _in_flight_blocker(row: NodeUpgrade) -> Blocker:
    rollout = row.rollout
    if row.arrived_at is not None and rollout.min_ready_seconds:
        until = row.arrived_at + timedelta(seconds=rollout.min_ready_seconds)
        return Blocker(
            "proving_ready",
            f"It rejoined on {row.target_version} and proves readiness until {_at(until)}.",
            {"until": until},
        )
    return Blocker(
        "awaiting_rejoin",
        f"Upgrading: waiting for its agent to rejoin on {row.target_version}, at the latest by {_at(row.deadline)}.",
        {"deadline": row.deadline},
    )


# --- rollout blockers --------------------------------------------------------------------------


def rollout_blockers(rollouts: Sequence[Rollout], *, now: datetime) -> dict[UUID, Blocker | None]:
    """{rollout id: blocker} for many rollouts: five queries at most, whatever their number."""
    return _rollout_blockers(rollouts, now=now)[0]


def _rollout_blockers(
    rollouts: Sequence[Rollout], *, now: datetime
) -> tuple[dict[UUID, Blocker | None], dict[UUID, PoolFacts]]:
    running = [rollout for rollout in rollouts if rollout.state == Rollout.State.ACTIVE]
    facts = rollout_facts(running, now=now)
    pools = pool_facts({pool for f in facts.values() for pool in f.pending_pools()}, now=now)
    blockers = {rollout.id: rollout_blocker(rollout, facts=facts.get(rollout.id), pools=pools) for rollout in rollouts}
    return blockers, pools


def rollout_blocker(rollout: Rollout, *, facts: RolloutFacts | None, pools: Mapping[UUID, PoolFacts]) -> Blocker | None:
    """What holds the rollout as a whole, or None while nodes are moving (or it is finished).

    In this order: ``paused``; ``soaking``; None when some pool of the startable wave is open
    and has a free slot (the next tick starts or skips nodes there); ``outside_window`` when
    some of its pools are closed (``poolIds``: those, ``nextWindowAt``: the earliest opening);
    ``budget_full`` when some are full and none of the rollout's own nodes are in flight
    there (``poolIds``: those; a budget its own upgrades fill frees itself as they settle);
    ``awaiting_nodes`` when nodes are in flight and nothing else can start; else None.
    """
    if rollout.state == Rollout.State.PAUSED:
        return Blocker(
            "paused", f"The rollout is paused ({_paused_why(rollout)}).", {"pausedReason": rollout.paused_reason}
        )
    if rollout.state != Rollout.State.ACTIVE or facts is None:
        return None
    if facts.soaking:
        until = rollout.next_wave_at
        return Blocker(
            "soaking",
            f"Wave {rollout.current_wave} settled and soaks until {_at(until)}.",
            {"until": until},
        )
    waiting = [pools[pool_id] for pool_id in facts.pending_pools() if pool_id in pools]
    if any(pool.is_open and pool.available > 0 for pool in waiting):
        return None
    closed = [pool for pool in waiting if not pool.is_open]
    if closed:
        first = min(closed, key=lambda pool: pool.next_window_at or facts.now)
        opens = first.next_window_at
        return Blocker(
            "outside_window",
            f"Waiting for {window_phrase(first.windows, opens) if opens else 'a window'} of "
            f"{', '.join(pool.name for pool in closed)} at {_at(opens)}.",
            {"nextWindowAt": opens, "poolIds": [str(pool.pool_id) for pool in closed]},
        )
    mine = facts.in_flight_pools()
    full = [pool for pool in waiting if pool.available == 0 and pool.pool_id not in mine]
    if full:
        return Blocker(
            "budget_full",
            "Budget full in "
            + ", ".join(f"{pool.name} ({pool.disrupted} of {pool.allowed} disrupted)" for pool in full)
            + ".",
            {"poolIds": [str(pool.pool_id) for pool in full]},
        )
    in_flight = facts.in_flight_total()
    if in_flight:
        return Blocker(
            "awaiting_nodes",
            f"Waiting for {in_flight} node(s) in flight to settle; no other node can start now.",
            {"inFlight": in_flight},
        )
    return None


# --- plain words (the admin) ---------------------------------------------------------------------


def disruption_split(pool_ids: Iterable[UUID]) -> dict[UUID, tuple[int, int]]:
    """{pool id: (nodes disrupted by an active workflow, nodes disrupted by a rollout upgrade)}: one query.

    A node both under a workflow and in an upgrade counts in both (the budget counts it once).
    """
    ids = sorted(set(pool_ids))
    if not ids:
        return {}
    rows = (
        Node.objects.filter(pool_id__in=ids)
        .values("pool_id")
        .annotate(
            by_workflows=Count("id", filter=Q(workflows__state="active"), distinct=True),
            by_upgrades=Count("id", filter=Q(id__in=upgrades_disrupting_in(ids)), distinct=True),
        )
        .values_list("pool_id", "by_workflows", "by_upgrades")
        .order_by()
    )
    return {pool_id: (workflows, upgrades) for pool_id, workflows, upgrades in rows}


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def rollout_blocker_words(rollout: Rollout, *, now: datetime) -> str | None:
    """What holds the rollout, in plain words for an operator; None while nodes are moving.

    ``waiting for the 22:00 Europe/Berlin window (gpu-a)``, ``budget full in gpu-a: 3 of 3
    disrupted by 2 workflows and 1 upgrade``. A constant number of queries.
    """
    blockers, pools = _rollout_blockers([rollout], now=now)
    blocker = blockers[rollout.id]
    if blocker is None:
        return None
    pool_ids = [UUID(pool_id) for pool_id in blocker.extra.get("poolIds", [])]
    chosen = [pools[pool_id] for pool_id in pool_ids if pool_id in pools]
    if blocker.code == "outside_window":
        opens = blocker.extra["nextWindowAt"]
        first = next((pool for pool in chosen if pool.next_window_at == opens), None)
        phrase = window_phrase(first.windows, opens) if first and opens else "the next window"
        return f"waiting for {phrase} ({', '.join(pool.name for pool in chosen)}), at {_at(opens)}"
    if blocker.code == "budget_full":
        split = disruption_split(pool_ids)
        parts = []
        for pool in chosen:
            workflows, upgrades = split.get(pool.pool_id, (0, 0))
            parts.append(
                f"budget full in {pool.name}: {pool.disrupted} of {pool.allowed} disrupted by "
                f"{_count(workflows, 'workflow')} and {_count(upgrades, 'upgrade')}"
            )
        return "; ".join(parts)
    if blocker.code == "paused":
        return f"paused: {_paused_why(rollout)}"
    if blocker.code == "soaking":
        return f"soaking until {_at(blocker.extra['until'])}"
    return f"waiting for {_count(blocker.extra.get('inFlight', 0), 'node')} in flight"
