"""The rollout module's Prometheus metrics (see core/metrics.py for how /metrics serves them)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from prometheus_client import Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

TICK_SECONDS = Histogram(
    "rollout_tick_seconds",
    "Duration of one controller tick of one rollout (rollout.services.controller.rollout_tick).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)


class RolloutCollector:
    """Node upgrades by state and active rollouts, per tenant: 3 queries per scrape."""

    def describe(self) -> list[Metric]:
        return []  # registering must not query the database

    def collect(self) -> Iterator[Metric]:
        from django.db.models import Count

        from fleet.interface import tenant_slugs
        from rollout.models import NodeUpgrade, Rollout

        tenants = tenant_slugs()

        upgrades = GaugeMetricFamily(
            "rollout_node_upgrades",
            "Nodes held by a rollout (active or paused, or still in flight), by upgrade state.",
            labels=["tenant", "state"],
        )
        counts: dict[tuple[str, str], int] = defaultdict(int)
        rows = (
            NodeUpgrade.objects.filter(claims_node=True)
            .values_list("rollout__tenant__slug", "state")
            .annotate(n=Count("id"))
            .order_by()
        )
        for slug, state, n in rows:
            counts[slug, state] = n
        for slug in tenants:
            for state in NodeUpgrade.State.values:
                upgrades.add_metric([slug, state], counts[slug, state])
        yield upgrades

        rollouts = GaugeMetricFamily(
            "rollout_active_rollouts", "Rollouts that are active or paused.", labels=["tenant", "state"]
        )
        counts = defaultdict(int)
        rollout_rows = (
            Rollout.objects.filter(state__in=Rollout.ACTIVE_STATES)
            .values_list("tenant__slug", "state")
            .annotate(n=Count("id"))
            .order_by()
        )
        for slug, state, n in rollout_rows:
            counts[slug, state] = n
        for slug in tenants:
            for state in Rollout.ACTIVE_STATES:
                rollouts.add_metric([slug, state], counts[slug, state])
        yield rollouts
