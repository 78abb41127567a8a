"""The admin site: Django's, and on its front page what the plug-ins must say (``fleet.plugins.admin_notices``) and
the fleet overview (fleet/admin_overview.py)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest
from django.template.response import TemplateResponse

from fleet.plugins import admin_notices


class FleetAdminSite(admin.AdminSite):
    """``django.contrib.admin.site`` (``FleetAdminConfig``): the plug-ins' notices above the index."""

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
