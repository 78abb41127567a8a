"""The rollout module's Prometheus metrics (see core/metrics.py for how /metrics serves them)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

#: ``rollout_blockers(rollouts, now=...) -> {rollout id: blocker with .code, or None}``.
BlockersOf = Callable[..., Mapping[Any, Any]]

TICK_SECONDS = Histogram(
    "rollout_tick_seconds",
    "Duration of one controller tick of one rollout (rollout.controller.tick.rollout_tick).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)


class RolloutCollector:
    """Node upgrades by state, active rollouts per tenant, and what holds each active rollout.

    3 queries per scrape, plus at most 9 for the blockers (docs/controller.md#why-not-yet) whatever the number of
    rollouts.
    ``blockers`` is rollout.rollouts.blockers.rollout_blockers and ``codes`` the rollout blocker codes
    (rollout.controller.decisions.ROLLOUT_CODES), passed in by the app's ready(): the controller imports this
    module (the tick histogram), so this module imports neither a service nor the controller.
    """

    def __init__(self, blockers: BlockersOf | None = None, codes: Sequence[str] = ()) -> None:
        self.blockers = blockers
        self.codes = tuple(codes)

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
        if self.blockers is not None:
            yield _blocked(self.blockers, self.codes)


def _blocked(blockers_of: BlockersOf, codes: Sequence[str]) -> GaugeMetricFamily:
    """``rollout_blocked{tenant,rollout,code}``: 1 for the code that holds the rollout now, 0 for the others.

    Every active, paused or awaiting-approval rollout has a sample per code (all 0 while its nodes are moving), so an
    alert's ``for:`` sees one continuous series: "blocked by budget for 30 minutes".
    """
    from django.utils import timezone

    from rollout.models import Rollout

    family = GaugeMetricFamily(
        "rollout_blocked",
        f"1 when the rollout is held by this code ({', '.join(codes)}).",
        labels=["tenant", "rollout", "code"],
    )
    rollouts = list(
        Rollout.objects.filter(state__in=Rollout.HOLDING_STATES).select_related("tenant").order_by("created_at")
    )
    blockers = blockers_of(rollouts, now=timezone.now())
    for rollout in rollouts:
        current = blockers.get(rollout.id)
        for code in codes:
            held = current is not None and current.code == code
            family.add_metric([rollout.tenant.slug, str(rollout.id), code], 1 if held else 0)
    return family


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
