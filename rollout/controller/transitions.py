"""Every state transition of a rollout: one function each, and nowhere else.

```
Rollout      active ──pause_rollout──► paused ──resume_rollout──► active
             paused ──hold_at_deadline──► paused (its deadline's: pausedReason "deadline")
             active ──start_next_wave──► active (next wave)
             active (soaking) ──promote_rollout──► active (soak over: next wave at the next tick)
             active ──complete_rollout──► completed
             active|paused|awaiting_approval ──abort_rollout──► aborted
             awaiting_approval ──approve_rollout──► active | scheduled;  ──deny_rollout──► denied
             scheduled ──start_scheduled_rollout──► active
             active|paused|scheduled|awaiting_approval ──supersede_rollout──► superseded
```

Each function does the whole transition together: the conditional UPDATE of the
rollout's row (``_move_rollout``: from the states it leaves, so a repeated call
moves it at most once), the changes to its node upgrades (through
rollout/controller/upgrade_transitions.py, the node upgrades' transitions), and
the event. Callers (the controller's tick, the schedule, the operator actions and
approvals in rollout/rollouts/) only decide *whether* it moves, and hold the
rollout's row lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from copy import copy
from datetime import datetime
from uuid import UUID

from django.db.models import Count, Max

from core.errors import InvalidState
from fleet.interface import pools_set_default_daemon_version
from rollout.controller.events import (
    Aborted,
    Approved,
    Completed,
    Denied,
    Paused,
    Promoted,
    Resumed,
    Started,
    Superseded,
    WaveStarted,
    event_record,
)
from rollout.controller.judge import failure_ratio_exceeded, wave_counts
from rollout.controller.upgrade_transitions import (
    cancel_pending_upgrades,
    hand_over_upgrades,
    release_settled_claims,
)
from rollout.dispatch import TICK_TASK, publish_on_commit
from rollout.models import NodeUpgrade, Rollout, RolloutApproval, RolloutWave, start_ahead
from rollout.words import cannot_be

State = NodeUpgrade.State


# --- the rollout (the caller holds its row lock) ---------------------------------------------


def _move_rollout(rollout: Rollout, *, sources: Sequence[str], action: str, **changes: object) -> None:
    """One conditional UPDATE of the rollout's row, mirrored on the instance; InvalidState if not in ``sources``."""
    if rollout.state not in sources:
        raise InvalidState(cannot_be(rollout.state, action), state=rollout.state)
    moved = Rollout.objects.filter(pk=rollout.pk, state__in=sources).update(**changes)
    if not moved:  # only reachable without the row lock: the row moved under us
        raise InvalidState(f"The rollout cannot be {action} now.", state=rollout.state)
    for name, value in changes.items():
        setattr(rollout, name, value)


def pause_rollout(*, rollout: Rollout, at: datetime, paused: Paused) -> None:
    """active|scheduled -> paused (``rollout.paused``, for ``paused.paused_reason``). In-flight nodes settle; none
    starts."""
    _move_rollout(
        rollout,
        sources=[Rollout.State.ACTIVE, Rollout.State.SCHEDULED],
        action="paused",
        state=Rollout.State.PAUSED,
        paused_reason=paused.paused_reason,
    )
    event_record(rollout=rollout, payload=paused, at=at)


def hold_at_deadline(*, rollout: Rollout) -> None:
    """paused -> paused by its deadline: the pause it had (an operator's, a gate's…) becomes the deadline's, as
    an active rollout's deadline pauses it (``pausedReason: "deadline"``). No ``rollout.paused``: it moved from
    paused; the caller records ``rollout.deadline``."""
    _move_rollout(
        rollout,
        sources=[Rollout.State.PAUSED],
        action="held at its deadline",
        paused_reason=Rollout.PausedReason.DEADLINE,
    )


def resume_rollout(
    *, rollout: Rollout, at: datetime, acknowledged_failures: int, actor: str, state: str = Rollout.State.ACTIVE
) -> None:
    """paused -> active, or scheduled while its startAt is ahead (``rollout.resumed``), accepting
    ``acknowledged_failures`` of the current wave. A scheduled rollout paused before its start that is resumed
    active starts now too (``rollout.started``, its first wave's ``startedAt``), as its startAt would have."""
    _move_rollout(
        rollout,
        sources=[Rollout.State.PAUSED],
        action="resumed",
        state=state,
        paused_reason=None,
        acknowledged_failures=acknowledged_failures,
    )
    event_record(rollout=rollout, payload=Resumed(actor=actor), at=at)
    if state == Rollout.State.ACTIVE and rollout.current_wave == 0 and _first_wave_started(rollout, at=at):
        event_record(rollout=rollout, payload=Started(actor=actor, start_at=rollout.start_at), at=at)


def abort_rollout(
    *,
    rollout: Rollout,
    at: datetime,
    actor: str,
    rollback: bool,
    cancelled: int,
    rolled_back: int,
    not_rolled_back: int,
    reason: str,
) -> None:
    """active|paused|awaiting_approval -> aborted (``rollout.aborted``); its settled rows stop holding their nodes.

    ``cancelled``, ``rolled_back``, ``not_rolled_back``: what the abort did to its pending and in-flight rows;
    ``reason``: its ``abortedReason`` (a ``Rollout.AbortedReason``, or ``gate_failed:<name>``).
    """
    _move_rollout(
        rollout,
        sources=Rollout.HOLDING_STATES,
        action="aborted",
        state=Rollout.State.ABORTED,
        paused_reason=None,
        aborted_at=at,
        aborted_reason=reason,
    )
    release_settled_claims(rollout=rollout)
    aborted = Aborted(
        actor=actor,
        rollback=rollback,
        cancelled=cancelled,
        rolled_back=rolled_back,
        not_rolled_back=not_rolled_back,
        reason=reason,
        still_in_flight=NodeUpgrade.objects.filter(rollout=rollout, state=State.IN_FLIGHT).count(),
    )
    event_record(rollout=rollout, payload=aborted, at=at)


def supersede_rollout(
    *, rollout: Rollout, by: Rollout, node_ids: AbstractSet[UUID], at: datetime, actor: str
) -> list[UUID]:
    """active|paused|scheduled|awaiting_approval -> superseded (``rollout.superseded``) by ``by``, being created
    over ``node_ids`` (docs/controller.md#undoing-a-bad-release). Its pending rows are cancelled (``superseded``),
    its in-flight rows on ``node_ids`` are handed over (returned: ``by`` takes them over), its settled rows
    stop holding their nodes; in-flight rows outside ``node_ids`` settle here as an aborted rollout's do."""
    _move_rollout(
        rollout, sources=Rollout.HOLDING_STATES, action="superseded", state=Rollout.State.SUPERSEDED, paused_reason=None
    )
    cancelled = cancel_pending_upgrades(rollout=rollout, at=at, reason=NodeUpgrade.Reason.SUPERSEDED)
    handed = hand_over_upgrades(rollout=rollout, node_ids=node_ids, at=at)
    release_settled_claims(rollout=rollout)
    superseded = Superseded(
        superseded_by=str(by.id),
        superseded_by_version=by.release.version,
        actor=actor,
        cancelled=cancelled,
        taken_over=len(handed),
        still_in_flight=NodeUpgrade.objects.filter(rollout=rollout, state=State.IN_FLIGHT).count(),
    )
    event_record(rollout=rollout, payload=superseded, at=at)
    return handed


def complete_rollout(*, rollout: Rollout, at: datetime) -> None:
    """active -> completed (``rollout.completed``); the covered pools take the version as their default."""
    _move_rollout(
        rollout, sources=[Rollout.State.ACTIVE], action="completed", state=Rollout.State.COMPLETED, completed_at=at
    )
    release_settled_claims(rollout=rollout)
    # The pools it actually covered: those of its own nodes (one writer per node means no newer
    # rollout can have taken them meanwhile).
    covered = NodeUpgrade.objects.filter(rollout=rollout).values_list("pool_id", flat=True).distinct()
    # A pool the selector covered in part keeps its default (docs/api.md#rollouts-to-a-selection).
    covered = covered.exclude(pool_id__in=rollout.partly_covered_pool_ids)
    pools_set_default_daemon_version(pool_ids=list(covered.order_by()), version=rollout.release.version)
    totals = dict(NodeUpgrade.objects.filter(rollout=rollout).values_list("state").annotate(n=Count("id")).order_by())
    event_record(rollout=rollout, payload=Completed(totals=totals), at=at)


def wave_settled_record(*, rollout: Rollout, waves: dict[int, RolloutWave], at: datetime) -> None:
    """Record, once, that the current wave settled: at its last node's settle (``at`` if none), its soak from
    then (``Rollout.wave_settles``), with one message for the soak's end (not one per tick) unless it is the last.
    ``waves``: the rollout's, by index; the caller has seen no pending or in-flight row in the wave."""
    wave = waves[rollout.current_wave]
    if wave.settled:
        return
    rollout.wave_settles(wave, at=_last_settle(rollout, wave) or at)
    wave.save(update_fields=["settled_at"])
    rollout.save(update_fields=["next_wave_at"])
    if not rollout.on_last_wave(last_index=max(waves)):
        publish_on_commit(TICK_TASK, args=[str(rollout.id)], eta=rollout.next_wave_at)


def _last_settle(rollout: Rollout, wave: RolloutWave) -> datetime | None:
    last: datetime | None = NodeUpgrade.objects.filter(rollout=rollout, wave=wave.index).aggregate(
        last=Max("settled_at")
    )["last"]
    return last


def _settle_unrecorded(rollout: Rollout) -> dict[int, RolloutWave] | None:
    """The rollout's waves (by index) when its current wave's last node settled after the last tick (the join
    asked for a tick that has not run yet): the wave soaks already as its blocker shows it
    (``plan._settles_unrecorded``). None otherwise, and when the wave's failures will pause the rollout."""
    if rollout.state != Rollout.State.ACTIVE or rollout.next_wave_at is not None:
        return None
    counts = wave_counts(rollout=rollout, wave=rollout.current_wave)
    if counts[State.PENDING] or counts[State.IN_FLIGHT] or failure_ratio_exceeded(rollout=rollout, counts=counts):
        return None
    waves = {wave.index: wave for wave in RolloutWave.objects.filter(rollout=rollout)}
    wave = waves.get(rollout.current_wave)
    return waves if wave is not None and not wave.settled else None


def rollout_soaking(rollout: Rollout, *, at: datetime) -> bool:
    """Whether the rollout's current wave soaks now (``Rollout.soaking``): what promote ends. One query."""
    if rollout.soak_until(at=at) is None:
        return False  # no query for what cannot be soaking
    waves = {wave.index: wave for wave in RolloutWave.objects.filter(rollout=rollout).only("index", "settled_at")}
    return rollout.soaking(wave=waves.get(rollout.current_wave), last_index=max(waves, default=0), at=at)


def rollout_promotable(rollout: Rollout, *, at: datetime) -> bool:
    """Whether promote would end a soak now (the admin's button): soaking, or soaking once promote records a
    settle no tick has recorded yet (``_settle_unrecorded``), as it would, on copies: this writes nothing."""
    if rollout_soaking(rollout, at=at):
        return True
    waves = _settle_unrecorded(rollout)
    if waves is None:
        return False
    foreseen, wave = copy(rollout), copy(waves[rollout.current_wave])
    foreseen.wave_settles(wave, at=_last_settle(rollout, wave) or at)
    return foreseen.soaking(wave=wave, last_index=max(waves), at=at)


def promote_rollout(*, rollout: Rollout, at: datetime, actor: str) -> None:
    """Soaking -> soak over (``rollout.promoted``): the next tick starts the next wave (``rollout.wave``).

    The caller holds the rollout's row lock. InvalidState (409) unless the rollout is soaking, its wave's settle
    recorded or not yet (``_settle_unrecorded``: then recorded here, as the tick would).
    """
    unrecorded = _settle_unrecorded(rollout)
    if unrecorded is not None:
        wave_settled_record(rollout=rollout, waves=unrecorded, at=at)
    if not rollout_soaking(rollout, at=at):
        if rollout.state != Rollout.State.ACTIVE:
            raise InvalidState(cannot_be(rollout.state, "promoted"), state=rollout.state)
        raise InvalidState(
            f"Wave {rollout.current_wave + 1} of {RolloutWave.objects.filter(rollout=rollout).count()} is not soaking:"
            " there is nothing to promote.",
            state=rollout.state,
        )
    soak_ends_at = rollout.next_wave_at
    _move_rollout(rollout, sources=[Rollout.State.ACTIVE], action="promoted", next_wave_at=at)
    event_record(
        rollout=rollout, payload=Promoted(wave=rollout.current_wave, soak_ends_at=soak_ends_at, actor=actor), at=at
    )


def start_next_wave(*, rollout: Rollout, wave: RolloutWave, at: datetime) -> None:
    """The current wave -> ``wave`` (``rollout.wave``), forgetting the previous wave's accepted failures."""
    _move_rollout(
        rollout,
        sources=[Rollout.State.ACTIVE],
        action="advanced",
        current_wave=wave.index,
        acknowledged_failures=0,
        next_wave_at=None,
    )
    wave.started_at = at
    wave.save(update_fields=["started_at"])
    event_record(
        rollout=rollout, payload=WaveStarted(wave=wave.index, percent=float(wave.percent), total=wave.total), at=at
    )


def approve_rollout(*, rollout: Rollout, at: datetime, actor: str) -> None:
    """awaiting_approval -> active (``rollout.approved``): its first wave starts now, at the next tick; or
    -> scheduled when its ``startAt`` is ahead (the tick starts it then, docs/controller.md#schedules)."""
    ahead = start_ahead(rollout.start_at, at=at)
    state = Rollout.State.SCHEDULED if ahead else Rollout.State.ACTIVE
    _move_rollout(rollout, sources=[Rollout.State.AWAITING_APPROVAL], action="approved", state=state, approved_at=at)
    if state == Rollout.State.ACTIVE:
        _first_wave_started(rollout, at=at)
    approvers = RolloutApproval.objects.filter(rollout=rollout).order_by("at", "id").values_list("username", flat=True)
    event_record(rollout=rollout, payload=Approved(actor=actor, approvals=list(approvers)), at=at)


def deny_rollout(*, rollout: Rollout, at: datetime, actor: str, comment: str) -> None:
    """awaiting_approval -> denied (``rollout.denied``): its pending rows are cancelled and free their nodes."""
    if rollout.state != Rollout.State.AWAITING_APPROVAL:
        raise InvalidState(cannot_be(rollout.state, "denied"), state=rollout.state)
    cancelled = cancel_pending_upgrades(rollout=rollout, at=at, reason=NodeUpgrade.Reason.DENIED)
    _move_rollout(rollout, sources=[Rollout.State.AWAITING_APPROVAL], action="denied", state=Rollout.State.DENIED)
    event_record(rollout=rollout, payload=Denied(actor=actor, comment=comment, cancelled=cancelled), at=at)


def start_scheduled_rollout(*, rollout: Rollout, at: datetime, actor: str) -> None:
    """scheduled -> active (``rollout.started``): its first wave starts now. InvalidState unless scheduled."""
    _move_rollout(rollout, sources=[Rollout.State.SCHEDULED], action="started", state=Rollout.State.ACTIVE)
    _first_wave_started(rollout, at=at)
    event_record(rollout=rollout, payload=Started(actor=actor, start_at=rollout.start_at), at=at)


def _first_wave_started(rollout: Rollout, *, at: datetime) -> bool:
    """The current wave starts now; whether it had not started before."""
    return bool(
        RolloutWave.objects.filter(rollout=rollout, index=rollout.current_wave, started_at__isnull=True).update(
            started_at=at
        )
    )
