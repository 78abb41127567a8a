"""Four eyes: approving and denying a rollout that awaits approval (docs/controller.md#approvals).

A tenant whose ``rollout_approvals`` is N > 0 creates rollouts in state ``awaiting_approval``
(rollout/rollouts/create.py): their nodes are held, nothing starts. Each approval is a row
(``RolloutApproval``, unique per rollout and user); when N distinct users other than the creator
have approved, the rollout starts (``rollout.approved``). A denial ends it (``denied``, terminal;
``rollout.denied``) and frees its nodes. Abort works too (rollouts.py ``rollout_abort``).

```
awaiting_approval ──approve_rollout──► active        (the Nth approval; scheduled while its startAt is ahead)
awaiting_approval ──deny_rollout──► denied           (pending rows cancelled: ``denied``)
```

Who may: the grant ``compute:rollout:approve`` is the caller's (the API's permission class, the
admin's ``can_approve``); the rules on the rollout are here, for the API and the admin alike:
the creator never approves their own rollout (403 ``self_approval``), a user approves once (409
``already_approved``), and only a rollout awaiting approval is approved or denied (409
``invalid_state``). Both hold the rollout's row lock, so two approvers at once are counted one
after the other; the unique constraint stands behind it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import Conflict, Forbidden, InvalidState
from fleet.interface import Actor, Tenant
from rollout.controller.tick_requests import rollout_request_tick
from rollout.controller.transitions import approve_rollout, deny_rollout
from rollout.models import Rollout, RolloutApproval
from rollout.rollouts.actions import audit_rollout, comment_checked, event_actor, rollout_locked
from rollout.words import cannot_be

if TYPE_CHECKING:
    from django.contrib.auth.models import _User

# --- the services ---------------------------------------------------------------------------------


def rollout_approve(
    *,
    rollout_id: UUID | str,
    user: _User,
    comment: object = None,
    tenant: Tenant | None = None,
    actor: Actor | None = None,
) -> Rollout:
    """Record ``user``'s approval; the last one needed starts the rollout. The caller checked the grant.

    Refusals, in this order: 400 ``invalid_input`` (the comment); 404; 409 ``already_approved`` (this
    user approved it before, whatever its state now); 409 ``invalid_state`` (not awaiting approval);
    403 ``self_approval`` (its creator). Nothing is written when one answers.
    """
    text = comment_checked(comment)
    with transaction.atomic():
        rollout = rollout_locked(tenant=tenant, rollout_id=rollout_id)
        if RolloutApproval.objects.filter(rollout=rollout, user=user).exists():
            raise Conflict(f"{user.get_username()} already approved this rollout.", code="already_approved")
        if rollout.state != Rollout.State.AWAITING_APPROVAL:
            raise InvalidState(
                f"{cannot_be(rollout.state, 'approved')[:-1]}: it does not await approval.", state=rollout.state
            )
        if rollout.created_by_id is not None and rollout.created_by_id == user.pk:
            raise Forbidden("The creator of a rollout cannot approve it: another user must.", code="self_approval")
        now = timezone.now()
        try:
            with transaction.atomic():
                RolloutApproval.objects.create(
                    rollout=rollout, user=user, username=user.get_username(), comment=text, at=now
                )
        except IntegrityError as exc:  # only without the row lock: the constraint stands behind it
            raise Conflict(f"{user.get_username()} already approved this rollout.", code="already_approved") from exc
        approvals = RolloutApproval.objects.filter(rollout=rollout).count()
        before = {"state": rollout.state, "approvals": approvals - 1}
        if approvals >= rollout.approvals_required:
            approve_rollout(rollout=rollout, at=now, actor=event_actor(actor))
            rollout_request_tick(rollout_id=rollout.id)
        audit_rollout(
            rollout,
            actor,
            "rollout.approve",
            before=before,
            after={"state": rollout.state, "approvals": approvals, "comment": text},
        )
    return rollout


def rollout_deny(
    *,
    rollout_id: UUID | str,
    comment: object,
    tenant: Tenant | None = None,
    actor: Actor | None = None,
) -> Rollout:
    """End a rollout awaiting approval: ``denied``, its nodes free. The caller checked the grant.

    Refusals: 400 ``invalid_input`` (the comment: 1 to 500 characters); 404; 409 ``invalid_state``.
    """
    text = comment_checked(comment, required=True)
    with transaction.atomic():
        rollout = rollout_locked(tenant=tenant, rollout_id=rollout_id)
        before = {"state": rollout.state}
        deny_rollout(rollout=rollout, at=timezone.now(), actor=event_actor(actor), comment=text)
        audit_rollout(rollout, actor, "rollout.deny", before=before, after={"state": rollout.state, "comment": text})
    return rollout
