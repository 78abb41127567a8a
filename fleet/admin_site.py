"""The admin site: Django's, and on its front page what the plug-ins must say (``fleet.plugins.admin_notices``) and
the fleet overview (fleet/admin_overview.py)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from fleet.plugins import admin_notices


class FleetAdminSite(admin.AdminSite):
    """``django.contrib.admin.site`` (``FleetAdminConfig``): the plug-ins' notices above the index."""

    login_template = "fleet/sso_login.html"

    def login(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """Django's login page, with "Sign in with <OIDC_NAME>" when SSO is configured (fleet/sso/); with
        ``ADMIN_PASSWORD_LOGIN=0`` no password form, and a posted password refused (403)."""
        from fleet.sso.config import sso_enabled

        context = {
            "sso_name": settings.OIDC_NAME if sso_enabled() else "",
            "password_login": settings.ADMIN_PASSWORD_LOGIN,
            **(extra_context or {}),
        }
        if request.method == "POST" and not settings.ADMIN_PASSWORD_LOGIN:
            context["password_refused"] = True
            return TemplateResponse(
                request, self.login_template, {**self.each_context(request), **context, "next": ""}, status=403
            )
        return super().login(request, context)

    def index(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> TemplateResponse:
        if request.method == "GET":
            admin_notices(request)
            if request.user.is_active and request.user.is_staff:
                from fleet.admin_overview import overview_sections  # the models are loaded by now

                extra_context = {**(extra_context or {}), "overview": overview_sections(request)}
        return super().index(request, extra_context)


class FleetAdminConfig(AdminConfig):
    """Django's admin (INSTALLED_APPS), its site ``FleetAdminSite``."""

    default_site = "fleet.admin_site.FleetAdminSite"
