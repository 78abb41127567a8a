"""The rollout module's API views, one module per resource (rollout/api/urls.py routes them)."""

from rollout.api.views.downloads import download_binary
from rollout.api.views.health import HealthView
from rollout.api.views.releases import ReleaseViewSet
from rollout.api.views.rollouts import RolloutViewSet
from rollout.api.views.roots import AgentReleaseRootsViewSet, ReleaseRootViewSet
from rollout.api.views.webhooks import WebhookViewSet

__all__ = [
    "AgentReleaseRootsViewSet",
    "HealthView",
    "ReleaseRootViewSet",
    "ReleaseViewSet",
    "RolloutViewSet",
    "WebhookViewSet",
    "download_binary",
]
