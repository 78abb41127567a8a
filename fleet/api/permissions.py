"""Every rollout, release and fleet method decides compute:fleet:admin on the tenant's fleet scope.

Approving and denying a rollout decide compute:rollout:approve instead (``RolloutApprover``); reading
rollouts and the tenant is open to either grant (``FleetAdminOrApprover``): an approver sees what
they approve.
"""

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


class RolloutApprover(permissions.BasePermission):
    message = "This key has no compute:rollout:approve grant on the tenant's fleet scope."

    def has_permission(self, request: Request, view: object) -> bool:
        principal = request.auth
        return isinstance(principal, Principal) and principal.can_approve


class FleetAdminOrApprover(permissions.BasePermission):
    message = "This key has neither compute:fleet:admin nor compute:rollout:approve on the tenant's fleet scope."

    def has_permission(self, request: Request, view: object) -> bool:
        principal = request.auth
        return isinstance(principal, Principal) and (principal.is_fleet_admin or principal.can_approve)
