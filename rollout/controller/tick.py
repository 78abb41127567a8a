"""The controller's tick for one rollout: load -> decide -> apply (docs/controller.md#the-tick).

Under the rollout's row lock, taken with ``skip_locked`` so two workers never reconcile the same rollout at once:
``load.tick_facts`` reads its facts once, ``decide.decide`` (a pure function: the steps stop, settle, judge,
advance, start, and their order, live there) returns one ``TickDecision``, and ``tick_apply`` writes it through
the transitions (rollout/controller/transitions.py, the rollout's; upgrade_transitions.py, its node upgrades')
and decides nothing: the one fact it reads again is each open pool's free slots, under the pool's row lock.

Also here: ``rollout_tick`` (one asked tick, its waiter and retries) and ``rollouts_tick_all`` (the period).
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import structlog
from django.db import transaction
from django.utils import timezone

from core.maintenance import tables_vacuum
from fleet.interface import node_tables_vacuum
from rollout import conf
from rollout.controller.aborts import rollout_abort_now
from rollout.controller.decide import Advance, Stop, TickDecision, TickFacts, decide
from rollout.controller.events import Paused
from rollout.controller.health import controller_beat_record, rollout_ticked
from rollout.controller.load import tick_facts
from rollout.controller.scheduled import rollout_deadline
from rollout.controller.settle import node_upgrades_settle_overdue, node_upgrades_settle_ready, settles_apply
from rollout.controller.start import StartPlan, rollouts_converge, start_apply
from rollout.controller.stops import with_stop_facts
from rollout.controller.tick_requests import (
    holder_awaited,
    rollout_request_tick,
    tick_request_end,
    tick_request_start,
    tick_send,
)
from rollout.controller.timeouts import timeouts_due_rearm
from rollout.controller.transitions import (
    complete_rollout,
    pause_rollout,
    start_next_wave,
    start_scheduled_rollout,
    wave_settled_record,
)
from rollout.controller.upgrade_transitions import release_settled_claims
from rollout.dispatch import TICK_TASK, publish_on_commit
from rollout.metrics import TICK_SECONDS
from rollout.models import NodeUpgrade, Rollout, RolloutGate, RolloutWave, TickRequest

log = structlog.get_logger("rollout")

State = NodeUpgrade.State


@dataclass
class TickResult:
    succeeded: int = 0
    failed: int = 0
    started: int = 0
    skipped: int = 0
    paused: bool = False
    advanced: bool = False
    completed: bool = False
    #: The start step's plan (None when the tick did not get to the start step).
    plan: StartPlan | None = None


# --- the tick --------------------------------------------------------------------------


def rollout_stop(*, rollout: Rollout, stop: Stop, now: datetime) -> None:
    """The decision's stop other than the deadline (rollout/controller/stops.py): a pause (a gate's carries the
    gate and its latest value in the event), or a gate's abort (``abortedReason`` the stop's words), with rollback
    for ``abort_rollback`` (docs/controller.md#gates)."""
    if stop.action == RolloutGate.OnFailure.PAUSE:
        pause_rollout(
            rollout=rollout, at=now, paused=Paused(paused_reason=stop.reason, gate=stop.gate, value=stop.value)
        )
        return
    rollback = stop.action == RolloutGate.OnFailure.ABORT_ROLLBACK
    rollout_abort_now(rollout=rollout, now=now, actor=f"gate:{stop.gate}", rollback=rollback, reason=stop.reason)


#: Ticks one asked tick tries at most, each but the first after waiting for another worker's (``rollout_tick``).
TICK_ATTEMPTS = 3
#: How long one worker goes on ticking a rollout that was asked for while it ticked; then a message takes over.
TICK_AGAIN_SECONDS = 10.0


def rollout_tick(*, rollout_id: UUID | str, wait: bool = True) -> TickResult | None:
    """Reconcile one rollout. Returns None when another worker holds it (or it is gone).

    A tick asked for while this one ran is this one's to run: an asked tick ticks again at once, in this worker,
    for up to ``TICK_AGAIN_SECONDS``, then sends it as a message, so other work gets its turn; the periodic tick
    sends it at once.

    The holder may have read the rollout before the settle that asked for this tick. With ``wait`` (an asked
    tick), one worker per rollout waits for the holder's tick to end and then ticks (``holder_awaited``), so a
    freed slot is used at once; the others, and the periodic tick (no ``wait``: it has every rollout to
    tick), leave it to that waiter or ask again a second later (docs/controller.md#reacting-at-once).
    """
    began, attempt, result = time.monotonic(), 0, None
    while True:
        attempt += 1
        ticked, asked = _rollout_tick_marked(rollout_id=rollout_id)
        if ticked is not None:
            result, attempt = ticked, 0
            if not asked:
                return result
            if not wait or time.monotonic() - began >= TICK_AGAIN_SECONDS:
                tick_send(rollout_id=rollout_id)  # the periodic tick has every rollout to tick
                return result
            continue
        # Held by another worker (or gone); an ask made meanwhile is this worker's to see to.
        if not wait or attempt == TICK_ATTEMPTS:
            # Not waited for (or held again each time the waiter ticked): ask again shortly rather than wait
            # for the period.
            if asked:
                tick_send(rollout_id=rollout_id, countdown=1)
            else:
                rollout_request_tick(rollout_id=rollout_id, countdown=1)
            return result
        if not holder_awaited(rollout_id=rollout_id):
            if asked:
                tick_send(rollout_id=rollout_id)
            return result


def _rollout_tick_marked(*, rollout_id: UUID | str) -> tuple[TickResult | None, bool]:
    """One tick, between its request's start and end (``tick_requests``): its result (None: held or gone), and
    whether a tick was asked for while it ran. A tick that raises leaves such an ask to a message, a second later."""
    tick_request_start(rollout_id=rollout_id)
    try:
        result = _rollout_tick_unless_held(rollout_id=rollout_id)
    except BaseException:
        if tick_request_end(rollout_id=rollout_id):
            tick_send(rollout_id=rollout_id, countdown=1)
        raise
    return result, tick_request_end(rollout_id=rollout_id)


@TICK_SECONDS.time()
def _rollout_tick_unless_held(*, rollout_id: UUID | str) -> TickResult | None:
    """Load, decide, apply: the rollout's facts read once under its row lock (``load.tick_facts``), its decision
    (``decide.decide``, a pure function), and that decision's writes (``tick_apply``)."""
    with transaction.atomic():
        now = timezone.now()
        # What its stops read (a blocked or expired release, a failed gate) comes with the lock, in one query.
        rollout = (
            with_stop_facts(
                Rollout.objects.select_for_update(skip_locked=True, of=("self",)).select_related("release"), now=now
            )
            .filter(pk=rollout_id)
            .first()
        )
        if rollout is None:
            return None
        rollout_ticked(rollout=rollout, at=now)
        facts = tick_facts(rollout, now=now)
        return tick_apply(rollout=rollout, facts=facts, decision=decide(facts))


def tick_apply(*, rollout: Rollout, facts: TickFacts, decision: TickDecision) -> TickResult:
    """Write what ``decision`` says, in its order, and nothing else; the start step re-reads only what the pools'
    locks protect (their free slots, ``start.start_apply``)."""
    now, result = facts.now, TickResult()
    was_paused = rollout.state == Rollout.State.PAUSED
    if decision.deadline:
        rollout_deadline(rollout=rollout, now=now)
        result.paused = rollout.state == Rollout.State.PAUSED and not was_paused
    if decision.start_scheduled:
        start_scheduled_rollout(rollout=rollout, at=now, actor="schedule")
    if decision.stop is not None:
        rollout_stop(rollout=rollout, stop=decision.stop, now=now)  # nodes in flight settle below
        result.paused = True
    result.succeeded, result.failed = settles_apply(rollout=rollout, settles=decision.settles, now=now)
    if decision.tick_at is not None:
        publish_on_commit(TICK_TASK, args=[str(rollout.id)], eta=decision.tick_at)
    if decision.advance is not None:
        result.advanced = _advance_apply(rollout=rollout, advance=decision.advance, waves=facts.waves, now=now)
        result.paused = result.paused or decision.advance.pause is not None
    if decision.start is not None:
        result.plan, exhausted = start_apply(rollout=rollout, step=decision.start, now=now)
        result.started, result.skipped = result.plan.started, result.plan.skipped
        then = decision.after_start(started=result.started, skipped=result.skipped, exhausted=exhausted)
        if then is not None:  # a wave of only offline nodes settles here: move on without waiting a period
            moved = _advance_apply(rollout=rollout, advance=then, waves=facts.waves, now=now)
            result.advanced = moved or result.advanced
    result.completed = rollout.state == Rollout.State.COMPLETED
    return result


def _advance_apply(*, rollout: Rollout, advance: Advance, waves: Mapping[int, RolloutWave], now: datetime) -> bool:
    """The decision's advance: its pause, its wave recorded settled, then the completion or the next wave."""
    if advance.pause is not None:
        pause_rollout(rollout=rollout, at=now, paused=advance.pause)
        return False
    if advance.record:
        wave_settled_record(rollout=rollout, waves=dict(waves), at=now)
    if advance.complete:
        complete_rollout(rollout=rollout, at=now)
    elif advance.next_wave is not None:
        start_next_wave(rollout=rollout, wave=waves[advance.next_wave], at=now)
    return advance.moves


def rollouts_tick_all() -> int:
    """``rollout/all``: settle overdue nodes everywhere, then tick each active or paused rollout.

    Each rollout's tick is isolated: one that raises is logged and the others go
    on. The order is shuffled every period so no rollout always comes last, and
    when the period's time is spent the rest are handed to ``rollout/tick``
    tasks (other workers) instead of starving. Returns the rollouts ticked here.
    """
    started = time.monotonic()
    budget = conf.options().every / 2
    now = timezone.now()
    controller_beat_record(at=now)
    with transaction.atomic():
        node_upgrades_settle_overdue(now=now)
        node_upgrades_settle_ready(now=now)
        release_settled_claims()
    try:
        timeouts_due_rearm(now=now)  # the timeouts-due messages a broker lost, or that could not be published
    except Exception:  # isolate: the sweep above settles what is due; the next period tries again
        log.exception("rollout.timeouts_rearm_failed")
    try:
        rollouts_converge(now=now)
    except Exception:  # isolate: convergence must not stop the rollouts' ticks
        log.exception("rollout.converge_failed")
    rollout_ids = list(Rollout.objects.filter(state__in=Rollout.ACTIVE_STATES).values_list("id", flat=True))
    random.shuffle(rollout_ids)  # fairness, not security
    ticked = 0
    for index, rollout_id in enumerate(rollout_ids):
        if time.monotonic() - started > budget:
            for rest in rollout_ids[index:]:
                rollout_request_tick(rollout_id=rest)
            break
        try:
            if rollout_tick(rollout_id=rollout_id, wait=False) is not None:
                ticked += 1
        except Exception:  # isolate: one broken rollout must not stop the others' ticks
            log.exception("rollout.tick_failed", rollout=str(rollout_id))
    if rollout_ids:
        try:
            controller_tables_vacuum()
        except Exception:  # the ticks are done: a vacuum that failed is tried again next period, not retried now
            log.exception("rollout.vacuum_failed")
    return ticked


def controller_tables_vacuum() -> bool:
    """While rollouts run, every period: vacuum the rows they rewrite (three versions of each node upgrade, each
    started node's spec; docs/operations.md#table-maintenance). False when it did not run (not PostgreSQL, or
    inside a transaction)."""
    vacuumed = tables_vacuum([NodeUpgrade, TickRequest, Rollout, RolloutWave])
    return node_tables_vacuum() and vacuumed
