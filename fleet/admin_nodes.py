"""The console's node pages: labels (edited through the service), the desired state with its signed envelope
folded, the plug-ins' links (for rollout: the current rollout and the upgrade history), no Delete while the
node's agent holds a session."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from core.errors import DomainError
from fleet.admin_base import TenantScopedAdmin
from fleet.admin_labels import LabelRowsField
from fleet.admin_node_list import OnlineFilter, SelectorFilter, VersionFilter, labels_chips, seen_text
from fleet.admin_spec import desired, desired_state
from fleet.labels import labels_validate
from fleet.models import Node, NodeSession
from fleet.plugins import node_links
from fleet.services.audit import Actor
from fleet.services.labels import node_labels_set
from fleet.services.nodes import node_create, node_session


class NodeSessionInline(admin.StackedInline):
    model = NodeSession
    fields = readonly_fields = ("daemon_version", "protocol_version", "joined_at", "last_seen_at", "left_at")
    can_delete = False
    extra = 0

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class NodeLabelsForm(forms.ModelForm):
    """The node page: its labels, checked by the API's one validator (fleet.labels.labels_validate)."""

    labels = LabelRowsField(
        required=False, help_text="One label a row; an empty row is none. Keys and values as the API checks them."
    )

    class Meta:
        model = Node
        fields = ["name", "labels"]

    def clean_labels(self) -> dict[str, str]:
        labels = self.cleaned_data.get("labels")
        try:
            return labels_validate({} if labels is None else labels)  # an empty box: no labels
        except DomainError as exc:
            raise forms.ValidationError(exc.detail) from exc


class NodeAddForm(NodeLabelsForm):
    class Meta:
        model = Node
        fields = ["tenant", "pool", "name", "arch", "labels"]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data  # what ModelForm.clean returns
        tenant, pool = data.get("tenant"), data.get("pool")
        if tenant is not None and pool is not None and pool.tenant_id != tenant.id:
            self.add_error("pool", "This pool belongs to another tenant.")
        return data


@admin.register(Node)
class NodeAdmin(TenantScopedAdmin):
    """Nodes are created through the service so that the agent token is generated (and shown once) and the
    desired daemon follows the pool's default. The token hash is never shown."""

    # Eight columns that fit 1,000 px beside the menu (tests/browser/test_console_widths.py): labels as chips, online
    # beside the last heartbeat, the agent's version beside its protocol.
    list_display = ["name", "pool", "tenant", "arch", "label_chips", "last_seen", "daemon_version", desired]
    list_filter = [
        ("pool", admin.RelatedOnlyFieldListFilter),
        SelectorFilter,
        OnlineFilter,
        VersionFilter,
        "arch",
        "tenant",
    ]
    list_select_related = ["pool", "tenant", "session"]
    search_fields = ["name"]
    inlines = [NodeSessionInline]

    def get_form(self, request: HttpRequest, obj=None, change: bool = False, **kwargs):
        kwargs["form"] = NodeAddForm if obj is None else NodeLabelsForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request: HttpRequest, obj=None):
        if obj is None:
            return ["tenant", "pool", "name", "arch", "labels"]
        return ["tenant", "pool", "name", "arch", "labels", "links", desired_state, "created_at"]

    def get_readonly_fields(self, request: HttpRequest, obj=None):
        # The pool and arch are fixed once created (workflows and rollouts recorded them).
        return ["tenant", "pool", "arch", "links", desired_state, "created_at"] if obj is not None else []

    @admin.display(description="rollouts")
    def links(self, node: Node) -> SafeString | str:
        """The plug-ins' pages about this node (fleet/plugins.py register_node_links), one link a line."""
        links = node_links(node.pk)
        if not links:
            return "-"
        return format_html(
            '<ul class="node-links">{}</ul>',
            format_html_join("", '<li><a href="{}">{}</a></li>', ((url, text) for text, url in links)),
        )

    def get_inlines(self, request: HttpRequest, obj=None):
        return self.inlines if obj is not None else []

    def has_delete_permission(self, request: HttpRequest, obj: Node | None = None) -> bool:
        """Not a node whose agent holds a session (joined and not left): delete it once its agent is gone."""
        if obj is not None:
            session = node_session(obj)
            if session is not None and session.left_at is None:
                return False
        return super().has_delete_permission(request, obj)

    @admin.display(description="labels", ordering="labels")
    def label_chips(self, node: Node) -> SafeString | str:
        return labels_chips(node.labels)

    @admin.display(description="last seen", ordering="session__last_seen_at")
    def last_seen(self, node: Node) -> SafeString:
        return seen_text(node)

    @admin.display(description="daemon version", ordering="session__daemon_version")
    def daemon_version(self, node: Node) -> SafeString | str:
        session = node_session(node)
        if session is None:
            return "-"
        return format_html(
            '{}<span class="console-muted">protocol {}</span>', session.daemon_version, session.protocol_version
        )

    def save_model(self, request: HttpRequest, obj: Node, form, change: bool) -> None:
        if change:
            with transaction.atomic():
                if "labels" in form.changed_data:  # through the service: audited as node.update
                    node_labels_set(
                        tenant=obj.tenant, node_id=obj.pk, labels=obj.labels, actor=Actor.admin(request.user)
                    )
                super().save_model(request, obj, form, change)
            return
        # The form has validated the name, arch, labels and pool (in the user's tenant) already.
        node, token = node_create(
            tenant=obj.tenant,
            name=obj.name,
            pool_id=obj.pool_id,
            arch=obj.arch,
            labels=obj.labels,
            actor=Actor.admin(request.user),
        )
        obj.pk = node.pk
        self.message_user(request, f"Agent token for {node.name} (shown once, store it now): {token}", messages.WARNING)
