"""The releases' admin: registered through a form that verifies the signatures; never edited."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from core.errors import DomainError
from fleet.interface import Actor, Tenant, is_fleet_admin, staff_user, tenant_id_of
from rollout.models import Release, ReleaseBinary
from rollout.services.releases import release_register


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
    fields = _RELEASE_BINARY_INLINE_FIELDS
    readonly_fields = _RELEASE_BINARY_INLINE_FIELDS
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Release | None = None) -> bool:
        return False


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
    "registered_at",
    "registered_by",
)


@admin.register(Release)
class ReleaseAdmin(admin.ModelAdmin):
    """Releases are immutable: they can be registered (verified) and viewed, never edited."""

    list_display = ["version", "sequence", "platforms", "signer_count", "registered_at", "registered_by"]
    search_fields = ["version", "notes"]
    ordering = ["-sequence"]
    inlines = [ReleaseBinaryInline]
    fields = _RELEASE_ADMIN_FIELDS
    readonly_fields = _RELEASE_ADMIN_FIELDS
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
        return request.user.has_perm("rollout.add_release") and is_fleet_admin(request)

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
