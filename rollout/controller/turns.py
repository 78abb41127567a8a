"""A pool's turn (docs/controller.md#the-plan): which of an open pool's pending rows the next tick starts.

The tick takes a pool's pending rows of the starting wave in position order while the pool has
free slots: an offline row is skipped (or, right after an outage, waited for), a row without a
binary for its arch is skipped, any other starts. Offline and binary-less rows take no slot. A
row the tick does not reach waits for the budget (``turn_decision``).

The tick reads a locked pool's rows in that order (``pool_rows``, taken by ``decide.pool_turns``); the plan,
for a page of rows, learns which the tick reaches from one query (``rows_reached``) instead of reading every
pool.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from django.db.models import Case, Count, F, IntegerField, Q, Value, When, Window
from django.db.models.expressions import RowRange

from fleet.interface import PoolBudget
from rollout.controller.decisions import (
    SKIP_NO_BINARY,
    SKIP_OFFLINE,
    START,
    WAIT_BUDGET,
    WAIT_OFFLINE,
    Decision,
    Move,
)
from rollout.models import NodeUpgrade
from rollout.models.querysets import NodeUpgradeQuerySet

#: Rows read past the free slots per query, to find startable rows behind offline ones.
START_LOOKAHEAD = 100


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


def pool_rows(rows: NodeUpgradeQuerySet, *, room: int, now: datetime) -> Iterator[Candidate]:
    """A locked pool's pending ``rows`` in position order, with their start facts, read lazily as its turn
    (``decide.pool_turns``) takes them: ``room + START_LOOKAHEAD`` rows per query, so offline rows ahead cost a
    query per hundred, not one each, and the tick never reads past the pool's last free slot."""
    cursor = -1
    while True:
        limit = room + START_LOOKAHEAD
        chunk = candidates(rows.filter(position__gt=cursor).order_by("position")[:limit], now=now)
        yield from chunk
        if len(chunk) < limit:
            return
        cursor = chunk[-1].position


def rows_reached(
    rows: Sequence[NodeUpgrade], *, waves: Mapping[UUID, int], room: Mapping[UUID, int], now: datetime
) -> set[int]:
    """Of these pending rows (open pools, their wave starting), the ids the next tick reaches: one query.

    ``waves``: rollout id -> the wave that starts; ``room``: pool id -> its free slots.

    The tick reaches a row while fewer rows ahead of it in its pool start than the pool has
    free slots; the rows that start are the online ones with a binary (``turn_decision``). So
    the database counts, for each row, the startable rows ahead of it (a window over the rows
    of its rollout, wave and pool up to the page's last position) and keeps those below the room.
    """
    rows = [row for row in rows if room[row.pool_id] > 0]
    if not rows:
        return set()
    by_rollout: dict[UUID, list[NodeUpgrade]] = defaultdict(list)
    for row in rows:
        by_rollout[row.rollout_id].append(row)
    condition = Q()
    for rollout_id, group in by_rollout.items():
        condition |= Q(
            rollout_id=rollout_id,
            wave=waves[rollout_id],
            pool_id__in={row.pool_id for row in group},
            position__lte=max(row.position for row in group),
        )
    free = Case(
        *(When(pool_id=pool_id, then=Value(room[pool_id])) for pool_id in {row.pool_id for row in rows}),
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
        .filter(ahead__lt=free)
        .values_list("id", flat=True)
    )
    return set(reached)
