"""The rollout module's Prometheus metrics (see core/metrics.py for how /metrics serves them)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

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
        from fleet.interface import tenant_slugs
        from rollout.models import NodeUpgrade, Rollout

        tenants = tenant_slugs()
        yield _by_tenant_and_state(
            "rollout_node_upgrades",
            "Nodes held by a rollout (active or paused, or still in flight), by upgrade state.",
            NodeUpgrade.objects.filter(claims_node=True),
            "rollout__tenant__slug",
            tenants,
            NodeUpgrade.State.values,
        )
        yield _by_tenant_and_state(
            "rollout_active_rollouts",
            "Rollouts that are active or paused.",
            Rollout.objects.filter(state__in=Rollout.ACTIVE_STATES),
            "tenant__slug",
            tenants,
            Rollout.ACTIVE_STATES,
        )


def _by_tenant_and_state(
    name: str, documentation: str, queryset, tenant_slug: str, tenants: Iterable[str], states: Iterable[str]
) -> GaugeMetricFamily:
    """Rows of ``queryset`` counted per tenant and state in one query; every (tenant, state) has a sample."""
    from django.db.models import Count

    family = GaugeMetricFamily(name, documentation, labels=["tenant", "state"])
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for slug, state, n in queryset.values_list(tenant_slug, "state").annotate(n=Count("id")).order_by():
        counts[slug, state] = n
    for slug in tenants:
        for state in states:
            family.add_metric([slug, state], counts[slug, state])
    return family


class WebhookCollector:
    """Webhook deliveries by tenant and status (pending, delivered, failed): 1 query per scrape.

    Alert on ``failed`` growing (a receiver gave up on for 24 h) or ``pending`` staying high (a
    receiver down now); docs/operations.md has example rules.
    """

    def describe(self) -> list[Metric]:
        return []  # registering must not query the database

    def collect(self) -> Iterator[Metric]:
        from django.db.models import Count

        from fleet.interface import tenant_slugs
        from rollout.models import WebhookDelivery

        deliveries = GaugeMetricFamily(
            "rollout_webhook_deliveries",
            "Webhook deliveries by status: pending (being retried or about to be sent), delivered, failed.",
            labels=["tenant", "status"],
        )
        counts: dict[tuple[str, str], int] = defaultdict(int)
        rows = WebhookDelivery.objects.values_list("webhook__tenant__slug", "status").annotate(n=Count("id")).order_by()
        for slug, status, n in rows:
            counts[slug, status] = n
        for slug in tenant_slugs():
            for status in WebhookDelivery.Status.values:
                deliveries.add_metric([slug, status], counts[slug, status])
        yield deliveries
