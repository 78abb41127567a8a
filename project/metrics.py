"""Prometheus metrics at ``/metrics`` (prometheus-client). See docs/operations.md, "Metrics".

Two kinds of metric:

- **State gauges**, computed from the database at scrape time by
  ``FleetCollector`` in a constant number of queries (6, whatever the size of
  the fleet): nodes by upgrade state, active rollouts, and each pool's
  disruption budget (allowed, disrupted, nodes). Any web process answers the
  same; nothing has to be kept in memory.
- **The controller's tick duration**, ``rollout_tick_seconds``, a histogram
  observed by ``rollout.services.controller.rollout_tick`` where ticks run:
  Celery worker processes, not the web process. With ``PROMETHEUS_MULTIPROC_DIR``
  set (docker-compose.yml shares one volume between ``web`` and ``worker``),
  every process writes its samples to files in that directory and ``/metrics``
  sums them (prometheus-client's multiprocess mode). Without it, each process
  keeps its own samples and ``/metrics`` shows those of the web process only
  (ticks run in-process in tests and with CELERY_TASK_ALWAYS_EAGER).

Access: ``/metrics`` is open unless ``METRICS_TOKEN`` is set; then it needs
``Authorization: Bearer <METRICS_TOKEN>`` (Prometheus: ``authorization: {credentials: ...}``).
"""

from __future__ import annotations

import hmac
import os
import socket
from collections import defaultdict
from collections.abc import Iterator

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_safe

from project.parsers import env_str

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
TOKEN_ENV = "METRICS_TOKEN"  # noqa: S105 (the name of the variable, not a secret)


def _process_identifier() -> str:
    """Unique across the containers sharing the multiprocess directory.

    prometheus-client names each process's file after its pid, but every
    container has its own pid namespace: the web's pid 7 and a worker's pid 7
    would write one file. The hostname (the container id under compose) tells
    them apart. No ``_`` in it: prometheus-client splits file names on ``_``.
    """
    return f"{socket.gethostname().replace('_', '-')}-{os.getpid()}"


if os.environ.get(MULTIPROC_ENV):
    # Must be chosen before the first metric is created (prometheus-client decides at import).
    from prometheus_client import values

    values.ValueClass = values.MultiProcessValue(process_identifier=_process_identifier)

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Histogram  # noqa: E402
from prometheus_client.core import GaugeMetricFamily, Metric  # noqa: E402
from prometheus_client.exposition import choose_encoder  # noqa: E402

TICK_SECONDS = Histogram(
    "rollout_tick_seconds",
    "Duration of one controller tick of one rollout (rollout.services.controller.rollout_tick).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)


class FleetCollector:
    """Gauges computed from the database at each scrape, in 6 queries."""

    def describe(self) -> list[Metric]:
        return []  # registering must not query the database

    def collect(self) -> Iterator[Metric]:
        from django.db.models import Count

        from project.fleet.models import Pool, Tenant
        from project.fleet.services.budget import pool_budgets
        from rollout.models import NodeUpgrade, Rollout

        tenants = list(Tenant.objects.order_by("slug").values_list("slug", flat=True))

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
        rows = (
            Rollout.objects.filter(state__in=Rollout.ACTIVE_STATES)
            .values_list("tenant__slug", "state")
            .annotate(n=Count("id"))
            .order_by()
        )
        for slug, state, n in rows:
            counts[slug, state] = n
        for slug in tenants:
            for state in Rollout.ACTIVE_STATES:
                rollouts.add_metric([slug, state], counts[slug, state])
        yield rollouts

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


class _Forward:
    """The default registry (this process's own metrics), inside a per-scrape registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        return self.registry.collect()


def scrape_registry() -> CollectorRegistry:
    """What one scrape shows: the process metrics (or all processes' in multiprocess mode) and the fleet."""
    registry = CollectorRegistry(auto_describe=False)
    directory = os.environ.get(MULTIPROC_ENV)
    if directory:
        from prometheus_client.multiprocess import MultiProcessCollector

        MultiProcessCollector(registry, path=directory)
    else:
        registry.register(_Forward(REGISTRY))
    registry.register(FleetCollector())
    return registry


def _unauthorized(code: str, detail: str) -> JsonResponse:
    response = JsonResponse({"code": code, "detail": detail}, status=401)
    response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: the Prometheus exposition (text format, or OpenMetrics when asked for)."""
    token = env_str(TOKEN_ENV)
    if token:
        header = request.headers.get("Authorization", "")
        if not header:
            return _unauthorized("not_authenticated", "Use 'Authorization: Bearer <METRICS_TOKEN>'.")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            return _unauthorized("authentication_failed", "Wrong metrics token.")
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(scrape_registry()), content_type=content_type or CONTENT_TYPE_LATEST)
