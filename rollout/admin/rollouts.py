"""The rollouts' admin: planned (a dry run, then a confirmation) and operated through rollout/services."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import re_path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from core.errors import DomainError
from fleet.interface import (
    Actor,
    Tenant,
    TenantScopedAdmin,
    budget_percent,
    pool_budgets,
    tenant_id_of,
)
from rollout.admin.actions import ACTIONS, RolloutAction, bulk_admin_action
from rollout.admin.approvals import ApprovalAdminMixin, ApprovalFilter
from rollout.admin.display import counts_total, progress_bar, rollout_label, short_id, short_when
from rollout.admin.plan import RolloutPlanAdminMixin
from rollout.admin.roll_forward import RollForwardAdminMixin
from rollout.controller.events import wave_words
from rollout.controller.health import BEAT_COMMAND, WORKER_COMMAND, controller_stale_after, rollouts_without_controller
from rollout.gates.verdicts import gates_of
from rollout.models import NodeUpgrade, Rollout
from rollout.rollouts.blocker_words import rollout_blocker_words
from rollout.rollouts.reads import rollout_waves


# --- rollouts --------------------------------------------------------------------------------
def event_words(data: dict[str, Any], pool_names: dict[str, str], *, waves: int) -> str:
    """An event's data as an operator reads it: pools by name (the API keeps their ids), its wave counted from 1
    (``wave 2 of 3``; the API keeps the index), keys in order."""
    shown = dict(data)
    wave = shown.pop("wave") if isinstance(shown.get("wave"), int) else None
    if isinstance(shown.get("poolIds"), list):
        shown["pools"] = [pool_names.get(str(pool_id), str(pool_id)) for pool_id in shown.pop("poolIds")]
    if "poolId" in shown:
        shown["pool"] = pool_names.get(str(shown.pop("poolId")), "?")
    words = [f"{key}: {json.dumps(value, default=str)}" for key, value in sorted(shown.items())]
    return ", ".join([wave_words(wave, waves=waves), *words] if wave is not None else words)


@admin.register(Rollout)
class RolloutAdmin(RolloutPlanAdminMixin, ApprovalAdminMixin, RollForwardAdminMixin, TenantScopedAdmin):
    """Rollouts are planned and operated here through the services; never edited by hand.

    - list: progress of every rollout on the page from one ``rollout_waves`` call (constant queries);
    - add: a form, then a preview from ``rollout_plan`` (writes nothing), then ``rollout_create``:
      rollout/admin/plan.py;
    - detail (the read-only change view): waves, budget in use per pool, events, action buttons;
    - actions: on the list (selected rollouts) and as buttons, each confirmed on an intermediate page;
    - approve and deny (with a comment) on a rollout awaiting approval: rollout/admin/approvals.py.

    The model permission ``change_rollout`` is what allows operating (pause, resume, abort);
    ``add_rollout`` allows creating.
    """

    list_display = [
        "short_id",
        "version",
        "tenant",
        "state_badge",
        "wave_position",
        "progress",
        "times",
    ]
    list_filter = ["state", ApprovalFilter, "tenant"]
    list_select_related = ["release", "tenant"]
    search_fields = ["release__version"]
    ordering = ["-created_at"]
    actions = [bulk_admin_action(action) for action in ACTIONS.values()]
    fieldsets = [
        (None, {"fields": ["id", "version", "tenant", "pool_names", "selector", "state_badge", "paused_reason"]}),
        ("Schedule", {"fields": ["start_at", "end_by", "end_behavior"]}),
        (
            "Plan",
            {
                "fields": [
                    "waves_requested",
                    "failure_ratio_percent",
                    "failure_ratio_min_settled",
                    "soak_seconds",
                    "upgrade_timeout_seconds",
                    "min_ready_seconds",
                ]
            },
        ),
        ("Approvals", {"fields": ["approvals_required", "approval_list"]}),
        (
            "History",
            {
                "fields": [
                    "created_by",
                    "created_at",
                    "next_wave",
                    "completed_at",
                    "aborted_at",
                    "aborted_reason",
                    "supersede_chain",
                ]
            },
        ),
    ]
    readonly_fields = [str(field) for _, options in fieldsets for field in options["fields"]]
    change_list_template = "admin/rollout/rollout/change_list.html"
    change_form_template = "admin/rollout/rollout/change_form.html"

    class Media:
        css = {"all": ["rollout/admin.css"]}

    # permissions: rows change only through the services
    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and (request.user.is_superuser or tenant_id_of(request) is not None)

    def has_change_permission(self, request: HttpRequest, obj: Rollout | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Rollout | None = None) -> bool:
        return False

    def has_operate_permission(self, request: HttpRequest, obj: Rollout | None = None) -> bool:
        user = request.user
        return user.has_perm("rollout.change_rollout") and self.has_fleet_admin_permission(request)

    def acting_tenant(self, request: HttpRequest) -> Tenant | None:
        """The ``tenant`` argument of the services: None (all tenants) only for superusers."""
        if request.user.is_superuser:
            return None
        tenant_id = tenant_id_of(request)
        if tenant_id is None:
            raise PermissionDenied
        return Tenant.objects.get(pk=tenant_id)

    # the list: one rollout_waves call for the page
    def get_changelist_instance(self, request: HttpRequest):
        changelist = super().get_changelist_instance(request)
        rollouts = list(changelist.result_list)
        waves = rollout_waves(rollouts)
        for rollout in rollouts:
            rollout.wave_stats = waves.get(rollout.id, [])
        return changelist

    @admin.display(description="next wave at")
    def next_wave(self, rollout: Rollout) -> str:
        """Only while the rollout may still start a wave: never a stale time after an abort or completion."""
        if rollout.state not in Rollout.ACTIVE_STATES or rollout.next_wave_at is None:
            return "-"
        return rollout.next_wave_at.strftime("%Y-%m-%d %H:%M:%S UTC")

    @admin.display(description="rollout", ordering="created_at")
    def short_id(self, rollout: Rollout) -> str:
        return short_id(rollout)

    @admin.display(description="version", ordering="release__sequence")
    def version(self, rollout: Rollout) -> str:
        return rollout.release.version

    @admin.display(description="state", ordering="state")
    def state_badge(self, rollout: Rollout) -> SafeString:
        reason = rollout.get_paused_reason_display() if rollout.paused_reason else ""
        return format_html(
            '<span class="rollout-state rollout-state-{}" title="{}">{}</span>{}',
            rollout.state,
            reason,
            rollout.get_state_display(),
            format_html(" <small>({})</small>", reason) if reason else "",
        )

    @admin.display(description="wave")
    def wave_position(self, rollout: Rollout) -> str:
        waves = getattr(rollout, "wave_stats", None) or []
        if not waves:
            return "-"
        current = len(waves) if rollout.state == Rollout.State.COMPLETED else min(rollout.current_wave + 1, len(waves))
        return f"{current} / {len(waves)}"

    @admin.display(description="progress")
    def progress(self, rollout: Rollout) -> SafeString | str:
        waves = getattr(rollout, "wave_stats", None)
        if waves is None:
            return "-"
        totals = counts_total(waves)
        return format_html(
            '<div class="rollout-progress-cell">{}<small>{}/{}</small></div>',
            progress_bar(totals),
            totals["succeeded"],
            sum(totals.values()),
        )

    @admin.display(description="times", ordering="created_at")
    def times(self, rollout: Rollout) -> SafeString:
        """Created, then the scheduled start and the end when there are: short, one a line (the list fits 1,400
        px, tests/browser); the page shows them in full."""
        moments = [
            ("created", rollout.created_at),
            ("starts" if rollout.state == Rollout.State.SCHEDULED else "start at", rollout.start_at),
            ("completed", rollout.completed_at),
            ("aborted", rollout.aborted_at),
        ]
        return format_html_join(
            "", '<div class="rollout-time">{} {}</div>', ((label, short_when(at)) for label, at in moments if at)
        )

    @admin.display(description="pools")
    def pool_names(self, rollout: Rollout) -> str:
        return ", ".join(pool.name for pool in rollout.pools.order_by("name"))

    @admin.display(description="max failure ratio")
    def failure_ratio_percent(self, rollout: Rollout) -> str:
        """In percent, as the budgets read (the API keeps the fraction)."""
        return budget_percent(rollout.max_failure_ratio)

    @admin.display(description="waves (cumulative %)")
    def waves_requested(self, rollout: Rollout) -> str:
        return ", ".join(str(percent) for percent in rollout.waves)

    # a controller that does not run (docs/controller.md#no-controller): a banner above the list and the page
    def controller_banner(self, request: HttpRequest) -> None:
        stalled = rollouts_without_controller(self.get_queryset(request), now=timezone.now())
        if stalled:
            messages.warning(
                request,
                format_html(
                    "No controller is running: {} active rollout(s) have not been ticked for {} s. Start a Celery "
                    "worker and beat: <code>{}</code> and <code>{}</code>.",
                    stalled,
                    int(controller_stale_after().total_seconds()),
                    WORKER_COMMAND,
                    BEAT_COMMAND,
                ),
            )

    def changelist_view(self, request: HttpRequest, extra_context=None):
        if request.method == "GET":
            self.controller_banner(request)
        return super().changelist_view(request, extra_context)

    # the detail page
    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None):
        if request.method == "GET":
            self.controller_banner(request)
        rollout = self.get_object(request, unquote(object_id))
        if rollout is not None:
            extra_context = {**(extra_context or {}), **self.detail_context(request, rollout)}
        return super().change_view(request, object_id, form_url, extra_context)

    def detail_context(self, request: HttpRequest, rollout: Rollout) -> dict[str, Any]:
        waves = rollout_waves([rollout]).get(rollout.id, [])
        upgrades_url = reverse("admin:rollout_nodeupgrade_changelist")

        def filtered(extra: dict[str, Any]) -> str:
            return f"{upgrades_url}?{urlencode({'rollout': rollout.pk, **extra})}"

        running = rollout.state in Rollout.ACTIVE_STATES
        wave_rows = [
            {
                "stats": wave,
                "ordinal": wave.index + 1,
                "bar": progress_bar(wave.counts),
                "current": running and wave.index == rollout.current_wave,
                "url": filtered({"wave": wave.index}),
                "failed_url": filtered({"wave": wave.index, "state__exact": NodeUpgrade.State.FAILED}),
            }
            for wave in waves
        ]
        totals = counts_total(waves)
        pools = list(rollout.pools.order_by("name"))
        budgets = pool_budgets(pool_ids=[pool.id for pool in pools])
        actions = []
        if self.has_operate_permission(request, rollout):
            actions = [
                (action, reverse("admin:rollout_rollout_action", kwargs={"object_id": rollout.pk, "slug": slug}))
                for slug, action in ACTIONS.items()
                if rollout.state in action.states and (action.shown is None or action.shown(rollout))
            ]
        pool_names = {str(pool.id): pool.name for pool in pools}
        return {
            "rollout_waves": wave_rows,
            "wave_count": len(wave_rows),
            "total_bar": progress_bar(totals),
            "totals": totals,
            "total_nodes": sum(totals.values()),
            "pool_names": pool_names,
            "budget_rows": [
                {"pool": pool, "budget": budgets.get(pool.id), "budget_percent": budget_percent(pool.disruption_budget)}
                for pool in pools
            ],
            "events": [
                {"kind": event.kind, "at": event.at, "data": event_words(event.data, pool_names, waves=len(waves))}
                for event in rollout.events.all()
            ],
            "upgrades_url": filtered({}),
            "rollout_actions": actions,
            "decision_buttons": self.decision_buttons(request, rollout),
            "roll_forward_url": self.roll_forward_url(request, rollout),
            # docs/controller.md#why-not-yet: what holds the rollout, in plain words (None while nodes are moving).
            "rollout_blocker": rollout_blocker_words(rollout, now=timezone.now()),
            # docs/controller.md#gates: each gate's latest result.
            "gates": gates_of(rollout),
        }

    # actions
    def get_urls(self):
        slugs = "|".join(re.escape(slug) for slug in ACTIONS)
        return [
            re_path(
                rf"^(?P<object_id>[0-9a-fA-F-]{{32,36}})/(?P<slug>{slugs})/$",
                self.admin_site.admin_view(self.action_view),
                name="rollout_rollout_action",
            ),
            *self.approval_urls(),
            *self.roll_forward_urls(),
            *super().get_urls(),
        ]

    def perform(self, request: HttpRequest, rollout: Rollout, action: RolloutAction, tenant: Tenant | None) -> bool:
        """Run the action's service; a refusal becomes an error message with its code, never a 500."""
        try:
            action.run(rollout_id=rollout.pk, tenant=tenant, actor=Actor.admin(request.user))
        except DomainError as exc:
            self.message_user(request, f"{rollout_label(rollout)}: {exc.code}: {exc.detail}", messages.ERROR)
            return False
        return True

    def confirmation(
        self, request: HttpRequest, action: RolloutAction, rollouts: list[Rollout], *, bulk: bool
    ) -> TemplateResponse:
        opts = self.model._meta
        rows = [
            {
                "rollout": rollout,
                "label": rollout_label(rollout),
                "url": reverse("admin:rollout_rollout_change", args=[rollout.pk]),
                "applies": rollout.state in action.states,
            }
            for rollout in rollouts
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": f"{action.title}: are you sure?",
            "subtitle": None,
            "opts": opts,
            "media": self.media,
            "action": action,
            "rows": rows,
            "refused": [row for row in rows if not row["applies"]],
            "bulk": bulk,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            # Back to the list as it was filtered, or to the rollout's page.
            "cancel_url": request.get_full_path() if bulk else rows[0]["url"],
        }
        return TemplateResponse(request, "admin/rollout/rollout/action_confirmation.html", context)

    def action_view(self, request: HttpRequest, object_id: str, slug: str) -> HttpResponse:
        """GET: the confirmation page; POST: the service call, then back to the detail page."""
        action = ACTIONS[slug]
        if not self.has_operate_permission(request):
            raise PermissionDenied
        rollout = self.get_object(request, unquote(object_id))
        if rollout is None:
            raise Http404("No such rollout.")
        if request.method != "POST":
            return self.confirmation(request, action, [rollout], bulk=False)
        if self.perform(request, rollout, action, self.acting_tenant(request)):
            self.message_user(request, f"{action.done} {rollout_label(rollout)}.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:rollout_rollout_change", args=[rollout.pk]))

    def run_bulk(self, request: HttpRequest, queryset: QuerySet[Rollout], slug: str) -> TemplateResponse | None:
        action = ACTIONS[slug]
        rollouts = list(queryset.select_related("release", "tenant").order_by("-created_at"))
        if request.POST.get("post") != "yes":
            return self.confirmation(request, action, rollouts, bulk=True)
        tenant = self.acting_tenant(request)
        done = sum(self.perform(request, rollout, action, tenant) for rollout in rollouts)
        if done:
            self.message_user(request, f"{action.done} {done} rollout(s).", messages.SUCCESS)
        return None
