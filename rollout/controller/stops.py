"""The stops a tick applies to a rollout before it settles or starts anything (docs/controller.md#the-tick).

First that applies:

1. its deadline (``endBy``, rollout/controller/scheduled.py): a pause or an abort, a paused rollout's too;
2. a release its tenant blocked: it pauses (``release_blocked``);
3. an expired release: it pauses (``release_expired``, docs/signing.md#expiry);
4. a gate whose failures in a row reached ``gateFailureLimit``: it pauses (``gate_failed:<name>``).

The last three stop a rollout the tick runs: an active one, or a scheduled one whose ``startAt`` has come.
``tick_stop`` is that order, written once: the tick applies it to the rollout it locked, and the plan
(rollout/controller/plan.py) predicts it for the blockers, both from rollouts annotated by ``with_stop_facts``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from uuid import UUID

from django.db.models import BooleanField, Exists, ExpressionWrapper, OuterRef, QuerySet

from rollout.controller.scheduled import deadline_due, start_due
from rollout.gates.verdicts import with_gate_verdicts
from rollout.models import Release, ReleaseBlock, Rollout


def with_stop_facts(queryset: QuerySet[Rollout], *, now: datetime) -> QuerySet[Rollout]:
    """Rollouts annotated, in the same query, with what ``tick_stop`` reads: ``release_is_blocked``,
    ``release_is_expired`` and ``gate_failed`` (a gate's name or None)."""
    blocked = ReleaseBlock.objects.blocking(tenant=OuterRef("tenant_id"), release=OuterRef("release_id"))
    return with_gate_verdicts(queryset, now=now).annotate(
        release_is_blocked=Exists(blocked),
        release_is_expired=ExpressionWrapper(Release.expired_q(now, prefix="release__"), BooleanField()),
    )


def tick_stop(rollout: Rollout, *, now: datetime) -> str | None:
    """The PausedReason (or ``gate_failed:<name>``) the tick stops ``rollout`` with at ``now``, or None.

    ``rollout`` comes from a ``with_stop_facts`` query.
    """
    if deadline_due(rollout, now=now):
        return Rollout.PausedReason.DEADLINE
    if rollout.state != Rollout.State.ACTIVE and not start_due(rollout, now=now):
        return None
    if rollout.release_is_blocked:  # type: ignore[attr-defined]
        return Rollout.PausedReason.RELEASE_BLOCKED
    if rollout.release_is_expired:  # type: ignore[attr-defined]
        return Rollout.PausedReason.RELEASE_EXPIRED
    gate_failed: str | None = rollout.gate_failed  # type: ignore[attr-defined]
    return f"{Rollout.GATE_FAILED_PREFIX}{gate_failed}" if gate_failed else None


def tick_stops(rollouts: Iterable[Rollout], *, now: datetime) -> dict[UUID, str]:
    """{rollout id: ``tick_stop``} of the rollouts that have one, as loaded (their state is the caller's): one
    query reads the rest of what ``tick_stop`` reads and annotates these instances with it."""
    loaded = {rollout.id: rollout for rollout in rollouts}
    if not loaded:
        return {}
    stops: dict[UUID, str] = {}
    for found in with_stop_facts(Rollout.objects.filter(id__in=list(loaded)).only("id"), now=now):
        rollout = loaded[found.id]
        for name in ("release_is_blocked", "release_is_expired", "gate_failed"):
            setattr(rollout, name, getattr(found, name))
        if (stop := tick_stop(rollout, now=now)) is not None:
            stops[found.id] = stop
    return stops
