"""Why not yet: what each node of a rollout, and the rollout itself, waits for (docs/controller.md#why-not-yet).

Reads only, and decides nothing: a rollout's blocker and each pending node's are its plan at the moment
asked (rollout/controller/plan.py ``plan_at``: the rollout's decision, the next tick's decision for each
row), rendered here as codes, sentences and fields. The plan reads its facts in a constant number of
queries for a page of rows or of rollouts, whatever its size. Only ``no_controller`` is this module's
own: whether a controller runs is not the plan's to say (rollout/controller/health.py).

Node blockers, first that applies wins:

pending  ``awaiting_approval`` the rollout awaits its approvals (docs/controller.md#approvals): nothing starts
         ``no_controller``     the rollout is active and no tick reconciled it for max(3 x every, 10 s)
         ``scheduled``         the rollout is scheduled: nothing starts before its ``startAt``
         ``rollout_paused``    the rollout is paused (or its next tick pauses it: controller/stops.py)
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

The sentences count waves from 1, as the console does; the ``wave`` field is the API's index, from 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from rollout.controller.decisions import (
    SKIP_NO_BINARY,
    WAIT_APPROVAL,
    WAIT_BUDGET,
    WAIT_GATE,
    WAIT_PAUSED,
    WAIT_SCHEDULE,
    WAIT_SOAK,
    WAIT_WAVE,
    WAIT_WINDOW,
    Code,
    Decision,
)
from rollout.controller.health import BEAT_COMMAND, WORKER_COMMAND, controller_missing
from rollout.controller.plan import Plan, PoolState, RolloutDecision, plan_at
from rollout.controller.settle_rules import readiness_end
from rollout.controller.turns import Candidate
from rollout.models import NodeUpgrade, Rollout, RolloutGate
from rollout.rollouts.reads import approval_counts

State = NodeUpgrade.State

#: An extra field of a blocker: a time, a reason, a count, an id, ids.
BlockerField = datetime | str | int | list[str] | None


@dataclass(frozen=True)
class Blocker:
    """What a node or a rollout waits for: a code, a sentence, and the code's extra fields (API names)."""

    code: Code
    detail: str
    extra: Mapping[str, BlockerField] = field(default_factory=dict)


def at_words(value: datetime | None) -> str:
    """A time as the blockers' sentences say it, ``never`` for none."""
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value is not None else "never"


def paused_why(reason: str | None) -> str:
    """A PausedReason in words (``gate_failed:<name>`` as it is)."""
    reason = reason or ""
    return str(Rollout.PausedReason(reason).label) if reason in Rollout.PausedReason.values else reason


def paused_blocker(rollout: Rollout, held: RolloutDecision, *, node: bool) -> Blocker:
    """``paused`` (the rollout's; ``rollout_paused``, its rows'): it is paused, or its next tick pauses it (or
    aborts it at its deadline) before anything starts."""
    why = paused_why(held.paused_reason)
    aborts = rollout.end_behavior in (Rollout.EndBehavior.ABORT, Rollout.EndBehavior.ABORT_ROLLBACK)
    if rollout.state == Rollout.State.PAUSED:
        detail = f"The rollout is paused ({why})"
    elif held.paused_reason == Rollout.PausedReason.DEADLINE and aborts:
        detail = f"The rollout's deadline passed at {at_words(rollout.end_by)}: the next tick aborts it."
    else:
        detail = f"The next tick pauses the rollout ({why})"
    if not detail.endswith("."):
        detail += ": no node starts until it is resumed." if node else "."
    return Blocker(Code.ROLLOUT_PAUSED if node else Code.PAUSED, detail, {"pausedReason": held.paused_reason})


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
        since = f"since {at_words(last)}"
    elif rollout.approved_at is not None:
        since = f"since it was approved at {at_words(rollout.approved_at)}"
    else:
        since = f"since it was created at {at_words(rollout.created_at)}"
    return Blocker(
        Code.NO_CONTROLLER,
        f"No controller has ticked this rollout {since}: start a Celery worker and beat "
        f"({WORKER_COMMAND}; {BEAT_COMMAND}).",
        {"lastTickAt": last},
    )


def scheduled_blocker(rollout: Rollout) -> Blocker:
    """``scheduled``: the rollout holds its nodes and starts none before ``startAt`` (docs/controller.md#schedules)."""
    return Blocker(
        Code.SCHEDULED,
        f"The rollout is scheduled to start at {at_words(rollout.start_at)}.",
        {"startAt": rollout.start_at},
    )


# --- node blockers -----------------------------------------------------------------------------


def node_blockers(rows: Sequence[NodeUpgrade], *, now: datetime) -> dict[int, Blocker | None]:
    """{row id: blocker} for a page of node rows (of one or more rollouts, loaded with ``rollout``): the plan
    of their rollouts at ``now`` (``plan_at``) rendered. A constant number of queries whatever the number of rows.
    """
    pending = [row for row in rows if row.state == State.PENDING]
    rollouts = list({row.rollout_id: row.rollout for row in pending}.values())
    plan = plan_at(rollouts, now=now, rows=pending)
    approvals = approval_counts(rollouts)
    return {
        row.id: (row.state == State.PENDING and no_controller_blocker(row.rollout, now=now))
        or node_blocker(row, plan=plan, approvals=approvals.get(row.rollout_id, 0))
        for row in rows
    }


def approval_blocker(rollout: Rollout, approvals: int) -> Blocker:
    """``awaiting_approval``: the rollout, and each of its rows, until enough users approve it."""
    required = rollout.approvals_required
    return Blocker(
        Code.AWAITING_APPROVAL,
        f"The rollout awaits approval ({approvals} of {required}): nothing starts until {required} user(s) other "
        "than its creator approve it.",
        {"approvals": approvals, "required": required},
    )


def node_blocker(row: NodeUpgrade, *, plan: Plan, approvals: int = 0) -> Blocker | None:
    """The blocker of one row: the plan's decision for it, in words (no query). ``approvals``: its rollout's."""
    rollout = row.rollout
    if row.state == State.IN_FLIGHT:
        return _in_flight_blocker(row)
    decision = plan.rows.get(row.id)
    if row.state != State.PENDING or row.rollout_id not in plan.rollouts:
        return None  # settled; pending rows of a finished rollout do not exist (abort cancels them)
    if decision is None:
        return Blocker(Code.NEXT_TICK, "It is decided at the next tick.")
    if decision == WAIT_APPROVAL:
        return approval_blocker(rollout, approvals)
    if decision == WAIT_SCHEDULE:
        return scheduled_blocker(rollout)
    held = plan.rollouts[row.rollout_id]
    if decision == WAIT_PAUSED:
        return paused_blocker(rollout, held, node=True)
    if decision == WAIT_GATE and held.gate is not None:
        return gate_blocker(held.gate)
    if decision == WAIT_SOAK:
        until = held.soak_until
        return Blocker(
            Code.SOAKING,
            f"Wave {rollout.current_wave + 1} settled and soaks until {at_words(until)}; the next wave starts then.",
            {"until": until},
        )
    if decision == WAIT_WAVE:
        return Blocker(
            Code.WAVE_NOT_STARTED,
            f"Its wave (wave {row.wave + 1}) has not started: the rollout is at wave {rollout.current_wave + 1}.",
            {"wave": rollout.current_wave},
        )
    return _turn_blocker(decision, pool=plan.pools.get(row.pool_id), candidate=plan.candidates.get(row.id))


def _turn_blocker(decision: Decision, *, pool: PoolState | None, candidate: Candidate | None) -> Blocker:
    """A row's blocker when its wave starts: its pool's windows, then its turn in the pool."""
    if pool is None:
        return Blocker(Code.NEXT_TICK, "It is decided at the next tick.")
    if decision == WAIT_WINDOW:
        opens = pool.next_window_at
        return Blocker(
            Code.OUTSIDE_WINDOW,
            f"Pool {pool.name} is outside its maintenance windows: "
            f"waiting for {window_phrase(pool)} at {at_words(opens)}.",
            {"nextWindowAt": opens},
        )
    last_seen = candidate.last_seen_at if candidate is not None else None
    if decision.code == Code.OFFLINE:
        return Blocker(
            Code.OFFLINE,
            f"Its agent is offline (last seen {at_words(last_seen)}): "
            "it will be skipped at its turn unless it comes back.",
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
        extra: dict[str, BlockerField] = {
            "poolId": str(pool.pool_id),
            "disrupted": pool.disrupted,
            "allowed": pool.allowed,
        }
        return Blocker(Code.BUDGET_FULL, detail, extra)
    if decision == SKIP_NO_BINARY:
        arch = candidate.arch if candidate is not None else "its arch"
        return Blocker(Code.NEXT_TICK, f"The next tick skips it: the release has no binary for {arch}.")
    return Blocker(Code.NEXT_TICK, "It starts at the next tick.")


def _in_flight_blocker(row: NodeUpgrade) -> Blocker:
    rollout = row.rollout
    if row.arrived_at is not None and rollout.min_ready_seconds:
        until = readiness_end(row.arrived_at, min_ready_seconds=rollout.min_ready_seconds)
        return Blocker(
            Code.PROVING_READY,
            f"It rejoined on {row.target_version} and proves readiness until {at_words(until)}.",
            {"until": until},
        )
    return Blocker(
        Code.AWAITING_REJOIN,
        f"Upgrading: waiting for its agent to rejoin on {row.target_version}, "
        f"at the latest by {at_words(row.deadline)}.",
        {"deadline": row.deadline},
    )


def gate_blocker(gate: RolloutGate) -> Blocker:
    """A gate holds: its latest result is not a pass taken within two intervals."""
    if gate.state == RolloutGate.State.PENDING:
        why = "has not answered yet"
    elif gate.state == RolloutGate.State.PASS:
        why = f"last passed at {at_words(gate.at)}, too long ago"
    else:
        why = f"is {gate.state} since {at_words(gate.at)}" + (f" ({gate.detail})" if gate.detail else "")
    return Blocker(
        Code.GATE,
        f"Gate {gate.name} {why}: no node starts until every gate passes.",
        {"name": gate.name, "state": str(gate.state), "at": gate.at},
    )


# --- rollout blockers --------------------------------------------------------------------------


def rollout_blockers(rollouts: Sequence[Rollout], *, now: datetime) -> dict[UUID, Blocker | None]:
    """{rollout id: blocker} for many rollouts: their plan at ``now`` rendered; nine queries at most, whatever
    their number."""
    return rollout_blockers_of(plan_at(rollouts, now=now), rollouts)


def rollout_blockers_of(plan: Plan, rollouts: Sequence[Rollout]) -> dict[UUID, Blocker | None]:
    """{rollout id: blocker}: the plan's decision for each rollout (``RolloutDecision``) in words."""
    approvals = approval_counts(rollouts)
    return {
        rollout.id: no_controller_blocker(rollout, now=plan.now)
        or rollout_blocker(rollout, plan.rollouts.get(rollout.id), approvals=approvals.get(rollout.id, 0))
        for rollout in rollouts
    }


def rollout_blocker(rollout: Rollout, held: RolloutDecision | None, *, approvals: int = 0) -> Blocker | None:
    """What holds the rollout as a whole (the plan's ``RolloutDecision``), or None while nodes are moving."""
    if held is None or held.code is None:
        return None
    if held.code == Code.AWAITING_APPROVAL:
        return approval_blocker(rollout, approvals)
    if held.code == Code.SCHEDULED:
        return scheduled_blocker(rollout)
    if held.code == Code.PAUSED:
        return paused_blocker(rollout, held, node=False)
    if held.code == Code.GATE and held.gate is not None:
        return gate_blocker(held.gate)
    if held.code == Code.SOAKING:
        until = held.soak_until
        detail = f"Wave {rollout.current_wave + 1} settled and soaks until {at_words(until)}."
        return Blocker(Code.SOAKING, detail, {"until": until})
    pool_ids = [str(pool.pool_id) for pool in held.pools]
    if held.code == Code.OUTSIDE_WINDOW:
        opens = held.opening.next_window_at if held.opening is not None else None
        return Blocker(
            Code.OUTSIDE_WINDOW,
            f"Waiting for {window_phrase(held.opening) if held.opening and opens else 'a window'} of "
            f"{', '.join(pool.name for pool in held.pools)} at {at_words(opens)}.",
            {"nextWindowAt": opens, "poolIds": pool_ids},
        )
    if held.code == Code.BUDGET_FULL:
        return Blocker(
            Code.BUDGET_FULL,
            "Budget full in "
            + ", ".join(f"{pool.name} ({pool.disrupted} of {pool.allowed} disrupted)" for pool in held.pools)
            + ".",
            {"poolIds": pool_ids},
        )
    return Blocker(
        Code.AWAITING_NODES,
        f"Waiting for {held.in_flight} node(s) in flight to settle; no other node can start now.",
        {"inFlight": held.in_flight},
    )
