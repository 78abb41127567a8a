"""Why not yet: what each node of a rollout, and the rollout itself, waits for (docs/controller.md#why-not-yet).

Reads only: nothing here writes. A pending node's blocker is the next tick's decision for it,
taken by the start step's own functions (rollout/controller/plan.py: who starts, who is
skipped, who waits and why); this module turns decisions into codes, sentences and fields.
The facts are read in a constant number of queries for a page of rows or of rollouts,
whatever its size:

- ``rollout_facts``: per rollout, its pending and in-flight rows counted per
  (wave, pool, state) (one grouped query for any number of rollouts) and its
  waves' ``settled_at`` (one query);
- ``pool_states``: per pool that has pending rows in a rollout's startable wave,
  its windows (one query), budget (``pool_budgets``, two queries) and name (one query);
- for a page of node rows, its pending rows' start facts (one query), the rows the next
  tick reaches (``rows_reached``, one query) and whether offline verdicts hold (one query).

Node blockers, first that applies wins:

pending  ``awaiting_approval`` the rollout awaits its approvals (docs/controller.md#approvals): nothing starts
         ``no_controller``     the rollout is active and no tick reconciled it for max(3 x every, 10 s)
         ``scheduled``         the rollout is scheduled: nothing starts before its ``startAt``
         ``rollout_paused``    the rollout is paused
         ``gate``              a gate's latest result is not a fresh pass (its wave is the current one)
         ``wave_not_started``  its wave is later than the startable wave, and no soak holds the rollout
         ``soaking``           the current wave settled and soaks (any later wave waits for the soak)
         ``outside_window``    its pool's maintenance windows are closed now
         ``offline``           its agent is offline (the tick skips it at its turn)
         ``budget_full``       the tick does not reach it: the free slots go to the nodes ahead of it
         ``next_tick``         the next tick starts it (or skips it: no binary for its arch)
in_flight ``awaiting_rejoin``  until its agent rejoins on the target, or its deadline
         ``proving_ready``     rejoined, proving readiness (minReadySeconds) until ``until``
settled  ``None``
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

from fleet.interface import pool_budgets
from rollout.controller.health import BEAT_COMMAND, WORKER_COMMAND, controller_missing
from rollout.controller.plan import (
    SKIP_NO_BINARY,
    WAIT_BUDGET,
    WAIT_GATE,
    WAIT_PAUSED,
    WAIT_SOAK,
    WAIT_WAVE,
    WAIT_WINDOW,
    Candidate,
    Decision,
    PoolState,
    RolloutFacts,
    pool_states,
    rollout_facts,
    rows_decisions,
)
from rollout.models import NodeUpgrade, Rollout, RolloutGate
from rollout.rollouts.reads import approval_counts

State = NodeUpgrade.State

#: Node blocker codes, in the order of precedence (docs/controller.md#why-not-yet).
NODE_CODES = (
    "awaiting_approval",
    "no_controller",
    "scheduled",
    "rollout_paused",
    "gate",
    "wave_not_started",
    "soaking",
    "outside_window",
    "offline",
    "budget_full",
    "next_tick",
    "awaiting_rejoin",
    "proving_ready",
)
#: Rollout blocker codes (docs/controller.md#why-not-yet, the rollout representation); rollout.metrics repeats them.
ROLLOUT_CODES = (
    "awaiting_approval",
    "no_controller",
    "scheduled",
    "paused",
    "gate",
    "soaking",
    "outside_window",
    "budget_full",
    "awaiting_nodes",
)


#: An extra field of a blocker: a time, a reason, a count, an id, ids.
BlockerField = datetime | str | int | list[str] | None


@dataclass(frozen=True)
class Blocker:
    """What a node or a rollout waits for: a code, a sentence, and the code's extra fields (API names)."""

    code: str
    detail: str
    extra: Mapping[str, BlockerField] = field(default_factory=dict)


def _at(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value is not None else "never"


def _paused_why(rollout: Rollout) -> str:
    reason = rollout.paused_reason or ""
    return str(Rollout.PausedReason(reason).label) if reason in Rollout.PausedReason.values else reason


# --- words --------------------------------------------------------------------------------------


def window_phrase(pool: PoolState) -> str:
    """``the 22:00 Europe/Berlin window``: the window of ``pool`` that opens next."""
    window = pool.windows.opening
    return f"the {window.start:%H:%M} {window.timezone} window" if window is not None else "the next window"


# --- no controller (docs/controller.md#no-controller) ------------------------------------------


def no_controller_blocker(rollout: Rollout, *, now: datetime) -> Blocker | None:
    """``no_controller`` when the rollout is active and no tick reconciled it for max(3 x every, 10 s)."""
    if not controller_missing(rollout, now=now):
        return None
    last = rollout.last_tick_at
    if last is not None:
        since = f"since {_at(last)}"
    elif rollout.approved_at is not None:
        since = f"since it was approved at {_at(rollout.approved_at)}"
    else:
        since = f"since it was created at {_at(rollout.created_at)}"
    return Blocker(
        "no_controller",
        f"No controller has ticked this rollout {since}: start a Celery worker and beat "
        f"({WORKER_COMMAND}; {BEAT_COMMAND}).",
        {"lastTickAt": last},
    )


def scheduled_blocker(rollout: Rollout) -> Blocker:
    """``scheduled``: the rollout holds its nodes and starts none before ``startAt`` (docs/controller.md#schedules)."""
    return Blocker(
        "scheduled", f"The rollout is scheduled to start at {_at(rollout.start_at)}.", {"startAt": rollout.start_at}
    )


# --- node blockers -----------------------------------------------------------------------------


def node_blockers(
    rows: Sequence[NodeUpgrade], *, now: datetime, facts: Mapping[UUID, RolloutFacts] | None = None
) -> dict[int, Blocker | None]:
    """{row id: blocker} for a page of node rows (of one or more rollouts, loaded with ``rollout``).

    A constant number of queries whatever the number of rows (see the module's docstring).
    """
    approvals = approval_counts({row.rollout_id: row.rollout for row in rows}.values())
    if facts is None:
        pending = [row for row in rows if row.state == State.PENDING and row.rollout_id not in approvals]
        facts = rollout_facts({row.rollout_id: row.rollout for row in pending}.values(), now=now) if pending else {}
    plan = rows_decisions(rows, facts=facts, now=now)
    return {
        row.id: approval_blocker(row.rollout, approvals.get(row.rollout_id, 0))
        if row.state == State.PENDING and row.rollout.state == Rollout.State.AWAITING_APPROVAL
        else (row.state == State.PENDING and no_controller_blocker(row.rollout, now=now))
        or node_blocker(
            row,
            decision=plan.decisions.get(row.id),
            pool=plan.pools.get(row.pool_id),
            candidate=plan.candidates.get(row.id),
            gate=facts[row.rollout_id].gate if row.rollout_id in facts else None,
        )
        for row in rows
    }


def approval_blocker(rollout: Rollout, approvals: int) -> Blocker:
    """``awaiting_approval``: the rollout, and each of its rows, until enough users approve it."""
    required = rollout.approvals_required
    return Blocker(
        "awaiting_approval",
        f"The rollout awaits approval ({approvals} of {required}): nothing starts until {required} user(s) other "
        "than its creator approve it.",
        {"approvals": approvals, "required": required},
    )


def node_blocker(
    row: NodeUpgrade,
    *,
    decision: Decision | None,
    pool: PoolState | None,
    candidate: Candidate | None,
    gate: RolloutGate | None = None,
) -> Blocker | None:
    """The blocker of one row, from the next tick's decision for it (no query)."""
    rollout = row.rollout
    if row.state == State.IN_FLIGHT:
        return _in_flight_blocker(row)
    if row.state != State.PENDING or rollout.state not in Rollout.ACTIVE_STATES:
        return None  # settled; pending rows of a finished rollout do not exist (abort cancels them)
    if rollout.state == Rollout.State.SCHEDULED:
        return scheduled_blocker(rollout)
    if decision is None:
        return Blocker("next_tick", "It is decided at the next tick.")
    if decision == WAIT_PAUSED:
        return Blocker(
            "rollout_paused",
            f"The rollout is paused ({_paused_why(rollout)}): no node starts until it is resumed.",
            {"pausedReason": rollout.paused_reason},
        )
    if decision == WAIT_GATE and gate is not None:
        return gate_blocker(gate)
    if decision == WAIT_SOAK:
        until = rollout.next_wave_at
        return Blocker(
            "soaking",
            f"Wave {rollout.current_wave} settled and soaks until {_at(until)}; the next wave starts then.",
            {"until": until},
        )
    if decision == WAIT_WAVE:
        return Blocker(
            "wave_not_started",
            f"Its wave ({row.wave}) has not started: the rollout is at wave {rollout.current_wave}.",
            {"wave": rollout.current_wave},
        )
    if pool is None:
        return Blocker("next_tick", "It is decided at the next tick.")
    if decision == WAIT_WINDOW:
        opens = pool.next_window_at
        return Blocker(
            "outside_window",
            f"Pool {pool.name} is outside its maintenance windows: waiting for {window_phrase(pool)} at {_at(opens)}.",
            {"nextWindowAt": opens},
        )
    last_seen = candidate.last_seen_at if candidate is not None else None
    if decision.code == "offline":
        return Blocker(
            "offline",
            f"Its agent is offline (last seen {_at(last_seen)}): it will be skipped at its turn unless it comes back.",
            {"lastSeenAt": last_seen},
        )
    if decision == WAIT_BUDGET:
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
    if decision == SKIP_NO_BINARY:
        arch = candidate.arch if candidate is not None else "its arch"
        return Blocker("next_tick", f"The next tick skips it: the release has no binary for {arch}.")
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


def gate_blocker(gate: RolloutGate) -> Blocker:
    """A gate holds: its latest result is not a pass taken within two intervals."""
    if gate.state == RolloutGate.State.PENDING:
        why = "has not answered yet"
    elif gate.state == RolloutGate.State.PASS:
        why = f"last passed at {_at(gate.at)}, too long ago"
    else:
        why = f"is {gate.state} since {_at(gate.at)}" + (f" ({gate.detail})" if gate.detail else "")
    return Blocker(
        "gate",
        f"Gate {gate.name} {why}: no node starts until every gate passes.",
        {"name": gate.name, "state": str(gate.state), "at": gate.at},
    )


# --- rollout blockers --------------------------------------------------------------------------


def rollout_blockers(rollouts: Sequence[Rollout], *, now: datetime) -> dict[UUID, Blocker | None]:
    """{rollout id: blocker} for many rollouts: six queries at most, whatever their number."""
    return _rollout_blockers(rollouts, now=now)[0]


def _rollout_blockers(
    rollouts: Sequence[Rollout], *, now: datetime
) -> tuple[dict[UUID, Blocker | None], dict[UUID, PoolState]]:
    running = [rollout for rollout in rollouts if rollout.state == Rollout.State.ACTIVE]
    facts = rollout_facts(running, now=now)
    pools = pool_states({pool for f in facts.values() for pool in f.pending_pools()}, now=now)
    approvals = approval_counts(rollouts)
    blockers = {
        rollout.id: approval_blocker(rollout, approvals.get(rollout.id, 0))
        if rollout.state == Rollout.State.AWAITING_APPROVAL
        else no_controller_blocker(rollout, now=now)
        or rollout_blocker(rollout, facts=facts.get(rollout.id), pools=pools)
        for rollout in rollouts
    }
    return blockers, pools


def rollout_blocker(rollout: Rollout, *, facts: RolloutFacts | None, pools: Mapping[UUID, PoolState]) -> Blocker | None:
    """What holds the rollout as a whole, or None while nodes are moving (or it is finished).

    In this order: ``paused``; ``gate`` (a gate's latest result is not a fresh pass); ``soaking``;
    None when some pool of the startable wave is open and has a free slot (the next tick starts
    or skips nodes there); ``outside_window`` when some of its pools are closed (``poolIds``:
    those, ``nextWindowAt``: the earliest opening);
    ``budget_full`` when some are full and none of the rollout's own nodes are in flight
    there (``poolIds``: those; a budget its own upgrades fill frees itself as they settle);
    ``awaiting_nodes`` when nodes are in flight and nothing else can start; else None.
    """
    if rollout.state == Rollout.State.SCHEDULED:
        return scheduled_blocker(rollout)
    if rollout.state == Rollout.State.PAUSED:
        return Blocker(
            "paused", f"The rollout is paused ({_paused_why(rollout)}).", {"pausedReason": rollout.paused_reason}
        )
    if rollout.state != Rollout.State.ACTIVE or facts is None:
        return None
    if facts.gate is not None:
        return gate_blocker(facts.gate)
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
            f"Waiting for {window_phrase(first) if opens else 'a window'} of "
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
    listed = blocker.extra.get("poolIds")
    pool_ids = [UUID(pool_id) for pool_id in listed] if isinstance(listed, list) else []
    chosen = [pools[pool_id] for pool_id in pool_ids if pool_id in pools]
    if blocker.code == "outside_window":
        opens = _time(blocker.extra.get("nextWindowAt"))
        first = next((pool for pool in chosen if pool.next_window_at == opens), None)
        phrase = window_phrase(first) if first and opens else "the next window"
        return f"waiting for {phrase} ({', '.join(pool.name for pool in chosen)}), at {_at(opens)}"
    if blocker.code == "budget_full":
        # The budget's own split: besides workflows, its only disruption source is the rollouts' upgrades.
        split = pool_budgets(pool_ids=pool_ids, split=True)
        return "; ".join(
            f"budget full in {pool.name}: {budget.disrupted} of {budget.allowed} disrupted by "
            f"{_count(budget.by_workflows or 0, 'workflow')} and {_count(budget.by_sources or 0, 'upgrade')}"
            for pool in chosen
            if (budget := split.get(pool.pool_id)) is not None
        )
    if blocker.code == "paused":
        return f"paused: {_paused_why(rollout)}"
    if blocker.code == "gate":
        return f"held by gate {blocker.extra.get('name')} ({blocker.extra.get('state')})"
    if blocker.code == "no_controller":
        return blocker.detail
    if blocker.code == "awaiting_approval":
        return f"awaiting approval: {blocker.extra.get('approvals')} of {blocker.extra.get('required')}"
    if blocker.code == "soaking":
        return f"soaking until {_at(_time(blocker.extra.get('until')))}"
    in_flight = blocker.extra.get("inFlight")
    return f"waiting for {_count(in_flight if isinstance(in_flight, int) else 0, 'node')} in flight"


def _time(value: BlockerField) -> datetime | None:
    return value if isinstance(value, datetime) else None
