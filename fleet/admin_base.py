"""Admin building blocks shared by the host's console and plug-ins' (re-exported by fleet.interface).

Superusers see every tenant; a staff user with a Membership sees only the rows
of their tenant (``TenantScopedAdmin``), also in foreign-key choices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import _User

from fleet.models import Membership, Node, Pool, Tenant


def tenant_id_of(request: HttpRequest) -> int | None:
    """The tenant a staff user acts in, or None (superusers act in all; others in none)."""
    membership = getattr(request.user, "membership", None) if request.user.is_authenticated else None
    try:
        return membership.tenant_id if membership is not None else None
    except Membership.DoesNotExist:
        return None


class TenantScopedAdmin(admin.ModelAdmin):
    """Rows (and foreign-key choices) limited to the staff user's tenant; superusers see all.

    ``tenant_path`` is the lookup from the model to its Tenant's id.
    """

    tenant_path = "tenant_id"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        tenant_id = tenant_id_of(request)
        if tenant_id is None:
            return queryset.none()
        return queryset.filter(**{self.tenant_path: tenant_id})

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
