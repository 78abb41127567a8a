"""Every rollout, release and fleet method decides compute:fleet:admin on the tenant's fleet scope."""

from __future__ import annotations

from rest_framework import permissions
from rest_framework.request import Request

from fleet.services.iam import Principal


class FleetAdmin(permissions.BasePermission):
    message = "This key has no compute:fleet:admin grant on the tenant's fleet scope."

    def has_permission(self, request: Request, view: object) -> bool:
        principal = request.auth
        if not isinstance(principal, Principal):
            return False
        return principal.is_fleet_admin
