"""The fleet's Prometheus metrics: each pool's disruption budget, computed at scrape time (3 queries)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric


class PoolCollector:
    """Per pool: nodes, disrupted nodes and the budget's allowance."""

    def describe(self) -> list[Metric]:
        return []  # registering must not query the database

    def collect(self) -> Iterator[Metric]:
        from fleet.models import Pool
        from fleet.services.budget import pool_budgets

        labels = ["tenant", "pool_id", "pool"]
        allowed = GaugeMetricFamily(
            "fleet_pool_disruption_allowed",
            "Nodes of the pool that may be disrupted at once: ceil(disruptionBudget x nodes).",
            labels=labels,
        )
        disrupted = GaugeMetricFamily(
            "fleet_pool_disrupted",
            "Nodes of the pool disrupted now (an active workflow, an upgrade in flight, or a failed upgrade whose"
            " node has not been online since).",
            labels=labels,
        )
        nodes = GaugeMetricFamily("fleet_pool_nodes", "Nodes in the pool.", labels=labels)
        pools = list(Pool.objects.order_by("tenant__slug", "name").values_list("id", "name", "tenant__slug"))
        budgets = pool_budgets(pool_ids=[pool_id for pool_id, _, _ in pools])
        for pool_id, name, slug in pools:
            budget = budgets.get(pool_id)
            if budget is None:  # deleted between the two queries
                continue
            values_ = [slug, str(pool_id), name]
            allowed.add_metric(values_, budget.allowed)
            disrupted.add_metric(values_, budget.disrupted)
            nodes.add_metric(values_, budget.nodes)
        yield allowed
        yield disrupted
        yield nodes


class PulseCollector:
    """How long ago the server last heard its fleet, and for how long it has heard it without a gap (1 query).

    ``fleet_heard_seconds_ago`` growing past a few heartbeat intervals while
    agents run means the web tier is not reaching the database: the controller
    cannot tell that silence from every agent being down (fleet/services/liveness.py).
    """

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        from django.utils import timezone

        from fleet.models import FleetPulse

        pulse = FleetPulse.objects.filter(pk=1).values_list("last_heard_at", "listening_since").first()
        if pulse is None:
            return
        now = timezone.now()
        heard = GaugeMetricFamily("fleet_heard_seconds_ago", "Seconds since the last agent heartbeat was heard.")
        heard.add_metric([], (now - pulse[0]).total_seconds())
        yield heard
        listening = GaugeMetricFamily(
            "fleet_listening_seconds",
            "Seconds the fleet has been heard without a gap (liveness verdicts need 3 intervals).",
        )
        listening.add_metric([], (now - pulse[1]).total_seconds())
        yield listening
