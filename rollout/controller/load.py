"""The tick's read of the world (docs/controller.md#the-tick): one rollout's facts (``decide.TickFacts``), once.

Under the rollout's row lock (the caller's ``with_stop_facts`` query): its waves, its current wave's rows per
state, its in-flight rows with what their settle reads, its pending rows per (wave, pool) of the current and next
waves, those pools' windows, whether a gate holds it, and the fleet's liveness verdict. Nothing here decides.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from django.db.models import Count, Exists, Max, OuterRef, Q, Subquery, Value

from fleet.interface import Node, offline_verdicts_trusted, online_node_q, pool_windows_at
from rollout import conf
from rollout.controller.decide import FailedGate, TickFacts
from rollout.controller.settle_rules import InFlight
from rollout.gates.verdicts import gates_holding_for
from rollout.models import NodeUpgrade, Rollout, RolloutGate, RolloutWave
from rollout.models.querysets import sessions_on_target

State = NodeUpgrade.State


def tick_facts(rollout: Rollout, *, now: datetime) -> TickFacts:
    """``rollout``'s facts at ``now`` (``rollout`` from a ``with_stop_facts`` query, locked by the caller)."""
    waves = {wave.index: wave for wave in RolloutWave.objects.filter(rollout=rollout)}
    counts = dict.fromkeys(State.values, 0)
    pending: dict[tuple[int, UUID], int] = {}
    last_settled: datetime | None = None
    current = rollout.current_wave
    rows = (
        NodeUpgrade.objects.filter(Q(wave=current) | Q(wave=current + 1, state=State.PENDING), rollout=rollout)
        .values_list("wave", "pool_id", "state")
        .annotate(n=Count("id"), last=Max("settled_at"))
        .order_by()
    )
    for wave, pool_id, state, n, last in rows:
        if wave == current:
            counts[state] += n
            if last is not None and (last_settled is None or last > last_settled):
                last_settled = last
        if state == State.PENDING:
            pending[wave, pool_id] = pending.get((wave, pool_id), 0) + n
    in_flight = _in_flight(rollout, now=now)
    pool_ids = sorted({pool for _, pool in pending})
    windows = {
        pool_id: None if found.open else found.opens_at
        for pool_id, found in pool_windows_at(pool_ids=pool_ids, now=now).items()
    }
    return TickFacts(
        rollout=rollout,
        now=now,
        waves=waves,
        counts=counts,
        in_flight=in_flight,
        last_settled=last_settled,
        pending=pending,
        windows=windows,
        gate_holding=rollout.id in gates_holding_for([rollout.id], now=now),
        offline_is_down=offline_verdicts_trusted(now=now),
        every=conf.options().every,
        failed_gate=_failed_gate(rollout),
    )


def _failed_gate(rollout: Rollout) -> FailedGate | None:
    """The gate ``with_stop_facts`` found failed (``gate_failed``), with its latest value and ``onFailure``."""
    name: str | None = getattr(rollout, "gate_failed", None)
    if not name:
        return None
    found = RolloutGate.objects.filter(rollout=rollout, name=name).values_list("value", "on_failure").first()
    return None if found is None else FailedGate(name=name, value=found[0], on_failure=found[1])


def _in_flight(rollout: Rollout, *, now: datetime) -> tuple[InFlight, ...]:
    """The rollout's in-flight rows, each with what its settle reads: one query."""
    # Readiness (minReadySeconds > 0) reads whether each row stayed on its target and online; without it no row
    # arrives, and those two are not read (a query over thousands of rows in flight is the tick's largest).
    proving = rollout.min_ready_seconds > 0
    still = Exists(sessions_on_target().filter(joined_at__lte=OuterRef("arrived_at"))) if proving else Value(False)
    online = Exists(Node.objects.filter(online_node_q(now=now), pk=OuterRef("node_id"))) if proving else Value(True)
    rows = (
        NodeUpgrade.objects.filter(rollout=rollout, state=State.IN_FLIGHT)
        .annotate(joined=Subquery(sessions_on_target().values("joined_at")[:1]), still=still, online=online)
        .values_list("id", "wave", "joined", "deadline", "arrived_at", "still", "online")
    )
    return tuple(
        InFlight(
            id=pk,
            wave=wave,
            on_target=joined is not None,
            overdue=deadline is not None and deadline <= now,
            arrived_at=arrived_at,
            still=still,
            online=online,
            joined_at=joined,
        )
        for pk, wave, joined, deadline, arrived_at, still, online in rows
    )
