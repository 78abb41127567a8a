"""The operators' actions on a rollout: pause, resume, promote, abort (creating it: rollout/rollouts/create.py;
approving and denying it: rollout/rollouts/approvals.py).

The controller's steps live in rollout/controller/tick.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import structlog
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from core.errors import Conflict, InvalidInput, InvalidState, NotFound
from fleet.interface import (
    Actor,
    Tenant,
    audit_record,
)
from rollout.controller.aborts import rollout_abort_now
from rollout.controller.events import KeyedActor, Paused
from rollout.controller.judge import wave_failures
from rollout.controller.tick_requests import rollout_request_tick
from rollout.controller.transitions import (
    pause_rollout,
    promote_rollout,
    resume_rollout,
    start_scheduled_rollout,
)
from rollout.gates.verdicts import gates_counts_clear
from rollout.models import Rollout, end_passed, start_ahead
from rollout.rollouts.spec import schedule_time
from rollout.words import cannot_be

log = structlog.get_logger("rollout")


def audit_rollout(rollout: Rollout, actor: Actor | None, action: str, **changes: dict[str, Any] | None) -> None:
    """The operator's action in the tenant's audit trail, in the transaction that made it."""
    audit_record(
        tenant=rollout.tenant, actor=actor, action=action, object_type="rollout", object_id=rollout.pk, **changes
    )


def event_actor(actor: Actor | None) -> str:
    """Who the rollout event names: "api:alice" (with the key it acted through), "admin:root", or "operator"
    for direct calls."""
    if actor is None:
        return "operator"
    if actor.api_key_id is not None:
        return KeyedActor(str(actor), api_key_id=actor.api_key_id, api_key_name=actor.api_key_name)
    return str(actor)


def _state(rollout: Rollout) -> dict[str, str | None]:
    return {"state": rollout.state, "pausedReason": rollout.paused_reason}


#: An operator's comment on an action: at most this many characters.
MAX_COMMENT = 500


def comment_checked(value: object, *, required: bool = False) -> str:
    """An action's comment, 0 to 500 characters ("" when absent), or 1 to 500 when ``required`` (a denial's);
    400 ``invalid_input`` (``field: comment``) otherwise."""
    if value is None and not required:
        return ""
    if not isinstance(value, str) or len(value) > MAX_COMMENT or (required and not value):
        raise InvalidInput(
            f"comment must be {'1' if required else '0'} to {MAX_COMMENT} characters.",
            code="invalid_input",
            field="comment",
        )
    return value


def _commented(after: dict[str, Any], comment: str) -> dict[str, Any]:
    """What an audit entry records after an action, with the operator's comment when there is one."""
    return {**after, "comment": comment} if comment else after


def rollout_locked(*, tenant: Tenant | None, rollout_id: UUID | str) -> Rollout:
    """The rollout, row-locked (waits for a running tick), or NotFound (also for another tenant's)."""
    queryset = Rollout.objects.select_for_update().select_related("release")
    if tenant is not None:
        queryset = queryset.filter(tenant=tenant)
    try:
        return queryset.get(pk=rollout_id)
    except (Rollout.DoesNotExist, ValueError) as exc:
        raise NotFound("No such rollout.", code="not_found") from exc


def rollout_pause(
    *, rollout_id: UUID | str, tenant: Tenant | None = None, actor: Actor | None = None, comment: object = None
) -> Rollout:
    """active -> paused. In-flight nodes still settle; nothing new starts. ``comment``: in the audit entry."""
    text = comment_checked(comment)
    with transaction.atomic():
        rollout = rollout_locked(tenant=tenant, rollout_id=rollout_id)
        before = _state(rollout)
        paused = Paused(paused_reason=Rollout.PausedReason.OPERATOR, actor=event_actor(actor))
        pause_rollout(rollout=rollout, at=timezone.now(), paused=paused)
        audit_rollout(rollout, actor, "rollout.pause", before=before, after=_commented(_state(rollout), text))
    return rollout


def rollout_resume(
    *,
    rollout_id: UUID | str,
    tenant: Tenant | None = None,
    actor: Actor | None = None,
    end_by: object = None,
    comment: object = None,
) -> Rollout:
    """paused -> active (scheduled while its startAt is ahead). Failures seen so far in the current wave are
    accepted; only new ones re-pause. Past its ``endBy``: 409 ``deadline_passed`` unless ``end_by`` moves it."""
    text = comment_checked(comment)
    now = timezone.now()
    new_end_by = schedule_time(end_by, "endBy")
    if new_end_by is not None and new_end_by <= now:
        raise InvalidInput("endBy must be after now.", code="invalid_schedule", field="endBy")
    with transaction.atomic():
        rollout = rollout_locked(tenant=tenant, rollout_id=rollout_id)
        acknowledged = rollout.acknowledged_failures
        before: dict[str, Any] = _state(rollout)
        if new_end_by is not None and rollout.start_at is not None and new_end_by <= rollout.start_at:
            raise InvalidInput("endBy must be after startAt.", code="invalid_schedule", field="endBy")
        past = end_passed(rollout.end_by, at=now)
        if rollout.state == Rollout.State.PAUSED and past and new_end_by is None:
            raise Conflict(
                "The rollout's deadline (endBy) has passed: resume with a later endBy.",
                code="deadline_passed",
                endBy=rollout.end_by.isoformat().replace("+00:00", "Z") if rollout.end_by else None,
            )
        if rollout.state == Rollout.State.PAUSED and rollout.release_blocked():
            raise Conflict(
                f"Release {rollout.release.version} is blocked in this tenant: unblock it first.",
                code="release_blocked",
            )
        if rollout.state == Rollout.State.PAUSED and rollout.release.expired_at(timezone.now()):
            raise Conflict(
                f"Release {rollout.release.version} has expired: no node may start on it. Roll forward to a newer "
                "release instead.",
                code="release_expired",
            )
        if rollout.state == Rollout.State.PAUSED and rollout.paused_reason == Rollout.PausedReason.FAILURE_RATIO:
            # The operator saw these failures and chose to go on; failures that came while
            # an operator's pause was on were seen by no one, and are judged as usual.
            acknowledged = wave_failures(rollout)
        ahead = start_ahead(rollout.start_at, at=now)
        resume_rollout(
            rollout=rollout,
            at=now,
            acknowledged_failures=acknowledged,
            actor=event_actor(actor),
            state=Rollout.State.SCHEDULED if ahead else Rollout.State.ACTIVE,
        )
        if new_end_by is not None:
            Rollout.objects.filter(pk=rollout.pk).update(end_by=new_end_by)
            before["endBy"], rollout.end_by = rollout.end_by, new_end_by
        gates_counts_clear(rollout=rollout, now=timezone.now())
        rollout_request_tick(rollout_id=rollout.id)
        after = {**_state(rollout), **({"endBy": new_end_by} if new_end_by is not None else {})}
        audit_rollout(rollout, actor, "rollout.resume", before=before, after=_commented(after, text))
    return rollout


def rollout_start(
    *, rollout_id: UUID | str, tenant: Tenant | None = None, actor: Actor | None = None, comment: object = None
) -> Rollout:
    """scheduled -> active now (``rollout.started``, docs/controller.md#schedules); 409 unless scheduled."""
    text = comment_checked(comment)
    with transaction.atomic():
        rollout = rollout_locked(tenant=tenant, rollout_id=rollout_id)
        before = _state(rollout)
        start_scheduled_rollout(rollout=rollout, at=timezone.now(), actor=event_actor(actor))
        rollout_request_tick(rollout_id=rollout.id)
        audit_rollout(rollout, actor, "rollout.start", before=before, after=_commented(_state(rollout), text))
    return rollout


def rollout_promote(
    *, rollout_id: UUID | str, tenant: Tenant | None = None, actor: Actor | None = None, comment: object = None
) -> Rollout:
    """End the current wave's soak now: the next wave starts at the next tick.

    See docs/controller.md#pause-resume-promote-abort.

    409 ``invalid_state`` unless the rollout is active and its current wave is soaking.
    """
    text = comment_checked(comment)
    with transaction.atomic():
        rollout = rollout_locked(tenant=tenant, rollout_id=rollout_id)
        before = {"currentWave": rollout.current_wave, "nextWaveAt": rollout.next_wave_at}
        promote_rollout(rollout=rollout, at=timezone.now(), actor=event_actor(actor))
        # The tick that starts the next wave (rollout.wave), right after this commit.
        rollout_request_tick(rollout_id=rollout.id)
        audit_rollout(
            rollout,
            actor,
            "rollout.promote",
            before=before,
            after=_commented({"currentWave": rollout.current_wave, "nextWaveAt": rollout.next_wave_at}, text),
        )
    return rollout


def rollout_abort(
    *, rollout_id: UUID | str, tenant: Tenant | None = None, rollback: bool = False, actor: Actor | None = None
) -> Rollout:
    """active|paused|awaiting_approval -> aborted. Pending nodes are cancelled.

    With ``rollback``, in-flight nodes go back to their previous section when
    that release is registered (rolled_back); otherwise they stay in flight
    with a reason. Without it, in-flight nodes go on and settle as usual.
    Succeeded nodes are never touched, nor nodes whose agent already runs the
    target version (they succeed).
    """
    if not isinstance(rollback, bool):
        raise InvalidInput("rollback must be true or false.", code="invalid_input", field="rollback")
    with transaction.atomic():
        rollout = rollout_locked(tenant=tenant, rollout_id=rollout_id)
        if rollout.state in Rollout.TERMINAL_STATES:
            raise InvalidState(cannot_be(rollout.state, "aborted"), state=rollout.state)
        now = timezone.now()
        before = _state(rollout)
        rollout_abort_now(
            rollout=rollout, now=now, actor=event_actor(actor), rollback=rollback, reason=Rollout.AbortedReason.MANUAL
        )
        audit_rollout(rollout, actor, "rollout.abort", before=before, after={**_state(rollout), "rollback": rollback})
    return rollout


def rollouts_for(*, tenant: Tenant, states: Sequence[str] | None = None) -> QuerySet[Rollout]:
    queryset = Rollout.objects.filter(tenant=tenant).select_related("release").prefetch_related("pools")
    if states:
        queryset = queryset.filter(state__in=states)
    return queryset.order_by("-created_at")
