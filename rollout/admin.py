"""The operators' console for releases and rollouts. Every action calls a service.

Releases are registered through a form that verifies the signatures. Rollouts
are planned (a dry run, then a confirmation) and operated (pause, resume,
abort, abort with rollback, each confirmed on an intermediate page) through
rollout/services; their rows, waves, node upgrades and events are never edited
by hand. Superusers see every tenant; staff users with a Membership see only
their tenant's rollouts (the fleet admin's ``TenantScopedAdmin``). In the pages
a wave is numbered from 1 ("wave 2 of 4"); the API and the event data count
wave indexes from 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, re_path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.timezone import localtime

from core.errors import DomainError
from fleet.interface import Actor, Pool, ReadOnlyMixin, Tenant, TenantScopedAdmin, pool_budgets, tenant_id_of
from rollout.forms import RolloutCreateForm
from rollout.models import NodeUpgrade, Release, ReleaseBinary, Rollout, RolloutEvent, RolloutWave
from rollout.selectors import WaveStats, rollout_waves
from rollout.services.plan import RolloutPlan
from rollout.services.releases import release_register
from rollout.services.rollouts import (
    rollout_abort,
    rollout_create,
    rollout_pause,
    rollout_plan,
    rollout_promote,
    rollout_resume,
)
from rollout.services.transitions import rollout_soaking


def _tenant_of(request: HttpRequest) -> Tenant | None:
    """The tenant whose audit trail records the admin user's installation-wide changes (None: the system's)."""
    tenant_id = tenant_id_of(request)
    return Tenant.objects.filter(pk=tenant_id).first() if tenant_id is not None else None


class ReleaseBinaryInline(admin.TabularInline):
    model = ReleaseBinary
    fields = ["platform", "sha256", "size", "stored_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Release | None = None) -> bool:
        return False


class RegisterReleaseForm(forms.Form):
    envelope_file = forms.FileField(required=False, label="Envelope file (RELEASE.json)")
    envelope_text = forms.CharField(
        required=False, label="…or paste the envelope", widget=forms.Textarea(attrs={"rows": 12, "cols": 100})
    )

    def clean(self) -> dict:
        data = super().clean()
        upload, text = data.get("envelope_file"), (data.get("envelope_text") or "").strip()
        if bool(upload) == bool(text):
            raise forms.ValidationError("Upload a file or paste an envelope (one of the two).")
        data["envelope"] = upload.read() if upload else text.encode("utf-8")
        return data


@admin.register(Release)
class ReleaseAdmin(admin.ModelAdmin):
    """Releases are immutable: they can be registered (verified) and viewed, never edited."""

    list_display = ["version", "sequence", "platforms", "signer_count", "registered_at", "registered_by"]
    search_fields = ["version", "notes"]
    ordering = ["-sequence"]
    inlines = [ReleaseBinaryInline]
    fields = [
        "version",
        "sequence",
        "product",
        "protocol_version",
        "notes",
        "digests",
        "signers",
        "payload_sha256",
        "registered_at",
        "registered_by",
    ]
    readonly_fields = fields
    change_list_template = "admin/rollout/release/change_list.html"

    def get_queryset(self, request: HttpRequest):
        return super().get_queryset(request).prefetch_related("binaries").select_related("registered_by")

    @admin.display(description="platforms")
    def platforms(self, release: Release) -> str:
        return ", ".join(binary.platform for binary in release.binaries.all())

    @admin.display(description="signers")
    def signer_count(self, release: Release) -> int:
        return len(release.signer_pins)

    @admin.display(description="binary digests (sha256)")
    def digests(self, release: Release) -> str:
        return format_html_join(
            "",
            "<div><code>{}</code> {} <small>({} bytes)</small></div>",
            ((b.platform, b.sha256, b.size) for b in release.binaries.all()),
        )

    @admin.display(description="signer pins that counted")
    def signers(self, release: Release) -> str:
        return format_html_join("", "<div><code>{}</code></div>", ((pin,) for pin in release.signer_pins))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # registering goes through register_view, which verifies signatures

    def has_change_permission(self, request: HttpRequest, obj: Release | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Release | None = None) -> bool:
        return False

    def can_register(self, request: HttpRequest) -> bool:
        return request.user.has_perm("rollout.add_release")

    def get_urls(self):
        return [
            path("register/", self.admin_site.admin_view(self.register_view), name="rollout_release_register"),
            *super().get_urls(),
        ]

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        extra_context = {**(extra_context or {}), "can_register": self.can_register(request)}
        return super().changelist_view(request, extra_context)

    def register_view(self, request: HttpRequest) -> HttpResponse:
        if not self.can_register(request):
            messages.error(request, "You may not register releases.")
            return HttpResponseRedirect(reverse("admin:rollout_release_changelist"))
        form = RegisterReleaseForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            try:
                registration = release_register(
                    envelope=form.cleaned_data["envelope"],
                    registered_by=request.user,
                    actor=Actor.admin(request.user),
                    audit_tenant=_tenant_of(request),
                )
            except DomainError as exc:
                form.add_error(None, format_html("<code>{}</code>: {}", exc.code, exc.detail))
            else:
                release = registration.release
                if registration.created:
                    messages.success(request, f"Registered bcd {release.version} (sequence {release.sequence}).")
                else:
                    messages.info(request, f"bcd {release.version} was already registered with this manifest.")
                return HttpResponseRedirect(reverse("admin:rollout_release_change", args=[release.pk]))
        context = {
            **self.admin_site.each_context(request),
            "title": "Register a signed release",
            "form": form,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/rollout/release/register.html", context)


# --- rollouts: display helpers --------------------------------------------------------------
State = NodeUpgrade.State

# (css class, label, upgrade states) of the progress bar's segments, in order.
SEGMENTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("succeeded", "succeeded", (State.SUCCEEDED,)),
    ("failed", "failed", (State.FAILED,)),
    ("in-flight", "in flight", (State.IN_FLIGHT,)),
    ("pending", "pending", (State.PENDING,)),
    ("other", "skipped/cancelled/rolled back", (State.SKIPPED, State.CANCELLED, State.ROLLED_BACK)),
)


def counts_total(waves: Iterable[WaveStats]) -> dict[str, int]:
    """Counts by upgrade state summed over waves."""
    totals = dict.fromkeys(State.values, 0)
    for wave in waves:
        for state, n in wave.counts.items():
            totals[state] += n
    return totals


def progress_bar(counts: Mapping[str, Any]) -> SafeString:
    """Proportional coloured segments, with the counts as a tooltip."""
    parts = [(css, label, sum(counts.get(key, 0) for key in keys)) for css, label, keys in SEGMENTS]
    total = sum(n for _, _, n in parts)
    title = ", ".join(f"{n} {label}" for _, label, n in parts) if total else "no nodes"
    segments = format_html_join(
        "",
        '<span class="rollout-seg rollout-seg-{}" style="width: {}%"></span>',
        ((css, f"{n * 100 / total:.3f}") for css, _, n in parts if n),
    )
    return format_html(
        '<div class="rollout-progress" title="{}" role="img" aria-label="{}">{}</div>', title, title, segments
    )


def short_id(rollout: Rollout) -> str:
    return str(rollout.pk)[:8]


def rollout_label(rollout: Rollout) -> str:
    return f"{rollout.release.version} · {short_id(rollout)}"


def rollout_link(rollout: Rollout) -> SafeString:
    url = reverse("admin:rollout_rollout_change", args=[rollout.pk])
    return format_html('<a href="{}">{}</a>', url, rollout_label(rollout))


def when(moment) -> str:
    return date_format(localtime(moment), "DATETIME_FORMAT") if moment else "-"


def duration_text(seconds: int | None) -> str:
    if seconds is None:
        return "unbounded: a pool with a disruption budget of 0 never starts a node"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n} {unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "min"), (secs, "s")) if n]
    return " ".join(parts) or "0 s"


def _uuid_or_none(value: Any) -> UUID | None:
    try:
        return UUID(str(value))
    except ValueError:
        return None


# --- rollouts: actions ------------------------------------------------------------------------
@dataclass(frozen=True)
class RolloutAction:
    """An operator's action on a rollout: one service call, confirmed on an intermediate page."""

    slug: str  # in the detail page's URL: /admin/rollout/rollout/<id>/<slug>/
    title: str
    done: str
    states: tuple[str, ...]  # where the service allows it; elsewhere it answers invalid_state
    explain: str
    run: Callable[..., Rollout]
    danger: bool = False
    # Whether the detail page shows its button (beyond ``states``), e.g. promote only while soaking.
    shown: Callable[[Rollout], bool] | None = None

    @property
    def admin_action(self) -> str:
        """The name of the changelist's admin action."""
        return f"{self.slug.replace('-', '_')}_selected"


ACTIONS: dict[str, RolloutAction] = {
    action.slug: action
    for action in (
        RolloutAction(
            "pause",
            "Pause",
            "Paused",
            (Rollout.State.ACTIVE,),
            "No new node starts; nodes already in flight still settle.",
            rollout_pause,
        ),
        RolloutAction(
            "resume",
            "Resume",
            "Resumed",
            (Rollout.State.PAUSED,),
            "Starts continue. Failures seen so far in the current wave are accepted; only new ones pause again.",
            rollout_resume,
        ),
        RolloutAction(
            "promote",
            "Promote",
            "Promoted",
            (Rollout.State.ACTIVE,),
            "Ends the current wave's soak now: the next wave starts at the next tick.",
            rollout_promote,
            shown=lambda rollout: rollout_soaking(rollout, at=timezone.now()),
        ),
        RolloutAction(
            "abort",
            "Abort",
            "Aborted",
            Rollout.ACTIVE_STATES,
            "Pending nodes are cancelled; nodes in flight go on and settle. Succeeded nodes are not touched. "
            "An aborted rollout cannot be resumed.",
            partial(rollout_abort, rollback=False),
            danger=True,
        ),
        RolloutAction(
            "abort-rollback",
            "Abort and roll back",
            "Aborted (with rollback)",
            Rollout.ACTIVE_STATES,
            "Pending nodes are cancelled; nodes in flight go back to their previous release when that release "
            "is registered. Succeeded nodes are not touched: undo them by rolling forward to a higher sequence. "
            "An aborted rollout cannot be resumed.",
            partial(rollout_abort, rollback=True),
            danger=True,
        ),
    )
}


# --- rollouts --------------------------------------------------------------------------------
@admin.register(Rollout)
class RolloutAdmin(TenantScopedAdmin):
    """Rollouts are planned and operated here through the services; never edited by hand.

    - list: progress of every rollout on the page from one ``rollout_waves`` call (constant queries);
    - add: a form, then a preview from ``rollout_plan`` (writes nothing), then ``rollout_create``;
    - detail (the read-only change view): waves, budget in use per pool, events, action buttons;
    - actions: on the list (selected rollouts) and as buttons, each confirmed on an intermediate page.

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
        "created_at",
        "finished",
    ]
    list_filter = ["state", "tenant"]
    list_select_related = ["release", "tenant"]
    search_fields = ["release__version"]
    ordering = ["-created_at"]
    actions = [action.admin_action for action in ACTIONS.values()]
    fieldsets = [
        (None, {"fields": ["id", "version", "tenant", "pool_names", "state_badge", "paused_reason"]}),
        (
            "Plan",
            {
                "fields": [
                    "waves_requested",
                    "max_failure_ratio",
                    "failure_ratio_min_settled",
                    "soak_seconds",
                    "upgrade_timeout_seconds",
                ]
            },
        ),
        ("History", {"fields": ["created_by", "created_at", "next_wave_at", "completed_at", "aborted_at"]}),
    ]
    readonly_fields = [field for _, options in fieldsets for field in options["fields"]]
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
        return user.has_perm("rollout.change_rollout") and (user.is_superuser or tenant_id_of(request) is not None)

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

    @admin.display(description="completed / aborted", ordering="completed_at")
    def finished(self, rollout: Rollout) -> str:
        if rollout.completed_at:
            return when(rollout.completed_at)
        if rollout.aborted_at:
            return f"aborted {when(rollout.aborted_at)}"
        return "-"

    @admin.display(description="pools")
    def pool_names(self, rollout: Rollout) -> str:
        return ", ".join(pool.name for pool in rollout.pools.order_by("name"))

    @admin.display(description="waves (cumulative %)")
    def waves_requested(self, rollout: Rollout) -> str:
        return ", ".join(str(percent) for percent in rollout.waves)

    # the detail page
    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None):
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
        return {
            "rollout_waves": wave_rows,
            "wave_count": len(wave_rows),
            "total_bar": progress_bar(totals),
            "totals": totals,
            "total_nodes": sum(totals.values()),
            "budget_rows": [{"pool": pool, "budget": budgets.get(pool.id)} for pool in pools],
            "events": [
                {"kind": event.kind, "at": event.at, "data": json.dumps(event.data, sort_keys=True, default=str)}
                for event in rollout.events.all()
            ],
            "upgrades_url": filtered({}),
            "rollout_actions": actions,
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

    @admin.action(description="Pause the selected rollouts", permissions=["operate"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[Rollout]):
        return self.run_bulk(request, queryset, "pause")

    @admin.action(description="Resume the selected rollouts", permissions=["operate"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Rollout]):
        return self.run_bulk(request, queryset, "resume")

    @admin.action(description="Promote the selected rollouts (end their soak now)", permissions=["operate"])
    def promote_selected(self, request: HttpRequest, queryset: QuerySet[Rollout]):
        return self.run_bulk(request, queryset, "promote")

    @admin.action(description="Abort the selected rollouts", permissions=["operate"])
    def abort_selected(self, request: HttpRequest, queryset: QuerySet[Rollout]):
        return self.run_bulk(request, queryset, "abort")

    @admin.action(description="Abort the selected rollouts and roll back nodes in flight", permissions=["operate"])
    def abort_rollback_selected(self, request: HttpRequest, queryset: QuerySet[Rollout]):
        return self.run_bulk(request, queryset, "abort-rollback")

    # creating: form -> preview (rollout_plan, writes nothing) -> confirm (rollout_create)
    def add_view(self, request: HttpRequest, form_url: str = "", extra_context=None) -> HttpResponse:
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = RolloutCreateForm(request.POST or None, tenant=self.acting_tenant(request))
        plan = None
        if request.method == "POST" and "_edit" not in request.POST and form.is_valid():
            try:
                tenant, spec = form.chosen_tenant(), form.spec()
                if "_confirm" in request.POST:
                    rollout = rollout_create(
                        tenant=tenant, spec=spec, created_by=request.user, actor=Actor.admin(request.user)
                    )
                    self.message_user(request, f"Created {rollout_label(rollout)}.", messages.SUCCESS)
                    return HttpResponseRedirect(reverse("admin:rollout_rollout_change", args=[rollout.pk]))
                plan = rollout_plan(tenant=tenant, spec=spec)
            except DomainError as exc:
                form.add_error(None, format_html("<code>{}</code>: {}", exc.code, exc.detail))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "media": self.media + form.media,
            "form": form,
            "has_view_permission": self.has_view_permission(request),
        }
        if plan is not None:
            context.update(self.preview_context(form, plan))
            return TemplateResponse(request, "admin/rollout/rollout/preview.html", context)
        context["title"] = "Plan a rollout"
        return TemplateResponse(request, "admin/rollout/rollout/create.html", context)

    def preview_context(self, form: RolloutCreateForm, plan: RolloutPlan) -> dict[str, Any]:
        pools = list(Pool.objects.filter(id__in=plan.pool_ids).order_by("name"))
        ids = [str(pool.id) for pool in pools]
        return {
            "title": f"Preview: roll out {plan.version}",
            "plan": plan,
            "tenant": form.chosen_tenant(),
            "plan_pools": pools,
            "plan_waves": [
                {
                    "ordinal": wave.index + 1,
                    "percent": wave.percent,
                    "total": wave.total,
                    "per_pool": [wave.pools.get(pool_id, 0) for pool_id in ids],
                }
                for wave in plan.waves
            ],
            "plan_budgets": [
                {
                    "pool": pool,
                    "nodes": sum(wave.pools.get(str(pool.id), 0) for wave in plan.waves),
                    "budget": plan.budgets[str(pool.id)],
                }
                for pool in pools
            ],
            "estimate": duration_text(plan.estimated_seconds),
        }


# --- node upgrades and events: read-only ---------------------------------------------------------
class RolloutFilter(admin.SimpleListFilter):
    """By rollout: the most recent ones of the user's scope (and the chosen one, however old)."""

    title = "rollout"
    parameter_name = "rollout"
    limit = 30

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin):
        rollouts = Rollout.objects.select_related("release").order_by("-created_at")
        if not request.user.is_superuser:
            rollouts = rollouts.filter(tenant_id=tenant_id_of(request))
        shown = list(rollouts[: self.limit])
        chosen = _uuid_or_none(self.value())
        if chosen is not None and all(rollout.id != chosen for rollout in shown):
            shown += list(rollouts.filter(pk=chosen))
        return [(str(rollout.id), f"{rollout_label(rollout)} ({rollout.state})") for rollout in shown]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() is None:
            return queryset
        chosen = _uuid_or_none(self.value())
        return queryset.filter(rollout_id=chosen) if chosen is not None else queryset.none()


def _chosen_rollout(request: HttpRequest) -> UUID | None:
    return _uuid_or_none(request.GET["rollout"]) if request.GET.get("rollout") else None


class WaveFilter(admin.SimpleListFilter):
    """By wave (numbered from 1 as in the pages; the query parameter is the index, from 0)."""

    title = "wave"
    parameter_name = "wave"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin):
        waves = RolloutWave.objects.all()
        chosen = _chosen_rollout(request)
        if chosen is not None:
            waves = waves.filter(rollout_id=chosen)
        if not request.user.is_superuser:
            waves = waves.filter(rollout__tenant_id=tenant_id_of(request))
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
        pools = Pool.objects.select_related("tenant").order_by("tenant__slug", "name")
        chosen = _chosen_rollout(request)
        if chosen is not None:
            pools = pools.filter(rollouts=chosen)
        if not request.user.is_superuser:
            pools = pools.filter(tenant_id=tenant_id_of(request))
        label = (lambda p: f"{p.tenant.slug} / {p.name}") if request.user.is_superuser else (lambda p: p.name)
        return [(str(pool.id), label(pool)) for pool in pools]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() is None:
            return queryset
        chosen = _uuid_or_none(self.value())
        return queryset.filter(pool_id=chosen) if chosen is not None else queryset.none()


@admin.register(NodeUpgrade)
class NodeUpgradeAdmin(ReadOnlyMixin, TenantScopedAdmin):
    """One row per snapshotted node of a rollout; written only by the controller."""

    tenant_path = "rollout__tenant_id"
    list_display = [
        "node_name",
        "pool_name",
        "rollout_link",
        "wave_ordinal",
        "position",
        "state_badge",
        "reason",
        "previous_version",
        "started_at",
        "deadline",
        "settled_at",
    ]
    list_filter = [RolloutFilter, "state", WaveFilter, PoolFilter]
    list_select_related = ["node", "pool", "rollout__release"]
    search_fields = ["node__name"]
    show_full_result_count = False  # no second COUNT over every upgrade of every rollout
    fields = [
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
    ]
    readonly_fields = fields

    class Media:
        css = {"all": ["rollout/admin.css"]}

    def has_delete_permission(self, request: HttpRequest, obj: NodeUpgrade | None = None) -> bool:
        return False

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
            '<span class="upgrade-state upgrade-state-{}">{}</span>', upgrade.state, upgrade.get_state_display()
        )


@admin.register(RolloutEvent)
class RolloutEventAdmin(ReadOnlyMixin, TenantScopedAdmin):
    """The audit trail of every rollout (also on each rollout's page)."""

    tenant_path = "rollout__tenant_id"
    list_display = ["kind", "rollout_link", "at", "data_text"]
    list_filter = ["kind", RolloutFilter]
    list_select_related = ["rollout__release"]
    fields = ["rollout_link", "kind", "at", "data_text"]
    readonly_fields = fields

    def has_delete_permission(self, request: HttpRequest, obj: RolloutEvent | None = None) -> bool:
        return False

    @admin.display(description="rollout")
    def rollout_link(self, event: RolloutEvent) -> SafeString:
        return rollout_link(event.rollout)

    @admin.display(description="data")
    def data_text(self, event: RolloutEvent) -> SafeString:
        return format_html("<code>{}</code>", json.dumps(event.data, sort_keys=True, default=str))
