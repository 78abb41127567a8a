"""Roll forward in the admin (docs/controller.md#undoing-a-bad-release): "Roll forward to…" on a rollout's page.

On an active or paused rollout, an operator picks a newer release (a higher sequence); the page says how
many of the rollout's nodes run its release now. Confirming creates a rollout of the chosen release over
the same pools, selector and options that supersedes this one: ``rollout_create`` with ``supersedes``,
the API's rules and refusals (shown with their code).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, re_path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from core.errors import DomainError
from fleet.interface import Actor, NodeSession, staff_user
from rollout.admin.display import rollout_label
from rollout.models import NodeUpgrade, Release, Rollout
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec

#: The states whose page offers "Roll forward to…" (the API supersedes scheduled and awaiting ones too).
OFFERED = (Rollout.State.ACTIVE, Rollout.State.PAUSED)


class RollForwardForm(forms.Form):
    version = forms.ChoiceField(label="Newer release")

    def __init__(self, *args: Any, rollout: Rollout, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        newer = Release.objects.filter(sequence__gt=rollout.release.sequence).order_by("-sequence")
        field = self.fields["version"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(release.version, f"{release.version} (sequence {release.sequence})") for release in newer]


def nodes_on_release(rollout: Rollout) -> int:
    """How many of the rollout's nodes report its release now (one query)."""
    nodes = NodeUpgrade.objects.filter(rollout=rollout).values("node_id")
    return NodeSession.objects.filter(node__in=nodes, daemon_version=rollout.release.version).count()


def roll_forward(rollout: Rollout, *, version: str, request: HttpRequest) -> Rollout:
    """A rollout of ``version`` over the same selection and options that supersedes ``rollout``."""
    spec = rollout_spec(
        version=version,
        pool_ids=[str(pool.id) for pool in rollout.pools.all()],
        waves=list(rollout.waves),
        max_failure_ratio=float(rollout.max_failure_ratio),
        soak_seconds=rollout.soak_seconds,
        upgrade_timeout_seconds=rollout.upgrade_timeout_seconds,
        min_ready_seconds=rollout.min_ready_seconds,
        failure_ratio_min_settled=rollout.failure_ratio_min_settled,
        selector=rollout.selector,
        supersedes=str(rollout.id),
    )
    return rollout_create(
        tenant=rollout.tenant, spec=spec, created_by=staff_user(request), actor=Actor.admin(request.user)
    )


class RollForwardAdminMixin:
    """The rollout admin's "Roll forward to…" page (mixed into ``RolloutAdmin``)."""

    @admin.display(description="supersede chain")
    def supersede_chain(self, rollout: Rollout) -> SafeString | str:
        """The rollout it superseded and the one that superseded it, linked (one query)."""
        successor = Rollout.objects.filter(supersedes=rollout).select_related("release").first()
        links = [
            format_html(
                '<div>{} <a href="{}">{}</a></div>',
                words,
                reverse("admin:rollout_rollout_change", args=[other.pk]),
                rollout_label(other),
            )
            for words, other in (("supersedes", rollout.supersedes), ("superseded by", successor))
            if other is not None
        ]
        return format_html_join("", "{}", ((link,) for link in links)) if links else "-"

    def roll_forward_urls(self) -> list[URLPattern]:
        return [
            re_path(
                r"^(?P<object_id>[0-9a-fA-F-]{32,36})/roll-forward/$",
                self.admin_site.admin_view(self.roll_forward_view),  # type: ignore[attr-defined]
                name="rollout_rollout_roll_forward",
            )
        ]

    def roll_forward_url(self, request: HttpRequest, rollout: Rollout) -> str | None:
        """The page's URL for a rollout it applies to and a user who may operate; else None."""
        if rollout.state not in OFFERED or not self.has_operate_permission(request, rollout):  # type: ignore[attr-defined]
            return None
        return reverse("admin:rollout_rollout_roll_forward", kwargs={"object_id": rollout.pk})

    def roll_forward_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: the newer releases and the count of nodes on this one; POST: the superseding create."""
        if not self.has_operate_permission(request):  # type: ignore[attr-defined]
            raise PermissionDenied
        rollout = self.get_object(request, unquote(object_id))  # type: ignore[attr-defined]
        if rollout is None:
            raise Http404("No such rollout.")
        posted = request.method == "POST"
        form = RollForwardForm(request.POST if posted else None, rollout=rollout)
        error = None
        if posted and form.is_valid():
            try:
                created = roll_forward(rollout, version=form.cleaned_data["version"], request=request)
            except DomainError as exc:
                error = format_html("<code>{}</code>: {}", exc.code, exc.detail)
            else:
                messages.success(request, f"{rollout_label(rollout)} superseded by {rollout_label(created)}.")
                return HttpResponseRedirect(reverse("admin:rollout_rollout_change", args=[created.pk]))
        context = {
            **self.admin_site.each_context(request),  # type: ignore[attr-defined]
            "title": f"Roll forward {rollout_label(rollout)}",
            "opts": Rollout._meta,
            "rollout": rollout,
            "form": form,
            "error": error,
            "offered": rollout.state in OFFERED,
            "on_release": nodes_on_release(rollout),
            "rollout_url": reverse("admin:rollout_rollout_change", args=[rollout.pk]),
        }
        return TemplateResponse(request, "admin/rollout/rollout/roll_forward.html", context)
