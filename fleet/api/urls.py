"""Fleet and agent endpoints, included at /api/compute/.

URL names: fleet-pool-list, fleet-pool-detail, fleet-node-list, fleet-node-detail,
fleet-workflow-list, fleet-workflow-detail, fleet-workflow-finish,
fleet-agent-session, fleet-agent-command-ack, fleet-tenant, fleet-audit-list,
fleet-apikey-list, fleet-apikey-detail.
"""

from django.urls import path, re_path
from rest_framework.routers import SimpleRouter

from fleet.api import agent_views, views
from fleet.api.apikeys import ApiKeyViewSet
from fleet.api.tenant import TenantView

router = SimpleRouter()
router.register("pools", views.PoolViewSet, basename="fleet-pool")
router.register("nodes", views.NodeViewSet, basename="fleet-node")
router.register("workflows", views.WorkflowViewSet, basename="fleet-workflow")
router.register("apikeys", ApiKeyViewSet, basename="fleet-apikey")

urlpatterns = [
    path("audit/", views.AuditListView.as_view(), name="fleet-audit-list"),
    path("tenant/", TenantView.as_view(), name="fleet-tenant"),
    path("agent/session", agent_views.AgentSessionView.as_view(), name="fleet-agent-session"),
    re_path(
        r"^agent/commands/(?P<command_id>[^/]+)/ack$",
        agent_views.AgentCommandAckView.as_view(),
        name="fleet-agent-command-ack",
    ),
    *router.urls,
]
