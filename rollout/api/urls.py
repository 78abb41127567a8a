from django.urls import path, re_path
from rest_framework.routers import SimpleRouter

from rollout.api import views
from rollout.api.download_answers import DOWNLOAD_URL_NAME

router = SimpleRouter(trailing_slash=True)
router.register("releases", views.ReleaseViewSet, basename="release")
router.register("release-roots", views.ReleaseRootViewSet, basename="release-root")
router.register("rollouts", views.RolloutViewSet, basename="rollout")
router.register("webhooks", views.WebhookViewSet, basename="webhook")

urlpatterns = [
    *router.urls,
    path("health", views.HealthView.as_view(), name="health"),
    path("agent/release-roots", views.AgentReleaseRootsViewSet.as_view({"get": "list"}), name="agent-release-roots"),
    re_path(
        r"^downloads/bcd/(?P<version>[A-Za-z0-9][A-Za-z0-9._+-]{0,63})/(?P<platform>linux-[a-z0-9_]+)$",
        views.download_binary,
        name=DOWNLOAD_URL_NAME,
    ),
]
