"""Every rollout, release and fleet method decides compute:fleet:admin on the tenant's fleet scope.

Approving and denying a rollout decide compute:rollout:approve instead (``RolloutApprover``); reading
rollouts and the tenant is open to either grant (``FleetAdminOrApprover``): an approver sees what
they approve. The caller's own keys need a key and no grant (``KeyHolder``).

Each of them then checks the key's scopes against the scope the view declares for the method
(fleet/api/scopes.py): outside them, 403 ``insufficient_scope``.
"""

from __future__ import annotations

from rest_framework import permissions
from rest_framework.request import Request

from fleet.api.scopes import scope_check
from fleet.services.iam import Principal


class KeyPermission(permissions.BasePermission):
    """A key's grant (``granted``), then its scopes (403 ``insufficient_scope``)."""

    message = "This method needs an API key."

    def granted(self, principal: Principal) -> bool:
        return True

    def has_permission(self, request: Request, view: object) -> bool:
        principal = request.auth
        if not isinstance(principal, Principal) or not self.granted(principal):
            return False
        scope_check(principal, view, request)
        return True


class KeyHolder(KeyPermission):
    """Any valid key of the tenant, whatever its grants (the caller's own keys)."""


class FleetAdmin(KeyPermission):
    message = "This key has no compute:fleet:admin grant on the tenant's fleet scope."

    def granted(self, principal: Principal) -> bool:
        return principal.is_fleet_admin


class RolloutApprover(KeyPermission):
    message = "This key has no compute:rollout:approve grant on the tenant's fleet scope."

    def granted(self, principal: Principal) -> bool:
        return principal.can_approve


class FleetAdminOrApprover(KeyPermission):
    message = "This key has neither compute:fleet:admin nor compute:rollout:approve on the tenant's fleet scope."

    def granted(self, principal: Principal) -> bool:
        return principal.is_fleet_admin or principal.can_approve
