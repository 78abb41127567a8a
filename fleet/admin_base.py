"""Admin building blocks shared by the host's console and plug-ins' (re-exported by fleet.interface).

Superusers see every tenant; a staff user with a Membership sees only the rows
of their tenant (``TenantScopedAdmin``), also in foreign-key choices.

Writing (add, change, delete, and every custom action: pause, resume, abort,
create, register, finish...) also needs the fleet IAM grant
``compute:fleet:admin`` on the user's tenant's fleet scope, as the API does:
revoking the grant revokes the console's writes too. Django's model
permissions still apply on top; viewing needs only the view permission.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, cast

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import _User

from fleet.models import Grant, Membership, Node, Permission, Pool, Tenant
from fleet.services.iam import FLEET_SCOPE


def tenant_id_of(request: HttpRequest) -> int | None:
    """The tenant a staff user acts in, or None (superusers act in all; others in none)."""
    membership = getattr(request.user, "membership", None) if request.user.is_authenticated else None
    try:
        return membership.tenant_id if membership is not None else None
    except Membership.DoesNotExist:
        return None


def in_tenant_scope(queryset: QuerySet, request: HttpRequest, tenant_path: str) -> QuerySet:
    """``queryset`` limited to what the console user may see: all for a superuser, else their tenant's
    rows (``tenant_path`` leads to the tenant id, e.g. ``rollout__tenant_id``), none without one."""
    if request.user.is_superuser:
        return queryset
    tenant_id = tenant_id_of(request)
    if tenant_id is None:
        return queryset.none()
    return queryset.filter(**{tenant_path: tenant_id})


def _granted(request: HttpRequest, permission: str) -> bool:
    """Superusers always; other console users need ``permission`` on their tenant's fleet scope.

    Decided once per request and permission (a page asks several times) and never cached longer,
    so a revoked grant takes effect on the next request.
    """
    decided: dict[str, bool] = request.__dict__.setdefault("_fleet_grants", {})
    if permission in decided:
        return decided[permission]
    user = request.user
    if not (user.is_authenticated and user.is_active):
        allowed = False
    elif user.is_superuser:
        allowed = True
    else:
        tenant_id = tenant_id_of(request)
        allowed = tenant_id is not None and (
            Grant.objects.filter(
                tenant_id=tenant_id, user_id=user.pk, permission=permission, scope=FLEET_SCOPE
            ).exists()
        )
    decided[permission] = allowed
    return allowed


def is_fleet_admin(request: HttpRequest) -> bool:
    """May this console user write? Superusers always; others need ``compute:fleet:admin`` on their tenant."""
    return _granted(request, Permission.FLEET_ADMIN)


def can_approve(request: HttpRequest) -> bool:
    """May this console user approve or deny rollouts? Superusers always; others need
    ``compute:rollout:approve`` on their tenant (docs/controller.md#approvals). Nobody approves their own."""
    return _granted(request, Permission.ROLLOUT_APPROVE)


class TenantScopedAdmin(admin.ModelAdmin):
    """Rows (and foreign-key choices) limited to the staff user's tenant; superusers see all.

    ``tenant_path`` is the lookup from the model to its Tenant's id. Every write
    needs ``is_fleet_admin`` besides the model permission; custom actions call
    ``has_fleet_admin_permission`` (or name ``permissions=["fleet_admin"]``).
    """

    tenant_path = "tenant_id"

    # The custom actions' check; ``@admin.action(permissions=["fleet_admin"])`` calls it too.
    def has_fleet_admin_permission(self, request: HttpRequest) -> bool:
        return is_fleet_admin(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and is_fleet_admin(request)

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return super().has_change_permission(request, obj) and is_fleet_admin(request)

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return super().has_delete_permission(request, obj) and is_fleet_admin(request)

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return in_tenant_scope(super().get_queryset(request), request, self.tenant_path)

    def formfield_for_foreignkey(self, db_field, request: HttpRequest, **kwargs):
        if not request.user.is_superuser:
            tenant_id = tenant_id_of(request)
            related = db_field.related_model
            scope = {Tenant: "id", Pool: "tenant_id", Node: "tenant_id"}.get(related)
            if scope is not None:
                kwargs["queryset"] = (
                    related.objects.filter(**{scope: tenant_id}) if tenant_id else related.objects.none()
                )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_list_filter(self, request: HttpRequest):
        # Only superusers span tenants, so only they filter by tenant.
        filters = list(super().get_list_filter(request))
        if not request.user.is_superuser:
            filters = [f for f in filters if not (isinstance(f, str) and f.split("__")[-1] == "tenant")]
        return filters


class ReadOnlyMixin:
    """Rows written by the system (the agent API, the services): viewed here, not edited."""

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


def staff_user(request: HttpRequest) -> _User:
    """The logged-in staff user of an admin view (the admin site lets no anonymous user in)."""
    return cast("_User", request.user)


def budget_percent(fraction: Decimal | float | str) -> str:
    """A disruption budget as an operator reads it: ``5 %``, ``12.5 %`` (the API keeps the fraction)."""
    value = (Decimal(str(fraction)) * 100).normalize()
    return f"{value:f} %"
