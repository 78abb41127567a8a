"""The admin's front page: a fleet overview above the list of models (issue 51): the daemon versions each pool's
agents run, then the plug-ins' sections (``fleet.plugins.register_admin_overview``; for rollout: the rollouts in
progress and the controller's health). Display only, in the console user's tenant (all for superusers)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import Count
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.safestring import SafeString

from fleet.admin_base import in_tenant_scope
from fleet.models import Node, NodeSession, Pool
from fleet.plugins import admin_overview
from fleet.services.nodes import online_node_q


def versions_per_pool(request: HttpRequest) -> SafeString:
    """Each pool: its nodes, how many are online, and the versions their agents run (most nodes first)."""
    pools = list(in_tenant_scope(Pool.objects.select_related("tenant"), request, "tenant_id").order_by("name"))
    nodes = in_tenant_scope(Node.objects.all(), request, "tenant_id")
    totals = dict(nodes.values_list("pool_id").annotate(n=Count("id")).order_by())
    online = dict(
        nodes.filter(online_node_q(now=timezone.now())).values_list("pool_id").annotate(n=Count("id")).order_by()
    )
    versions: dict[Any, list[tuple[str, int]]] = defaultdict(list)
    sessions = (
        NodeSession.objects.filter(node__in=nodes)
        .values_list("node__pool_id", "daemon_version")
        .annotate(n=Count("node_id"))
        .order_by("node__pool_id", "-n", "daemon_version")
    )
    for pool_id, version, n in sessions:
        versions[pool_id].append((version, n))
    rows = [
        {
            "pool": pool,
            "nodes": totals.get(pool.id, 0),
            "online": online.get(pool.id, 0),
            "versions": versions.get(pool.id, []),
        }
        for pool in pools
    ]
    return render_to_string("admin/fleet/overview_versions.html", {"rows": rows})


def overview_sections(request: HttpRequest) -> list[tuple[str, Any]]:
    return [("Daemon versions per pool", versions_per_pool(request)), *admin_overview(request)]
