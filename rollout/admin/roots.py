"""The root chain of release keys: read-only (a root is registered with its signed envelope through the API)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from fleet.interface import ReadOnlyMixin
from rollout.models import ReleaseRoot

_ROOT_FIELDS = ("version", "threshold", "pins", "expires_at", "signer_pins", "recorded_at", "recorded_by", "envelope")


@admin.register(ReleaseRoot)
class ReleaseRootAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """Which release keys count: root 1 is the configuration; each later root was signed by the one before and by
    itself (docs/signing.md#rotating-the-release-keys). The newest decides what registers and what agents run."""

    list_display = ["version", "threshold", "key_count", "expires_at", "recorded_at", "recorded_by"]
    ordering = ["-version"]
    fields = _ROOT_FIELDS
    readonly_fields = _ROOT_FIELDS

    @admin.display(description="keys")
    def key_count(self, root: ReleaseRoot) -> int:
        return len(root.pins)

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # the chain only grows: a compromised key is revoked by the next root
