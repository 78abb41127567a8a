"""Schedules (docs/controller.md#schedules): a scheduled rollout's start, and what its deadline does.

A rollout created with a ``startAt`` ahead is ``scheduled``: its nodes are held, nothing starts. The tick
(every ``ROLLOUT_EVERY`` seconds: every holding rollout is ticked) starts it once ``startAt`` has come; an
operator may start it at once. At ``endBy`` a rollout that is not finished (a paused one too) stops starting
nodes (those in flight settle), records ``rollout.deadline`` once, and pauses (``pausedReason: "deadline"``) or
aborts, with rollback for ``abort_rollback``.
"""

from __future__ import annotations

from datetime import datetime

from rollout.controller.aborts import rollout_abort_now
from rollout.controller.events import DeadlinePassed, Paused, event_record
from rollout.controller.transitions import hold_at_deadline, pause_rollout
from rollout.models import Rollout, end_passed, start_ahead

State = Rollout.State
EndBehavior = Rollout.EndBehavior


def start_due(rollout: Rollout, *, now: datetime) -> bool:
    """Whether the rollout is scheduled and its ``startAt`` has come: the tick starts it now."""
    return (
        rollout.state == State.SCHEDULED and rollout.start_at is not None and not start_ahead(rollout.start_at, at=now)
    )


def deadline_due(rollout: Rollout, *, now: datetime) -> bool:
    """Whether the tick applies the deadline now: once, to a rollout not finished (docs/controller.md#schedules).

    A paused rollout too: its ``endBehavior`` aborts it, or its pause becomes the deadline's (once: then its
    ``pausedReason`` is ``deadline``).
    """
    if not end_passed(rollout.end_by, at=now):
        return False
    if rollout.state in (State.ACTIVE, State.SCHEDULED):
        return True
    if rollout.state != State.PAUSED:
        return False
    aborts = rollout.end_behavior in (EndBehavior.ABORT, EndBehavior.ABORT_ROLLBACK)
    return aborts or rollout.paused_reason != Rollout.PausedReason.DEADLINE


def rollout_deadline(*, rollout: Rollout, now: datetime) -> bool:
    """The tick's step at ``endBy`` (``rollout.deadline``, then the pause or the abort). Whether it acted.

    The caller holds the rollout's row lock. Nodes in flight settle as usual; with ``abort_rollback`` they go
    back to their previous section (as an operator's abort with ``rollback``).
    """
    if not deadline_due(rollout, now=now):
        return False
    behavior = rollout.end_behavior or EndBehavior.PAUSE
    event_record(rollout=rollout, payload=DeadlinePassed(end_by=rollout.end_by, end_behavior=behavior), at=now)
    if behavior == EndBehavior.PAUSE and rollout.state == State.PAUSED:
        hold_at_deadline(rollout=rollout)
        return True
    if behavior == EndBehavior.PAUSE:
        pause_rollout(rollout=rollout, at=now, paused=Paused(paused_reason=Rollout.PausedReason.DEADLINE))
        return True
    rollout_abort_now(
        rollout=rollout,
        now=now,
        actor="deadline",
        rollback=behavior == EndBehavior.ABORT_ROLLBACK,
        reason=Rollout.AbortedReason.DEADLINE,
    )
    return True
