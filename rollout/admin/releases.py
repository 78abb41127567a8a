"""The releases' admin: registered through a form that verifies the signatures; never edited."""

from __future__ import annotations

from functools import partial
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, QuerySet, Subquery, Value
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from core.errors import DomainError
from fleet.interface import Actor, Tenant, is_fleet_admin, staff_user, tenant_id_of
from rollout.admin.binaries import BinaryUploadMixin
from rollout.models import Release, ReleaseBinary, ReleaseBlock
from rollout.registry.releases import release_register
from rollout.rollouts.blocks import release_block, release_unblock


def _tenant_of(request: HttpRequest) -> Tenant | None:
    """The tenant whose audit trail records the admin user's installation-wide changes (None: the system's)."""
    tenant_id = tenant_id_of(request)
    return Tenant.objects.filter(pk=tenant_id).first() if tenant_id is not None else None


_RELEASE_BINARY_INLINE_FIELDS = (
    "platform",
    "sha256",
    "size",
    "stored_at",
)


class ReleaseBinaryInline(admin.TabularInline):
    model = ReleaseBinary
    verbose_name = "release binary"
    verbose_name_plural = "release binaries"
    fields = _RELEASE_BINARY_INLINE_FIELDS
    readonly_fields = _RELEASE_BINARY_INLINE_FIELDS
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Release | None = None) -> bool:
        return False


class ReleaseBlockForm(forms.Form):
    reason = forms.CharField(max_length=500, widget=forms.Textarea(attrs={"rows": 3, "cols": 80}), strip=False)


class RegisterReleaseForm(forms.Form):
    envelope_file = forms.FileField(required=False, label="Envelope file (RELEASE.json)")
    envelope_text = forms.CharField(
        required=False, label="…or paste the envelope", widget=forms.Textarea(attrs={"rows": 12, "cols": 100})
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        upload, text = data.get("envelope_file"), (data.get("envelope_text") or "").strip()
        if bool(upload) == bool(text):
            raise forms.ValidationError("Upload a file or paste an envelope (one of the two).")
        data["envelope"] = upload.read() if upload else text.encode("utf-8")
        return data


_RELEASE_ADMIN_FIELDS = (
    "version",
    "sequence",
    "product",
    "protocol_version",
    "notes",
    "digests",
    "signers",
    "payload_sha256",
    "expires_at",
    "registered_at",
    "registered_by",
    "blocked_here",
)


@admin.register(Release)
class ReleaseAdmin(BinaryUploadMixin, admin.ModelAdmin):
    """Releases are immutable: they can be registered (verified) and viewed, never edited."""

    list_display = [
        "version",
        "sequence",
        "platforms",
        "signer_count",
        "expires_at",
        "registered_at",
        "registered_by",
        "blocked_here",
    ]

    class Media:
        css = {"all": ["rollout/admin.css"]}

    search_fields = ["version", "notes"]
    ordering = ["-sequence"]
    inlines = [ReleaseBinaryInline]
    fields = _RELEASE_ADMIN_FIELDS
    readonly_fields = _RELEASE_ADMIN_FIELDS
    change_list_template = "admin/rollout/release/change_list.html"
    change_form_template = "admin/rollout/release/change_form.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Release]:
        # The acting tenant's view of each release: its block, and whether this user may change it.
        tenant_id = tenant_id_of(request)
        blocked = ReleaseBlock.objects.filter(tenant_id=tenant_id or 0, release=OuterRef("pk")).values("reason")[:1]
        return (
            super()
            .get_queryset(request)
            .prefetch_related("binaries")
            .select_related("registered_by")
            .annotate(
                block_reason_here=Subquery(blocked),
                acting_tenant=Value(tenant_id is not None),
                acting_can_block=Value(self.can_block(request)),
            )
        )

    @admin.display(description="blocked in your tenant")
    def blocked_here(self, release: Release) -> SafeString | str:
        """The acting tenant's block with the action that changes it (see get_queryset).

        See docs/controller.md#blocking-a-release-per-tenant."""
        if not getattr(release, "acting_tenant", False):
            return "-"
        reason, can = release.block_reason_here, release.acting_can_block  # type: ignore[attr-defined]
        if reason is None:
            link = reverse("admin:rollout_release_block", args=[release.pk])
            return format_html('no <a class="button" href="{}">block</a>', link) if can else "no"
        link = reverse("admin:rollout_release_unblock", args=[release.pk])
        text = format_html("<strong>blocked</strong>: {}", reason)
        return format_html('{} <a class="button" href="{}">unblock</a>', text, link) if can else text

    def can_block(self, request: HttpRequest) -> bool:
        return (
            request.user.has_perm("rollout.add_releaseblock")
            and _tenant_of(request) is not None
            and is_fleet_admin(request)
        )

    def block_view(self, request: HttpRequest, object_id: str, unblock: bool = False) -> HttpResponse:
        """Block (with a reason) or unblock a release for the acting tenant, through the services."""
        release = self.get_object(request, unquote(object_id))
        tenant = _tenant_of(request)
        if release is None:
            raise Http404("No such release.")
        if not self.can_block(request) or tenant is None:
            raise PermissionDenied
        form = ReleaseBlockForm(request.POST or None) if not unblock else None
        error = None
        if request.method == "POST" and (form is None or form.is_valid()):
            try:
                if form is None:
                    release_unblock(tenant=tenant, version=release.version, actor=Actor.admin(request.user))
                    messages.success(request, f"Unblocked bcd {release.version} in {tenant.slug}.")
                else:
                    release_block(
                        tenant=tenant,
                        version=release.version,
                        reason=form.cleaned_data["reason"],
                        blocked_by=staff_user(request),
                        actor=Actor.admin(request.user),
                    )
                    messages.success(request, f"Blocked bcd {release.version} in {tenant.slug}.")
                return HttpResponseRedirect(reverse("admin:rollout_release_change", args=[release.pk]))
            except DomainError as exc:
                error = format_html("<code>{}</code>: {}", exc.code, exc.detail)
        context = {
            **self.admin_site.each_context(request),
            "title": f"{'Unblock' if unblock else 'Block'} bcd {release.version} in {tenant.slug}",
            "form": form,
            "error": error,
            "unblock": unblock,
            "release": release,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/rollout/release/block.html", context)

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
        return request.user.has_perm("rollout.add_release") and is_fleet_admin(request)

    def get_urls(self):
        return [
            path("register/", self.admin_site.admin_view(self.register_view), name="rollout_release_register"),
            path(
                "<path:object_id>/block/",
                self.admin_site.admin_view(self.block_view),
                name="rollout_release_block",
            ),
            path(
                "<path:object_id>/unblock/",
                self.admin_site.admin_view(partial(self.block_view, unblock=True)),
                name="rollout_release_unblock",
            ),
            *self.upload_urls(),
            *super().get_urls(),
        ]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None):
        release = self.get_object(request, unquote(object_id))
        if release is not None:
            extra_context = {**(extra_context or {}), **self.upload_context(request, release)}
        return super().change_view(request, object_id, form_url, extra_context)

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
                    registered_by=staff_user(request),
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
