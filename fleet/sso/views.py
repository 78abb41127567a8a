"""The console's sign-in through the identity provider: mozilla-django-oidc's views, refusals shown and audited.

``/admin/sso/start/`` sends the browser to the provider (state, nonce and a PKCE challenge kept in
the session); ``/admin/sso/callback/`` checks the state, exchanges the code and signs the user in
for at most ``OIDC_SESSION_MAX_AGE``. A refusal is a page saying why (no session) and an audit entry.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import structlog
from django.conf import settings
from django.contrib import auth
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from fleet.services.sso import SignInRefused, sso_refusal_record
from fleet.sso.config import session_max_age, sso_enabled
from fleet.sso.discovery import DiscoveryError, provider_metadata

logger = structlog.get_logger(__name__)


def refused(request: HttpRequest, refusal: SignInRefused, *, status: int = 403, audit: bool = True) -> HttpResponse:
    """No session, a page saying why, and the audit entry ``user.sso_refused``.

    ``audit=False`` for a callback that no sign-in of this browser asked for (a forged or replayed state):
    anyone can send those, and they would fill the audit trail; they are logged instead.
    """
    if request.user.is_authenticated:
        auth.logout(request)
    if audit:
        sso_refusal_record(refusal=refusal)
    else:
        logger.warning("sso.refused", reason=refusal.reason, detail=refusal.detail)
    context = {"title": "Sign-in refused", "refusal": refusal, "sso_name": settings.OIDC_NAME}
    return TemplateResponse(request, "fleet/sso_refused.html", context, status=status)


class SsoStartView(OIDCAuthenticationRequestView):
    def __init__(self, **kwargs: Any) -> None:
        # Not the parent's __init__ (it reads the endpoint from settings): discovery gives it, in get().
        super(OIDCAuthenticationRequestView, self).__init__(**kwargs)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_CLIENT_ID

    def get(self, request: HttpRequest) -> HttpResponse:
        if not sso_enabled():
            raise Http404("Single sign-on is not configured.")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = provider_metadata()["authorization_endpoint"]
        except DiscoveryError as exc:
            return refused(request, SignInRefused("provider_unreachable", str(exc)), status=502)
        return super().get(request)

    def get_extra_params(self, request: HttpRequest) -> dict[str, str]:
        # Applied after the parent's own parameters: OIDC_REDIRECT_URI, when set, is the redirect URI.
        return {"redirect_uri": settings.OIDC_REDIRECT_URI} if settings.OIDC_REDIRECT_URI else {}


class SsoCallbackView(OIDCAuthenticationCallbackView):
    def get(self, request: HttpRequest) -> HttpResponse:
        if not sso_enabled():
            raise Http404("Single sign-on is not configured.")
        if request.GET.get("error"):
            detail = request.GET.get("error_description") or request.GET["error"]
            states = request.session.get("oidc_states", {})
            ours = states.pop(request.GET.get("state", ""), None) is not None
            if ours:  # never usable again
                request.session["oidc_states"] = states
            refusal = SignInRefused("provider_refused", f"The identity provider said: {detail}")
            return refused(request, refusal, audit=ours)
        if not (request.GET.get("code") and request.GET.get("state")):
            refusal = SignInRefused("bad_callback", "The callback lacks its code or state.")
            return refused(request, refusal, status=400, audit=False)
        if request.GET["state"] not in request.session.get("oidc_states", {}):
            return refused(
                request,
                SignInRefused(
                    "state_mismatch",
                    "This sign-in was not started here, or its answer was already used (a replayed or forged "
                    "callback). Start again from the sign-in page.",
                ),
                status=400,
                audit=False,
            )
        try:
            return super().get(request)
        except SignInRefused as refusal:
            return refused(request, refusal)
        except SuspiciousOperation as exc:
            return refused(request, SignInRefused("bad_callback", str(exc)), status=400)

    def login_failure(self) -> HttpResponse:
        return refused(self.request, SignInRefused("inactive", "This account is switched off."))

    def login_success(self) -> HttpResponse:
        response = super().login_success()
        # An absolute end, however active the session: the next sign-in syncs the groups again.
        self.request.session.set_expiry(timezone.now() + timedelta(seconds=session_max_age()))
        return response
