"""Driving the controller in tests: agents rejoin through the fleet's real join path."""

from __future__ import annotations

from collections.abc import Iterable
from uuid import UUID

from django.test import TestCase
from django.utils import timezone

from fleet.models import FleetPulse, Node, NodeSession
from fleet.services.nodes import online_since
from fleet.services.sessions import agent_session_leave, agent_session_report
from rollout.controller.tick import rollout_tick
from rollout.models import NodeUpgrade, Rollout, RolloutEvent
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec


def create(tenant, **kwargs) -> Rollout:
    """A rollout to 1.0.0 in one wave of 100 % without soak, unless ``kwargs`` (``rollout_spec``'s) say otherwise."""
    kwargs.setdefault("version", "1.0.0")
    kwargs.setdefault("waves", [100])
    kwargs.setdefault("soak_seconds", 0)
    return rollout_create(tenant=tenant, spec=rollout_spec(**kwargs))


def events(rollout: Rollout) -> list[str]:
    """The kinds of the rollout's events, in the order they were written."""
    return list(RolloutEvent.objects.filter(rollout=rollout).values_list("kind", flat=True))


def rejoin(node_id, version: str, *, protocol: int = 3) -> None:
    """The agent leaves and joins again reporting ``version``.

    Tests run inside a transaction, so the join's on-commit hook (which settles
    the node) is run here by hand, as a commit would. The tick it asks for in
    turn is dropped: these tests tick explicitly.
    """
    node = Node.objects.select_related("session").get(pk=node_id)
    agent_session_leave(node=node)
    node = Node.objects.select_related("session").get(pk=node_id)
    with TestCase.captureOnCommitCallbacks() as hooks:
        agent_session_report(node=node, daemon_version=version, protocol_version=protocol, now=timezone.now())
    with TestCase.captureOnCommitCallbacks():
        for hook in hooks:
            hook()


def heartbeat_all(*, but: Iterable[UUID] = ()) -> None:
    """Every agent (but the nodes ``but`` names, whose agents are down) heartbeats now, as it did all along while
    time moved: nodes stay online, and the server has kept hearing the fleet (its pulse is fresh, with no gap:
    offline verdicts stay trusted, docs/controller.md#liveness-against-the-fleet)."""
    now = timezone.now()
    NodeSession.objects.filter(left_at__isnull=True).exclude(node_id__in=list(but)).update(last_seen_at=now)
    if not FleetPulse.objects.filter(pk=1).update(last_heard_at=now):
        FleetPulse.objects.create(pk=1, last_heard_at=now, listening_since=online_since(now=now))


def tick(rollout: Rollout):
    result = rollout_tick(rollout_id=rollout.id)
    rollout.refresh_from_db()
    return result


def states(rollout: Rollout, **filters) -> dict[str, int]:
    counts: dict[str, int] = {}
    for state in NodeUpgrade.objects.filter(rollout=rollout, **filters).values_list("state", flat=True):
        counts[state] = counts.get(state, 0) + 1
    return counts


def in_flight(rollout: Rollout) -> list[NodeUpgrade]:
    return list(NodeUpgrade.objects.filter(rollout=rollout, state="in_flight").order_by("position"))
