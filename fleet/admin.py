"""The operators' console for the fleet: tenants, IAM, pools, sessions, workflows, commands (nodes: admin_nodes.py).

Superusers see every tenant; a staff user with a Membership sees only the rows
of their tenant (``TenantScopedAdmin``), also in foreign-key choices. Writes
that have rules go through the services (creating pools and nodes, finishing
workflows); secrets (API key and agent token hashes) are never shown.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

import fleet.admin_nodes  # noqa: F401  (registers the node pages)
from core.errors import DomainError
from fleet.admin_base import ReadOnlyMixin, TenantScopedAdmin, budget_percent
from fleet.models import ApiKey, AuditEntry, Command, Grant, Membership, NodeSession, Pool, Tenant, Workflow
from fleet.services.apikeys import api_keys_revoke
from fleet.services.audit import Actor, audit_record
from fleet.services.budget import pool_budgets
from fleet.services.iam import tenant_set_rollout_approvals
from fleet.services.pools import (
    pool_audit_fields,
    pool_changed_fields,
    pool_create,
    pools_set_default_daemon_version,
    windows_at,
    windows_of,
    windows_validate,
)
from fleet.services.workflows import workflow_finish
from fleet.windows import open_until


# --- tenants and IAM -------------------------------------------------------------------------
@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    """Tenants. ``rollout_approvals`` is a superuser's to change (docs/controller.md#approvals): others see it."""

    tenant_path = "id"
    list_display = ["slug", "name", "rollout_approvals", "created_at"]
    search_fields = ["slug", "name"]
    fields = ["slug", "name", "rollout_approvals"]

    def get_readonly_fields(self, request: HttpRequest, obj=None) -> list[str]:
        return [] if request.user.is_superuser else ["rollout_approvals"]

    def save_model(self, request: HttpRequest, obj: Tenant, form: forms.ModelForm, change: bool) -> None:
        if not (change and "rollout_approvals" in form.changed_data):
            super().save_model(request, obj, form, change)
            return
        # The other fields as usual; the approvals through the service, which audits the change.
        wanted = obj.rollout_approvals
        with transaction.atomic():
            obj.rollout_approvals = form.initial["rollout_approvals"]
            super().save_model(request, obj, form, change)
            tenant_set_rollout_approvals(tenant=obj, approvals=wanted, actor=Actor.admin(request.user))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return request.user.is_superuser


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdmin):
    list_display = ["user", "tenant"]
    list_filter = ["tenant"]
    list_select_related = ["user", "tenant"]
    search_fields = ["user__username", "tenant__slug"]
    autocomplete_fields = ["user"]


@admin.register(Grant)
class GrantAdmin(TenantScopedAdmin):
    list_display = ["user", "permission", "tenant", "scope", "created_at"]
    list_filter = ["permission", "scope", "tenant"]
    list_select_related = ["user", "tenant"]
    search_fields = ["user__username", "tenant__slug"]
    autocomplete_fields = ["user"]


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyMixin, TenantScopedAdmin):
    """Keys are created with ``manage.py createapikey`` or by their owner through the API (the plain key is shown
    once there); here they are listed and revoked. The hash is never shown."""

    list_display = ["prefix", "name", "user", "tenant", "scope_list", "expires_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter), ("expires_at", admin.EmptyFieldListFilter), "tenant"]
    list_select_related = ["user", "tenant"]
    search_fields = ["prefix", "name", "user__username", "tenant__slug"]
    fields = readonly_fields = (
        "prefix",
        "name",
        "user",
        "tenant",
        "scopes",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    )
    actions = ["revoke"]

    @admin.display(description="scopes")
    def scope_list(self, api_key: ApiKey) -> str:
        return ", ".join(api_key.scopes)

    @admin.action(description="Revoke the selected API keys", permissions=["delete"])
    def revoke(self, request: HttpRequest, queryset: QuerySet) -> None:
        revoked = api_keys_revoke(keys=queryset, actor=Actor.admin(request.user), now=timezone.now())
        self.message_user(request, f"Revoked {revoked} key(s).", messages.SUCCESS)


# --- the fleet ----------------------------------------------------------------------------
WINDOWS_HELP = (
    'A JSON list of weekly windows, e.g. [{"days": ["sat", "sun"], "start": "02:00", "durationMinutes": 240, '
    '"timezone": "Europe/Berlin"}]. Nodes of the pool start only while one is open. Empty: always open.'
)


class PoolForm(forms.ModelForm):
    """Maintenance windows are checked exactly as the API checks them (fleet.services.pools.windows_validate)."""

    maintenance_windows = forms.JSONField(
        required=False, initial=list, help_text=WINDOWS_HELP, widget=forms.Textarea(attrs={"rows": 4, "cols": 80})
    )

    class Meta:
        model = Pool
        fields = ["tenant", "name", "disruption_budget", "maintenance_windows", "default_daemon_version"]

    def clean_maintenance_windows(self) -> list[dict[str, Any]]:
        try:
            return windows_validate(self.cleaned_data.get("maintenance_windows"))
        except DomainError as exc:
            raise forms.ValidationError(f"{exc.code}: {exc.detail}", code=exc.code) from exc


@admin.register(Pool)
class PoolAdmin(TenantScopedAdmin):
    form = PoolForm
    list_display = [
        "name",
        "tenant",
        "budget_percent",
        "node_count",
        "disruption",
        "next_window",
        "default_daemon_version",
    ]
    list_filter = ["tenant"]
    list_select_related = ["tenant"]
    search_fields = ["name", "tenant__slug"]
    fields = ["tenant", "name", "disruption_budget", "maintenance_windows", "default_daemon_version"]

    @admin.display(description="disruption budget", ordering="disruption_budget")
    def budget_percent(self, pool: Pool) -> str:
        return budget_percent(pool.disruption_budget)

    @admin.display(description="next window")
    def next_window(self, pool: Pool) -> str:
        """When its nodes may next start: "always open", "open now (until ...)" or the opening.

        See docs/controller.md#maintenance-windows."""
        windows = windows_at(windows_of(pool), timezone.now())
        if not windows.windows:
            return "always open"
        if windows.open:
            until = open_until(windows.windows, windows.at)
            return f"open now (until {timezone.localtime(until):%Y-%m-%d %H:%M %Z})" if until else "open now"
        return f"{timezone.localtime(windows.opens_at):%Y-%m-%d %H:%M %Z}"

    def get_readonly_fields(self, request: HttpRequest, obj=None):
        return ["tenant"] if obj is not None else []

    def get_changelist_instance(self, request: HttpRequest):
        # One pool_budgets call for the whole page: a constant number of queries.
        changelist = super().get_changelist_instance(request)
        pools = list(changelist.result_list)
        budgets = pool_budgets(pool_ids=[pool.id for pool in pools])
        for pool in pools:
            pool.budget_now = budgets.get(pool.id)
        return changelist

    @admin.display(description="nodes")
    def node_count(self, pool: Pool) -> int | str:
        budget = getattr(pool, "budget_now", None)
        return budget.nodes if budget else "-"

    @admin.display(description="disrupted / allowed")
    def disruption(self, pool: Pool) -> str:
        budget = getattr(pool, "budget_now", None)
        return f"{budget.disrupted}/{budget.allowed}" if budget else "-"

    def save_model(self, request: HttpRequest, obj: Pool, form, change: bool) -> None:
        actor = Actor.admin(request.user)
        with transaction.atomic():
            if change:
                # pool.update: the fields that changed, as the API shows them.
                before = pool_audit_fields(Pool.objects.select_for_update().get(pk=obj.pk))
                super().save_model(request, obj, form, change)
                old, new = pool_changed_fields(before, pool_audit_fields(obj))
                if new:
                    audit_record(
                        tenant=obj.tenant,
                        actor=actor,
                        action="pool.update",
                        object_type="pool",
                        object_id=obj.pk,
                        before=old,
                        after=new,
                    )
                return
            created = pool_create(
                tenant=obj.tenant,
                name=obj.name,
                disruption_budget=obj.disruption_budget,
                maintenance_windows=obj.maintenance_windows,
                actor=actor,
            )
            if obj.default_daemon_version:
                pools_set_default_daemon_version(pool_ids=[created.pk], version=obj.default_daemon_version)
                audit_record(
                    tenant=obj.tenant,
                    actor=actor,
                    action="pool.update",
                    object_type="pool",
                    object_id=created.pk,
                    before={"defaultDaemonVersion": None},
                    after={"defaultDaemonVersion": obj.default_daemon_version},
                )
            obj.pk = created.pk


@admin.register(NodeSession)
class NodeSessionAdmin(ReadOnlyMixin, TenantScopedAdmin):
    tenant_path = "node__tenant_id"
    list_display = ["node", "daemon_version", "protocol_version", "joined_at", "last_seen_at", "left_at"]
    list_filter = [
        "daemon_version",
        "protocol_version",
        ("node__pool", admin.RelatedOnlyFieldListFilter),
        "node__tenant",
    ]
    list_select_related = ["node"]
    search_fields = ["node__name", "daemon_version"]


@admin.register(Workflow)
class WorkflowAdmin(ReadOnlyMixin, TenantScopedAdmin):
    """Workflows start through the API (within the budget); here they are viewed and finished."""

    list_display = ["node", "pool", "kind", "state", "started_at", "finished_at"]
    list_filter = ["state", "kind", ("pool", admin.RelatedOnlyFieldListFilter), "tenant"]
    list_select_related = ["node", "pool"]
    search_fields = ["node__name"]
    actions = ["finish"]

    def has_finish_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("fleet.change_workflow") and self.has_fleet_admin_permission(request)

    @admin.action(description="Finish the selected workflows", permissions=["finish"])
    def finish(self, request: HttpRequest, queryset: QuerySet) -> None:
        finished = 0
        for workflow in queryset.filter(state=Workflow.State.ACTIVE).select_related("tenant"):
            try:
                workflow_finish(tenant=workflow.tenant, workflow_id=workflow.id, actor=Actor.admin(request.user))
                finished += 1
            except DomainError:
                continue  # finished meanwhile
        self.message_user(request, f"Finished {finished} workflow(s).", messages.SUCCESS)


@admin.register(Command)
class CommandAdmin(ReadOnlyMixin, TenantScopedAdmin):
    tenant_path = "node__tenant_id"
    list_display = ["kind", "node", "state", "created_at", "acked_at", "completed_at"]
    list_filter = ["kind", "state", ("node__pool", admin.RelatedOnlyFieldListFilter), "node__tenant"]
    list_select_related = ["node"]
    search_fields = ["node__name", "error"]


# --- the audit trail ------------------------------------------------------------------------

AUDIT_FIELDS = (
    "tenant",
    "seq",
    "at",
    "actor_user",
    "actor_via",
    "action",
    "object_type",
    "object_id",
    "before",
    "after",
    "prev_hash",
    "hash",
)


@admin.register(AuditEntry)
class AuditEntryAdmin(TenantScopedAdmin):
    """Read only: entries are written by the services, in the transaction of the change they record.
    No one adds, changes or deletes them here (PostgreSQL refuses UPDATE and DELETE anyway)."""

    list_display = ["at", "action", "object_type", "object_id", "actor_user", "actor_via", "tenant", "seq"]
    list_filter = ["action", "actor_via", "object_type", "tenant"]
    list_select_related = ["tenant"]
    search_fields = ["object_id", "actor_user", "action"]
    fields = AUDIT_FIELDS
    readonly_fields = AUDIT_FIELDS
    ordering = ["-at", "-seq"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False
