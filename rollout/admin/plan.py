"""Planning a rollout in the admin (its "Add" page): the form, then a preview from ``rollout_plan`` that
writes nothing, then ``rollout_create`` on confirmation (mixed into ``RolloutAdmin``).

Both pages extend the admin's own change form (its styles and scripts) and lay the form out in the admin's
fieldsets, so they read like every other page of the console.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from core.errors import DomainError
from fleet.interface import Actor, Pool, budget_percent, staff_user
from rollout.admin.display import duration_text, rollout_label
from rollout.admin.forms import RolloutCreateForm
from rollout.rollouts.create import rollout_create, rollout_plan
from rollout.rollouts.spec import RolloutPlan

# The form's fields as the admin groups them (a field the form does not have, the tenant of a staff user's
# own tenant, is left out).
PLAN_FIELDSETS: list[tuple[str, dict[str, Any]]] = [
    ("Release and nodes", {"fields": ["tenant", "version", "pools", "selector"]}),
    (
        "Waves",
        {
            "fields": ["waves", "soak_seconds", "max_failure_ratio", "failure_ratio_min_settled"],
            "description": "The nodes are shuffled once and taken wave by wave; a wave that fails too much "
            "pauses the rollout.",
        },
    ),
    ("Each node", {"fields": ["upgrade_timeout_seconds", "min_ready_seconds"]}),
    (
        "Schedule",
        {
            "fields": ["start_at", "end_by", "end_behavior"],
            "classes": ["collapse"],
            "description": "Optional: empty starts at once and runs until done.",
        },
    ),
]


def plan_fieldsets(form: RolloutCreateForm) -> list[tuple[str, dict[str, Any]]]:
    return [
        (name, {**options, "fields": [field for field in options["fields"] if field in form.fields]})
        for name, options in PLAN_FIELDSETS
    ]


class RolloutPlanAdminMixin:
    """The rollout admin's add view: form -> preview (``rollout_plan``, writes nothing) -> ``rollout_create``."""

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context=None) -> HttpResponse:
        if not self.has_add_permission(request):  # type: ignore[attr-defined]
            raise PermissionDenied
        form = RolloutCreateForm(request.POST or None, tenant=self.acting_tenant(request))  # type: ignore[attr-defined]
        plan = None
        if request.method == "POST" and "_edit" not in request.POST and form.is_valid():
            try:
                tenant, spec = form.chosen_tenant(), form.spec()
                if tenant is None:  # the form requires a tenant from a superuser; others act in theirs
                    raise PermissionDenied
                if "_confirm" in request.POST:
                    rollout = rollout_create(
                        tenant=tenant, spec=spec, created_by=staff_user(request), actor=Actor.admin(request.user)
                    )
                    self.message_user(request, f"Created {rollout_label(rollout)}.", messages.SUCCESS)  # type: ignore[attr-defined]
                    return HttpResponseRedirect(reverse("admin:rollout_rollout_change", args=[rollout.pk]))
                plan = rollout_plan(tenant=tenant, spec=spec)
            except DomainError as exc:
                form.add_error(None, format_html("<code>{}</code>: {}", exc.code, exc.detail))
        context = {
            **self.admin_site.each_context(request),  # type: ignore[attr-defined]
            "opts": self.model._meta,  # type: ignore[attr-defined]
            "media": self.media + form.media,  # type: ignore[attr-defined]
            "form": form,
            "errors": form.errors if form.is_bound else None,
            "has_view_permission": self.has_view_permission(request),  # type: ignore[attr-defined]
            "add": True,
        }
        if plan is not None:
            context.update(self.preview_context(form, plan))
            return TemplateResponse(request, "admin/rollout/rollout/preview.html", context)
        context["title"] = "Plan a rollout"
        # The admin's own fieldsets; AdminForm takes any form, though its stubs say ModelForm.
        context["adminform"] = helpers.AdminForm(form, plan_fieldsets(form), {})  # type: ignore[arg-type]
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
            # Percent, as the rollout's page and the budgets read (the API keeps the fraction).
            "failure_ratio": budget_percent(plan.options.max_failure_ratio),
            "soak": duration_text(plan.options.soak_seconds),
            "upgrade_timeout": duration_text(plan.options.upgrade_timeout_seconds),
            "min_ready": duration_text(plan.options.min_ready_seconds),
        }
