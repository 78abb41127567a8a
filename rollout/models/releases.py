"""The release registry's rows: signed releases, their root chain, their binaries, and blocks per tenant."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q, QuerySet

from fleet.interface import Tenant


class Release(models.Model):
    """A verified, signed bcd release. Immutable once registered."""

    version = models.CharField(max_length=64, unique=True)
    sequence = models.BigIntegerField(unique=True)
    product = models.CharField(max_length=32, default="bcd")
    protocol_version = models.PositiveIntegerField(null=True, blank=True)
    notes = models.TextField(blank=True)
    # The manifest bytes exactly as signed, and the envelope exactly as received.
    payload = models.BinaryField()
    payload_sha256 = models.CharField(max_length=64, unique=True)
    envelope = models.TextField()
    signer_pins = models.JSONField(default=list, help_text="Pins of the keys whose signatures counted.")
    # The signed manifest's "expires" (docs/signing.md#expiry): no node starts on it afterwards.
    expires_at = models.DateTimeField(null=True, blank=True)
    registered_at = models.DateTimeField()
    registered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-sequence"]
        constraints = [models.CheckConstraint(condition=Q(sequence__gte=1), name="release_sequence_positive")]

    def __str__(self) -> str:
        return f"bcd {self.version} (#{self.sequence})"

    def expired_at(self, at: datetime) -> bool:
        """Whether it has expired at ``at`` (docs/signing.md#expiry): no node may start on it then.

        ``Release.expired_q`` is the same rule as a lookup, for queries.
        """
        return self.expires_at is not None and self.expires_at <= at

    @staticmethod
    def expired_q(at: datetime, *, prefix: str = "") -> Q:
        """``expired_at`` as a lookup on releases, or on the release ``prefix`` leads to (``"rollout__release__"``)."""
        return Q(**{f"{prefix}expires_at__lte": at})


class ReleaseRoot(models.Model):
    """One version of the root chain: which release keys count (docs/signing.md#rotating-the-release-keys).

    Version 1 is the configured pins and threshold, recorded the first time it
    is needed, without an envelope. Each later version was verified against
    the one before it (its keys and its own) and keeps its envelope exactly as
    received, for the agents that follow the chain. Immutable once recorded.
    """

    version = models.BigIntegerField(unique=True)
    pins = models.JSONField()
    threshold = models.PositiveIntegerField()
    expires_at = models.DateTimeField(null=True, blank=True)
    envelope = models.TextField(null=True, blank=True)
    payload_sha256 = models.CharField(max_length=64, null=True, blank=True, unique=True)
    signer_pins = models.JSONField(default=list, help_text="Pins that counted: of the previous root, then its own.")
    recorded_at = models.DateTimeField()
    recorded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["version"]
        constraints = [
            models.CheckConstraint(condition=Q(version__gte=1), name="release_root_version_positive"),
            models.CheckConstraint(condition=Q(threshold__gte=1), name="release_root_threshold_positive"),
            # Root 1 is the configuration; every later root arrived as a signed envelope.
            models.CheckConstraint(
                condition=Q(version=1, envelope__isnull=True) | Q(version__gt=1, envelope__isnull=False),
                name="release_root_envelope_after_one",
            ),
        ]

    def __str__(self) -> str:
        return f"root {self.version} ({self.threshold} of {len(self.pins)})"


class ReleaseBinary(models.Model):
    """One per-platform binary of a release: ``linux-<arch>``."""

    release = models.ForeignKey(Release, on_delete=models.CASCADE, related_name="binaries")
    platform = models.CharField(max_length=40)
    arch = models.CharField(max_length=32)
    sha256 = models.CharField(max_length=64)
    size = models.BigIntegerField()
    stored_at = models.DateTimeField(null=True, blank=True, help_text="When the bytes were uploaded to storage.")

    class Meta:
        ordering = ["platform"]
        constraints = [
            models.UniqueConstraint(fields=["release", "platform"], name="release_binary_platform_unique"),
            models.CheckConstraint(condition=Q(size__gte=0), name="release_binary_size_nonnegative"),
        ]

    def __str__(self) -> str:
        return f"{self.release.version} {self.platform}"

    @property
    def storage_name(self) -> str:
        return binary_storage_name(self.release.version, self.platform)


def binary_storage_name(version: str, platform: str) -> str:
    """Where a binary's bytes are kept in the store (rollout/registry/storage.py)."""
    return f"bcd/{version}/{platform}"


class ReleaseBlockQuerySet(QuerySet["ReleaseBlock"]):
    def blocking(self, *, tenant: Any, release: Any) -> ReleaseBlockQuerySet:
        """The block of ``release`` in ``tenant`` (instances, ids or ``OuterRef``): the tenant blocked it
        (docs/controller.md#blocking-a-release-per-tenant)."""
        return self.filter(tenant=tenant, release=release)


class ReleaseBlock(models.Model):
    """A release blocked in one tenant: no new rollout to it, its rollouts pause.

    See docs/controller.md#blocking-a-release-per-tenant."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="release_blocks")
    release = models.ForeignKey(Release, on_delete=models.CASCADE, related_name="blocks")
    reason = models.CharField(max_length=500)
    blocked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    at = models.DateTimeField()

    objects = ReleaseBlockQuerySet.as_manager()

    class Meta:
        ordering = ["tenant_id", "-at"]
        constraints = [models.UniqueConstraint(fields=["tenant", "release"], name="release_block_once_per_tenant")]

    def __str__(self) -> str:
        return f"{self.release.version} blocked in {self.tenant_id}"
