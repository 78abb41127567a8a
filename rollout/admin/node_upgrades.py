"""Node upgrades and events: read-only, filtered by rollout, wave and pool."""

from __future__ import annotations

from uuid import UUID

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from fleet.interface import Pool, ReadOnlyMixin, TenantScopedAdmin, in_tenant_scope
from rollout.admin.display import (
    rollout_label,
    rollout_link,
    short_when,
    uuid_or_none,
)
from rollout.admin.event_words import event_sentence
from rollout.models import NodeUpgrade, Rollout, RolloutEvent, RolloutWave
from rollout.rollouts.blockers import node_blockers


# --- node upgrades and events: read-only ---------------------------------------------------------
class RolloutFilter(admin.SimpleListFilter):
    """By rollout: the most recent ones of the user's scope (and the chosen one, however old)."""

    title = "rollout"
    parameter_name = "rollout"
    limit = 30

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin):
        rollouts = in_tenant_scope(
            Rollout.objects.select_related("release").order_by("-created_at"), request, "tenant_id"
        )
        shown = list(rollouts[: self.limit])
        chosen = uuid_or_none(self.value())
        if chosen is not None and all(rollout.id != chosen for rollout in shown):
            shown += list(rollouts.filter(pk=chosen))
        return [(str(rollout.id), f"{rollout_label(rollout)} ({rollout.state})") for rollout in shown]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() is None:
            return queryset
        chosen = uuid_or_none(self.value())
        return queryset.filter(rollout_id=chosen) if chosen is not None else queryset.none()


def _chosen_rollout(request: HttpRequest) -> UUID | None:
    return uuid_or_none(request.GET["rollout"]) if request.GET.get("rollout") else None


class WaveFilter(admin.SimpleListFilter):
    """By wave (numbered from 1 as in the pages; the query parameter is the index, from 0)."""

    title = "wave"
    parameter_name = "wave"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin):
        waves = in_tenant_scope(RolloutWave.objects.all(), request, "rollout__tenant_id")
        chosen = _chosen_rollout(request)
        if chosen is not None:
            waves = waves.filter(rollout_id=chosen)
        indexes = waves.order_by("index").values_list("index", flat=True).distinct()
        return [(str(index), str(index + 1)) for index in indexes]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if value is None:
            return queryset
        return queryset.filter(wave=int(value)) if value.isdigit() else queryset.none()


class PoolFilter(admin.SimpleListFilter):
    """By pool: the chosen rollout's pools, or the pools of the user's scope."""

    title = "pool"
    parameter_name = "pool"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin):
        pools = in_tenant_scope(
            Pool.objects.select_related("tenant").order_by("tenant__slug", "name"), request, "tenant_id"
        )
        chosen = _chosen_rollout(request)
        if chosen is not None:
            pools = pools.filter(rollouts=chosen)
        label = (lambda p: f"{p.tenant.slug} / {p.name}") if request.user.is_superuser else (lambda p: p.name)
        return [(str(pool.id), label(pool)) for pool in pools]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() is None:
            return queryset
        chosen = uuid_or_none(self.value())
        return queryset.filter(pool_id=chosen) if chosen is not None else queryset.none()


_NODE_UPGRADE_ADMIN_FIELDS = (
    "rollout_link",
    "node",
    "pool",
    "wave_ordinal",
    "position",
    "state",
    "reason",
    "claims_node",
    "target_version",
    "previous_version",
    "previous_daemon",
    "started_at",
    "deadline",
    "settled_at",
)


@admin.register(NodeUpgrade)
class NodeUpgradeAdmin(ReadOnlyMixin, TenantScopedAdmin):
    """One row per snapshotted node of a rollout; written only by the controller."""

    tenant_path = "rollout__tenant_id"
    # Eight columns that fit 1,400 px beside the menu and the filters (tests/browser): the reason under its
    # state, the times in one column; the order (position) and the rest are on an upgrade's page.
    list_display = [
        "node_name",
        "pool_name",
        "rollout_link",
        "wave_ordinal",
        "state_badge",
        "previous",
        "times",
        "waiting_for",
    ]
    list_filter = [RolloutFilter, "state", WaveFilter, PoolFilter]

    def get_list_display(self, request: HttpRequest):
        """Without the rollout's column while the list shows one rollout's nodes (its name is the filter's)."""
        shown = super().get_list_display(request)
        return [name for name in shown if name != "rollout_link"] if request.GET.get("rollout") else shown

    list_select_related = ["node", "pool", "rollout__release"]
    search_fields = ["node__name"]
    show_full_result_count = False  # no second COUNT over every upgrade of every rollout
    fields = _NODE_UPGRADE_ADMIN_FIELDS
    readonly_fields = _NODE_UPGRADE_ADMIN_FIELDS

    class Media:
        css = {"all": ["rollout/admin.css"]}

    def has_delete_permission(self, request: HttpRequest, obj: NodeUpgrade | None = None) -> bool:
        return False

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        # One node's history, linked from its page (rollout/hooks.py node_links); the scope still applies.
        return lookup == "node__id__exact" or super().lookup_allowed(lookup, value, request)

    def get_changelist_instance(self, request: HttpRequest):
        # Blockers for the page's rows at once (docs/controller.md#why-not-yet): a constant number of queries.
        changelist = super().get_changelist_instance(request)
        upgrades = list(changelist.result_list)
        blockers = node_blockers(upgrades, now=timezone.now())
        for upgrade in upgrades:
            upgrade.blocker = blockers.get(upgrade.pk)
        return changelist

    @admin.display(description="waiting for")
    def waiting_for(self, upgrade: NodeUpgrade) -> SafeString | str:
        blocker = getattr(upgrade, "blocker", None)
        if blocker is None:
            return "-"
        return format_html('<span class="upgrade-blocker" title="{}">{}</span>', blocker.code, blocker.detail)

    @admin.display(description="node", ordering="node__name")
    def node_name(self, upgrade: NodeUpgrade) -> str:
        return upgrade.node.name

    @admin.display(description="pool", ordering="pool__name")
    def pool_name(self, upgrade: NodeUpgrade) -> str:
        return upgrade.pool.name

    @admin.display(description="rollout")
    def rollout_link(self, upgrade: NodeUpgrade) -> SafeString:
        return rollout_link(upgrade.rollout)

    @admin.display(description="wave", ordering="wave")
    def wave_ordinal(self, upgrade: NodeUpgrade) -> int:
        return upgrade.wave + 1

    @admin.display(description="state", ordering="state")
    def state_badge(self, upgrade: NodeUpgrade) -> SafeString:
        return format_html(
            '<span class="upgrade-state upgrade-state-{}">{}</span>{}',
            upgrade.state,
            upgrade.get_state_display(),
            format_html('<div class="upgrade-reason">{}</div>', upgrade.get_reason_display()) if upgrade.reason else "",
        )

    @admin.display(description="previous", ordering="previous_version")
    def previous(self, upgrade: NodeUpgrade) -> str:
        return upgrade.previous_version or "-"

    @admin.display(description="times", ordering="started_at")
    def times(self, upgrade: NodeUpgrade) -> SafeString | str:
        """Started and its deadline while in flight, settled once settled: one short line each."""
        moments = [("started", upgrade.started_at), ("deadline", upgrade.deadline), ("settled", upgrade.settled_at)]
        if upgrade.settled_at is not None:
            moments = [("started", upgrade.started_at), ("settled", upgrade.settled_at)]
        return (
            format_html_join(
                "",
                '<div class="upgrade-time">{} <span class="console-date">{}</span></div>',
                ((label, short_when(at)) for label, at in moments if at),
            )
            or "-"
        )


_ROLLOUT_EVENT_ADMIN_FIELDS = (
    "rollout_link",
    "kind",
    "at",
    "data_text",
)


@admin.register(RolloutEvent)
class RolloutEventAdmin(ReadOnlyMixin, TenantScopedAdmin):
    """The audit trail of every rollout (also on each rollout's page)."""

    tenant_path = "rollout__tenant_id"
    list_display = ["kind", "rollout_link", "at", "data_text"]
    list_filter = ["kind", RolloutFilter]
    list_select_related = ["rollout__release"]
    fields = _ROLLOUT_EVENT_ADMIN_FIELDS
    readonly_fields = _ROLLOUT_EVENT_ADMIN_FIELDS

    def has_delete_permission(self, request: HttpRequest, obj: RolloutEvent | None = None) -> bool:
        return False

    @admin.display(description="rollout")
    def rollout_link(self, event: RolloutEvent) -> SafeString:
        return rollout_link(event.rollout)

    @admin.display(description="what happened")
    def data_text(self, event: RolloutEvent) -> str:
        """The event as a sentence (rollout/admin/event_words.py); pools by id here, by name on the rollout's page."""
        return event_sentence(event.kind, event.data, {})
