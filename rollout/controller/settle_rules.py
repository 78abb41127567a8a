"""The settle rule of an in-flight row (docs/controller.md#the-tick, Settle; #readiness-before-success-minreadyseconds),
written once and pure: the tick's decision (``decide.decide``), the period's readiness sweep and the join path's
(``settle.node_upgrades_settle_ready``) and the blockers' readiness end all read it here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum


class Settle(StrEnum):
    """What the tick does with an in-flight row (docs/controller.md#the-tick, Settle)."""

    SUCCEED = "succeed"
    ARRIVE = "arrive"
    TIMEOUT = "timeout"
    READY = "ready"
    NOT_READY = "not_ready"


#: The order the settles are written in.
SETTLE_ORDER = (Settle.SUCCEED, Settle.ARRIVE, Settle.TIMEOUT, Settle.READY, Settle.NOT_READY)


@dataclass(frozen=True)
class InFlight:
    """An in-flight row as its settle sees it."""

    id: int
    wave: int
    #: Its node's current session is open on the target version.
    on_target: bool
    #: Its deadline has passed.
    overdue: bool
    #: When it arrived on the target (readiness, minReadySeconds > 0), or None.
    arrived_at: datetime | None = None
    #: Arrived and its session stayed open on the target since, without rejoining.
    still: bool = False
    #: Its node is online (the fleet's online rule).
    online: bool = True
    #: When its session on the target began (the arrival time ``mark_arrived`` records), while ``on_target``.
    joined_at: datetime | None = None

    def arrival(self, *, now: datetime) -> datetime:
        """When it arrived, or arrives at this settle (its session's ``joined_at``)."""
        return self.arrived_at or self.joined_at or now


def readiness_end(arrived_at: datetime, *, min_ready_seconds: int) -> datetime:
    """When a row that arrived on its target at ``arrived_at`` has proved ready (minReadySeconds later)."""
    return arrived_at + timedelta(seconds=min_ready_seconds)


def settle_verdict(row: InFlight, *, min_ready_seconds: int, now: datetime, trusted: bool) -> list[Settle]:
    """The one settle rule of an in-flight row (docs/controller.md#readiness-before-success-minreadyseconds).

    On its target it succeeds (with minReadySeconds, it arrives instead, from then proving readiness); past
    its deadline off its target it times out, once the fleet's offline verdicts hold (``trusted``). An arrived
    row succeeds once its session stayed open on the target and online for minReadySeconds; one that left,
    rejoined or went offline fails ``not_ready``.
    """
    arrived_at, still = row.arrived_at, row.still
    if arrived_at is None:
        if not row.on_target:
            return [Settle.TIMEOUT] if row.overdue and trusted else []
        if not min_ready_seconds:
            return [Settle.SUCCEED]
        arrived_at, still = row.arrival(now=now), True
        verdict = [Settle.ARRIVE]
    else:
        verdict = []
    if not still or (trusted and not row.online):
        return [*verdict, Settle.NOT_READY]
    if row.online and readiness_end(arrived_at, min_ready_seconds=min_ready_seconds) <= now:
        return [*verdict, Settle.READY]
    return verdict
