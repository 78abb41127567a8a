"""Blocking a release per tenant (docs/controller.md#blocking-a-release-per-tenant).

A block is one row (tenant, release); ``ReleaseBlock.objects.blocking`` (rollout/models/releases.py) is the
rule every reader asks. While it stands, in that tenant only: creating a rollout to the release answers 400
``release_blocked`` (rollout/rollouts/create.py ``_snapshot``), its active rollouts pause at their next tick
(``pausedReason: "release_blocked"``; rollout/controller/tick.py, before it settles or starts), resuming
them answers 409 ``release_blocked``, and nodes of its completed rollouts do not converge. Abort still works.
Unblocking does not resume anything: an operator resumes the rollouts they want to go on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import structlog
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import InvalidInput, InvalidState, NotFound
from fleet.interface import Actor, Tenant, audit_record
from rollout.controller.tick_requests import rollout_request_tick
from rollout.models import Release, ReleaseBlock, Rollout

if TYPE_CHECKING:
    from django.contrib.auth.models import _User

log = structlog.get_logger("rollout")

MAX_REASON = 500


def _release(version: str) -> Release:
    release = Release.objects.filter(version=version).prefetch_related("binaries").first()
    if release is None:
        raise NotFound(f"No registered release has version {version!r}.", code="not_found")
    return release


def _reason(value: object) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_REASON:
        raise InvalidInput(f"reason must be 1 to {MAX_REASON} characters.", code="invalid_input", field="reason")
    return value


def block_json(block: ReleaseBlock | None) -> dict[str, Any] | None:
    """The ``blocked`` field of a release as a tenant sees it: ``{"at", "reason", "by"}`` or None."""
    if block is None:
        return None
    return {
        "at": block.at.isoformat().replace("+00:00", "Z"),
        "reason": block.reason,
        "by": block.blocked_by.get_username() if block.blocked_by is not None else None,
    }


def blocks_for(*, tenant: Tenant | None, release_ids: Iterable[int]) -> dict[int, ReleaseBlock]:
    """The tenant's blocks of these releases, by release id (one query; none without a tenant)."""
    if tenant is None:
        return {}
    rows = ReleaseBlock.objects.filter(tenant=tenant, release_id__in=list(release_ids)).select_related("blocked_by")
    return {block.release_id: block for block in rows}


def release_block(
    *, tenant: Tenant, version: str, reason: object, blocked_by: _User | None = None, actor: Actor | None = None
) -> Release:
    """Block ``version`` in ``tenant``: its active rollouts pause at their next tick (asked for now).

    409 ``invalid_state`` when it is already blocked there; 404 for an unknown version.
    """
    reason = _reason(reason)
    release = _release(version)
    now = timezone.now()
    with transaction.atomic():
        try:
            with transaction.atomic():
                ReleaseBlock.objects.create(
                    tenant=tenant, release=release, reason=reason, blocked_by=blocked_by, at=now
                )
        except IntegrityError as exc:
            raise InvalidState(f"Release {version} is already blocked in this tenant.", code="invalid_state") from exc
        active = Rollout.objects.filter(tenant=tenant, release=release, state=Rollout.State.ACTIVE)
        for rollout_id in active.values_list("id", flat=True):
            rollout_request_tick(rollout_id=rollout_id)
        audit_record(
            tenant=tenant,
            actor=actor,
            action="release.block",
            object_type="release",
            object_id=release.version,
            before={"blocked": None},
            after={"blocked": {"reason": reason}},
        )
    log.info("release.blocked", tenant=tenant.pk, version=version)
    return release


def release_unblock(*, tenant: Tenant, version: str, actor: Actor | None = None) -> Release:
    """Lift the tenant's block of ``version``. 409 ``invalid_state`` when it is not blocked there."""
    release = _release(version)
    with transaction.atomic():
        block = ReleaseBlock.objects.select_for_update().filter(tenant=tenant, release=release).first()
        if block is None:
            raise InvalidState(f"Release {version} is not blocked in this tenant.", code="invalid_state")
        reason = block.reason
        block.delete()
        audit_record(
            tenant=tenant,
            actor=actor,
            action="release.unblock",
            object_type="release",
            object_id=release.version,
            before={"blocked": {"reason": reason}},
            after={"blocked": None},
        )
    log.info("release.unblocked", tenant=tenant.pk, version=version)
    return release
