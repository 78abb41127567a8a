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
            "Nodes of the pool disrupted now (an active workflow or an upgrade in flight).",
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
