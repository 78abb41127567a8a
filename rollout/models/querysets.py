"""The rollout module's named readings of node upgrades, as QuerySet methods (``NodeUpgrade.objects``).

Each rule that several places read is written here once: the controller, the blockers, the
admin and the metrics call these methods instead of repeating their lookups.

- ``on_target()``: the node's current session is open on the row's target version
  (docs/controller.md#the-tick, Settle);
- ``disrupting(pool_ids)``: the nodes an upgrade disrupts, for the pools' budgets
  (docs/controller.md#the-tick);
- ``with_start_facts(now=...)``: what the start step needs to know of a pending row
  (docs/controller.md#the-plan).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

from django.db.models import BooleanField, Exists, ExpressionWrapper, OuterRef, Q, QuerySet

from fleet.interface import NodeSession, online_node_q

if TYPE_CHECKING:
    from rollout.models import NodeUpgrade  # noqa: F401  (the base class names it: QuerySet["NodeUpgrade"])


def sessions_on_target() -> QuerySet[NodeSession]:
    """Sessions open (not left) on the target version of the outer node upgrade row (``OuterRef``)."""
    return NodeSession.objects.filter(
        node_id=OuterRef("node_id"), daemon_version=OuterRef("target_version"), left_at__isnull=True
    )


def _on_node(q: Q, prefix: str = "node__") -> Q:
    """``q``, a Q on Node, as a Q on rows that reference the node (``node__`` before each lookup)."""
    children: list[Any] = []
    for child in q.children:
        if isinstance(child, Q):
            children.append(_on_node(child, prefix))
        else:
            lookup, value = cast(tuple[str, Any], child)  # a Q's leaves are (lookup, value) pairs
            children.append((prefix + lookup, value))
    return Q(*children, _connector=q.connector, _negated=q.negated)


class NodeUpgradeQuerySet(QuerySet["NodeUpgrade"]):
    def pending(self) -> NodeUpgradeQuerySet:
        return self.filter(state=self.model.State.PENDING)

    def on_target(self) -> NodeUpgradeQuerySet:
        """Rows whose node's current session is open on their target version: the agent arrived."""
        return self.filter(Exists(sessions_on_target()))

    def disrupting(self, pool_ids: Iterable[UUID]) -> QuerySet[Any, Any]:
        """Node ids of these pools that a rollout upgrade disrupts (any rollout): the rollout's share of the budget.

        An upgrade in flight, or a failed upgrade whose node has not been online since it
        failed: a node that never came back is still down, and still uses the budget.
        """
        # Seen after it failed. A heartbeat stamped the very instant of the failure counts only while the
        # session is still open: a node that heartbeated, then left, and failed at that instant is down.
        settled = OuterRef("settled_at")
        seen_since = Q(last_seen_at__gt=settled) | Q(last_seen_at=settled, left_at__isnull=True)
        back_since_failure = Exists(NodeSession.objects.filter(seen_since, node_id=OuterRef("node_id")))
        failed_and_not_back = Q(state=self.model.State.FAILED) & ~back_since_failure
        return (
            self.filter(pool_id__in=list(pool_ids))
            .filter(Q(state=self.model.State.IN_FLIGHT) | failed_and_not_back)
            .values("node_id")
        )

    def with_start_facts(self, *, now: datetime) -> NodeUpgradeQuerySet:
        """Annotated with what the start step decides on: ``online``, ``has_binary`` (for the node's arch), ``joined``.

        ``online`` is the fleet's rule (``online_node_q``) on the session row the query joins
        anyway: an EXISTS was planned as a hash of every session of the fleet, once per pool (what the tick
        that starts 5,000 nodes of 100,000 in ``make bench ARGS=engine`` would pay for each pool).
        """
        online = ExpressionWrapper(_on_node(online_node_q(now=now)), output_field=BooleanField())
        binaries = self.model._meta.apps.get_model("rollout", "ReleaseBinary")._default_manager  # models import us
        binary = binaries.filter(release_id=OuterRef("rollout__release_id"), arch=OuterRef("node__arch"))
        joined = ExpressionWrapper(Q(node__session__joined_at__isnull=False), output_field=BooleanField())
        return self.annotate(online=online, has_binary=Exists(binary), joined=joined)
