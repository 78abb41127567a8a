"""Roll forward: a create that supersedes a rollout (docs/controller.md#undoing-a-bad-release).

``supersedes`` names an active, paused, scheduled or awaiting-approval rollout of the caller's tenant whose
release has a lower sequence than the new one's. Refused, with nothing written: unknown or another tenant's
(404 ``not_found``); finished, or its release not older (400 ``supersede_invalid``, the ``detail`` and
``reason`` saying which). A real create reads it under its row lock, so of two creates superseding the same
rollout at once the second waits for the first and then finds it superseded (400); the one-to-one
``supersedes`` column refuses a second successor in any case.

The new rollout's order puts first the nodes in flight to the superseded release, then those that run it,
then the others, each group in the usual shuffle seeded by the new rollout's id.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from uuid import UUID

from django.db.models import QuerySet

from core.errors import InvalidInput, NotFound
from fleet.interface import Node, NodeSession, Tenant
from rollout.models import NodeUpgrade, Release, Rollout
from rollout.rollouts.spec import shuffle


def _invalid(detail: str, *, reason: str, rollout: Rollout) -> InvalidInput:
    return InvalidInput(detail, code="supersede_invalid", reason=reason, rolloutId=str(rollout.id))


def supersede_target(*, tenant: Tenant, rollout_id: str, release: Release, lock: bool) -> Rollout:
    """The rollout ``rollout_id`` names, checked as supersedable by a rollout of ``release``; with ``lock``
    under its row lock (a real create: held to the commit)."""
    try:
        pk = UUID(rollout_id)
    except ValueError as exc:
        raise NotFound(f"supersedes: no rollout {rollout_id!r} in this tenant.") from exc
    rollouts = Rollout.objects.filter(tenant=tenant, pk=pk).select_related("release")
    if lock:
        rollouts = rollouts.select_for_update(of=("self",))
    target = rollouts.first()
    if target is None:
        raise NotFound(f"supersedes: no rollout {rollout_id!r} in this tenant.")
    if target.state not in Rollout.HOLDING_STATES:
        raise _invalid(
            f"Rollout {target.id} is {target.state}: only an active, paused, scheduled or awaiting-approval "
            "rollout can be superseded.",
            reason="finished",
            rollout=target,
        )
    old = target.release
    if release.sequence <= old.sequence:
        raise _invalid(
            f"Release {release.version} (sequence {release.sequence}) is not newer than {old.version} "
            f"(sequence {old.sequence}), the release of rollout {target.id}: roll forward to a higher sequence.",
            reason="not_newer",
            rollout=target,
        )
    return target


@dataclass(frozen=True)
class FirstNodes:
    """The snapshot's nodes that go first: in flight to the superseded release, and running it."""

    in_flight: frozenset[UUID]
    running: frozenset[UUID]


def first_nodes(*, superseded: Rollout, nodes: QuerySet[Node]) -> FirstNodes:
    """Of ``nodes`` (the new snapshot), those in flight in ``superseded`` and those whose agent reports its
    release: two queries (the in-flight rows are few: the pools' budgets bound them)."""
    chosen = nodes.values("id")
    in_flight = NodeUpgrade.objects.filter(
        rollout=superseded, state=NodeUpgrade.State.IN_FLIGHT, node__in=chosen
    ).values_list("node_id", flat=True)
    running = NodeSession.objects.filter(node__in=chosen, daemon_version=superseded.release.version).values_list(
        "node_id", flat=True
    )
    return FirstNodes(in_flight=frozenset(in_flight), running=frozenset(running))


def supersede_order(node_ids: Collection[UUID], *, seed: UUID, first: FirstNodes | None) -> list[UUID]:
    """The wave order: without ``first`` the usual shuffle; with it, ``first.in_flight``, then
    ``first.running``, then the rest, each shuffled by ``seed``."""
    if first is None:
        return shuffle(list(node_ids), seed=seed)
    in_flight = [node_id for node_id in node_ids if node_id in first.in_flight]
    running = [node_id for node_id in node_ids if node_id in first.running and node_id not in first.in_flight]
    ahead = first.in_flight | first.running
    rest = [node_id for node_id in node_ids if node_id not in ahead]
    return shuffle(in_flight, seed=seed) + shuffle(running, seed=seed) + shuffle(rest, seed=seed)
