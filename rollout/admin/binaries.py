"""Uploading a release's binary from its admin page: the ``release upload`` command's service, on one file.

The bytes are streamed to ``release_binary_store`` (Django spools a large upload to a temporary file, the
service reads it a chunk at a time): stored only when they are the signed manifest's, refused otherwise with
the service's code (``size_mismatch``, ``sha256_mismatch``), nothing kept. See docs/console.md.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from core.errors import DomainError
from rollout.admin.display import size_text
from rollout.models import Release
from rollout.registry.binaries import release_binary_store


class BinaryUploadForm(forms.Form):
    """A platform of the release's signed manifest, and the file to store for it."""

    platform = forms.ChoiceField()
    binary = forms.FileField(label="Binary file", allow_empty_file=True)

    def __init__(self, *args: Any, release: Release, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        platforms = [binary.platform for binary in release.binaries.order_by("platform")]
        field = self.fields["platform"]
        field.choices = [(platform, platform) for platform in platforms]  # type: ignore[attr-defined]
        field.error_messages["invalid_choice"] = (
            f"bcd {release.version} has no binary for %(value)s: its signed manifest names {', '.join(platforms)}."
        )


class BinaryUploadMixin:
    """The release admin's upload form (on the release's page) and the view it posts to."""

    def upload_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.upload_view)  # type: ignore[attr-defined]
        return [path("<path:object_id>/upload/", view, name="rollout_release_upload")]

    def can_upload(self, request: HttpRequest) -> bool:
        return self.can_register(request)  # type: ignore[attr-defined]

    def upload_context(self, request: HttpRequest, release: Release) -> dict[str, Any]:
        if not self.can_upload(request):
            return {}
        return {
            "upload_form": BinaryUploadForm(release=release),
            "upload_url": reverse("admin:rollout_release_upload", args=[release.pk]),
        }

    def upload_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST only: store the file for the platform, or say why not (the service's code); then the page."""
        release = self.get_object(request, unquote(object_id))  # type: ignore[attr-defined]
        if release is None:
            raise Http404("No such release.")
        if not self.can_upload(request):
            raise PermissionDenied
        page = HttpResponseRedirect(reverse("admin:rollout_release_change", args=[release.pk]))
        if request.method != "POST":
            return page
        form = BinaryUploadForm(request.POST, request.FILES, release=release)
        if not form.is_valid():
            errors = " ".join(str(error) for field_errors in form.errors.values() for error in field_errors)
            messages.error(request, f"Nothing stored: {errors}")
            return page
        platform = form.cleaned_data["platform"]
        upload = form.cleaned_data["binary"]
        try:
            binary = release_binary_store(version=release.version, platform=platform, source=upload)
        except DomainError as exc:
            messages.error(request, format_html("Nothing stored: <code>{}</code>: {}", exc.code, exc.detail))
        else:
            messages.success(request, f"Stored bcd {release.version} for {platform} ({size_text(binary.size)}).")
        return page
