import sys

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views import defaults
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from core.database import DATABASE_ERRORS, database_unavailable
from core.metrics import metrics_view

urlpatterns = [
    # Before the admin's own (which answers every path under /admin/): single sign-on (fleet/sso/).
    path("admin/sso/", include("fleet.sso.urls")),
    path("admin/", admin.site.urls),
    path("api/compute/", include("fleet.api.urls")),
    path("api/compute/", include("rollout.api.urls")),
    # The schema includes the downloads endpoint (a plain Django view) via a hook: see rollout/api/schema.py.
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("metrics", metrics_view, name="metrics"),
]


# Under /api/ every error is the API's JSON body, also when no view answers (an unknown path, an id
# that does not match a route's pattern, a plain Django view raising Http404). Elsewhere (the
# admin) Django's pages. These handlers are used when DEBUG is off.
def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        # A view's Http404 carries a sentence; the resolver's carries the tried patterns (not shown).
        message = exception.args[0] if exception.args and isinstance(exception.args[0], str) else "Not found."
        return JsonResponse({"code": "not_found", "detail": message}, status=404)
    return defaults.page_not_found(request, exception)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    # Django's own refusals before a view reads the request (too many query parameters: TooManyFieldsSent).
    if _is_api(request):
        detail = exception.args[0] if exception.args and isinstance(exception.args[0], str) else "Bad request."
        return JsonResponse({"code": "invalid_input", "detail": detail}, status=400)
    return defaults.bad_request(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    # Raised outside a view (in a middleware), a database that is down is still a 503 under /api/.
    exc = sys.exc_info()[1]
    if _is_api(request) and isinstance(exc, DATABASE_ERRORS):
        return database_unavailable(exc)
    if _is_api(request):
        return JsonResponse({"code": "server_error", "detail": "Internal server error."}, status=500)
    return defaults.server_error(request)


handler400 = bad_request
handler404 = not_found
handler500 = server_error
