"""Approving and denying a rollout in the admin (docs/controller.md#approvals): the API's rules, one service.

A console user approves or denies with ``compute:rollout:approve`` on their tenant (superusers always:
``fleet.interface.can_approve``), and is held to the same rules as an API key: the creator of a
rollout never approves it, superusers included; each user approves once. The page asks for the
comment (required to deny), then calls ``rollout.rollouts.approvals``; a refusal shows its code.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, re_path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from core.errors import DomainError
from fleet.interface import Actor, can_approve, staff_user
from rollout.admin.display import rollout_label, when
from rollout.models import Rollout
from rollout.rollouts.actions import MAX_COMMENT
from rollout.rollouts.approvals import rollout_approve, rollout_deny


@dataclass(frozen=True)
class Decision:
    slug: str  # /admin/rollout/rollout/<id>/<slug>/
    title: str
    done: str
    explain: str
    comment_required: bool
    danger: bool = False


DECISIONS = {
    decision.slug: decision
    for decision in (
        Decision(
            "approve",
            "Approve",
            "Approved",
            "Approving records your approval, with your comment. When enough users other than its creator have "
            "approved, the rollout starts. Its creator cannot approve it.",
            comment_required=False,
        ),
        Decision(
            "deny",
            "Deny",
            "Denied",
            "The rollout ends, denied: nothing of it starts and its nodes are free for another rollout. "
            "A denied rollout cannot be started again.",
            comment_required=True,
            danger=True,
        ),
    )
}


class ApprovalFilter(admin.SimpleListFilter):
    """The list's rollouts that await approval, and among them those the console user may approve now."""

    title = "approval"
    parameter_name = "approval"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("awaiting", "awaiting approval"), ("mine", "awaiting my approval")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Rollout]) -> QuerySet[Rollout]:
        if self.value() not in ("awaiting", "mine"):
            return queryset
        awaiting = queryset.filter(state=Rollout.State.AWAITING_APPROVAL)
        if self.value() == "awaiting":
            return awaiting
        user = staff_user(request)
        return awaiting.exclude(created_by=user).exclude(approvals__user=user)


class DecisionForm(forms.Form):
    comment = forms.CharField(max_length=MAX_COMMENT, widget=forms.Textarea(attrs={"rows": 3, "cols": 80}), strip=False)

    def __init__(self, *args: Any, required: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["comment"].required = required


class ApprovalAdminMixin:
    """The rollout admin's approve and deny pages and buttons (mixed into ``RolloutAdmin``)."""

    @admin.display(description="approvals")
    def approval_list(self, rollout: Rollout) -> SafeString | str:
        """Who approved, when, with what comment (oldest first)."""
        approvals = list(rollout.approvals.order_by("at", "id"))
        if not approvals:
            return "-"
        return format_html_join(
            "",
            "<div>{} <small>{}</small>{}</div>",
            (
                (
                    approval.username,
                    when(approval.at),
                    format_html(": {}", approval.comment) if approval.comment else "",
                )
                for approval in approvals
            ),
        )

    def approval_urls(self) -> list[URLPattern]:
        return [
            re_path(
                rf"^(?P<object_id>[0-9a-fA-F-]{{32,36}})/{slug}/$",
                self.admin_site.admin_view(partial(self.decision_view, slug=slug)),  # type: ignore[attr-defined]
                name=f"rollout_rollout_{slug}",
            )
            for slug in DECISIONS
        ]

    def has_approve_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request) and can_approve(request)  # type: ignore[attr-defined]

    def decision_buttons(self, request: HttpRequest, rollout: Rollout) -> list[tuple[Decision, str]]:
        """Approve and deny on the detail page of a rollout awaiting approval, for a user who may."""
        if rollout.state != Rollout.State.AWAITING_APPROVAL or not self.has_approve_permission(request):
            return []
        return [
            (decision, reverse(f"admin:rollout_rollout_{slug}", kwargs={"object_id": rollout.pk}))
            for slug, decision in DECISIONS.items()
        ]

    def decision_view(self, request: HttpRequest, object_id: str, slug: str) -> HttpResponse:
        """GET: the page with the comment; POST: the service, then back to the rollout's page."""
        decision = DECISIONS[slug]
        if not self.has_approve_permission(request):
            raise PermissionDenied
        rollout = self.get_object(request, unquote(object_id))  # type: ignore[attr-defined]
        if rollout is None:
            raise Http404("No such rollout.")
        posted = request.method == "POST"
        form = DecisionForm(request.POST if posted else None, required=decision.comment_required)
        error = None
        if posted and form.is_valid():
            comment = form.cleaned_data["comment"]
            actor = Actor.admin(request.user)
            try:
                if slug == "approve":
                    rollout_approve(rollout_id=rollout.pk, user=staff_user(request), comment=comment, actor=actor)
                else:
                    rollout_deny(rollout_id=rollout.pk, comment=comment, actor=actor)
            except DomainError as exc:
                error = format_html("<code>{}</code>: {}", exc.code, exc.detail)
            else:
                messages.success(request, f"{decision.done} {rollout_label(rollout)}.")
                return HttpResponseRedirect(reverse("admin:rollout_rollout_change", args=[rollout.pk]))
        context = {
            **self.admin_site.each_context(request),  # type: ignore[attr-defined]
            "title": f"{decision.title} {rollout_label(rollout)}",
            "opts": Rollout._meta,
            "decision": decision,
            "rollout": rollout,
            "form": form,
            "error": error,
            "rollout_url": reverse("admin:rollout_rollout_change", args=[rollout.pk]),
            "comment_help": f"{'1' if decision.comment_required else '0'} to {MAX_COMMENT} characters.",
        }
        return TemplateResponse(request, "admin/rollout/rollout/decision.html", context)
