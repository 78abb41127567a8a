"""Shapes of the release registry's API (camelCase: docs/api.md#releases): releases, their blocks, the roots."""

from __future__ import annotations

import json
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.fields import JSONObjectField, ResponseModelSerializer, StrictCharField, StrictSerializer
from rollout import conf
from rollout.api.schema import ReleaseBinarySerializer
from rollout.models import Release, ReleaseRoot
from rollout.rollouts.blocks import block_json, blocks_for


class ReleaseBlockedSerializer(serializers.Serializer):
    """A release's block in the caller's tenant (docs/controller.md#blocking-a-release-per-tenant)."""

    at = serializers.DateTimeField()
    reason = serializers.CharField()
    by = serializers.CharField(allow_null=True, help_text="The user who blocked it.")


class ReleaseSerializer(ResponseModelSerializer):
    """A release as the caller's tenant sees it: ``blocked`` is that tenant's block (context ``tenant``)."""

    protocolVersion = serializers.IntegerField(source="protocol_version", allow_null=True)
    registeredAt = serializers.DateTimeField(source="registered_at")
    expiresAt = serializers.DateTimeField(
        source="expires_at", allow_null=True, help_text="The signed manifest's expiry; null when it never expires."
    )
    binaries = serializers.SerializerMethodField(help_text="Per `linux-<arch>`.")
    blocked = serializers.SerializerMethodField()

    class Meta:
        model = Release
        fields = [
            "version",
            "sequence",
            "product",
            "protocolVersion",
            "binaries",
            "registeredAt",
            "expiresAt",
            "blocked",
        ]

    @extend_schema_field(ReleaseBlockedSerializer(allow_null=True))
    def get_blocked(self, release: Release) -> dict[str, Any] | None:
        blocks = self.context.get("blocks")  # a list passes the page's blocks (one query)
        if blocks is None:
            blocks = blocks_for(tenant=self.context.get("tenant"), release_ids=[release.pk])
        return block_json(blocks.get(release.pk))

    @extend_schema_field(serializers.DictField(child=ReleaseBinarySerializer()))
    def get_binaries(self, release: Release) -> dict[str, dict]:
        return {
            binary.platform: {
                "sha256": binary.sha256,
                "size": binary.size,
                "url": conf.binary_url(release.version, binary.platform),
            }
            for binary in release.binaries.all()
        }


class ReleaseRootSerializer(ResponseModelSerializer):
    """A root of the key chain: version 1 is the configured pins and threshold (no envelope)."""

    expiresAt = serializers.DateTimeField(source="expires_at", allow_null=True)
    envelope = serializers.SerializerMethodField(help_text="The DSSE envelope as registered; null for root 1.")
    signerPins = serializers.JSONField(source="signer_pins", help_text="Pins that counted (previous root's, its own).")
    recordedAt = serializers.DateTimeField(source="recorded_at")

    class Meta:
        model = ReleaseRoot
        fields = ["version", "pins", "threshold", "expiresAt", "envelope", "signerPins", "recordedAt"]

    @extend_schema_field(JSONObjectField(allow_null=True))
    def get_envelope(self, root: ReleaseRoot) -> Any:
        return json.loads(root.envelope) if root.envelope is not None else None


class ReleaseBlockSerializer(StrictSerializer):
    """Types only; the reason's rule is rollout.rollouts.blocks.release_block's."""

    reason = StrictCharField(trim_whitespace=False)
